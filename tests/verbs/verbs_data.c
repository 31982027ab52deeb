/* Data-moving C tests of goiwarp's libibverbs ABI: two RC QPs connected
 * through rdma_cm on 127.0.0.1 (ports 24200-24299).
 *
 *   verbs_data <case> thread    server half in a thread of this process
 *   verbs_data <case> spawn     server half in a second process: this binary
 *                               posix_spawn'ed with "srv <case> <fd>" (never
 *                               fork without exec: the Go runtime is loaded)
 *
 * The halves talk out of band over a socketpair (port, rkey/address, sync).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
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

static __thread const char *role = "cli";
#define GIW_TEST_ROLE role
#include "giw_test.h"

extern char **environ;

#define BUFSZ (4 << 20)
struct ep {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *scq, *rcq;
	struct ibv_srq *srq;
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
	int oob;
	uint64_t raddr;
	uint32_t rkey;
};

struct opts {
	int access;   /* server MR access */
	int rcq_size; /* server receive CQ size */
	int srq;      /* server QP on an SRQ */
};

/* --- out of band ------------------------------------------------------ */
static void oob_send(struct ep *e, const void *p, size_t n)
{
	REQUIRE(write(e->oob, p, n) == (ssize_t)n);
}
static void oob_recv(struct ep *e, void *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(e->oob, (char *)p + got, n - got);
		REQUIRE(r > 0);
		got += r;
	}
}
static void oob_sync(struct ep *e)
{
	char c = 's';
	oob_send(e, &c, 1);
	oob_recv(e, &c, 1);
}

/* --- connection -------------------------------------------------------- */
static struct rdma_cm_event *expect(struct ep *e, enum rdma_cm_event_type t)
{
	struct pollfd p = {.fd = e->ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;

	REQUIRE(poll(&p, 1, 10000) == 1);
	REQUIRE(rdma_get_cm_event(e->ch, &ev) == 0);
	if (ev->event != t) {
		fprintf(stderr, "[%s] got %s (status %d), want %s\n", role, rdma_event_str(ev->event),
			ev->status, rdma_event_str(t));
		exit(1);
	}
	return ev;
}

static void setup_res(struct ep *e, struct rdma_cm_id *id, const struct opts *o, int server)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4,
					     .max_recv_sge = 4, .max_inline_data = 64},
				     .qp_type = IBV_QPT_RC};
	int rcq = server && o->rcq_size ? o->rcq_size : 128;

	e->ctx = id->verbs;
	REQUIRE((e->pd = ibv_alloc_pd(e->ctx)));
	REQUIRE((e->cc = ibv_create_comp_channel(e->ctx)));
	REQUIRE((e->scq = ibv_create_cq(e->ctx, 128, NULL, NULL, 0)));
	REQUIRE((e->rcq = ibv_create_cq(e->ctx, rcq, NULL, e->cc, 0)));
	if (server && o->srq) {
		struct ibv_srq_init_attr sa = {.attr = {.max_wr = 32, .max_sge = 1}};
		REQUIRE((e->srq = ibv_create_srq(e->pd, &sa)));
		a.srq = e->srq;
	}
	a.send_cq = e->scq;
	a.recv_cq = e->rcq;
	REQUIRE(rdma_create_qp(id, e->pd, &a) == 0);
	e->qp = id->qp;
	REQUIRE(posix_memalign((void **)&e->buf, 4096, BUFSZ) == 0);
	memset(e->buf, 0, BUFSZ);
	REQUIRE((e->mr = ibv_reg_mr(e->pd, e->buf, BUFSZ,
				   server && o->access ? o->access
						       : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
								 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)));
}

