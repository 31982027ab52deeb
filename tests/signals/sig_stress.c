/* Application signal handlers while goiwarp's Go code runs on the
 * application's threads (issue: perftest -D died with "unknown caller pc").
 *
 *   sig_stress before SECS   handlers installed before the first RDMA call
 *   sig_stress after SECS    handlers installed after the connection is up
 *   sig_stress quiet SECS    no handlers: the library's runtime must not
 *                            interrupt the application's blocking calls
 *   sig_stress pipe          SIGPIPE left at SIG_DFL; the peer process dies
 *                            while we write: error completions, no death
 *   sig_stress directed SECS process-directed signals the application blocks
 *                            in every thread and takes with sigwaitinfo
 *   sig_stress peer FD       (internal) pipe's peer, spawned by pipe
 *
 * before/after: one process, two RC QPs connected through rdma_cm on
 * 127.0.0.1; a client thread posts RDMA Writes and Sends and polls as fast as
 * it can, a server thread posts receives and polls, so both call into the Go
 * engine constantly (send doorbell, empty-poll progress). Meanwhile an
 * ITIMER_REAL fires every 100 us into a SIGALRM handler installed with
 * signal() (no SA_ONSTACK), and the main thread sends SIGUSR1, SIGINT,
 * SIGTERM and SIGCHLD one at a time, each to a data thread, waiting until its
 * handler (installed with sigaction, no SA_ONSTACK) has counted it. Every
 * handler uses a few KiB of stack, as real ones do. Passes when the process
 * survives, every sent signal was counted, the timer fired, and every Send
 * arrived in order with its payload.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static __thread const char *role = "main";
#define GIW_TEST_ROLE role
#include "giw_test.h"
#include "giw_cm.h"

extern char **environ;

#define MSG 64
#define DEPTH 32
#define BUFSZ (2 * DEPTH * MSG) /* receive slots, then Write slots */

/* ---- handlers: count, and use stack like a real handler would ---------- */
static volatile sig_atomic_t counts[NSIG];

static void handler(int sig)
{
	volatile char scratch[3000];

	for (size_t i = 0; i < sizeof scratch; i += 64)
		scratch[i] = (char)sig;
	counts[sig] = counts[sig] + 1;
}

static const int acked[] = {SIGUSR1, SIGINT, SIGTERM, SIGCHLD};

static void install_handlers(void)
{
	struct sigaction sa = {.sa_handler = handler, .sa_flags = SA_RESTART};

	sigemptyset(&sa.sa_mask);
	REQUIRE(signal(SIGALRM, handler) != SIG_ERR);
	for (size_t i = 0; i < sizeof acked / sizeof acked[0]; i++)
		REQUIRE(sigaction(acked[i], &sa, NULL) == 0);
}

/* ---- one side of a connection ------------------------------------------ */
struct ep {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
	uint64_t raddr;
	uint32_t rkey;
	pthread_t thr;
	volatile int tid_ready;
	uint64_t msgs; /* sends completed (client) or received in order (server) */
};

static void setup(struct ep *e, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = DEPTH * 2, .max_recv_wr = DEPTH,
					     .max_send_sge = 1, .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};

	REQUIRE((e->pd = ibv_alloc_pd(id->verbs)));
	REQUIRE((e->cq = ibv_create_cq(id->verbs, DEPTH * 4, NULL, NULL, 0)));
	a.send_cq = a.recv_cq = e->cq;
	REQUIRE(rdma_create_qp(id, e->pd, &a) == 0);
	e->qp = id->qp;
	REQUIRE((e->buf = calloc(1, BUFSZ)));
	REQUIRE((e->mr = ibv_reg_mr(e->pd, e->buf, BUFSZ,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)));
}

static uint16_t listen_any(struct ep *s)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	REQUIRE((s->ch = rdma_create_event_channel()));
	REQUIRE(rdma_create_id(s->ch, &s->lid, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(s->lid, (struct sockaddr *)&sa) == 0); /* port 0: any */
	REQUIRE(rdma_listen(s->lid, 4) == 0);
	return ntohs(rdma_get_src_port(s->lid));
}

static void connect_to(struct ep *c, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};

	REQUIRE((c->ch = rdma_create_event_channel()));
	REQUIRE(rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&sa, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(c->ch, RDMA_CM_EVENT_ADDR_RESOLVED, 10000));
	REQUIRE(rdma_resolve_route(c->id, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(c->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 10000));
	setup(c, c->id);
	REQUIRE(rdma_connect(c->id, &cp) == 0);
}

