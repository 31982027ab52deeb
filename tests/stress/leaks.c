/* Leak test: create/destroy cycles of every kind of object, and whole
 * connections, must give back the process's fds, threads, goroutines and
 * resident memory.
 *
 *   leaks [-n CYCLES] [-c CONN_CYCLES] [-p PORT] [CASE ...]
 *
 * Cases (default: all): id id_chan id_listen ctx pd mr cq cq_chan qp srq
 * conn conn2 conn_reject conn_refused conn_abort. Object cases run CYCLES
 * cycles (default 10000), connection cases CONN_CYCLES (default 2000, about
 * 15-25 s for all five on a loaded 2-core machine; -c 10000 is the long
 * run). conn has both ends in this process; conn2 has the server in a
 * second process (this binary, posix_spawn'ed as "leaks srv PORT FD"),
 * measured the same way and printed with a "srv" prefix. conn_reject: the
 * server rejects; conn_refused: nobody listens; conn_abort: the client
 * destroys an established connection without disconnecting.
 *
 * Every case but conn2 first runs a tenth of its cycles (at least 100) in a
 * pass over all cases (the Go runtime grows its heap, thread pool and
 * netpoller once, whichever case comes first). Then each case warms up in
 * rounds until one no longer raises the RSS peak (object cases: rounds of
 * as many cycles as measured; connection cases: of a tenth), takes the
 * baseline, runs its cycles and measures: fds and goroutines must come back
 * within +-10 % of the baseline, threads too or within 2 of it
 * (threads_within), resident memory to at most 110 % of it (rss_within; its
 * baseline is the highest VmRSS of the case's warm-up, rss_sample).
 *
 * Ports: the first free ones from PORT (default 34000) on, and from
 * PORT + 200 for conn_refused.
 * Run with GOIWARP_CONNECT_RETRY=0 (ctest does): conn_refused times the
 * refusal itself, which the library otherwise retries for a second.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <goiwarp.h>

static const char *role = "leaks";
#define GIW_TEST_ROLE role
#include "giw_test.h"

extern char **environ;

/* --- measuring ------------------------------------------------------------ */
struct figures {
	long fds, threads, goroutines, rss_kb;
};

static struct figures sample(void)
{
	struct giw_runtime rt;
	struct figures f;

	REQUIRE(giw_query_runtime(&rt) == 0);
	f.fds = giw_count_dir("/proc/self/fd") - 1; /* opendir's own */
	f.threads = giw_count_dir("/proc/self/task");
	f.goroutines = (long)rt.goroutines;
	f.rss_kb = giw_rss_kb();
	return f;
}

static int within(long base, long after)
{
	return labs(after - base) * 10 <= base;
}

/* Resident memory may end below its baseline (the runtime gave pages back);
 * only growth counts. */
static int rss_within(long base, long after)
{
	return (after - base) * 10 <= base;
}

/* The Go runtime never ends an idle thread: its pool grows to the most
 * goroutines ever blocked in a system call at once, a high-water mark that
 * can still rise by one or two over thousands of connections after the
 * warm-up. A thread kept per object would add hundreds, so threads get that
 * slack of 2 besides the 10 %. */
static int threads_within(long base, long after)
{
	return within(base, after) || labs(after - base) <= 2;
}

static int all_within(const struct figures *b, const struct figures *a)
{
	return within(b->fds, a->fds) && threads_within(b->threads, a->threads) &&
	       within(b->goroutines, a->goroutines) && rss_within(b->rss_kb, a->rss_kb);
}

/* The baseline: the last cycle's goroutines (event delivery, a reader
 * returning from its read) may still be ending, so fds and goroutines are
 * the lowest seen over 100 ms. */
static struct figures baseline(void)
{
	double end = giw_now() + 0.1;
	struct figures f = sample(), g;