static void server_connect(struct ep *e, const struct opts *o)
{
	struct rdma_cm_event *ev;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rdma_conn_param cp = {.responder_resources = 4, .initiator_depth = 4};
	uint16_t port;

	REQUIRE((e->ch = rdma_create_event_channel()));
	for (port = 24200; port < 24300; port++) {
		sa.sin_port = htons(port);
		REQUIRE(rdma_create_id(e->ch, &e->lid, NULL, RDMA_PS_TCP) == 0);
		if (rdma_bind_addr(e->lid, (struct sockaddr *)&sa) == 0 && rdma_listen(e->lid, 4) == 0)
			break;
		rdma_destroy_id(e->lid);
	}
	REQUIRE(port < 24300);
	oob_send(e, &port, sizeof(port));
	ev = expect(e, RDMA_CM_EVENT_CONNECT_REQUEST);
	e->id = ev->id;
	rdma_ack_cm_event(ev);
	setup_res(e, e->id, o, 1);
	REQUIRE(rdma_accept(e->id, &cp) == 0);
	rdma_ack_cm_event(expect(e, RDMA_CM_EVENT_ESTABLISHED));
}

static void client_connect(struct ep *e, const struct opts *o)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rdma_conn_param cp = {.responder_resources = 4, .initiator_depth = 4};
	uint16_t port;

	REQUIRE((e->ch = rdma_create_event_channel()));
	oob_recv(e, &port, sizeof(port));
	sa.sin_port = htons(port);
	REQUIRE(rdma_create_id(e->ch, &e->id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(e->id, NULL, (struct sockaddr *)&sa, 2000) == 0);
	rdma_ack_cm_event(expect(e, RDMA_CM_EVENT_ADDR_RESOLVED));
	REQUIRE(rdma_resolve_route(e->id, 2000) == 0);
	rdma_ack_cm_event(expect(e, RDMA_CM_EVENT_ROUTE_RESOLVED));
	setup_res(e, e->id, o, 0);
	REQUIRE(rdma_connect(e->id, &cp) == 0);
	rdma_ack_cm_event(expect(e, RDMA_CM_EVENT_ESTABLISHED));
}

/* exchange buffer address and rkey */
static void swap_keys(struct ep *e)
{
	uint64_t m[2] = {(uintptr_t)e->buf, e->mr->rkey};
	oob_send(e, m, sizeof(m));
	oob_recv(e, m, sizeof(m));
	e->raddr = m[0];
	e->rkey = (uint32_t)m[1];
}

/* --- posting and polling ---------------------------------------------- */
static void post_recv(struct ep *e, uint64_t wrid, void *p, uint32_t n)
{
	struct ibv_sge s = {.addr = (uintptr_t)p, .length = n, .lkey = e->mr->lkey};
	struct ibv_recv_wr w = {.wr_id = wrid, .sg_list = &s, .num_sge = 1}, *bad;
	if (e->srq)
		REQUIRE(ibv_post_srq_recv(e->srq, &w, &bad) == 0);
	else
		REQUIRE(ibv_post_recv(e->qp, &w, &bad) == 0);
}

static int post(struct ep *e, uint64_t wrid, enum ibv_wr_opcode op, int flags, void *p, uint32_t n,
		uint64_t raddr)
{
	struct ibv_sge s = {.addr = (uintptr_t)p, .length = n, .lkey = e->mr->lkey};
	struct ibv_send_wr w = {.wr_id = wrid, .sg_list = &s, .num_sge = n ? 1 : 0, .opcode = op,
				.send_flags = flags}, *bad;
	w.wr.rdma.remote_addr = raddr;
	w.wr.rdma.rkey = e->rkey;
	return ibv_post_send(e->qp, &w, &bad);
}

static struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 10000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		REQUIRE(n >= 0);
		if (n == 1)
			return wc;
		if (i > 1000)
			usleep(10);
	}
	fprintf(stderr, "[%s] no completion\n", role);
	exit(1);
}

