/* Several application threads on one QP, one CQ, one channel: threads <case>.
 *
 *   post_poll    4 threads post sends and writes to one QP (one of them with
 *                the ibv_wr_* API, chains of 1-4 from the others) while 3
 *                threads poll its send CQ; 2 threads post receives while 2
 *                poll the receive CQ. Every completion is seen exactly once,
 *                every message arrives exactly once, every write lands.
 *   cq_event     one thread blocks in ibv_get_cq_event while 3 others post
 *                and poll the same CQ; it wakes for every armed event and
 *                exits on the completion of a last marker WR.
 *   cm_event     one thread blocks in rdma_get_cm_event while 3 others post
 *                writes and poll, and 2 post receives and poll; the peer's
 *                disconnect wakes it; every WR posted completes once
 *                (successfully or flushed).
 *   resize       ibv_resize_cq, ibv_req_notify_cq and ibv_poll_cq on one CQ
 *                in three threads while its QP's completions arrive; the arm
 *                survives the resizes.
 *   destroy_qp   rdma_destroy_qp with 4096 writes queued while 3 threads poll
 *                its CQ (their empty polls call into the engine for that QP).
 *   small_stack  a thread with a PTHREAD_STACK_MIN stack makes the process's
 *                first call, connects, writes and closes.
 *   bench        ns per call of an empty ibv_poll_cq and of ibv_req_notify_cq
 *                (a figure, not a check).
 *
 * Both ends of one RC connection live in this process (rdma_cm on 127.0.0.1,
 * ports 35100-35199). Worker threads REQUIRE (exit); the main thread CHECKs.
 * Waiting is polling with a deadline, never sleeping. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "giw_test.h"
#include "giw_cm.h"

#define DEADLINE_S 15 /* every wait of a case; ctest's timeout is above it */

struct side {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	uint64_t *buf;
	struct ibv_mr *mr;
};

struct conn {
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *lid;
	struct side srv, cli;
};

/* PD, CQs (the client's send CQ on a completion channel), QP, buffer of n words. */
static void setup_side(struct side *s, struct rdma_cm_id *id, int cqe, size_t n)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 256, .max_recv_wr = 256, .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};

	s->id = id;
	REQUIRE((s->pd = ibv_alloc_pd(id->verbs)));
	REQUIRE((s->cc = ibv_create_comp_channel(id->verbs)));
	REQUIRE((s->scq = ibv_create_cq(id->verbs, cqe, NULL, s->cc, 0)));
	REQUIRE((s->rcq = ibv_create_cq(id->verbs, cqe, NULL, NULL, 0)));
	a.send_cq = s->scq;
	a.recv_cq = s->rcq;
	REQUIRE(rdma_create_qp(id, s->pd, &a) == 0);
	s->qp = id->qp;
	REQUIRE((s->buf = calloc(n, sizeof(uint64_t))));
	REQUIRE((s->mr = ibv_reg_mr(s->pd, s->buf, n * sizeof(uint64_t),
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)));
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, double until)
{
	int n;

	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && giw_now() < until)
		sched_yield();
	return n;
}

/* Both ends of one connection, set up from this thread: the client connects,
 * the server accepts, and the client's first FPDU (a zero-length write) lets
 * the server report ESTABLISHED. */