	while (giw_now() < end) {
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
		g = sample();
		g.fds = g.fds < f.fds ? g.fds : f.fds;
		g.goroutines = g.goroutines < f.goroutines ? g.goroutines : f.goroutines;
		f = g;
	}
	return f;
}

/* Goroutines of a closed connection end asynchronously (a reader returns
 * from its read, an event goroutine delivers the last event): the figures
 * are sampled until they are back within bounds, for at most 5 s. */
static struct figures settle(const struct figures *base)
{
	double end = giw_now() + 5;
	struct figures f = sample();

	while (!all_within(base, &f) && giw_now() < end) {
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
		f = sample();
	}
	return f;
}

/* Resident memory swings with the Go heap between two collections (the
 * heap grows to twice what is live, then is collected; its pages go back to
 * the kernel later), by 1-3 MB here: a baseline sampled at one low point
 * would fail a measurement at a high one. The RSS baseline is therefore the
 * highest VmRSS seen during the case's warm-up (sampled every 16 cycles):
 * the working set the case already needed. A leak grows past it. */
static long rss_high;

static void rss_sample(long cycle)
{
	long r;
	if (cycle % 16)
		return;
	r = giw_rss_kb();
	if (r > rss_high)
		rss_high = r;
}

/* Prints the figures and returns the number out of bounds. */
static int report(const char *who, const char *name, long cycles, double secs, const struct figures *b,
		  const struct figures *a)
{
	const char *lbl[] = {"fds", "threads", "goroutines", "rss_kB"};
	long bv[] = {b->fds, b->threads, b->goroutines, b->rss_kb};
	long av[] = {a->fds, a->threads, a->goroutines, a->rss_kb};
	int bad = 0;

	printf("%s%-12s %6ld cycles %6.1f s:", who, name, cycles, secs);
	for (int i = 0; i < 4; i++) {
		int ok = i == 3 ? rss_within(bv[i], av[i]) : i == 1 ? threads_within(bv[i], av[i]) : within(bv[i], av[i]);
		printf("  %s %ld->%ld (%.2f)%s", lbl[i], bv[i], av[i], bv[i] ? (double)av[i] / bv[i] : 0,
		       ok ? "" : " OUT OF BOUNDS");
		bad += !ok;
	}
	printf("\n");
	fflush(stdout);
	return bad;
}

/* --- object cycles ---------------------------------------------------------- */
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static uint8_t mrbuf[65536];
static uint16_t port0 = 34000;

static struct sockaddr_in lo_addr(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	return sa;
}

/* Binds and listens on the first free port from port0 on (they lie in the
 * ephemeral range, where earlier connections' TIME_WAIT can hold one). */
static uint16_t listen_free(struct rdma_cm_id *id)
{
	for (uint16_t p = port0; p < port0 + 200; p++) {
		struct sockaddr_in sa = lo_addr(p);
		if (rdma_bind_addr(id, (struct sockaddr *)&sa) == 0) {
			REQUIRE(rdma_listen(id, 64) == 0);
			return p;
		}
		REQUIRE(errno == EADDRINUSE);
	}
	REQUIRE(!"no free port");
	return 0;
}

static void cyc_id(void)
{
	struct rdma_cm_id *id;
	REQUIRE(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_destroy_id(id) == 0);
}

static void cyc_id_chan(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	REQUIRE(ch != NULL);
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
}

/* The same port every cycle while it stays free: a listener that outlived
 * its id would make the next bind fail with EADDRINUSE (and would show as an
 * fd and a goroutine too). The ports lie in the ephemeral range, so another
 * process's outgoing connection may take it between two cycles: then the
 * cycle moves to the next free port and says so. */
static uint16_t listen_port;