static struct ibv_wc expect_wc(struct ibv_cq *cq, uint64_t wrid, enum ibv_wc_status st)
{
	struct ibv_wc wc = poll1(cq);
	if (wc.wr_id != wrid || wc.status != st) {
		fprintf(stderr, "[%s] completion wr_id %llu status %s, want %llu %s\n", role,
			(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
			(unsigned long long)wrid, ibv_wc_status_str(st));
		exit(1);
	}
	return wc;
}

static int async_event(struct ep *e, int ms)
{
	struct pollfd p = {.fd = e->ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ae;
	int t;
	if (poll(&p, 1, ms) != 1)
		return -1;
	REQUIRE(ibv_get_async_event(e->ctx, &ae) == 0);
	t = ae.event_type;
	ibv_ack_async_event(&ae);
	return t;
}

static int qp_state(struct ep *e)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	REQUIRE(ibv_query_qp(e->qp, &a, IBV_QP_STATE, &ia) == 0);
	return a.qp_state;
}

static void fill(uint8_t *b, int n, int seed)
{
	for (int i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 13 + seed);
}

/* --- the cases: srv half and cli half ------------------------------------ */
static void sendrecv_srv(struct ep *e)
{
	struct ibv_sge s[3] = {{(uintptr_t)e->buf, 100, e->mr->lkey},
			       {(uintptr_t)e->buf + 1000, 100, e->mr->lkey},
			       {(uintptr_t)e->buf + 5000, 200, e->mr->lkey}};
	struct ibv_recv_wr w = {.wr_id = 1, .sg_list = s, .num_sge = 3}, *bad;
	uint8_t want[400];
	REQUIRE(ibv_post_recv(e->qp, &w, &bad) == 0);
	oob_sync(e);
	struct ibv_wc wc = expect_wc(e->rcq, 1, IBV_WC_SUCCESS);
	REQUIRE(wc.byte_len == 300 && wc.opcode == IBV_WC_RECV);
	fill(want, 300, 5);
	REQUIRE(memcmp(e->buf, want, 100) == 0 && memcmp(e->buf + 1000, want + 100, 100) == 0 &&
		memcmp(e->buf + 5000, want + 200, 100) == 0);
	/* inline send next */
	post_recv(e, 2, e->buf, 64);
	oob_sync(e);
	wc = expect_wc(e->rcq, 2, IBV_WC_SUCCESS);
	REQUIRE(wc.byte_len == 40 && memcmp(e->buf, "inline data, buffer reused right after!", 40) == 0);
}
static void sendrecv_cli(struct ep *e)
{
	struct ibv_sge s[3] = {{(uintptr_t)e->buf + 10, 50, e->mr->lkey},
			       {(uintptr_t)e->buf + 2000, 150, e->mr->lkey},
			       {(uintptr_t)e->buf + 9000, 100, e->mr->lkey}};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = s, .num_sge = 3, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	uint8_t src[300];
	fill(src, 300, 5);
	memcpy(e->buf + 10, src, 50);
	memcpy(e->buf + 2000, src + 50, 150);
	memcpy(e->buf + 9000, src + 200, 100);
	oob_sync(e);
	REQUIRE(ibv_post_send(e->qp, &w, &bad) == 0);
	expect_wc(e->scq, 7, IBV_WC_SUCCESS);
	/* inline: a stack buffer, no lkey, overwritten right after the post */
	char tmp[40] = "inline data, buffer reused right after!";
	struct ibv_sge is = {.addr = (uintptr_t)tmp, .length = 40};
	struct ibv_send_wr iw = {.wr_id = 8, .sg_list = &is, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	oob_sync(e);
	REQUIRE(ibv_post_send(e->qp, &iw, &bad) == 0);
	memset(tmp, 'X', sizeof(tmp));
	expect_wc(e->scq, 8, IBV_WC_SUCCESS);
}

static void rdma_srv(struct ep *e)
{
	swap_keys(e);
	fill(e->buf + (1 << 20), 1 << 20, 9); /* read source */
	post_recv(e, 1, e->buf + 3 * (1 << 20), 64);
	oob_sync(e);
	struct ibv_wc wc = expect_wc(e->rcq, 1, IBV_WC_SUCCESS);
	REQUIRE(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		ntohl(wc.imm_data) == 0x1234);
	uint8_t *want = malloc(1 << 20);
	fill(want, 1 << 20, 3);
	REQUIRE(memcmp(e->buf, want, 1 << 20) == 0);
	free(want);
	oob_sync(e); /* atomics done */
	REQUIRE(*(uint64_t *)(e->buf + 2 * (1 << 20)) == 99);
}
static void rdma_cli(struct ep *e)
{
	swap_keys(e);
	fill(e->buf, 1 << 20, 3);
	oob_sync(e);
	/* write, read, write-with-immediate */
	REQUIRE(post(e, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, e->buf, (1 << 20) - 4096, e->raddr) == 0);
	REQUIRE(post(e, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, e->buf + (1 << 20), 1 << 20,
		     e->raddr + (1 << 20)) == 0);
	{
		struct ibv_sge s = {.addr = (uintptr_t)e->buf + (1 << 20) - 4096, .length = 4096, .lkey = e->mr->lkey};
		struct ibv_send_wr w = {.wr_id = 3, .sg_list = &s, .num_sge = 1,
					.opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
					.imm_data = htonl(0x1234)}, *bad;
		w.wr.rdma.remote_addr = e->raddr + (1 << 20) - 4096;
		w.wr.rdma.rkey = e->rkey;
		REQUIRE(ibv_post_send(e->qp, &w, &bad) == 0);
	}
	expect_wc(e->scq, 1, IBV_WC_SUCCESS);
	struct ibv_wc wc = expect_wc(e->scq, 2, IBV_WC_SUCCESS);
	REQUIRE(wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 1 << 20);
	expect_wc(e->scq, 3, IBV_WC_SUCCESS);
	uint8_t *want = malloc(1 << 20);
	fill(want, 1 << 20, 9);
	REQUIRE(memcmp(e->buf + (1 << 20), want, 1 << 20) == 0);
	free(want);
	/* atomics on the server's u64 at 2 MiB: 0 +10 -> cmp 10 swap 99 */
	uint64_t *res = (uint64_t *)(e->buf + 3 * (1 << 20));
	struct ibv_sge s = {.addr = (uintptr_t)res, .length = 8, .lkey = e->mr->lkey};
	struct ibv_send_wr a = {.wr_id = 4, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	a.wr.atomic.remote_addr = e->raddr + 2 * (1 << 20);
	a.wr.atomic.rkey = e->rkey;
	a.wr.atomic.compare_add = 10;
	REQUIRE(ibv_post_send(e->qp, &a, &bad) == 0);
	wc = expect_wc(e->scq, 4, IBV_WC_SUCCESS);
	REQUIRE(wc.opcode == IBV_WC_FETCH_ADD && *res == 0);
	a.wr_id = 5;
	a.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	a.wr.atomic.compare_add = 10;
	a.wr.atomic.swap = 99;
	REQUIRE(ibv_post_send(e->qp, &a, &bad) == 0);
	wc = expect_wc(e->scq, 5, IBV_WC_SUCCESS);
	REQUIRE(wc.opcode == IBV_WC_COMP_SWAP && *res == 10);
	oob_sync(e);
}

/* unsignaled work, fence, solicited events through the completion channel */
static void flow_srv(struct ep *e)
{
	for (int i = 0; i < 11; i++)
		post_recv(e, 100 + i, e->buf + 64 * i, 64);
	oob_sync(e);
	for (int i = 0; i < 11; i++)
		expect_wc(e->rcq, 100 + i, IBV_WC_SUCCESS);
	/* fenced send carries data the preceding read brought in */
	fill(e->buf + (1 << 20), 1 << 20, 77);
	post_recv(e, 200, e->buf + 3 * (1 << 20), 256);
	swap_keys(e);
	oob_sync(e);
	struct ibv_wc wc = expect_wc(e->rcq, 200, IBV_WC_SUCCESS);
	REQUIRE(wc.byte_len == 256 && memcmp(e->buf + 3 * (1 << 20), e->buf + (1 << 20), 256) == 0);
	/* solicited-only notification */
	int fl = fcntl(e->cc->fd, F_GETFL);
	REQUIRE(fcntl(e->cc->fd, F_SETFL, fl | O_NONBLOCK) == 0);
	post_recv(e, 300, e->buf, 64);
	post_recv(e, 301, e->buf + 64, 64);
	REQUIRE(ibv_req_notify_cq(e->rcq, 1) == 0);
	oob_sync(e); /* client sends an unsolicited message */
	struct pollfd p = {.fd = e->cc->fd, .events = POLLIN};
	REQUIRE(poll(&p, 1, 300) == 0); /* no event for it */
	oob_sync(e);                    /* client sends a solicited one */
	REQUIRE(poll(&p, 1, 5000) == 1);
	struct ibv_cq *cq;
	void *cctx;
	REQUIRE(ibv_get_cq_event(e->cc, &cq, &cctx) == 0 && cq == e->rcq);
	ibv_ack_cq_events(cq, 1);
	expect_wc(e->rcq, 300, IBV_WC_SUCCESS);
	wc = expect_wc(e->rcq, 301, IBV_WC_SUCCESS);
	(void)wc;
}
static void flow_cli(struct ep *e)
{
	oob_sync(e);
	for (int i = 0; i < 11; i++)
		REQUIRE(post(e, 100 + i, IBV_WR_SEND, i == 10 ? IBV_SEND_SIGNALED : 0, e->buf, 8, 0) == 0);
	expect_wc(e->scq, 110, IBV_WC_SUCCESS);
	struct ibv_wc wc;
	REQUIRE(ibv_poll_cq(e->scq, 1, &wc) == 0); /* the unsignaled ones give nothing */
	swap_keys(e);
	oob_sync(e);
	REQUIRE(post(e, 1, IBV_WR_RDMA_READ, 0, e->buf + (1 << 20), 1 << 20, e->raddr + (1 << 20)) == 0);
	REQUIRE(post(e, 2, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_FENCE, e->buf + (1 << 20), 256, 0) == 0);
	expect_wc(e->scq, 2, IBV_WC_SUCCESS);
	oob_sync(e);
	REQUIRE(post(e, 3, IBV_WR_SEND, 0, e->buf, 8, 0) == 0);
	oob_sync(e);
	REQUIRE(post(e, 4, IBV_WR_SEND, IBV_SEND_SOLICITED | IBV_SEND_SIGNALED, e->buf, 8, 0) == 0);
	expect_wc(e->scq, 4, IBV_WC_SUCCESS);
}

/* --- blocking ibv_get_cq_event ---------------------------------------- */
static volatile sig_atomic_t sigs;
static void on_sig(int s)
{
	(void)s;
	sigs++;
}
struct kicker {
	pthread_t target;
	volatile int stop;
};
static void *kick(void *p) /* SIGUSR1 to the waiter every 20 ms until stopped */
{
	struct kicker *k = p;
	while (!k->stop) {
		usleep(20000);
		if (!k->stop)
			pthread_kill(k->target, SIGUSR1);
	}
	return NULL;
}

/* next_wc takes the next completion of a CQ on the channel, sleeping in
 * ibv_get_cq_event while there is none (the pattern of rping and fio). */
static struct ibv_wc next_wc(struct ep *e)
{
	struct ibv_wc wc;
	for (;;) {
		REQUIRE(ibv_req_notify_cq(e->rcq, 0) == 0);
		int n = ibv_poll_cq(e->rcq, 1, &wc);
		REQUIRE(n >= 0);
		if (n == 1) {
			REQUIRE(wc.status == IBV_WC_SUCCESS);
			return wc;
		}
		struct ibv_cq *cq;
		void *cctx;
		REQUIRE(ibv_get_cq_event(e->cc, &cq, &cctx) == 0 && cq == e->rcq);
		ibv_ack_cq_events(cq, 1);
	}
}

#define EV_ROUNDS 2000
/* a ping-pong on events alone, each message checked; then a signal during
 * the wait, which read(2) on a kernel provider's channel restarts for a
 * handler with SA_RESTART and fails with EINTR for one without */
static void events_srv(struct ep *e)
{
	for (int i = 0; i < 4; i++)
		post_recv(e, i, e->buf + 64 * i, 64);
	oob_sync(e);
	for (uint32_t i = 0; i < EV_ROUNDS; i++) {
		struct ibv_wc wc = next_wc(e);
		uint32_t got;
		memcpy(&got, e->buf + 64 * wc.wr_id, 4);
		REQUIRE(wc.byte_len == 4 && got == i);
		post_recv(e, wc.wr_id, e->buf + 64 * wc.wr_id, 64);
		memcpy(e->buf + 4096, &got, 4);
		REQUIRE(post(e, i, IBV_WR_SEND, IBV_SEND_SIGNALED, e->buf + 4096, 4, 0) == 0);
		expect_wc(e->scq, i, IBV_WC_SUCCESS);
	}
	struct sigaction sa = {.sa_handler = on_sig, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);
	struct kicker k = {.target = pthread_self()};
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, kick, &k) == 0);
	oob_sync(e); /* the client sends in 300 ms */
	sigs = 0;
	struct ibv_wc wc = next_wc(e);
	REQUIRE(wc.byte_len == 4 && sigs > 0);
	post_recv(e, wc.wr_id, e->buf + 64 * wc.wr_id, 64);
	sa.sa_flags = 0;
	REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);
	REQUIRE(ibv_req_notify_cq(e->rcq, 0) == 0);
	struct ibv_cq *cq;
	void *cctx;
	errno = 0;
	REQUIRE(ibv_get_cq_event(e->cc, &cq, &cctx) == -1 && errno == EINTR);
	k.stop = 1;
	pthread_join(t, NULL);
	sa.sa_handler = SIG_DFL;
	REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);
}
static void events_cli(struct ep *e)
{
	for (int i = 0; i < 4; i++)
		post_recv(e, i, e->buf + 64 * i, 64);
	oob_sync(e);
	for (uint32_t i = 0; i < EV_ROUNDS; i++) {
		memcpy(e->buf + 4096, &i, 4);
		REQUIRE(post(e, i, IBV_WR_SEND, IBV_SEND_SIGNALED, e->buf + 4096, 4, 0) == 0);
		expect_wc(e->scq, i, IBV_WC_SUCCESS);
		struct ibv_wc wc = next_wc(e);
		uint32_t got;
		memcpy(&got, e->buf + 64 * wc.wr_id, 4);
		REQUIRE(wc.byte_len == 4 && got == i);
		post_recv(e, wc.wr_id, e->buf + 64 * wc.wr_id, 64);
	}
	oob_sync(e);
	usleep(300000);
	REQUIRE(post(e, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, e->buf + 4096, 4, 0) == 0);
	expect_wc(e->scq, 1, IBV_WC_SUCCESS);
}