static void accept_one(struct ep *s)
{
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct rdma_cm_event *ev = giw_expect_cm(s->ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);

	s->id = ev->id;
	rdma_ack_cm_event(ev);
	setup(s, s->id);
	REQUIRE(rdma_accept(s->id, &cp) == 0);
}

/* Both ends in this process: c writes into s's buffer. */
static void connect_local(struct ep *s, struct ep *c)
{
	connect_to(c, listen_any(s));
	accept_one(s);
	rdma_ack_cm_event(giw_expect_cm(s->ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	rdma_ack_cm_event(giw_expect_cm(c->ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	c->raddr = (uintptr_t)s->buf;
	c->rkey = s->mr->rkey;
}

static void post_recv(struct ep *e, int slot)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf + slot * MSG, .length = MSG, .lkey = e->mr->lkey};
	struct ibv_recv_wr w = {.wr_id = slot, .sg_list = &s, .num_sge = 1}, *bad;

	REQUIRE(ibv_post_recv(e->qp, &w, &bad) == 0);
}

static int post_send(struct ep *e, enum ibv_wr_opcode op, uint64_t wrid, int slot, int signaled)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf + slot * MSG, .length = MSG, .lkey = e->mr->lkey};
	struct ibv_send_wr w = {.wr_id = wrid, .sg_list = &s, .num_sge = 1, .opcode = op,
				.send_flags = signaled ? IBV_SEND_SIGNALED : 0}, *bad;

	w.wr.rdma.remote_addr = e->raddr + (DEPTH + slot) * MSG;
	w.wr.rdma.rkey = e->rkey;
	return ibv_post_send(e->qp, &w, &bad);
}

/* ---- the busy threads --------------------------------------------------- */
static volatile int stop;
static pthread_t data_threads[2];

/* Client: per round a Write and a Send (signaled every 8th) into slot i of
 * the peer, the Send carrying its sequence number; at most DEPTH Sends in
 * flight (the server keeps DEPTH receives posted). */
static void *client(void *arg)
{
	struct ep *c = arg;
	uint64_t seq = 0, done = 0;
	struct ibv_wc wc[16];

	role = "client";
	while (!stop || done < seq) {
		if (!stop && seq - done < DEPTH - 8) {
			int slot = seq % DEPTH, sig = seq % 8 == 7;

			memcpy(c->buf + slot * MSG, &seq, sizeof seq);
			memset(c->buf + slot * MSG + 8, (int)(seq & 0xff), MSG - 8);
			REQUIRE(post_send(c, IBV_WR_RDMA_WRITE, UINT64_MAX, slot, 0) == 0);
			REQUIRE(post_send(c, IBV_WR_SEND, seq, slot, sig) == 0);
			seq++;
		}
		int n = ibv_poll_cq(c->cq, 16, wc);
		REQUIRE(n >= 0);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "[client] completion %s\n", ibv_wc_status_str(wc[i].status));
				exit(1);
			}
			done = wc[i].wr_id + 1; /* a signaled Send retires everything before it */
		}
		if (stop && seq % 8 != 0) { /* end on a signaled Send */
			int slot = seq % DEPTH;
			memcpy(c->buf + slot * MSG, &seq, sizeof seq);
			memset(c->buf + slot * MSG + 8, (int)(seq & 0xff), MSG - 8);
			REQUIRE(post_send(c, IBV_WR_SEND, seq, slot, seq % 8 == 7) == 0);
			seq++;
		}
	}
	c->msgs = seq;
	return NULL;
}

static void *server(void *arg)
{
	struct ep *s = arg;
	struct ibv_wc wc[16];
	uint64_t want = 0;

	role = "server";
	for (int i = 0; i < DEPTH; i++)
		post_recv(s, i);
	while (!stop || want < s->msgs) {
		int n = ibv_poll_cq(s->cq, 16, wc);
		REQUIRE(n >= 0);
		for (int i = 0; i < n; i++) {
			uint8_t *m = s->buf + wc[i].wr_id * MSG;
			uint64_t seq;

			REQUIRE(wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_RECV);
			memcpy(&seq, m, sizeof seq);
			if (seq != want || m[8] != (uint8_t)seq || m[MSG - 1] != (uint8_t)seq) {
				fprintf(stderr, "[server] message %llu: got seq %llu bytes %02x %02x\n",
					(unsigned long long)want, (unsigned long long)seq, m[8], m[MSG - 1]);
				exit(1);
			}
			want++;
			post_recv(s, (int)wc[i].wr_id);
		}
	}
	return NULL;
}