static void cyc_id_listen(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in sa = lo_addr(listen_port);
	struct rdma_cm_id *id;
	REQUIRE(ch != NULL);
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	if (listen_port && rdma_bind_addr(id, (struct sockaddr *)&sa) == 0) {
		REQUIRE(rdma_listen(id, 16) == 0);
	} else {
		uint16_t was = listen_port;
		REQUIRE(!was || errno == EADDRINUSE);
		listen_port = listen_free(id);
		if (was)
			printf("id_listen: port %u taken meanwhile, now %u\n", was, listen_port);
	}
	REQUIRE(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
}

/* Opened besides the library's own context of giw_lo (rdma_cm's). */
static void cyc_ctx(void)
{
	struct ibv_context *c = open_lo();
	REQUIRE(ibv_close_device(c) == 0);
}

static void cyc_srq(void)
{
	struct ibv_srq_init_attr a = {.attr = {.max_wr = 256, .max_sge = 2}};
	struct ibv_srq *srq = ibv_create_srq(pd, &a);
	REQUIRE(srq != NULL);
	REQUIRE(ibv_destroy_srq(srq) == 0);
}

static void cyc_pd(void)
{
	struct ibv_pd *p = ibv_alloc_pd(ctx);
	REQUIRE(p != NULL);
	REQUIRE(ibv_dealloc_pd(p) == 0);
}

static void cyc_mr(void)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, mrbuf, sizeof(mrbuf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	REQUIRE(mr != NULL);
	REQUIRE(ibv_dereg_mr(mr) == 0);
}

static void cyc_cq(void)
{
	struct ibv_cq *c = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	REQUIRE(c != NULL);
	REQUIRE(ibv_destroy_cq(c) == 0);
}

static void cyc_cq_chan(void)
{
	struct ibv_comp_channel *cc = ibv_create_comp_channel(ctx);
	struct ibv_cq *c;
	REQUIRE(cc != NULL);
	REQUIRE((c = ibv_create_cq(ctx, 256, NULL, cc, 0)) != NULL);
	REQUIRE(ibv_req_notify_cq(c, 0) == 0);
	REQUIRE(ibv_destroy_cq(c) == 0);
	REQUIRE(ibv_destroy_comp_channel(cc) == 0);
}

/* SQ and RQ rings of 256 entries, taken to INIT so the QP is fully set up. */
static void cyc_qp(void)
{
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 256, .max_recv_wr = 256, .max_send_sge = 2,
					     .max_recv_sge = 2, .max_inline_data = 64}};
	struct ibv_qp_attr m = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	REQUIRE(qp != NULL);
	REQUIRE(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT) == 0);
	REQUIRE(ibv_destroy_qp(qp) == 0);
}

/* --- connection cycles ----------------------------------------------------- */
/* One side of a connection: what an application allocates per connection. */
struct side {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t buf[2][64]; /* [0] sent from, [1] received into */
	unsigned done;      /* bit wr_id: that completion was polled */
};

static uint32_t conn_seq; /* connections so far: each one's Sends carry it */

static struct rdma_cm_event *get_event(struct rdma_event_channel *ch, const char *want)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;

	if (poll(&p, 1, 10000) != 1) {
		fprintf(stderr, "[%s] cycle %u: no CM event in 10 s, want %s\n", role, conn_seq, want);
		exit(1);
	}
	REQUIRE(rdma_get_cm_event(ch, &ev) == 0);
	return ev;
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *ev = get_event(ch, rdma_event_str(t));

	if (ev->event != t) {
		fprintf(stderr, "[%s] got %s (status %d), want %s\n", role, rdma_event_str(ev->event),
			ev->status, rdma_event_str(t));
		exit(1);
	}
	return ev;
}

static void side_setup(struct side *s, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
					     .max_recv_sge = 1}};
	struct ibv_sge sge;
	struct ibv_recv_wr w = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad;

	s->id = id;
	s->done = 0;
	REQUIRE((s->pd = ibv_alloc_pd(id->verbs)));
	REQUIRE((s->cq = ibv_create_cq(id->verbs, 32, NULL, NULL, 0)));
	a.send_cq = a.recv_cq = s->cq;
	REQUIRE(rdma_create_qp(id, s->pd, &a) == 0);
	REQUIRE((s->mr = ibv_reg_mr(s->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE)));
	sge = (struct ibv_sge){(uintptr_t)s->buf[1], sizeof(s->buf[1]), s->mr->lkey};
	REQUIRE(ibv_post_recv(id->qp, &w, &bad) == 0);
}

