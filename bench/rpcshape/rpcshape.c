/* rpcshape: two application shapes for bench/ab.py that perftest does not have.
 *
 *   server: rpcshape -s [-m rpc|qps] [options]
 *   client: rpcshape    [-m rpc|qps] [options] HOST
 *
 * Both sides take the same options (ab.py passes them to both); the client
 * measures and prints one line, the server exits when the client has gone.
 *
 * -m rpc (default): an RPC server. One RC QP. The client sends a small
 * request (-S bytes, default 32) with a Send and busy-polls its CQ for the
 * reply; the server busy-polls its receive CQ (a poll that finds nothing does
 * nothing else), and after each completion reposts the receive, "computes"
 * -u MICROSECONDS (a busy loop on the clock) and replies with a Send of the
 * same size. One request in flight. Client prints
 *
 *   rpcshape rpc compute_us=U size=S secs=T rtts=N rate=R mean_us=M p50_us=A p99_us=B max_us=C
 *
 * rate in round trips per second; the round-trip times include the compute.
 *
 * -m qps: many QPs on shared or separate CQs. -q QPS connections, QP i on CQ
 * i % CQS (-c CQS), one CQ for both queues of its QPs; -T THREADS poll threads
 * (with fewer CQs than threads, several threads poll one CQ; else thread t
 * polls the CQs c with c % THREADS == t). The client keeps -d DEPTH (16) Sends
 * (-o send) or RDMA Writes (-o write) of -S bytes (4096) in flight on every
 * QP, each completion posting the next on its QP, for -t SECS; the server
 * polls the same way and reposts each receive (4 x DEPTH per QP). Client
 * prints
 *
 *   rpcshape qps qps=Q cqs=C threads=T op=O size=S secs=T msgs=N gbps=G mpps=M min_qp_msgs=A max_qp_msgs=B
 *
 * gbps in 10^9 bytes/s; min_qp_msgs is the fewest messages one QP moved
 * (0: a QP starved; exit status 1).
 *
 * Other options: -p PORT (18700), -t SECS (3), -W WATCHDOG_SECS (SECS + 30:
 * a side still running then exits 3; a server waits that long for its
 * client's connections and disconnects, then exits 1). Exit 0 on success,
 * 1 on any error (one line on stderr), 2 on bad usage, 3 on the watchdog.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "../common/benchutil.h"

#define MAXQPS 1024
#define CM_TIMEOUT_MS 10000

static int is_server, port = 18700, nqps = 1, ncqs = 1, nthreads = 1, depth = 16;
static int size = -1, op_write;
static double secs = 3, compute_us = 20, watchdog_s;
static const char *mode = "rpc", *host;

const char *bench_prog = "rpcshape", *bench_role = "client";

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "rpcshape: watchdog expired (-W)\n";
	if (write(2, m, sizeof m - 1) < 0) {
	}
	_exit(3);
}

/* ------------------------------------------------------------ connections */

struct conn {
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	int idx;
	char *buf; /* send slots, then receive slots (server/rpc) or the write target */
	struct ibv_mr *mr;
	uint64_t raddr; /* the peer's buffer (write) */
	uint32_t rkey;
	long inflight;
	long msgs; /* completions counted (atomic: threads may share the CQ) */
};

struct wire { /* connection private data: where a writer may write */
	uint64_t addr;
	uint32_t rkey;
	uint32_t qps;
};

static struct rdma_event_channel *ch;
static struct ibv_pd *pd;
static struct ibv_cq *cqs[MAXQPS];
static struct conn conns[MAXQPS];
static int nconns;

static int rq_depth(void)
{
	return strcmp(mode, "rpc") == 0 ? 4 : 4 * depth;
}

static int sq_depth(void)
{
	return strcmp(mode, "rpc") == 0 ? 16 : depth;
}

static size_t slots(void)
{
	return (size_t)(sq_depth() + rq_depth());
}