static void connect_pair(struct conn *c, int cqe, size_t words)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rdma_conn_param cp = {.responder_resources = 4, .initiator_depth = 4};
	struct rdma_cm_event *e;
	struct rdma_cm_id *cid;
	uint16_t port;

	REQUIRE((c->sch = rdma_create_event_channel()) && (c->cch = rdma_create_event_channel()));
	for (port = 35100; port < 35200; port++) {
		sa.sin_port = htons(port);
		REQUIRE(rdma_create_id(c->sch, &c->lid, NULL, RDMA_PS_TCP) == 0);
		if (rdma_bind_addr(c->lid, (struct sockaddr *)&sa) == 0 && rdma_listen(c->lid, 1) == 0)
			break;
		rdma_destroy_id(c->lid);
	}
	REQUIRE(port < 35200);
	REQUIRE(rdma_create_id(c->cch, &cid, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(cid, NULL, (struct sockaddr *)&sa, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(c->cch, RDMA_CM_EVENT_ADDR_RESOLVED, 10000));
	REQUIRE(rdma_resolve_route(cid, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(c->cch, RDMA_CM_EVENT_ROUTE_RESOLVED, 10000));
	setup_side(&c->cli, cid, cqe, words);
	REQUIRE(rdma_connect(cid, &cp) == 0);
	e = giw_expect_cm(c->sch, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	setup_side(&c->srv, e->id, cqe, words);
	rdma_ack_cm_event(e);
	REQUIRE(rdma_accept(c->srv.id, &cp) == 0);
	rdma_ack_cm_event(giw_expect_cm(c->cch, RDMA_CM_EVENT_ESTABLISHED, 10000));

	struct ibv_send_wr w = {.wr_id = UINT64_MAX, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_wc wc;
	w.wr.rdma.rkey = c->srv.mr->rkey;
	w.wr.rdma.remote_addr = (uintptr_t)c->srv.buf;
	REQUIRE(ibv_post_send(c->cli.qp, &w, &bad) == 0);
	REQUIRE(poll_one(c->cli.scq, &wc, giw_now() + DEADLINE_S) == 1);
	REQUIRE(wc.status == IBV_WC_SUCCESS && wc.wr_id == UINT64_MAX);
	rdma_ack_cm_event(giw_expect_cm(c->sch, RDMA_CM_EVENT_ESTABLISHED, 10000));
}

static void free_side(struct side *s)
{
	rdma_destroy_qp(s->id);
	CHECK(ibv_dereg_mr(s->mr) == 0);
	CHECK(ibv_destroy_cq(s->scq) == 0);
	CHECK(ibv_destroy_cq(s->rcq) == 0);
	CHECK(ibv_destroy_comp_channel(s->cc) == 0);
	CHECK(ibv_dealloc_pd(s->pd) == 0);
	free(s->buf);
	CHECK(rdma_destroy_id(s->id) == 0);
}

/* Tears down a pair that is still connected or was disconnected already. */
static void close_pair(struct conn *c, int connected)
{
	if (connected) {
		CHECK(rdma_disconnect(c->cli.id) == 0);
		rdma_ack_cm_event(giw_expect_cm(c->cch, RDMA_CM_EVENT_DISCONNECTED, 10000));
		rdma_ack_cm_event(giw_expect_cm(c->sch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	}
	free_side(&c->cli);
	free_side(&c->srv);
	CHECK(rdma_destroy_id(c->lid) == 0);
	rdma_destroy_event_channel(c->sch);
	rdma_destroy_event_channel(c->cch);
}

/* ---- shared bookkeeping -------------------------------------------------- */

/* A set of n ids, each marked at most once. */
struct seen {
	atomic_uchar *bit;
	size_t n;
	atomic_size_t count;
};

static void seen_init(struct seen *s, size_t n)
{
	REQUIRE((s->bit = calloc(n, 1)));
	s->n = n;
	atomic_init(&s->count, 0);
}

static void seen_mark(struct seen *s, uint64_t id, const char *what)
{
	if (id >= s->n || atomic_exchange(&s->bit[id], 1)) {
		fprintf(stderr, "%s %llu: out of range or seen twice\n", what, (unsigned long long)id);
		exit(1);
	}
	atomic_fetch_add(&s->count, 1);
}

/* Completions polled per CQ, and the bound on what is posted and not yet
 * polled: the CQ must hold every completion nobody polled yet. */
struct credit {
	atomic_long out;
	long max;
};

static void credit_take(struct credit *c, long n, double until)
{
	while (atomic_fetch_add(&c->out, n) + n > c->max) {
		atomic_fetch_sub(&c->out, n);
		REQUIRE(giw_now() < until);
		sched_yield();
	}
}

/* Posts wr (a chain) until the SQ or RQ has room (ENOMEM: the engine has not
 * consumed enough yet). */
static void post_send_retry(struct ibv_qp *qp, struct ibv_send_wr *wr, double until)
{
	struct ibv_send_wr *bad;
	int e;

	while ((e = ibv_post_send(qp, wr, &bad)) == ENOMEM) {
		REQUIRE(giw_now() < until);
		wr = bad; /* what was before bad is posted */
		sched_yield();
	}
	REQUIRE(e == 0);
}

static void post_recv_retry(struct ibv_qp *qp, struct ibv_recv_wr *wr, double until)
{
	struct ibv_recv_wr *bad;
	int e;

	while ((e = ibv_post_recv(qp, wr, &bad)) == ENOMEM) {
		REQUIRE(giw_now() < until);
		sched_yield();
	}
	REQUIRE(e == 0);
}

/* ---- post_poll ------------------------------------------------------------ */

enum { PP_POSTERS = 4, PP_PER = 4000, PP_N = PP_POSTERS * PP_PER, PP_SENDS = PP_N / 2 };

/* WR i (0..PP_N) of poster i / PP_PER: even i a send of the word i, odd i an
 * RDMA write of it to the server's word i. Receive j lands in word PP_N + j. */
struct pp {
	struct conn c;
	struct seen sent, recvd, arrived;
	struct credit scq, rcq;
	atomic_int posted_recvs;
	double until;
};

struct pp_arg {
	struct pp *p;
	int t;
};

static void pp_fill(struct pp *p, struct ibv_send_wr *w, struct ibv_sge *s, uint64_t i)
{
	*s = (struct ibv_sge){.addr = (uintptr_t)&p->c.cli.buf[i], .length = 8,
			      .lkey = p->c.cli.mr->lkey};
	*w = (struct ibv_send_wr){.wr_id = i, .sg_list = s, .num_sge = 1,
				  .opcode = i % 2 ? IBV_WR_RDMA_WRITE : IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED};
	w->wr.rdma.remote_addr = (uintptr_t)&p->c.srv.buf[i];
	w->wr.rdma.rkey = p->c.srv.mr->rkey;
}

static void *pp_poster(void *arg)
{
	struct pp_arg *a = arg;
	struct pp *p = a->p;
	uint64_t i = (uint64_t)a->t * PP_PER, end = i + PP_PER;

	if (a->t == 0) { /* the new post-send API, one WR per wr_start */
		struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(p->c.cli.qp);
		for (; i < end; i++) {
			credit_take(&p->scq, 1, p->until);
			for (;;) {
				ibv_wr_start(qx);
				qx->wr_id = i;
				qx->wr_flags = IBV_SEND_SIGNALED;
				if (i % 2)
					ibv_wr_rdma_write(qx, p->c.srv.mr->rkey,
							  (uintptr_t)&p->c.srv.buf[i]);
				else
					ibv_wr_send(qx);
				ibv_wr_set_sge(qx, p->c.cli.mr->lkey, (uintptr_t)&p->c.cli.buf[i], 8);
				int e = ibv_wr_complete(qx);
				if (e == 0)
					break;
				REQUIRE(e == ENOMEM && giw_now() < p->until);
				sched_yield();
			}
		}
		return NULL;
	}
	while (i < end) {
		struct ibv_send_wr w[4];
		struct ibv_sge s[4];
		int n = 1 + (int)(i % 4);

		if (i + n > end)
			n = (int)(end - i);
		credit_take(&p->scq, n, p->until);
		for (int k = 0; k < n; k++) {
			pp_fill(p, &w[k], &s[k], i + k);
			w[k].next = k + 1 < n ? &w[k + 1] : NULL;
		}
		post_send_retry(p->c.cli.qp, w, p->until);
		i += n;
	}
	return NULL;
}

static void *pp_send_poller(void *arg)
{
	struct pp *p = arg;
	struct ibv_wc wc[8];

	while (atomic_load(&p->sent.count) < PP_N) {
		REQUIRE(giw_now() < p->until);
		int n = ibv_poll_cq(p->c.cli.scq, 8, wc);
		REQUIRE(n >= 0);
		for (int k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "send wr %llu: %s\n", (unsigned long long)wc[k].wr_id,
					ibv_wc_status_str(wc[k].status));
				exit(1);
			}
			REQUIRE(wc[k].opcode == (wc[k].wr_id % 2 ? IBV_WC_RDMA_WRITE : IBV_WC_SEND));
			seen_mark(&p->sent, wc[k].wr_id, "send completion");
		}
		atomic_fetch_sub(&p->scq.out, n);
		if (n == 0)
			sched_yield();
	}
	return NULL;
}

static void *pp_recv_poster(void *arg)
{
	struct pp *p = arg;
	int j;

	while ((j = atomic_fetch_add(&p->posted_recvs, 1)) < PP_SENDS) {
		struct ibv_sge s = {.addr = (uintptr_t)&p->c.srv.buf[PP_N + j], .length = 8,
				    .lkey = p->c.srv.mr->lkey};
		struct ibv_recv_wr w = {.wr_id = (uint64_t)j, .sg_list = &s, .num_sge = 1};

		credit_take(&p->rcq, 1, p->until);
		post_recv_retry(p->c.srv.qp, &w, p->until);
	}
	return NULL;
}

static void *pp_recv_poller(void *arg)
{
	struct pp *p = arg;
	struct ibv_wc wc[8];

	while (atomic_load(&p->recvd.count) < PP_SENDS) {
		REQUIRE(giw_now() < p->until);
		int n = ibv_poll_cq(p->c.srv.rcq, 8, wc);
		REQUIRE(n >= 0);
		for (int k = 0; k < n; k++) {
			REQUIRE(wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_RECV &&
				wc[k].byte_len == 8);
			seen_mark(&p->recvd, wc[k].wr_id, "receive completion");
			/* the payload names the send: each send arrives once */
			uint64_t v = p->c.srv.buf[PP_N + wc[k].wr_id];
			REQUIRE(v % 2 == 0);
			seen_mark(&p->arrived, v / 2, "message");
		}
		atomic_fetch_sub(&p->rcq.out, n);
		if (n == 0)
			sched_yield();
	}
	return NULL;
}

static int t_post_poll(void)
{
	static struct pp p;
	pthread_t post[PP_POSTERS], spoll[3], rpost[2], rpoll[2];
	struct pp_arg args[PP_POSTERS];

	connect_pair(&p.c, 1024, PP_N + PP_SENDS);
	for (uint64_t i = 0; i < PP_N; i++)
		p.c.cli.buf[i] = i;
	seen_init(&p.sent, PP_N);
	seen_init(&p.recvd, PP_SENDS);
	seen_init(&p.arrived, PP_SENDS);
	p.scq.max = p.rcq.max = 512;
	p.until = giw_now() + DEADLINE_S;
	for (int t = 0; t < 2; t++)
		REQUIRE(pthread_create(&rpost[t], NULL, pp_recv_poster, &p) == 0);
	for (int t = 0; t < 2; t++)
		REQUIRE(pthread_create(&rpoll[t], NULL, pp_recv_poller, &p) == 0);
	for (int t = 0; t < 3; t++)
		REQUIRE(pthread_create(&spoll[t], NULL, pp_send_poller, &p) == 0);
	for (int t = 0; t < PP_POSTERS; t++) {
		args[t] = (struct pp_arg){&p, t};
		REQUIRE(pthread_create(&post[t], NULL, pp_poster, &args[t]) == 0);
	}
	for (int t = 0; t < PP_POSTERS; t++)
		pthread_join(post[t], NULL);
	for (int t = 0; t < 3; t++)
		pthread_join(spoll[t], NULL);
	for (int t = 0; t < 2; t++) {
		pthread_join(rpost[t], NULL);
		pthread_join(rpoll[t], NULL);
	}
	CHECK(atomic_load(&p.sent.count) == PP_N);
	CHECK(atomic_load(&p.recvd.count) == PP_SENDS);
	CHECK(atomic_load(&p.arrived.count) == PP_SENDS);
	/* Writes posted after the last Send are placed a little after their
	 * completions at the source (see small_stack). */
	for (uint64_t i = 1; i < PP_N; i += 2)
		while (__atomic_load_n(&p.c.srv.buf[i], __ATOMIC_ACQUIRE) != i && giw_now() < p.until)
			sched_yield();
	for (uint64_t i = 1; i < PP_N; i += 2)
		if (p.c.srv.buf[i] != i) {
			CHECK(p.c.srv.buf[i] == i);
			break;
		}
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(p.c.cli.scq, 1, &wc) == 0 && ibv_poll_cq(p.c.srv.rcq, 1, &wc) == 0);
	printf("post_poll: %d WRs from %d threads (%d sends, %d writes), 3 send pollers, "
	       "2 receive posters, 2 receive pollers: each completion once\n",
	       PP_N, PP_POSTERS, PP_SENDS, PP_N - PP_SENDS);
	close_pair(&p.c, 1);
	return 0;
}

/* ---- cq_event ------------------------------------------------------------- */

enum { CE_POSTERS = 3, CE_PER = 1000, CE_N = CE_POSTERS * CE_PER, CE_STOP = CE_N };

struct ce {
	struct conn c;
	struct seen done;
	struct credit scq;
	atomic_int events;
	double until;
};

static void ce_count(struct ce *p, struct ibv_wc *wc, int n, int *stop)
{
	for (int k = 0; k < n; k++) {
		REQUIRE(wc[k].status == IBV_WC_SUCCESS);
		if (wc[k].wr_id == CE_STOP)
			*stop = 1;
		else
			seen_mark(&p->done, wc[k].wr_id, "completion");
	}
	atomic_fetch_sub(&p->scq.out, n);
}

/* The event loop: sleep in ibv_get_cq_event, re-arm, drain; ends with the
 * completion of the marker WR, which only comes after every other. */
static void *ce_waiter(void *arg)
{
	struct ce *p = arg;
	struct ibv_wc wc[8];
	struct ibv_cq *cq;
	void *ctx;
	int stop = 0, n;

	REQUIRE(ibv_req_notify_cq(p->c.cli.scq, 0) == 0);
	while (!stop) {
		REQUIRE(ibv_get_cq_event(p->c.cli.cc, &cq, &ctx) == 0 && cq == p->c.cli.scq);
		ibv_ack_cq_events(cq, 1);
		atomic_fetch_add(&p->events, 1);
		REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
		while ((n = ibv_poll_cq(cq, 8, wc)) > 0)
			ce_count(p, wc, n, &stop);
		REQUIRE(n == 0);
	}
	return NULL;
}

struct ce_arg {
	struct ce *p;
	int t;
};

/* Posts its share of writes and polls the same CQ in between. */
static void *ce_worker(void *arg)
{
	struct ce_arg *a = arg;
	struct ce *p = a->p;
	struct ibv_wc wc[4];
	int stop = 0;

	for (uint64_t i = (uint64_t)a->t * CE_PER; i < (uint64_t)(a->t + 1) * CE_PER; i++) {
		struct ibv_sge s = {.addr = (uintptr_t)&p->c.cli.buf[i], .length = 8,
				    .lkey = p->c.cli.mr->lkey};
		struct ibv_send_wr w = {.wr_id = i, .sg_list = &s, .num_sge = 1,
					.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
		w.wr.rdma.remote_addr = (uintptr_t)&p->c.srv.buf[i];
		w.wr.rdma.rkey = p->c.srv.mr->rkey;
		credit_take(&p->scq, 1, p->until);
		post_send_retry(p->c.cli.qp, &w, p->until);
		if (i % 2) {
			int n = ibv_poll_cq(p->c.cli.scq, 4, wc);
			REQUIRE(n >= 0);
			ce_count(p, wc, n, &stop);
			REQUIRE(!stop);
		}
	}
	return NULL;
}

static int t_cq_event(void)
{
	static struct ce p;
	pthread_t waiter, workers[CE_POSTERS];
	struct ce_arg args[CE_POSTERS];

	connect_pair(&p.c, 1024, CE_N + 1);
	seen_init(&p.done, CE_N);
	p.scq.max = 512;
	p.until = giw_now() + DEADLINE_S;
	REQUIRE(pthread_create(&waiter, NULL, ce_waiter, &p) == 0);
	for (int t = 0; t < CE_POSTERS; t++) {
		args[t] = (struct ce_arg){&p, t};
		REQUIRE(pthread_create(&workers[t], NULL, ce_worker, &args[t]) == 0);
	}
	for (int t = 0; t < CE_POSTERS; t++)
		pthread_join(workers[t], NULL);
	/* Once the waiter drained everything the workers left, it is asleep in
	 * ibv_get_cq_event on an armed CQ: the marker's completion wakes it. */
	while (atomic_load(&p.done.count) < CE_N) {
		REQUIRE(giw_now() < p.until);
		sched_yield();
	}
	struct ibv_send_wr w = {.wr_id = CE_STOP, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	w.wr.rdma.remote_addr = (uintptr_t)p.c.srv.buf;
	w.wr.rdma.rkey = p.c.srv.mr->rkey;
	atomic_fetch_add(&p.scq.out, 1);
	REQUIRE(ibv_post_send(p.c.cli.qp, &w, &bad) == 0);
	pthread_join(waiter, NULL);
	CHECK(atomic_load(&p.done.count) == CE_N);
	CHECK(atomic_load(&p.events) >= 1);
	printf("cq_event: %d writes from %d threads polling too; the waiter took %d events and "
	       "left on the marker's\n", CE_N, CE_POSTERS, atomic_load(&p.events));
	close_pair(&p.c, 1);
	return 0;
}

/* ---- cm_event ------------------------------------------------------------- */

enum { CM_WORKERS = 3, CM_MAX = 1 << 20 };

struct cm {
	struct conn c;
	struct seen done, rdone;
	struct credit scq, rcq;
	atomic_int posted, rposted, disconnected;
	double until;
};

static void cm_count(struct cm *p, struct ibv_wc *wc, int n)
{
	for (int k = 0; k < n; k++) {
		REQUIRE(wc[k].status == IBV_WC_SUCCESS || wc[k].status == IBV_WC_WR_FLUSH_ERR);
		seen_mark(&p->done, wc[k].wr_id, "completion");
	}
	atomic_fetch_sub(&p->scq.out, n);
}

/* Sleeps in rdma_get_cm_event until the peer's disconnect. */
static void *cm_waiter(void *arg)
{
	struct cm *p = arg;

	rdma_ack_cm_event(giw_expect_cm(p->c.cch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	atomic_store(&p->disconnected, 1);
	return NULL;
}

/* Posts writes and polls until the disconnect is reported. A post after
 * the QP left RTS may be refused (EINVAL); one accepted completes. */
static void *cm_worker(void *arg)
{
	struct cm *p = arg;
	struct ibv_wc wc[4];

	while (!atomic_load(&p->disconnected)) {
		REQUIRE(giw_now() < p->until);
		int i = atomic_fetch_add(&p->posted, 1);
		REQUIRE(i < CM_MAX);
		struct ibv_sge s = {.addr = (uintptr_t)p->c.cli.buf, .length = 8,
				    .lkey = p->c.cli.mr->lkey};
		struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1,
					.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		w.wr.rdma.remote_addr = (uintptr_t)p->c.srv.buf;
		w.wr.rdma.rkey = p->c.srv.mr->rkey;
		credit_take(&p->scq, 1, p->until);
		int e = ibv_post_send(p->c.cli.qp, &w, &bad);
		if (e) {
			REQUIRE(e == EINVAL || e == ENOMEM);
			seen_mark(&p->done, (uint64_t)i, "refused post");
			atomic_fetch_sub(&p->scq.out, 1);
		}
		int n = ibv_poll_cq(p->c.cli.scq, 4, wc);
		REQUIRE(n >= 0);
		cm_count(p, wc, n);
	}
	return NULL;
}

static void cm_rcount(struct cm *p, struct ibv_wc *wc, int n)
{
	for (int k = 0; k < n; k++) {
		REQUIRE(wc[k].status == IBV_WC_WR_FLUSH_ERR); /* the peer sends nothing */
		seen_mark(&p->rdone, wc[k].wr_id, "receive completion");
	}
	atomic_fetch_sub(&p->rcq.out, n);
}

/* Posts receives (flushed at the disconnect, or at once once the QP is in
 * ERR) and polls the receive CQ until the disconnect is reported. */
static void *cm_recv_worker(void *arg)
{
	struct cm *p = arg;
	struct ibv_wc wc[4];

	while (!atomic_load(&p->disconnected)) {
		REQUIRE(giw_now() < p->until);
		int i = atomic_fetch_add(&p->rposted, 1);
		REQUIRE(i < CM_MAX);
		struct ibv_sge s = {.addr = (uintptr_t)p->c.cli.buf, .length = 8,
				    .lkey = p->c.cli.mr->lkey};
		struct ibv_recv_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bad;
		credit_take(&p->rcq, 1, p->until);
		int e = ibv_post_recv(p->c.cli.qp, &w, &bad);
		if (e) {
			REQUIRE(e == ENOMEM);
			seen_mark(&p->rdone, (uint64_t)i, "refused receive");
			atomic_fetch_sub(&p->rcq.out, 1);
		}
		int n = ibv_poll_cq(p->c.cli.rcq, 4, wc);
		REQUIRE(n >= 0);
		cm_rcount(p, wc, n);
	}
	return NULL;
}

static int t_cm_event(void)
{
	static struct cm p;
	pthread_t waiter, workers[CM_WORKERS], rworkers[2];
	struct ibv_wc wc[8];

	connect_pair(&p.c, 1024, 1);
	seen_init(&p.done, CM_MAX);
	seen_init(&p.rdone, CM_MAX);
	p.scq.max = p.rcq.max = 512;
	p.until = giw_now() + DEADLINE_S;
	REQUIRE(pthread_create(&waiter, NULL, cm_waiter, &p) == 0);
	for (int t = 0; t < CM_WORKERS; t++)
		REQUIRE(pthread_create(&workers[t], NULL, cm_worker, &p) == 0);
	for (int t = 0; t < 2; t++)
		REQUIRE(pthread_create(&rworkers[t], NULL, cm_recv_worker, &p) == 0);
	while (atomic_load(&p.done.count) < 2000) {
		REQUIRE(giw_now() < p.until);
		sched_yield();
	}
	CHECK(rdma_disconnect(p.c.srv.id) == 0);
	rdma_ack_cm_event(giw_expect_cm(p.c.sch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	pthread_join(waiter, NULL);
	for (int t = 0; t < CM_WORKERS; t++)
		pthread_join(workers[t], NULL);
	for (int t = 0; t < 2; t++)
		pthread_join(rworkers[t], NULL);
	/* every accepted WR completes: what the workers left is flushed */
	int posted = atomic_load(&p.posted), rposted = atomic_load(&p.rposted);
	while (atomic_load(&p.done.count) < (size_t)posted ||
	       atomic_load(&p.rdone.count) < (size_t)rposted) {
		REQUIRE(giw_now() < p.until);
		int n = ibv_poll_cq(p.c.cli.scq, 8, wc);
		REQUIRE(n >= 0);
		cm_count(&p, wc, n);
		n = ibv_poll_cq(p.c.cli.rcq, 8, wc);
		REQUIRE(n >= 0);
		cm_rcount(&p, wc, n);
	}
	CHECK(ibv_poll_cq(p.c.cli.scq, 1, wc) == 0 && ibv_poll_cq(p.c.cli.rcq, 1, wc) == 0);
	printf("cm_event: %d writes from %d threads and %d receives from 2; the thread in "
	       "rdma_get_cm_event woke for the peer's disconnect; every WR completed once\n",
	       posted, CM_WORKERS, rposted);
	close_pair(&p.c, 0);
	return 0;
}

/* ---- resize --------------------------------------------------------------- */

enum { RS_N = 20000, RS_RESIZES = 5000 };

struct rs {
	struct conn c;
	struct seen done;
	struct credit scq;
	atomic_int stop, resizes, arms;
	double until;
};

/* Between 512 and 4096 entries: each resize maps a new ring and unmaps the
 * old one, so a call that still used the old ring would fault. A resize
 * holds the poll lock: yielding after each leaves the pollers room. */
static void *rs_resizer(void *arg)
{
	struct rs *p = arg;
	static const int sizes[] = {4096, 512, 2048, 1024};

	for (int k = 0; k < RS_RESIZES && !atomic_load(&p->stop); k++) {
		REQUIRE(ibv_resize_cq(p->c.cli.scq, sizes[k % 4]) == 0);
		REQUIRE(p->c.cli.scq->cqe >= 512);
		atomic_fetch_add(&p->resizes, 1);
		sched_yield();
	}
	return NULL;
}

static void *rs_notifier(void *arg)
{
	struct rs *p = arg;

	for (int k = 0; !atomic_load(&p->stop); k++) {
		REQUIRE(ibv_req_notify_cq(p->c.cli.scq, k % 2) == 0);
		atomic_fetch_add(&p->arms, 1);
		sched_yield();
	}
	return NULL;
}

static void *rs_poller(void *arg)
{
	struct rs *p = arg;
	struct ibv_wc wc[8];

	while (atomic_load(&p->done.count) < RS_N) {
		REQUIRE(giw_now() < p->until);
		int n = ibv_poll_cq(p->c.cli.scq, 8, wc);
		REQUIRE(n >= 0);
		for (int k = 0; k < n; k++) {
			REQUIRE(wc[k].status == IBV_WC_SUCCESS);
			seen_mark(&p->done, wc[k].wr_id, "completion");
		}
		atomic_fetch_sub(&p->scq.out, n);
	}
	return NULL;
}

static void *rs_poster(void *arg)
{
	struct rs *p = arg;

	for (uint64_t i = 0; i < RS_N; i++) {
		struct ibv_sge s = {.addr = (uintptr_t)p->c.cli.buf, .length = 8,
				    .lkey = p->c.cli.mr->lkey};
		struct ibv_send_wr w = {.wr_id = i, .sg_list = &s, .num_sge = 1,
					.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
		w.wr.rdma.remote_addr = (uintptr_t)p->c.srv.buf;
		w.wr.rdma.rkey = p->c.srv.mr->rkey;
		credit_take(&p->scq, 1, p->until);
		post_send_retry(p->c.cli.qp, &w, p->until);
	}
	return NULL;
}

/* Reads every queued completion event (the notifier armed many). */
static int drain_events(struct ibv_comp_channel *cc)
{
	struct ibv_cq *cq;
	void *ctx;
	int n = 0;

	while (ibv_get_cq_event(cc, &cq, &ctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		n++;
	}
	REQUIRE(errno == EAGAIN);
	return n;
}

static int t_resize(void)
{
	static struct rs p;
	pthread_t th[5];
	void *(*fn[5])(void *) = {rs_resizer, rs_notifier, rs_poller, rs_poller, rs_poster};

	connect_pair(&p.c, 512, 1);
	seen_init(&p.done, RS_N);
	p.scq.max = 256;
	p.until = giw_now() + DEADLINE_S;
	REQUIRE(fcntl(p.c.cli.cc->fd, F_SETFL, fcntl(p.c.cli.cc->fd, F_GETFL) | O_NONBLOCK) == 0);
	for (int t = 0; t < 5; t++)
		REQUIRE(pthread_create(&th[t], NULL, fn[t], &p) == 0);
	for (int t = 2; t < 5; t++)
		pthread_join(th[t], NULL);
	atomic_store(&p.stop, 1);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	CHECK(atomic_load(&p.done.count) == RS_N);
	int events = drain_events(p.c.cli.cc);

	/* An arm made before a resize fires after it. */
	struct pollfd pfd = {.fd = p.c.cli.cc->fd, .events = POLLIN};
	struct ibv_send_wr w = {.wr_id = 0, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_wc wc;
	w.wr.rdma.remote_addr = (uintptr_t)p.c.srv.buf;
	w.wr.rdma.rkey = p.c.srv.mr->rkey;
	REQUIRE(ibv_req_notify_cq(p.c.cli.scq, 0) == 0);
	REQUIRE(ibv_resize_cq(p.c.cli.scq, 8192) == 0);
	REQUIRE(ibv_post_send(p.c.cli.qp, &w, &bad) == 0);
	CHECK(poll(&pfd, 1, DEADLINE_S * 1000) == 1);
	CHECK(drain_events(p.c.cli.cc) == 1);
	CHECK(poll_one(p.c.cli.scq, &wc, giw_now() + DEADLINE_S) == 1 && wc.status == IBV_WC_SUCCESS);
	printf("resize: %d completions polled by 2 threads during %d resizes and %d arms "
	       "(%d events); an arm survives a resize\n",
	       RS_N, atomic_load(&p.resizes), atomic_load(&p.arms), events);
	close_pair(&p.c, 1);
	return 0;
}

/* ---- destroy_qp ----------------------------------------------------------- */

enum { DQ_N = 4096, DQ_POLLERS = 3 };

struct dq {
	struct conn c;
	struct seen done;
	atomic_int stop;
};

/* Polls the CQ of a QP that is destroyed meanwhile (an empty poll calls
 * into the engine for that QP's progress): each completion comes once. */
static void *dq_poller(void *arg)
{
	struct dq *p = arg;
	struct ibv_wc wc[8];

	while (!atomic_load(&p->stop)) {
		int n = ibv_poll_cq(p->c.cli.scq, 8, wc);
		REQUIRE(n >= 0);
		for (int k = 0; k < n; k++)
			seen_mark(&p->done, wc[k].wr_id, "completion");
		if (n == 0)
			sched_yield();
	}
	return NULL;
}

static int t_destroy_qp(void)
{
	static struct dq p;
	pthread_t th[DQ_POLLERS];
	double until = giw_now() + DEADLINE_S;

	connect_pair(&p.c, DQ_N, 1);
	seen_init(&p.done, DQ_N);
	for (int t = 0; t < DQ_POLLERS; t++)
		REQUIRE(pthread_create(&th[t], NULL, dq_poller, &p) == 0);
	for (uint64_t i = 0; i < DQ_N; i++) {
		struct ibv_sge s = {.addr = (uintptr_t)p.c.cli.buf, .length = 8,
				    .lkey = p.c.cli.mr->lkey};
		struct ibv_send_wr w = {.wr_id = i, .sg_list = &s, .num_sge = 1,
					.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
		w.wr.rdma.remote_addr = (uintptr_t)p.c.srv.buf;
		w.wr.rdma.rkey = p.c.srv.mr->rkey;
		post_send_retry(p.c.cli.qp, &w, until);
	}
	size_t before = atomic_load(&p.done.count);
	rdma_destroy_qp(p.c.cli.id); /* aborts the connection, work still queued */
	rdma_ack_cm_event(giw_expect_cm(p.c.sch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	/* Nothing completes into the CQ once the destroy returned: what it holds
	 * is drained when it is found empty, here or by the pollers. */
	struct ibv_wc wc[8];
	int n;
	while ((n = ibv_poll_cq(p.c.cli.scq, 8, wc)) > 0)
		for (int k = 0; k < n; k++)
			seen_mark(&p.done, wc[k].wr_id, "completion");
	REQUIRE(n == 0);
	atomic_store(&p.stop, 1);
	for (int t = 0; t < DQ_POLLERS; t++)
		pthread_join(th[t], NULL);
	printf("destroy_qp: %d writes, %zu completed before the destroy, %zu in all; %d pollers "
	       "went on over its CQ\n", DQ_N, before, atomic_load(&p.done.count), DQ_POLLERS);
	close_pair(&p.c, 0);
	return 0;
}

/* ---- small_stack ------------------------------------------------------------ */

/* The whole life of a connection on a thread with the smallest stack POSIX
 * allows, its first call being the process's first into the library (the
 * loader's dlopen once overflowed it). */
static void *ss_run(void *arg)
{
	static struct conn c;
	struct ibv_send_wr w = {.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
	struct ibv_sge sg;
	struct ibv_wc wc;

	connect_pair(&c, 64, 1);
	sg = (struct ibv_sge){.addr = (uintptr_t)c.cli.buf, .length = 8, .lkey = c.cli.mr->lkey};
	w.sg_list = &sg;
	w.num_sge = 1;
	w.wr.rdma.rkey = c.srv.mr->rkey;
	w.wr.rdma.remote_addr = (uintptr_t)c.srv.buf;
	for (uint64_t i = 1; i <= 1000; i++) {
		c.cli.buf[0] = i;
		w.wr_id = i;
		REQUIRE(ibv_post_send(c.cli.qp, &w, &bad) == 0);
		REQUIRE(poll_one(c.cli.scq, &wc, giw_now() + DEADLINE_S) == 1);
		REQUIRE(wc.status == IBV_WC_SUCCESS && wc.wr_id == i);
	}
	/* A Write's completion at its source says its data left, not that the
	 * target placed it: that comes a little later (1 run in 12 looked too
	 * soon). */
	double until = giw_now() + DEADLINE_S;
	while (__atomic_load_n(&c.srv.buf[0], __ATOMIC_ACQUIRE) != 1000 && giw_now() < until)
		sched_yield();
	CHECK(c.srv.buf[0] == 1000);
	close_pair(&c, 1);
	*(int *)arg = 1;
	return NULL;
}

static int t_small_stack(void)
{
	size_t min = (size_t)sysconf(_SC_THREAD_STACK_MIN);
	pthread_attr_t attr;
	pthread_t t;
	int done = 0;

	REQUIRE(pthread_attr_init(&attr) == 0);
	REQUIRE(pthread_attr_setstacksize(&attr, min) == 0);
	REQUIRE(pthread_create(&t, &attr, ss_run, &done) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	printf("small_stack: a %zu-byte stack connected, wrote 1,000 times and closed\n", min);
	CHECK(done);
	return 0;
}

/* ---- bench ---------------------------------------------------------------- */

/* The best of 5 rounds of n calls: the machine is shared, the least
 * disturbed round is the cost. */
static double ns_per(int (*fn)(struct ibv_cq *), struct ibv_cq *cq, long n)
{
	double best = 1e9;

	for (int round = 0; round < 5; round++) {
		double t0 = giw_now();
		for (long i = 0; i < n; i++)
			REQUIRE(fn(cq) == 0);
		double ns = (giw_now() - t0) * 1e9 / n;
		best = ns < best ? ns : best;
	}
	return best;
}

static int poll_empty(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	return ibv_poll_cq(cq, 1, &wc);
}

static int arm(struct ibv_cq *cq)
{
	return ibv_req_notify_cq(cq, 0);
}

/* The fast path's own cost (a CQ without connected QPs never calls into Go)
 * and, for scale, an empty poll whose progress call goes into Go. */
static int t_bench(void)
{
	struct ibv_context *ctx = open_lo();
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	static struct conn c;

	REQUIRE(cq);
	poll_empty(cq); /* the first call loads the core */
	double poll = ns_per(poll_empty, cq, 1000000), notify = ns_per(arm, cq, 1000000);
	connect_pair(&c, 64, 1);
	double progress = ns_per(poll_empty, c.cli.scq, 50000);
	printf("bench: empty ibv_poll_cq %.1f ns/call, ibv_req_notify_cq %.1f ns/call, "
	       "empty ibv_poll_cq with a connected QP (progress in Go) %.0f ns/call\n",
	       poll, notify, progress);
	close_pair(&c, 1);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: threads post_poll|cq_event|cm_event|resize|destroy_qp|small_stack|bench\n");
		return 2;
	}
	if (!strcmp(argv[1], "post_poll"))
		t_post_poll();
	else if (!strcmp(argv[1], "cq_event"))
		t_cq_event();
	else if (!strcmp(argv[1], "cm_event"))
		t_cm_event();
	else if (!strcmp(argv[1], "resize"))
		t_resize();
	else if (!strcmp(argv[1], "destroy_qp"))
		t_destroy_qp();
	else if (!strcmp(argv[1], "small_stack"))
		t_small_stack();
	else if (!strcmp(argv[1], "bench"))
		t_bench();
	else {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	return failures ? 1 : 0;
}