static void side_teardown(struct side *s)
{
	rdma_destroy_qp(s->id);
	REQUIRE(ibv_dereg_mr(s->mr) == 0);
	REQUIRE(ibv_destroy_cq(s->cq) == 0);
	REQUIRE(ibv_dealloc_pd(s->pd) == 0);
	REQUIRE(rdma_destroy_id(s->id) == 0);
}

/* Waits for the completion of wr_id 1 (our Send) or 2 (the Receive); the
 * other one may come first (a reply can complete before our Send's own
 * completion is written), so it is remembered. */
static void wait_wc(struct side *s, uint64_t wrid)
{
	double end = giw_now() + 10;
	struct ibv_wc wc;
	int n;

	while (!(s->done & (1u << wrid))) {
		while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
			REQUIRE(giw_now() < end);
		REQUIRE(n == 1);
		if (wc.status != IBV_WC_SUCCESS || (wc.wr_id != 1 && wc.wr_id != 2) || (s->done & (1u << wc.wr_id))) {
			fprintf(stderr, "[%s] wc %llu %s, want %llu\n", role, (unsigned long long)wc.wr_id,
				ibv_wc_status_str(wc.status), (unsigned long long)wrid);
			exit(1);
		}
		s->done |= 1u << wc.wr_id;
	}
}

/* One Send of 64 bytes carrying the cycle number; the receiver checks it. */
static void send_seq(struct side *s, uint32_t seq)
{
	struct ibv_sge sge = {(uintptr_t)s->buf[0], sizeof(s->buf[0]), s->mr->lkey};
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	memset(s->buf[0], (uint8_t)seq, sizeof(s->buf[0]));
	memcpy(s->buf[0], &seq, sizeof(seq));
	REQUIRE(ibv_post_send(s->id->qp, &w, &bad) == 0);
	wait_wc(s, 1);
}

static void recv_seq(struct side *s, uint32_t seq)
{
	uint8_t want[64];
	memset(want, (uint8_t)seq, sizeof(want));
	memcpy(want, &seq, sizeof(seq));
	wait_wc(s, 2);
	REQUIRE(memcmp(s->buf[1], want, sizeof(want)) == 0);
}

/* The listening end, kept for the whole case (part of the baseline). */
static struct rdma_event_channel *lch;
static struct rdma_cm_id *lid;

static uint16_t conn_port;

static void listen_on(void)
{
	REQUIRE((lch = rdma_create_event_channel()));
	REQUIRE(rdma_create_id(lch, &lid, NULL, RDMA_PS_TCP) == 0);
	conn_port = listen_free(lid);
}

static void unlisten(void)
{
	REQUIRE(rdma_destroy_id(lid) == 0);
	rdma_destroy_event_channel(lch);
}

/* The client's first steps: resolve, set up, connect. */
static struct rdma_event_channel *client_start(struct side *c, uint16_t port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in sa = lo_addr(port);
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct rdma_cm_id *id;

	REQUIRE(ch != NULL);
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 2000) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	REQUIRE(rdma_resolve_route(id, 2000) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	side_setup(c, id);
	REQUIRE(rdma_connect(id, &cp) == 0);
	return ch;
}

/* The server rejects the request. */
static void cyc_conn_reject(void)
{
	struct side c;
	struct rdma_event_channel *ch = client_start(&c, conn_port);
	struct rdma_cm_event *ev = expect(lch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *req = ev->id;

	REQUIRE(rdma_reject(req, "no", 2) == 0);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_destroy_id(req) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_REJECTED));
	side_teardown(&c);
	rdma_destroy_event_channel(ch);
}