static void setup_conn(struct conn *c, struct rdma_cm_id *id, int idx)
{
	c->id = id;
	c->idx = idx;
	id->context = c;
	if (!pd) {
		if (!(pd = ibv_alloc_pd(id->verbs)))
			DIE("ibv_alloc_pd");
		int per = (nqps + ncqs - 1) / ncqs;
		for (int i = 0; i < ncqs; i++)
			if (!(cqs[i] = ibv_create_cq(id->verbs, per * (sq_depth() + rq_depth()) + 16, NULL, NULL, 0)))
				DIE("ibv_create_cq %d", i);
	}
	c->cq = cqs[idx % ncqs];
	struct ibv_qp_init_attr a = {.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = sq_depth(), .max_recv_wr = rq_depth(),
					     .max_send_sge = 1, .max_recv_sge = 1}};
	if (rdma_create_qp(id, pd, &a))
		DIE("rdma_create_qp %d", idx);
	c->qp = id->qp;
	size_t len = slots() * (size_t)size;
	if (posix_memalign((void **)&c->buf, 4096, len))
		DIE("posix_memalign");
	memset(c->buf, 0x5a, len);
	if (!(c->mr = ibv_reg_mr(pd, c->buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
		DIE("ibv_reg_mr");
}

/* wr_id: QP index << 32 | slot; slot >= sq_depth() is a receive. */
static void post_recv(struct conn *c, int slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)c->buf + (size_t)slot * size, .length = size, .lkey = c->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = (uint64_t)c->idx << 32 | (uint32_t)slot, .sg_list = &sge, .num_sge = 1},
			   *bad;
	int e = ibv_post_recv(c->qp, &wr, &bad);
	if (e) {
		errno = e;
		DIE("ibv_post_recv QP %d", c->idx);
	}
}

static void post_send(struct conn *c, int slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)c->buf + (size_t)slot * size, .length = size, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = (uint64_t)c->idx << 32 | (uint32_t)slot, .sg_list = &sge, .num_sge = 1,
				 .opcode = op_write ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	if (op_write) {
		wr.wr.rdma.remote_addr = c->raddr + (size_t)slot * size;
		wr.wr.rdma.rkey = c->rkey;
	}
	int e = ibv_post_send(c->qp, &wr, &bad);
	if (e) {
		errno = e;
		DIE("ibv_post_send QP %d", c->idx);
	}
}

static struct rdma_cm_event *next_event(int timeout_ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	int r = poll(&p, 1, timeout_ms);
	if (r < 0)
		DIE("poll");
	if (r == 0) {
		errno = 0;
		DIE("no CM event within %d ms", timeout_ms);
	}
	if (rdma_get_cm_event(ch, &ev))
		DIE("rdma_get_cm_event");
	return ev;
}

static void wire_of(struct conn *c, struct wire *w)
{
	w->addr = htobe64((uintptr_t)c->buf);
	w->rkey = htonl(c->mr->rkey);
	w->qps = htonl(nqps);
}

static void server_connect(void)
{
	struct rdma_cm_id *lid;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY)};
	if (!(ch = rdma_create_event_channel()) || rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&sa) || rdma_listen(lid, 1024))
		DIE("listen on port %d", port);
	int up = 0;
	while (up < nqps) {
		/* the client may come late: as long as the watchdog allows */
		struct rdma_cm_event *ev = next_event((int)(watchdog_s * 1000));
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type t = ev->event;
		if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct wire w;
			if (nconns >= nqps) {
				errno = 0;
				DIE("more connections than -q %d", nqps);
			}
			struct conn *c = &conns[nconns];
			setup_conn(c, id, nconns);
			nconns++;
			for (int s = sq_depth(); s < (int)slots(); s++)
				post_recv(c, s);
			wire_of(c, &w);
			struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1,
						     .private_data = &w, .private_data_len = sizeof w};
			rdma_ack_cm_event(ev);
			if (rdma_accept(id, &cp))
				DIE("rdma_accept");
		} else if (t == RDMA_CM_EVENT_ESTABLISHED) {
			rdma_ack_cm_event(ev);
			up++;
		} else {
			errno = 0;
			DIE("unexpected %s (status %d) with %d established", rdma_event_str(t), ev->status, up);
		}
	}
}

static void client_connect(void)
{
	struct addrinfo *ai, hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	if (getaddrinfo(host, ps, &hints, &ai))
		DIE("getaddrinfo %s", host);
	if (!(ch = rdma_create_event_channel()))
		DIE("rdma_create_event_channel");
	for (int i = 0; i < nqps; i++) {
		struct conn *c = &conns[i];
		c->idx = i;
		if (rdma_create_id(ch, &c->id, c, RDMA_PS_TCP) ||
		    rdma_resolve_addr(c->id, NULL, ai->ai_addr, CM_TIMEOUT_MS))
			DIE("connect %d", i);
	}
	freeaddrinfo(ai);
	nconns = nqps;
	int up = 0;
	while (up < nqps) {
		struct rdma_cm_event *ev = next_event(CM_TIMEOUT_MS * 2);
		struct rdma_cm_id *id = ev->id;
		struct conn *c = id->context;
		enum rdma_cm_event_type t = ev->event;
		int st = ev->status;
		if (t == RDMA_CM_EVENT_ESTABLISHED && ev->param.conn.private_data_len >= sizeof(struct wire)) {
			struct wire w;
			memcpy(&w, ev->param.conn.private_data, sizeof w);
			c->raddr = be64toh(w.addr);
			c->rkey = ntohl(w.rkey);
			if ((int)ntohl(w.qps) != nqps) {
				errno = 0;
				DIE("the server expects -q %u, we have -q %d", ntohl(w.qps), nqps);
			}
		}
		rdma_ack_cm_event(ev);
		switch (t) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(id, CM_TIMEOUT_MS))
				DIE("rdma_resolve_route");
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED: {
			setup_conn(c, id, c->idx);
			for (int s = sq_depth(); s < (int)slots(); s++)
				post_recv(c, s);
			struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7};
			if (rdma_connect(id, &cp))
				DIE("rdma_connect");
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			up++;
			break;
		default:
			errno = st < 0 ? -st : 0;
			DIE("unexpected %s (status %d) with %d established", rdma_event_str(t), st, up);
		}
	}
}