/* SRQ limit event */
static void srq_srv(struct ep *e)
{
	struct ibv_srq_attr a = {.srq_limit = 4};
	for (int i = 0; i < 8; i++)
		post_recv(e, i, e->buf + 64 * i, 64);
	REQUIRE(ibv_modify_srq(e->srq, &a, IBV_SRQ_LIMIT) == 0);
	oob_sync(e);
	for (int i = 0; i < 5; i++)
		expect_wc(e->rcq, i, IBV_WC_SUCCESS);
	REQUIRE(async_event(e, 5000) == IBV_EVENT_SRQ_LIMIT_REACHED);
	oob_sync(e);
}
static void srq_cli(struct ep *e)
{
	oob_sync(e);
	for (int i = 0; i < 5; i++)
		REQUIRE(post(e, i, IBV_WR_SEND, IBV_SEND_SIGNALED, e->buf, 8, 0) == 0);
	for (int i = 0; i < 5; i++)
		expect_wc(e->scq, i, IBV_WC_SUCCESS);
	oob_sync(e);
}

/* CQ overflow: the server never polls a small receive CQ */
static void cqover_srv(struct ep *e)
{
	int n = e->rcq->cqe + 4;
	for (int i = 0; i < n; i++)
		post_recv(e, i, e->buf + 64 * i, 64);
	oob_send(e, &n, sizeof(n));
	REQUIRE(async_event(e, 5000) == IBV_EVENT_CQ_ERR);
	oob_sync(e);
}
static void cqover_cli(struct ep *e)
{
	int n;
	oob_recv(e, &n, sizeof(n));
	for (int i = 0; i < n; i++)
		REQUIRE(post(e, i, IBV_WR_SEND, 0, e->buf, 8, 0) == 0);
	oob_sync(e);
}

