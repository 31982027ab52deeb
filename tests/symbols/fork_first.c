/* fork_first: a process that forks before its first RDMA call (qperf's server
 * does, per client) must get a working library in the child: the shim loads a
 * fresh Go core (and runtime) there at the first call. The child lists devices,
 * opens one and allocates a PD; so does the parent afterwards (its own core).
 * Each step has a deadline: a dead Go runtime shows up as a hang. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_S 30

static int use_rdma(const char *who)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "FAIL: %s: ibv_get_device_list: %s, %d devices\n", who, strerror(errno), n);
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) {
		fprintf(stderr, "FAIL: %s: ibv_open_device(%s): %s\n", who, ibv_get_device_name(list[0]),
			strerror(errno));
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd) {
		fprintf(stderr, "FAIL: %s: ibv_alloc_pd: %s\n", who, strerror(errno));
		return 1;
	}
	printf("%s (pid %d): %d devices, opened %s, allocated a PD\n", who, (int)getpid(), n,
	       ibv_get_device_name(list[0]));
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}

/* waitpid with a deadline; kills the child (only it, by pid) when it passes */
static int wait_child(pid_t pid)
{
	int st;
	for (int i = 0; i < TIMEOUT_S * 10; i++) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			if (WIFEXITED(st))
				return WEXITSTATUS(st);
			fprintf(stderr, "FAIL: child killed by signal %d\n", WTERMSIG(st));
			return 1;
		}
		if (r < 0) {
			perror("FAIL: waitpid");
			return 1;
		}
		nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
	}
	fprintf(stderr, "FAIL: child %d hung for %d s in its first RDMA calls (Go runtime dead after fork?)\n",
		(int)pid, TIMEOUT_S);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return 1;
}

int main(void)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("FAIL: fork");
		return 1;
	}
	if (pid == 0) {
		alarm(TIMEOUT_S); /* belt and braces: the child dies by itself too */
		int rc = use_rdma("child");
		fflush(stdout);
		_exit(rc);
	}
	if (wait_child(pid) != 0)
		return 1;
	alarm(TIMEOUT_S);
	if (use_rdma("parent after fork") != 0)
		return 1;
	printf("ok: fork before the first RDMA call, both processes use their own core\n");
	return 0;
}
