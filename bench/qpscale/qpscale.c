/* qpscale: the cost of many connected QPs, for bench/compare.py.
 *
 *   qpscale [-n QPS] [-t IDLE_SECS] [-p PORT] [-d DEV]
 *
 * Forks before its first RDMA call (the child gets its own goiwarp): the child
 * listens on 127.0.0.1:PORT and accepts; the parent connects QPS RC QPs, all
 * at once on one event channel (resolve, route, connect as each event comes).
 * Then both hold the connections idle for IDLE_SECS. Prints one line:
 *
 *   qps=N connect_s=S client_rss_per_qp_kib=K server_rss_per_qp_kib=K
 *   ring_kib_per_qp=R client_idle_cpu_pct=C server_idle_cpu_pct=C
 *
 * connect_s: first rdma_resolve_addr to the last ESTABLISHED at the client.
 * rss_per_qp: VmRSS growth from just before the first connection to all
 * established, per QP (ring_kib_per_qp of that is the QP's and CQ's rings).
 * idle_cpu_pct: CPU time (user+system, /proc/PID/stat) over the idle
 * period, in percent of one core. Exit 0 on success.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "../common/benchutil.h"

#define DEPTH 16 /* send and receive queue depth per QP */

static int nqps = 1, port = 18600;
static double idle_s = 2;
const char *bench_prog = "qpscale", *bench_role = "client";

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long v = -1;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* user+system CPU seconds of pid */
static double cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long ut = 0, st = 0;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof buf, f))
		DIE("read %s", path);
	fclose(f);
	char *p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		DIE("parse %s", path);
	return (double)(ut + st) / sysconf(_SC_CLK_TCK);
}

struct side {
	struct rdma_event_channel *ch;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
};

static void qp_for(struct side *s, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};
	if (!s->pd) {
		if (!(s->pd = ibv_alloc_pd(id->verbs)))
			DIE("ibv_alloc_pd");
		/* one CQ for every QP, as a server of many connections would */
		if (!(s->cq = ibv_create_cq(id->verbs, 4096, NULL, NULL, 0)))
			DIE("ibv_create_cq");
	}
	a.send_cq = a.recv_cq = s->cq;
	if (rdma_create_qp(id, s->pd, &a))
		DIE("rdma_create_qp");
}

static struct rdma_cm_event *next_event(struct side *s)
{
	struct pollfd p = {.fd = s->ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 30000) != 1)
		DIE("no CM event within 30 s");
	if (rdma_get_cm_event(s->ch, &ev))
		DIE("rdma_get_cm_event");
	return ev;
}

static int server(int ready_fd, int done_fd)
{
	struct side s = {0};
	struct rdma_cm_id *lid;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	int up = 0;
	char c;

	bench_role = "server";
	if (!(s.ch = rdma_create_event_channel()) || rdma_create_id(s.ch, &lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&sa) || rdma_listen(lid, 1024))
		DIE("listen on port %d", port);
	long rss0 = rss_kib(getpid());
	if (write(ready_fd, &rss0, sizeof rss0) != sizeof rss0)
		DIE("write");
	while (up < nqps) {
		struct rdma_cm_event *ev = next_event(&s);
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type t = ev->event;
		rdma_ack_cm_event(ev);
		if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
			qp_for(&s, id);
			if (rdma_accept(id, &cp))
				DIE("rdma_accept");
		} else if (t == RDMA_CM_EVENT_ESTABLISHED) {
			up++;
		} else {
			errno = 0;
			DIE("unexpected %s", rdma_event_str(t));
		}
	}
	/* Hold the connections until the client is done measuring. */
	if (read(done_fd, &c, 1) < 0)
		DIE("read");
	return 0;
}

int main(int argc, char **argv)
{
	int o, ready[2], done[2];
	const char *dev = "giw_lo";

	while ((o = getopt(argc, argv, "n:t:p:d:")) != -1) {
		switch (o) {
		case 'n': nqps = atoi(optarg); break;
		case 't': idle_s = atof(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'd': dev = optarg; break;
		default:
			fprintf(stderr, "usage: qpscale [-n QPS] [-t IDLE_SECS] [-p PORT] [-d DEV]\n");
			return 2;
		}
	}
	(void)dev; /* loopback: rdma_cm picks giw_lo for 127.0.0.1 */
	if (nqps < 1 || pipe(ready) || pipe(done))
		DIE("bad -n or pipe");
	pid_t pid = fork(); /* before the first RDMA call: the child loads its own core */
	if (pid < 0)
		DIE("fork");
	if (pid == 0) {
		close(ready[0]);
		close(done[1]);
		_exit(server(ready[1], done[0]));
	}
	close(ready[1]);
	close(done[0]);

	long srv_rss0;
	if (read(ready[0], &srv_rss0, sizeof srv_rss0) != sizeof srv_rss0)
		DIE("server did not start");

	struct side s = {0};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct rdma_cm_id **ids = calloc(nqps, sizeof *ids);
	if (!ids || !(s.ch = rdma_create_event_channel()))
		DIE("rdma_create_event_channel");
	long rss0 = rss_kib(getpid());
	double t0 = now();
	for (int i = 0; i < nqps; i++) {
		if (rdma_create_id(s.ch, &ids[i], NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(ids[i], NULL, (struct sockaddr *)&sa, 10000))
			DIE("connect %d", i);
	}
	int up = 0;
	while (up < nqps) {
		struct rdma_cm_event *ev = next_event(&s);
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type t = ev->event;
		int st = ev->status;
		rdma_ack_cm_event(ev);
		switch (t) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(id, 10000))
				DIE("rdma_resolve_route");
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			qp_for(&s, id);
			if (rdma_connect(id, &cp))
				DIE("rdma_connect");
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			up++;
			break;
		default:
			errno = -st;
			DIE("unexpected %s after %d established", rdma_event_str(t), up);
		}
	}
	double connect_s = now() - t0;
	/* The server counts its ESTABLISHED too; give it the same idle start. */
	long rss1 = rss_kib(getpid()), srv_rss1 = rss_kib(pid);
	double c0 = cpu_s(getpid()), s0 = cpu_s(pid), i0 = now();
	struct timespec nap = {(time_t)idle_s, (long)((idle_s - (time_t)idle_s) * 1e9)};
	while (nanosleep(&nap, &nap) && errno == EINTR)
		;
	double c1 = cpu_s(getpid()), s1 = cpu_s(pid), idle = now() - i0;
	srv_rss1 = rss_kib(pid) > srv_rss1 ? rss_kib(pid) : srv_rss1;

	/* A QP's rings (capi/giw_ring.h): SQ of DEPTH 176-byte entries, RQ of DEPTH
	 * 144-byte ones, each with a 192-byte header, page-rounded by mmap. */
	double ring_kib = 2 * 4096 / 1024.0;
	if (DEPTH * 176 + 192 > 4096)
		DIE("DEPTH too large for the ring estimate");
	printf("qps=%d connect_s=%.3f client_rss_per_qp_kib=%.1f server_rss_per_qp_kib=%.1f "
	       "ring_kib_per_qp=%.1f client_idle_cpu_pct=%.2f server_idle_cpu_pct=%.2f\n",
	       nqps, connect_s, (double)(rss1 - rss0) / nqps, (double)(srv_rss1 - srv_rss0) / nqps,
	       ring_kib, 100 * (c1 - c0) / idle, 100 * (s1 - s0) / idle);

	if (write(done[1], "x", 1) != 1)
		DIE("write");
	for (int i = 0; i < nqps; i++) {
		rdma_disconnect(ids[i]);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		DIE("server failed");
	return 0;
}