/* errors: no receive posted, invalid lkey, remote access, out of bounds */
static void wait_err(struct ep *e)
{
	struct rdma_cm_event *ev = expect(e, RDMA_CM_EVENT_DISCONNECTED);
	rdma_ack_cm_event(ev);
	REQUIRE(qp_state(e) == IBV_QPS_ERR);
	post_recv(e, 999, e->buf, 8);
	expect_wc(e->rcq, 999, IBV_WC_WR_FLUSH_ERR);
}
static void norecv_srv(struct ep *e)
{
	oob_sync(e);
	wait_err(e);
	oob_sync(e);
}
static void norecv_cli(struct ep *e)
{
	post_recv(e, 50, e->buf + 4096, 64);
	oob_sync(e);
	REQUIRE(post(e, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, e->buf, 8, 0) == 0);
	struct ibv_wc wc = poll1(e->scq);
	REQUIRE(wc.wr_id == 1 && (wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_WR_FLUSH_ERR ||
				  wc.status == IBV_WC_REM_INV_REQ_ERR));
	expect_wc(e->rcq, 50, IBV_WC_WR_FLUSH_ERR);
	wait_err(e);
	oob_sync(e);
}
static void lkey_srv(struct ep *e)
{
	post_recv(e, 1, e->buf, 64);
	oob_sync(e);
	oob_sync(e);
}
static void lkey_cli(struct ep *e)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf, .length = 8, .lkey = e->mr->lkey ^ 0x5a5a5a5a};
	struct ibv_send_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	oob_sync(e);
	REQUIRE(ibv_post_send(e->qp, &w, &bad) == 0);
	expect_wc(e->scq, 1, IBV_WC_LOC_PROT_ERR);
	oob_sync(e);
}
static void remacc_srv(struct ep *e) /* MR without remote read */
{
	swap_keys(e);
	oob_sync(e);
	wait_err(e);
	oob_sync(e);
}
static void remacc_cli(struct ep *e)
{
	swap_keys(e);
	oob_sync(e);
	REQUIRE(post(e, 1, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED, e->buf, 64, e->raddr) == 0);
	expect_wc(e->scq, 1, IBV_WC_REM_ACCESS_ERR);
	wait_err(e);
	oob_sync(e);
}
static void oob_srv(struct ep *e)
{
	swap_keys(e);
	memset(e->buf, 0xc5, BUFSZ);
	oob_sync(e);
	wait_err(e);
	for (int i = 0; i < BUFSZ; i++)
		REQUIRE(e->buf[i] == 0xc5);
	REQUIRE(async_event(e, 2000) == IBV_EVENT_QP_ACCESS_ERR);
	oob_sync(e);
}
static void oob_cli(struct ep *e)
{
	swap_keys(e);
	oob_sync(e);
	REQUIRE(post(e, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, e->buf, 8192, e->raddr + BUFSZ - 4096) == 0);
	struct ibv_wc wc = poll1(e->scq);
	REQUIRE(wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_WR_FLUSH_ERR ||
		wc.status == IBV_WC_REM_ACCESS_ERR);
	wait_err(e);
	oob_sync(e);
}