/* Sends each acknowledged signal `rounds` times to alternating data threads,
 * one at a time; returns how many were not counted within 10 s each. */
static int signal_rounds(int rounds)
{
	int lost = 0;

	for (int r = 0; r < rounds; r++) {
		for (size_t i = 0; i < sizeof acked / sizeof acked[0]; i++) {
			int sig = acked[i];
			sig_atomic_t before = counts[sig];
			double deadline = giw_now() + 10;

			REQUIRE(pthread_kill(data_threads[r % 2], sig) == 0);
			while (counts[sig] == before && giw_now() < deadline)
				sched_yield();
			if (counts[sig] == before) {
				fprintf(stderr, "[main] signal %d not delivered within 10 s\n", sig);
				lost++;
			}
		}
	}
	return lost;
}

static int stress(int before, double secs)
{
	struct ep s = {0}, c = {0};
	struct itimerval it = {.it_interval = {0, 100}, .it_value = {0, 100}};
	int rounds = 0, lost = 0;

	if (before)
		install_handlers();
	connect_local(&s, &c);
	if (!before)
		install_handlers();

	s.msgs = UINT64_MAX;
	REQUIRE(pthread_create(&data_threads[0], NULL, server, &s) == 0);
	REQUIRE(pthread_create(&data_threads[1], NULL, client, &c) == 0);
	REQUIRE(setitimer(ITIMER_REAL, &it, NULL) == 0);
	double end = giw_now() + secs;
	while (giw_now() < end) {
		lost += signal_rounds(1);
		rounds++;
	}
	struct itimerval off = {0};
	REQUIRE(setitimer(ITIMER_REAL, &off, NULL) == 0);
	stop = 1;
	pthread_join(data_threads[1], NULL);
	s.msgs = c.msgs;
	pthread_join(data_threads[0], NULL);

	printf("%s: %.1f s, %llu messages (Write+Send) in order, %d SIGALRM, %d rounds of "
	       "SIGUSR1/SIGINT/SIGTERM/SIGCHLD: %d of %d not delivered\n",
	       before ? "before" : "after", secs, (unsigned long long)c.msgs, (int)counts[SIGALRM],
	       rounds, lost, rounds * 4);
	CHECK(lost == 0);
	CHECK(counts[SIGALRM] > 0);
	CHECK(c.msgs > 0);
	for (size_t i = 0; i < sizeof acked / sizeof acked[0]; i++)
		CHECK(counts[acked[i]] == rounds);
	rdma_disconnect(c.id);
	return failures ? 1 : 0;
}

/* ---- quiet: no signal of the application, and none of ours either -------
 * A thread that calls into goiwarp between its own blocking calls must never
 * see EINTR from them: the application installed no handler, so nothing
 * should interrupt it (qperf's select failed with EINTR when the Go runtime
 * preempted its thread with SIGURG). The client alternates a burst of Writes,
 * busy-polled to completion, with select, poll and nanosleep of 200 us; in
 * the second half it blocks SIGURG, so that any sent to it stays pending
 * where sigpending sees it, not only one that lands in a blocking call. */
static uint64_t bursts(struct ep *c, double secs, uint64_t *eintr)
{
	struct ibv_wc wc;
	uint64_t n = 0;

	for (double end = giw_now() + secs; giw_now() < end; n++) {
		for (int i = 0; i < DEPTH; i++)
			REQUIRE(post_send(c, IBV_WR_RDMA_WRITE, i, i, i == DEPTH - 1) == 0);
		int got;
		while ((got = ibv_poll_cq(c->cq, 1, &wc)) == 0)
			;
		REQUIRE(got == 1 && wc.status == IBV_WC_SUCCESS);

		struct timeval tv = {0, 200};
		struct pollfd none = {.fd = -1};
		struct timespec ts = {0, 200000};
		if (select(0, NULL, NULL, NULL, &tv) < 0 && errno == EINTR)
			(*eintr)++;
		if (poll(&none, 1, 0) < 0 && errno == EINTR)
			(*eintr)++;
		if (nanosleep(&ts, NULL) < 0 && errno == EINTR)
			(*eintr)++;
	}
	return n;
}