/* Nobody listens on the port: an id bound to it, not listening, kept for
 * the process (TCP answers RST). */
static struct rdma_cm_id *closed_id;
static uint16_t closed_port;

static void cyc_conn_refused(void)
{
	struct side c;
	struct rdma_event_channel *ch;

	if (!closed_id) {
		struct sockaddr_in sa;
		REQUIRE(rdma_create_id(NULL, &closed_id, NULL, RDMA_PS_TCP) == 0);
		for (closed_port = port0 + 200;; closed_port++) {
			sa = lo_addr(closed_port);
			if (rdma_bind_addr(closed_id, (struct sockaddr *)&sa) == 0)
				break;
			REQUIRE(errno == EADDRINUSE && closed_port < port0 + 400);
		}
	}
	ch = client_start(&c, closed_port);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_REJECTED));
	side_teardown(&c);
	rdma_destroy_event_channel(ch);
}

/* Established, then the client destroys everything without disconnecting:
 * the server sees DISCONNECTED. */
static void cyc_conn_abort(void)
{
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct side c, s;
	struct rdma_event_channel *ch = client_start(&c, conn_port);
	struct rdma_cm_event *ev = expect(lch, RDMA_CM_EVENT_CONNECT_REQUEST);

	side_setup(&s, ev->id);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_accept(s.id, &cp) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(expect(lch, RDMA_CM_EVENT_ESTABLISHED));
	side_teardown(&c);
	rdma_destroy_event_channel(ch);
	rdma_ack_cm_event(expect(lch, RDMA_CM_EVENT_DISCONNECTED));
	side_teardown(&s);
}

/* The client half: resolve, connect, one Send each way, disconnect. With
 * srv set the server half runs interleaved in this thread; otherwise the
 * server is another process serving the same steps (serve_one). */
static void conn_client(uint16_t port, int local_srv)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in sa = lo_addr(port);
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7};
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct side c, s;
	uint32_t seq = ++conn_seq;

	REQUIRE(ch != NULL);
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 2000) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	REQUIRE(rdma_resolve_route(id, 2000) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	side_setup(&c, id);
	REQUIRE(rdma_connect(id, &cp) == 0);
	if (local_srv) {
		ev = expect(lch, RDMA_CM_EVENT_CONNECT_REQUEST);
		side_setup(&s, ev->id);
		rdma_ack_cm_event(ev);
		REQUIRE(rdma_accept(s.id, &cp) == 0);
	}
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
	if (local_srv)
		rdma_ack_cm_event(expect(lch, RDMA_CM_EVENT_ESTABLISHED));
	send_seq(&c, seq);
	if (local_srv) {
		recv_seq(&s, seq);
		send_seq(&s, ~seq);
	}
	recv_seq(&c, ~seq);
	REQUIRE(rdma_disconnect(id) == 0);
	rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
	side_teardown(&c);
	rdma_destroy_event_channel(ch);
	if (local_srv) {
		rdma_ack_cm_event(expect(lch, RDMA_CM_EVENT_DISCONNECTED));
		side_teardown(&s);
	}
}

/* The server half of one conn2 cycle, in the server process. The client
 * may start its next connection as soon as its own DISCONNECTED arrived, so
 * the next CONNECT_REQUEST can come before this one's DISCONNECTED: it is
 * kept for the next cycle. */
static struct rdma_cm_event *next_req;

static void serve_one(void)
{
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct rdma_cm_event *ev = next_req ? next_req : expect(lch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct side s;
	uint32_t seq = ++conn_seq;

	next_req = NULL;
	side_setup(&s, ev->id);
	rdma_ack_cm_event(ev);
	REQUIRE(rdma_accept(s.id, &cp) == 0);
	rdma_ack_cm_event(expect(lch, RDMA_CM_EVENT_ESTABLISHED));
	recv_seq(&s, seq);
	send_seq(&s, ~seq);
	ev = get_event(lch, "DISCONNECTED or the next CONNECT_REQUEST");
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		next_req = ev;
		ev = get_event(lch, "DISCONNECTED");
	}
	REQUIRE(ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->id == s.id);
	rdma_ack_cm_event(ev);
	side_teardown(&s);
}