/* dereg of the target MR while writes stream into it */
static void dereg_srv(struct ep *e)
{
	swap_keys(e);
	oob_sync(e);
	/* Deregister once the first write is landing (the client's bytes are
	 * 0x5a, the buffer was zeroed). */
	volatile uint8_t *first = e->buf;
	time_t end = time(NULL) + 10;
	while (*first != 0x5a) {
		REQUIRE(time(NULL) < end);
		sched_yield();
	}
	REQUIRE(ibv_dereg_mr(e->mr) == 0);
	e->mr = NULL;
	oob_sync(e);
}
static void dereg_cli(struct ep *e)
{
	swap_keys(e);
	memset(e->buf, 0x5a, 1 << 20);
	oob_sync(e);
	for (int i = 0; i < 48; i++)
		REQUIRE(post(e, i, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, e->buf, 1 << 20,
			     e->raddr + (uint64_t)(i % 4) * (1 << 20)) == 0);
	int ok = 0, bad = 0;
	for (int i = 0; i < 48; i++) {
		struct ibv_wc wc = poll1(e->scq);
		if (wc.status == IBV_WC_SUCCESS)
			ok++;
		else
			bad++;
	}
	fprintf(stderr, "dereg under traffic: %d writes done, %d failed\n", ok, bad);
	oob_sync(e);
}