static int quiet(double secs)
{
	struct ep s = {0}, c = {0};
	uint64_t eintr = 0, n;
	sigset_t urg, pending;

	connect_local(&s, &c);

	n = bursts(&c, secs / 2, &eintr);
	sigemptyset(&urg);
	sigaddset(&urg, SIGURG);
	REQUIRE(pthread_sigmask(SIG_BLOCK, &urg, NULL) == 0);
	n += bursts(&c, secs / 2, &eintr);
	REQUIRE(sigpending(&pending) == 0);
	int urged = sigismember(&pending, SIGURG);

	printf("quiet: %.1f s, %llu bursts of %d Writes, %llu blocking calls interrupted, "
	       "SIGURG %s\n", secs, (unsigned long long)n, DEPTH, (unsigned long long)eintr,
	       urged ? "pending" : "not sent");
	CHECK(n > 0);
	CHECK(eintr == 0);
	CHECK(!urged);
	rdma_disconnect(c.id);
	return failures ? 1 : 0;
}

/* ---- directed: signals sent to the process, not to a thread ---------------
 * A server pattern: every application thread blocks SIGUSR1, SIGUSR2, SIGALRM,
 * SIGCHLD and SIGIO and the main thread takes them with sigwaitinfo, while
 * worker threads wake it with kill(getpid(), ...). The kernel gives a
 * process-directed signal to any thread that does not block it: if one of
 * goiwarp's threads left one open, it would land there and be lost (SIGCHLD) or
 * kill the process (the others' default action). One sender thread per signal
 * sends it and waits until the main thread has taken it (a pending standard
 * signal would absorb a second one) while the data threads move Writes and
 * Sends. Passes when every signal sent was taken by the main thread and every
 * thread that is not the application's blocks all five. */
static const int directed_sigs[] = {SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGIO};
#define NDIRECTED (int)(sizeof directed_sigs / sizeof directed_sigs[0])
static volatile uint64_t taken[NDIRECTED], sent[NDIRECTED];
static volatile int directed_lost;
static void *directed_sender(void *arg)
{
	int i = (int)(intptr_t)arg;

	while (!stop) {
		uint64_t before = taken[i];
		double deadline = giw_now() + 10;

		REQUIRE(kill(getpid(), directed_sigs[i]) == 0);
		sent[i] = sent[i] + 1;
		while (taken[i] == before && giw_now() < deadline && !stop)
			sched_yield();
		if (taken[i] == before && !stop) {
			fprintf(stderr, "[sender] signal %d not taken by the main thread within 10 s\n",
				directed_sigs[i]);
			directed_lost = 1;
			return NULL;
		}
	}
	return NULL;
}

/* Whether every thread of this process but the main one blocks all of
 * directed_sigs (SigBlk in /proc/self/task/TID/status); called when the
 * application's other threads have ended. */
static int goiwarp_threads_block(int *checked)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int ok = 1;

	REQUIRE(d);
	*checked = 0;
	while ((e = readdir(d))) {
		pid_t tid = (pid_t)atoi(e->d_name);
		char path[64], line[256];
		unsigned long long blk = 0;

		if (tid <= 0)
			continue;
		if (tid == getpid())
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue; /* ended meanwhile */
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "SigBlk: %llx", &blk) == 1)
				break;
		fclose(f);
		(*checked)++;
		for (int i = 0; i < NDIRECTED; i++)
			if (!(blk & (1ULL << (directed_sigs[i] - 1)))) {
				fprintf(stderr, "[main] thread %d does not block signal %d (SigBlk %llx)\n",
					(int)tid, directed_sigs[i], blk);
				ok = 0;
			}
	}
	closedir(d);
	return ok;
}