static void cyc_conn(void) { conn_client(conn_port, 1); }
static void cyc_conn2(void) { conn_client(conn_port, 0); }

/* --- conn2's server process ------------------------------------------------ */
/* Protocol over the socketpair, client to server: 'w' N (warm-up of N
 * cycles, then the baseline), 'm' N (N cycles, then the figures), 'q'. The
 * server answers each with its figures. */
struct cmd {
	char op;
	long n;
};

static int server_main(int fd)
{
	struct figures base = {0}, f;
	struct cmd c;

	role = "srv";
	listen_on();
	REQUIRE(write(fd, &conn_port, sizeof(conn_port)) == sizeof(conn_port));
	while (read(fd, &c, sizeof(c)) == (ssize_t)sizeof(c) && c.op != 'q') {
		for (long i = 0; i < c.n; i++) {
			serve_one();
			if (c.op == 'w')
				rss_sample(i);
		}
		f = c.op == 'w' ? baseline() : settle(&base);
		if (c.op == 'w') {
			f.rss_kb = f.rss_kb > rss_high ? f.rss_kb : rss_high;
			base = f;
		}
		REQUIRE(write(fd, &f, sizeof(f)) == (ssize_t)sizeof(f));
	}
	unlisten();
	return 0;
}

/* --- driver --------------------------------------------------------------- */
struct kase {
	const char *name;
	void (*cycle)(void);
	int conn;
};

static const struct kase cases[] = {
	{"id", cyc_id, 0},      {"id_chan", cyc_id_chan, 0}, {"id_listen", cyc_id_listen, 0},
	{"ctx", cyc_ctx, 0},    {"pd", cyc_pd, 0},           {"mr", cyc_mr, 0},
	{"cq", cyc_cq, 0},      {"cq_chan", cyc_cq_chan, 0}, {"qp", cyc_qp, 0},
	{"srq", cyc_srq, 0},    {"conn", cyc_conn, 1},       {"conn2", cyc_conn2, 1},
	{"conn_reject", cyc_conn_reject, 1}, {"conn_refused", cyc_conn_refused, 1},
	{"conn_abort", cyc_conn_abort, 1},
};

static int srv_fd = -1;
static pid_t srv_pid;

static void srv_start(void)
{
	int sv[2];
	char fdarg[16], portarg[16];
	char *av[] = {"leaks", "srv", portarg, fdarg, NULL};

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	snprintf(portarg, sizeof(portarg), "%u", port0);
	REQUIRE(posix_spawn(&srv_pid, "/proc/self/exe", NULL, NULL, av, environ) == 0);
	close(sv[1]);
	srv_fd = sv[0];
	REQUIRE(read(srv_fd, &conn_port, sizeof(conn_port)) == sizeof(conn_port));
}

static void srv_send(char op, long n)
{
	struct cmd c = {op, n};
	REQUIRE(write(srv_fd, &c, sizeof(c)) == (ssize_t)sizeof(c));
}

/* The server answers a command once it has served all its cycles. */
static void srv_figures(struct figures *f)
{
	REQUIRE(read(srv_fd, f, sizeof(*f)) == (ssize_t)sizeof(*f));
}