/* destroy a QP with outstanding work */
static void destroy_srv(struct ep *e)
{
	swap_keys(e);
	oob_sync(e);
	rdma_ack_cm_event(expect(e, RDMA_CM_EVENT_DISCONNECTED));
	oob_sync(e);
}
static void destroy_cli(struct ep *e)
{
	swap_keys(e);
	oob_sync(e);
	for (int i = 0; i < 16; i++)
		post_recv(e, 1000 + i, e->buf, 64);
	for (int i = 0; i < 32; i++)
		REQUIRE(post(e, i, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, e->buf, 1 << 20, e->raddr) == 0);
	REQUIRE(ibv_destroy_qp(e->qp) == 0);
	e->qp = NULL;
	e->id->qp = NULL;
	oob_sync(e);
}

static const struct tcase {
	const char *name;
	void (*srv)(struct ep *), (*cli)(struct ep *);
	struct opts o;
} cases[] = {
	{"sendrecv", sendrecv_srv, sendrecv_cli, {0}},
	{"rdma", rdma_srv, rdma_cli, {0}},
	{"flow", flow_srv, flow_cli, {0}},
	{"events", events_srv, events_cli, {0}},
	{"srq", srq_srv, srq_cli, {.srq = 1}},
	{"cq_overflow", cqover_srv, cqover_cli, {.rcq_size = 4}},
	{"norecv", norecv_srv, norecv_cli, {0}},
	{"lkey", lkey_srv, lkey_cli, {0}},
	{"rem_access", remacc_srv, remacc_cli, {.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE}},
	{"oob_write", oob_srv, oob_cli, {0}},
	{"dereg_traffic", dereg_srv, dereg_cli, {0}},
	{"destroy_busy", destroy_srv, destroy_cli, {0}},
};