static int directed(double secs)
{
	struct ep s = {0}, c = {0};
	sigset_t set;
	pthread_t senders[NDIRECTED];
	uint64_t total_sent = 0, total_taken = 0;
	int checked = 0;

	/* The first RDMA call comes before the application blocks anything. */
	connect_local(&s, &c);
	sigemptyset(&set);
	for (int i = 0; i < NDIRECTED; i++)
		sigaddset(&set, directed_sigs[i]);
	REQUIRE(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0);

	s.msgs = UINT64_MAX;
	REQUIRE(pthread_create(&data_threads[0], NULL, server, &s) == 0);
	REQUIRE(pthread_create(&data_threads[1], NULL, client, &c) == 0);
	for (int i = 0; i < NDIRECTED; i++)
		REQUIRE(pthread_create(&senders[i], NULL, directed_sender, (void *)(intptr_t)i) == 0);

	struct timespec tick = {0, 50 * 1000 * 1000};
	double end = giw_now() + secs;
	while (giw_now() < end && !directed_lost) {
		siginfo_t si;
		int sig = sigtimedwait(&set, &si, &tick);

		for (int i = 0; i < NDIRECTED; i++)
			if (sig == directed_sigs[i])
				taken[i] = taken[i] + 1;
	}
	stop = 1;
	for (int i = 0; i < NDIRECTED; i++)
		pthread_join(senders[i], NULL);
	/* A signal sent just before the loop ended is still pending: take it. */
	struct timespec none = {0, 0};
	for (;;) {
		siginfo_t si;
		int sig = sigtimedwait(&set, &si, &none);

		if (sig < 0)
			break;
		for (int i = 0; i < NDIRECTED; i++)
			if (sig == directed_sigs[i])
				taken[i] = taken[i] + 1;
	}
	pthread_join(data_threads[1], NULL);
	s.msgs = c.msgs;
	pthread_join(data_threads[0], NULL);
	/* The data threads have ended: every other thread left is goiwarp's. */
	int blocked = goiwarp_threads_block(&checked);

	for (int i = 0; i < NDIRECTED; i++) {
		total_sent += sent[i];
		total_taken += taken[i];
	}
	printf("directed: %.1f s, %llu messages (Write+Send) in order, %llu signals sent to the "
	       "process, %llu taken by the main thread, %d goiwarp threads checked, all block them: %s\n",
	       secs, (unsigned long long)c.msgs, (unsigned long long)total_sent,
	       (unsigned long long)total_taken, checked, blocked ? "yes" : "no");
	CHECK(!directed_lost);
	CHECK(total_sent > 0 && total_taken == total_sent);
	CHECK(c.msgs > 0);
	CHECK(checked > 0 && blocked);
	rdma_disconnect(c.id);
	return failures ? 1 : 0;
}

/* ---- SIGPIPE: the peer dies while we write --------------------------------- */
static int peer(int fd)
{
	struct ep s = {0};
	uint16_t port = listen_any(&s);

	role = "peer";
	REQUIRE(write(fd, &port, sizeof port) == sizeof port);
	accept_one(&s);
	rdma_ack_cm_event(giw_expect_cm(s.ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	for (int i = 0; i < DEPTH; i++)
		post_recv(&s, i);
	uint64_t m[2] = {(uintptr_t)s.buf, s.mr->rkey};
	REQUIRE(write(fd, m, sizeof m) == sizeof m);
	pause(); /* until killed */
	return 0;
}

static int pipe_case(const char *self)
{
	int sv[2];
	char fdarg[16];
	pid_t pid;
	struct ep c = {0};
	uint16_t port;
	uint64_t m[2];
	struct ibv_wc wc;
	int errors = 0;

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	snprintf(fdarg, sizeof fdarg, "%d", sv[1]);
	char *argv[] = {(char *)self, "peer", fdarg, NULL};
	REQUIRE(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0);
	close(sv[1]);
	REQUIRE(read(sv[0], &port, sizeof port) == sizeof port);
	connect_to(&c, port);
	rdma_ack_cm_event(giw_expect_cm(c.ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	REQUIRE(read(sv[0], m, sizeof m) == sizeof m);
	c.raddr = m[0];
	c.rkey = (uint32_t)m[1];
	/* After our runtime is loaded, as an application resetting it would. */
	REQUIRE(signal(SIGPIPE, SIG_DFL) != SIG_ERR);

	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* Write into the dead connection until the QP reports it. */
	double end = giw_now() + 10;
	for (uint64_t i = 0; errors == 0 && giw_now() < end; i++) {
		int r = post_send(&c, IBV_WR_RDMA_WRITE, i, (int)(i % DEPTH), 1);
		if (r != 0 && r != ENOMEM)
			break;
		while (ibv_poll_cq(c.cq, 1, &wc) == 1)
			if (wc.status != IBV_WC_SUCCESS)
				errors++;
	}
	printf("pipe: peer killed, SIGPIPE at SIG_DFL: we are alive, %d error completion(s)\n",
	       errors);
	CHECK(errors > 0);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc >= 3 && strcmp(argv[1], "peer") == 0)
		return peer(atoi(argv[2]));
	if (argc >= 2 && strcmp(argv[1], "quiet") == 0)
		return quiet(argc >= 3 ? atof(argv[2]) : 5);
	if (argc >= 2 && strcmp(argv[1], "directed") == 0)
		return directed(argc >= 3 ? atof(argv[2]) : 5);
	if (argc >= 2 && strcmp(argv[1], "pipe") == 0)
		return pipe_case("/proc/self/exe");
	if (argc >= 2 && (strcmp(argv[1], "before") == 0 || strcmp(argv[1], "after") == 0))
		return stress(strcmp(argv[1], "before") == 0, argc >= 3 ? atof(argv[2]) : 5);
	fprintf(stderr, "usage: sig_stress before|after|quiet|directed [SECS] | pipe\n");
	return 2;
}