static int srv_stop(void)
{
	int st;
	srv_send('q', 0);
	close(srv_fd);
	REQUIRE(waitpid(srv_pid, &st, 0) == srv_pid);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* A warm-up round: a tenth of the cycles, at least 100. */
static long warm_cycles(long cycles) { return cycles / 10 > 100 ? cycles / 10 : 100; }

static void warm_up(const struct kase *k, long n)
{
	if (k->conn)
		listen_on();
	for (long i = 0; i < n; i++) {
		k->cycle();
		rss_sample(i);
	}
	if (k->conn)
		unlisten();
}

static int run_case(const struct kase *k, long cycles)
{
	struct figures b, a, sb = {0}, sa;
	int two = k->cycle == cyc_conn2, bad;
	/* Warm-up rounds until one no longer raises the RSS peak (of either
	 * process) by more than 1 %. An object cycle allocates little: a
	 * tenth of the cycles may not span one collection, so its rounds are
	 * as long as the measurement and see the same swings (at most 3). A
	 * connection allocates ~100 KB: rounds of a tenth (at most 8). */
	long warm = k->conn ? warm_cycles(cycles) : cycles, last = 0, srv_last = 0;
	int rounds = k->conn ? 8 : 3;
	double t0;

	if (k->conn && !two)
		listen_on();
	if (two) {
		conn_seq = 0; /* counted from the server process's start */
		srv_start();
	}
	rss_high = 0; /* this case's own peak */
	for (int round = 0; round < rounds; round++) {
		last = rss_high;
		srv_last = sb.rss_kb;
		if (two)
			srv_send('w', warm);
		for (long i = 0; i < warm; i++) {
			k->cycle();
			rss_sample(i);
		}
		if (two)
			srv_figures(&sb);
		if (round > 0 && rss_high * 100 <= last * 101 && sb.rss_kb * 100 <= srv_last * 101)
			break;
	}
	b = baseline();
	b.rss_kb = b.rss_kb > rss_high ? b.rss_kb : rss_high;
	t0 = giw_now();
	if (two)
		srv_send('m', cycles);
	for (long i = 0; i < cycles; i++)
		k->cycle();
	a = settle(&b);
	bad = report("", k->name, cycles, giw_now() - t0, &b, &a);
	if (two) {
		srv_figures(&sa);
		bad += report("srv ", k->name, cycles, giw_now() - t0, &sb, &sa);
		bad += srv_stop();
	}
	if (k->conn && !two)
		unlisten();
	return bad;
}

int main(int argc, char **argv)
{
	long cycles = 10000, conn_cycles = 2000;
	int opt, bad = 0, ran = 0;

	if (argc == 4 && !strcmp(argv[1], "srv")) {
		port0 = (uint16_t)atoi(argv[2]);
		return server_main(atoi(argv[3]));
	}
	while ((opt = getopt(argc, argv, "n:c:p:")) != -1) {
		switch (opt) {
		case 'n': cycles = atol(optarg); break;
		case 'c': conn_cycles = atol(optarg); break;
		case 'p': port0 = (uint16_t)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: leaks [-n CYCLES] [-c CONN_CYCLES] [-p PORT] [CASE ...]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	ctx = open_lo();
	REQUIRE((pd = ibv_alloc_pd(ctx)));
	REQUIRE((cq = ibv_create_cq(ctx, 512, NULL, NULL, 0)));
	/* A first pass over every case before any is measured: the runtime's
	 * heap, thread pool and netpoller reach their working size whichever
	 * case comes first. conn is always in it: the netpoller's two fds come
	 * with the first socket or timer, whatever cases were chosen. */
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			const struct kase *k = &cases[i];
			int want = optind == argc || (pass == 0 && k->cycle == cyc_conn);
			for (int j = optind; j < argc; j++)
				want |= !strcmp(argv[j], k->name);
			if (!want)
				continue;
			if (pass == 1) {
				ran++;
				bad += run_case(k, k->conn ? conn_cycles : cycles);
			} else if (k->cycle != cyc_conn2) {
				warm_up(k, warm_cycles(k->conn ? conn_cycles : cycles));
			}
		}
	REQUIRE(ran > 0);
	REQUIRE(ibv_destroy_cq(cq) == 0);
	REQUIRE(ibv_dealloc_pd(pd) == 0);
	REQUIRE(ibv_close_device(ctx) == 0);
	printf("%s\n", bad ? "FAIL" : "PASS");
	return bad || failures;
}