static void teardown(struct ep *e)
{
	if (e->qp)
		rdma_disconnect(e->id);
	if (e->qp)
		rdma_destroy_qp(e->id);
	rdma_destroy_id(e->id);
	if (e->lid)
		rdma_destroy_id(e->lid);
	if (e->mr)
		ibv_dereg_mr(e->mr);
	if (e->srq)
		ibv_destroy_srq(e->srq);
	ibv_destroy_cq(e->scq);
	ibv_destroy_cq(e->rcq);
	ibv_destroy_comp_channel(e->cc);
	ibv_dealloc_pd(e->pd);
	rdma_destroy_event_channel(e->ch);
	free(e->buf);
}

static void run_srv(const struct tcase *c, int fd)
{
	struct ep e = {.oob = fd};
	role = "srv";
	server_connect(&e, &c->o);
	c->srv(&e);
	oob_sync(&e);
	teardown(&e);
}

struct targ {
	const struct tcase *c;
	int fd;
};
static void *srv_thread(void *p)
{
	struct targ *a = p;
	run_srv(a->c, a->fd);
	return NULL;
}

int main(int argc, char **argv)
{
	const struct tcase *c = NULL;
	int sv[2];

	if (argc < 3)
		goto usage;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!strcmp(cases[i].name, argv[strcmp(argv[1], "srv") ? 1 : 2]))
			c = &cases[i];
	if (!c)
		goto usage;
	if (!strcmp(argv[1], "srv") && argc == 4) {
		run_srv(c, atoi(argv[3]));
		return 0;
	}
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	pthread_t th;
	pid_t pid = 0;
	struct targ ta = {c, sv[1]};
	if (!strcmp(argv[2], "thread")) {
		REQUIRE(pthread_create(&th, NULL, srv_thread, &ta) == 0);
	} else if (!strcmp(argv[2], "spawn")) {
		char fds[16];
		char *av[] = {argv[0], "srv", (char *)c->name, fds, NULL};
		snprintf(fds, sizeof(fds), "%d", sv[1]);
		REQUIRE(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, av, environ) == 0);
		close(sv[1]);
	} else
		goto usage;
	struct ep e = {.oob = sv[0]};
	client_connect(&e, &c->o);
	c->cli(&e);
	oob_sync(&e);
	teardown(&e);
	if (pid) {
		int st;
		REQUIRE(waitpid(pid, &st, 0) == pid);
		REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	} else
		pthread_join(th, NULL);
	return 0;
usage:
	fprintf(stderr, "usage: verbs_data CASE thread|spawn\n");
	return 2;
}