static void disconnect_all(void)
{
	for (int i = 0; i < nconns; i++)
		rdma_disconnect(conns[i].id);
}

/* Server: wait until every connection is gone (the client disconnected). */
static void wait_disconnects(void)
{
	int down = 0;
	while (down < nconns) {
		struct rdma_cm_event *ev = next_event((int)(watchdog_s * 1000));
		enum rdma_cm_event_type t = ev->event;
		rdma_ack_cm_event(ev);
		if (t == RDMA_CM_EVENT_DISCONNECTED)
			down++;
		/* TIMEWAIT_EXIT and the like: nothing to do */
	}
}

static void bad_wc(struct ibv_wc *wc)
{
	errno = 0;
	DIE("QP %u: completion %s (opcode %d, vendor error %u)", (unsigned)(wc->wr_id >> 32),
	    ibv_wc_status_str(wc->status), wc->opcode, wc->vendor_err);
}

/* ------------------------------------------------------------ -m rpc */

static void spin_us(double us)
{
	double end = now() + us * 1e-6;
	while (now() < end)
		;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int rpc_server(void)
{
	struct conn *c = &conns[0];
	struct ibv_wc wc[16];
	long sends = 0, reaped = 0, empty = 0;
	int slot = 0;
	/* The CM channel is looked at now and then between empty polls: the
	 * client's disconnect ends the run even if no flushed receive shows. */
	for (;;) {
		int n = ibv_poll_cq(c->cq, 16, wc);
		if (n < 0)
			DIE("ibv_poll_cq");
		if (n == 0) {
			struct pollfd pf = {.fd = ch->fd, .events = POLLIN};
			if (++empty % 4096 == 0 && poll(&pf, 1, 0) == 1) {
				struct rdma_cm_event *ev;
				if (rdma_get_cm_event(ch, &ev) == 0) {
					enum rdma_cm_event_type t = ev->event;
					rdma_ack_cm_event(ev);
					if (t == RDMA_CM_EVENT_DISCONNECTED)
						return 0;
				}
			}
			continue;
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
				return 0; /* the client disconnected */
			if (wc[i].status != IBV_WC_SUCCESS)
				bad_wc(&wc[i]);
			if (wc[i].opcode == IBV_WC_SEND) {
				reaped++;
				continue;
			}
			/* a request: repost its receive, compute, reply */
			post_recv(c, (int)(uint32_t)wc[i].wr_id);
			spin_us(compute_us);
			while (sends - reaped >= sq_depth()) { /* SQ full: wait for a send completion */
				struct ibv_wc w;
				int m = ibv_poll_cq(c->cq, 1, &w);
				if (m < 0)
					DIE("ibv_poll_cq");
				if (m == 1) {
					if (w.status == IBV_WC_WR_FLUSH_ERR)
						return 0;
					if (w.status != IBV_WC_SUCCESS)
						bad_wc(&w);
					if (w.opcode == IBV_WC_SEND)
						reaped++;
					else
						post_recv(c, (int)(uint32_t)w.wr_id); /* cannot happen: one request in flight */
				}
			}
			post_send(c, slot);
			slot = (slot + 1) % sq_depth();
			sends++;
		}
	}
}

static int rpc_client(void)
{
	struct conn *c = &conns[0];
	size_t cap = 1 << 16, n = 0;
	double *rtt = malloc(cap * sizeof *rtt);
	struct ibv_wc wc[4];
	long sends = 0, reaped = 0;
	int slot = 0;
	if (!rtt)
		DIE("malloc");
	double t0 = now(), end = t0 + secs, t;
	while ((t = now()) < end) {
		post_send(c, slot);
		slot = (slot + 1) % sq_depth();
		sends++;
		int got = 0;
		while (!got || sends - reaped >= sq_depth()) {
			int m = ibv_poll_cq(c->cq, 4, wc);
			if (m < 0)
				DIE("ibv_poll_cq");
			for (int i = 0; i < m; i++) {
				if (wc[i].status != IBV_WC_SUCCESS)
					bad_wc(&wc[i]);
				if (wc[i].opcode == IBV_WC_SEND) {
					reaped++;
				} else {
					post_recv(c, (int)(uint32_t)wc[i].wr_id);
					got = 1;
				}
			}
			if (now() - t > 10) {
				errno = 0;
				DIE("no reply within 10 s");
			}
		}
		double d = (now() - t) * 1e6;
		if (n == cap) {
			cap *= 2;
			if (!(rtt = realloc(rtt, cap * sizeof *rtt)))
				DIE("realloc");
		}
		rtt[n++] = d;
	}
	double el = now() - t0, sum = 0;
	if (n == 0) {
		errno = 0;
		DIE("no round trip in %.1f s", secs);
	}
	for (size_t i = 0; i < n; i++)
		sum += rtt[i];
	qsort(rtt, n, sizeof *rtt, cmp_double);
	printf("rpcshape rpc compute_us=%g size=%d secs=%.3f rtts=%zu rate=%.1f mean_us=%.2f p50_us=%.2f "
	       "p99_us=%.2f max_us=%.2f\n",
	       compute_us, size, el, n, n / el, sum / n, rtt[n / 2], rtt[(size_t)(n * 0.99)], rtt[n - 1]);
	fflush(stdout);
	free(rtt);
	return 0;
}

/* ------------------------------------------------------------ -m qps */

static volatile int stop;
static double deadline;

struct poller {
	pthread_t th;
	int t;
	int ncq;
	struct ibv_cq *cq[MAXQPS];
};

static void *poll_thread(void *arg)
{
	struct poller *p = arg;
	struct ibv_wc wc[32];
	int k = 0;
	while (!stop) {
		struct ibv_cq *cq = p->cq[k];
		k = (k + 1) % p->ncq;
		int n = ibv_poll_cq(cq, 32, wc);
		if (n < 0)
			DIE("ibv_poll_cq");
		if (!is_server && n == 0 && now() >= deadline)
			break;
		for (int i = 0; i < n; i++) {
			struct conn *c = &conns[wc[i].wr_id >> 32];
			int slot = (int)(uint32_t)wc[i].wr_id;
			if (wc[i].status == IBV_WC_WR_FLUSH_ERR && is_server)
				continue; /* the client has gone */
			if (wc[i].status != IBV_WC_SUCCESS)
				bad_wc(&wc[i]);
			if (is_server) {
				if (wc[i].opcode == IBV_WC_RECV) {
					__atomic_fetch_add(&c->msgs, 1, __ATOMIC_RELAXED);
					post_recv(c, slot);
				}
				continue;
			}
			if (wc[i].opcode == IBV_WC_RECV)
				continue; /* the server sends nothing */
			__atomic_fetch_sub(&c->inflight, 1, __ATOMIC_RELAXED);
			if (now() < deadline) {
				__atomic_fetch_add(&c->msgs, 1, __ATOMIC_RELAXED);
				__atomic_fetch_add(&c->inflight, 1, __ATOMIC_RELAXED);
				post_send(c, slot);
			}
		}
	}
	return NULL;
}

static void start_pollers(struct poller *ps)
{
	for (int t = 0; t < nthreads; t++) {
		struct poller *p = &ps[t];
		p->t = t;
		p->ncq = 0;
		if (ncqs < nthreads)
			p->cq[p->ncq++] = cqs[t % ncqs];
		else
			for (int c = t; c < ncqs; c += nthreads)
				p->cq[p->ncq++] = cqs[c];
	}
	for (int t = 0; t < nthreads; t++)
		if ((errno = pthread_create(&ps[t].th, NULL, poll_thread, &ps[t])))
			DIE("pthread_create");
}

static void join_pollers(struct poller *ps)
{
	for (int t = 0; t < nthreads; t++)
		pthread_join(ps[t].th, NULL);
}

static int qps_server(void)
{
	struct poller *ps = calloc(nthreads, sizeof *ps);
	if (!ps)
		DIE("calloc");
	start_pollers(ps);
	wait_disconnects();
	stop = 1;
	join_pollers(ps);
	long min = -1, sum = 0;
	for (int i = 0; i < nconns; i++) {
		sum += conns[i].msgs;
		if (min < 0 || conns[i].msgs < min)
			min = conns[i].msgs;
	}
	fprintf(stderr, "rpcshape server: %ld receives, fewest on one QP %ld\n", sum, min);
	return 0;
}

static int qps_client(void)
{
	struct poller *ps = calloc(nthreads, sizeof *ps);
	if (!ps)
		DIE("calloc");
	double t0 = now();
	deadline = t0 + secs;
	for (int i = 0; i < nconns; i++)
		for (int s = 0; s < sq_depth(); s++) {
			conns[i].inflight++;
			post_send(&conns[i], s);
		}
	start_pollers(ps);
	join_pollers(ps);
	double el = deadline - t0; /* the messages counted completed before the deadline */
	/* Let the last messages complete before we disconnect (drain, bounded). */
	double dend = now() + 5;
	for (int i = 0; i < nconns; i++) {
		struct ibv_wc wc[32];
		while (__atomic_load_n(&conns[i].inflight, __ATOMIC_RELAXED) > 0 && now() < dend) {
			int n = ibv_poll_cq(conns[i].cq, 32, wc);
			if (n < 0)
				DIE("ibv_poll_cq");
			for (int k = 0; k < n; k++) {
				if (wc[k].status != IBV_WC_SUCCESS)
					bad_wc(&wc[k]);
				if (wc[k].opcode != IBV_WC_RECV)
					conns[wc[k].wr_id >> 32].inflight--;
			}
		}
	}
	long min = -1, max = 0, sum = 0;
	for (int i = 0; i < nconns; i++) {
		long m = conns[i].msgs;
		sum += m;
		if (min < 0 || m < min)
			min = m;
		if (m > max)
			max = m;
	}
	printf("rpcshape qps qps=%d cqs=%d threads=%d op=%s size=%d secs=%.3f msgs=%ld gbps=%.4f mpps=%.4f "
	       "min_qp_msgs=%ld max_qp_msgs=%ld\n",
	       nqps, ncqs, nthreads, op_write ? "write" : "send", size, el, sum, sum * (double)size / el / 1e9,
	       sum / el / 1e6, min, max);
	fflush(stdout);
	if (min <= 0) {
		fprintf(stderr, "rpcshape client: a QP moved no data\n");
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------ main */

static void usage(void)
{
	fprintf(stderr, "usage: rpcshape [-s] [-m rpc|qps] [-p PORT] [-t SECS] [-W WATCHDOG_SECS] [-S SIZE]\n"
			"                [-u COMPUTE_US] (rpc)  [-q QPS] [-c CQS] [-T THREADS] [-d DEPTH] [-o send|write] (qps)\n"
			"                [HOST] (client)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int o;
	while ((o = getopt(argc, argv, "sm:p:t:W:S:u:q:c:T:d:o:")) != -1) {
		switch (o) {
		case 's': is_server = 1; bench_role = "server"; break;
		case 'm': mode = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'W': watchdog_s = atof(optarg); break;
		case 'S': size = atoi(optarg); break;
		case 'u': compute_us = atof(optarg); break;
		case 'q': nqps = atoi(optarg); break;
		case 'c': ncqs = atoi(optarg); break;
		case 'T': nthreads = atoi(optarg); break;
		case 'd': depth = atoi(optarg); break;
		case 'o':
			if (strcmp(optarg, "write") == 0)
				op_write = 1;
			else if (strcmp(optarg, "send") != 0)
				usage();
			break;
		default: usage();
		}
	}
	int rpc = strcmp(mode, "rpc") == 0;
	if (!rpc && strcmp(mode, "qps") != 0)
		usage();
	if (is_server == (optind < argc) || argc - optind > 1)
		usage(); /* a client needs HOST, a server takes none */
	host = is_server ? NULL : argv[optind];
	if (size < 0)
		size = rpc ? 32 : 4096;
	if (rpc) {
		nqps = ncqs = nthreads = 1;
		op_write = 0;
	}
	if (size < 1 || secs <= 0 || nqps < 1 || nqps > MAXQPS || ncqs < 1 || ncqs > nqps || nthreads < 1 ||
	    nthreads > 64 || depth < 1 || depth > 1024 || compute_us < 0)
		usage();
	if (watchdog_s <= 0)
		watchdog_s = secs + 30;
	signal(SIGALRM, on_alarm);
	alarm((unsigned)watchdog_s + 1);

	int rc;
	if (is_server) {
		server_connect();
		rc = rpc ? rpc_server() : qps_server();
		disconnect_all();
	} else {
		client_connect();
		rc = rpc ? rpc_client() : qps_client();
		disconnect_all();
	}
	return rc;
}
