/* QPs connected without a CM, through the verbs C API (issue 11): the GID
 * table; two devices of one process connected by ibv_modify_qp alone, data
 * both ways, both sides' RTR seconds apart; and the error cases: wrong QPN,
 * a peer that never comes, a peer that goes away (ERR, flushed receive,
 * IBV_EVENT_QP_FATAL within the bound), destroy while connecting; and
 * sends posted by a QP left in RTR before its peer came.
 *
 * The ctest sets GOIWARP_QP_PORT_BASE, GOIWARP_QP_CONNECT_TIMEOUT=3s and
 * GOIWARP_QP_LINGER=200ms. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include "giw_test.h"

#define BUF 4096

struct end {
	const char *name;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	int gid_index;
	union ibv_gid gid;
};

static struct ibv_context *open_dev(const char *want_other)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;

	REQUIRE(l != NULL);
	for (int i = 0; i < n && !ctx; i++) {
		const char *name = ibv_get_device_name(l[i]);
		if (want_other ? strcmp(name, "giw_lo") != 0 : strcmp(name, "giw_lo") == 0)
			ctx = ibv_open_device(l[i]);
	}
	ibv_free_device_list(l);
	return ctx;
}

/* A device's first IPv4-mapped GID, or -1. */
static int ipv4_gid(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_port_attr pa;

	if (ibv_query_port(ctx, 1, &pa))
		return -1;
	for (int i = 1; i < pa.gid_tbl_len; i++)
		if (ibv_query_gid(ctx, 1, i, gid) == 0 && IN6_IS_ADDR_V4MAPPED((struct in6_addr *)gid->raw))
			return i;
	return -1;
}

static void end_init(struct end *e, const char *name, struct ibv_context *ctx)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 16, .max_recv_wr = 16,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE };

	memset(e, 0, sizeof(*e));
	e->name = name;
	e->ctx = ctx;
	REQUIRE((e->pd = ibv_alloc_pd(ctx)));
	REQUIRE((e->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0)));
	ia.send_cq = ia.recv_cq = e->cq;
	REQUIRE((e->qp = ibv_create_qp(e->pd, &ia)));
	REQUIRE((e->buf = calloc(1, BUF)));
	REQUIRE((e->mr = ibv_reg_mr(e->pd, e->buf, BUF,
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)));
	REQUIRE(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					 IBV_QP_ACCESS_FLAGS) == 0);
	e->gid_index = ipv4_gid(ctx, &e->gid);
	REQUIRE(e->gid_index > 0);
}

static void end_fini(struct end *e)
{
	if (e->qp)
		CHECK(ibv_destroy_qp(e->qp) == 0);
	CHECK(ibv_dereg_mr(e->mr) == 0);
	CHECK(ibv_destroy_cq(e->cq) == 0);
	CHECK(ibv_dealloc_pd(e->pd) == 0);
	free(e->buf);
}

/* INIT -> RTR toward (gid, qpn), as ibv_rc_pingpong does. */
static int to_rtr(struct end *e, const union ibv_gid *dgid, uint32_t qpn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = qpn, .rq_psn = 0x1234, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = 12 };

	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = e->gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	return ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct end *e)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				 .rnr_retry = 7, .sq_psn = 0x4321, .max_rd_atomic = 1 };

	return ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void post_recv(struct end *e, uint64_t id, int off)
{
	struct ibv_sge s = { (uintptr_t)e->buf + off, 64, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	REQUIRE(ibv_post_recv(e->qp, &wr, &bad) == 0);
}

static int post_send(struct end *e, uint64_t id, enum ibv_wr_opcode op, int off, int len,
		     uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = { (uintptr_t)e->buf + off, len, e->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(e->qp, &wr, &bad);
}

/* The next completion within secs; status -1 if none came. */
static struct ibv_wc poll_one(struct end *e, double secs)
{
	struct ibv_wc wc = { .status = -1 };
	double end = giw_now() + secs;

	while (giw_now() < end) {
		int n = ibv_poll_cq(e->cq, 1, &wc);
		REQUIRE(n >= 0);
		if (n == 1)
			return wc;
		usleep(100);
	}
	wc.status = -1;
	return wc;
}

/* The next async event's type within secs, -1 if none. */
static int async_event(struct ibv_context *ctx, struct ibv_qp *qp, double secs)
{
	struct pollfd p = { ctx->async_fd, POLLIN, 0 };
	struct ibv_async_event ev;
	int t;

	if (poll(&p, 1, (int)(secs * 1000)) != 1)
		return -1;
	REQUIRE(ibv_get_async_event(ctx, &ev) == 0);
	t = ev.event_type;
	CHECK(ev.element.qp == qp);
	ibv_ack_async_event(&ev);
	return t;
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0);
	return a.qp_state;
}

/* A failed QP: ERR, its posted receive (id) flushed, QP_FATAL, all within secs. */
static void expect_failed(struct end *e, uint64_t id, double secs, const char *what)
{
	double t0 = giw_now();
	int ev = async_event(e->ctx, e->qp, secs);
	struct ibv_wc wc;

	if (ev != IBV_EVENT_QP_FATAL)
		fprintf(stderr, "%s: event %d after %.2fs, want QP_FATAL\n", what, ev, giw_now() - t0);
	CHECK(ev == IBV_EVENT_QP_FATAL);
	CHECK(qp_state(e->qp) == IBV_QPS_ERR);
	wc = poll_one(e, 1);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == id);
	printf("%s: QP_FATAL after %.2fs\n", what, giw_now() - t0);
}

static void test_gid_table(struct ibv_context *lo)
{
	struct ibv_port_attr pa;
	union ibv_gid g;
	struct ibv_gid_entry ent, tab[16];
	char s[INET6_ADDRSTRLEN];

	REQUIRE(ibv_query_port(lo, 1, &pa) == 0);
	CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET);
	CHECK(pa.gid_tbl_len >= 3);
	CHECK(pa.lid == 1); /* the low 16 bits of 127.0.0.1 */
	CHECK(ibv_query_gid(lo, 1, 1, &g) == 0);
	CHECK(strcmp(inet_ntop(AF_INET6, g.raw, s, sizeof(s)), "::ffff:127.0.0.1") == 0);
	CHECK(ibv_query_gid(lo, 1, 2, &g) == 0);
	CHECK(strcmp(inet_ntop(AF_INET6, g.raw, s, sizeof(s)), "::1") == 0);
	CHECK(ibv_query_gid(lo, 1, pa.gid_tbl_len, &g) != 0);
	CHECK(ibv_query_gid_ex(lo, 1, 0, &ent, 0) == 0 && ent.gid_type == IBV_GID_TYPE_IB);
	CHECK(ibv_query_gid_ex(lo, 1, 1, &ent, 0) == 0 && ent.gid_type == IBV_GID_TYPE_ROCE_V2 &&
	      ent.gid_index == 1);
	CHECK(ibv_query_gid_ex(lo, 1, pa.gid_tbl_len, &ent, 0) == ENODATA);
	CHECK(ibv_query_gid_table(lo, tab, 16, 0) == pa.gid_tbl_len);
	CHECK(memcmp(tab[1].gid.raw, ((union ibv_gid){ .raw = { [10] = 0xff, [11] = 0xff, 127, 0, 0, 1 } }).raw, 16) == 0);
}

/* a and b (on two devices when there are two) connect through ibv_modify_qp:
 * b reaches RTR 1.2 s after a, then data both ways. */
static void test_two_devices(struct ibv_context *c1, struct ibv_context *c2)
{
	struct end a, b;
	struct ibv_wc wc;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;

	end_init(&a, "a", c1);
	end_init(&b, "b", c2);
	post_recv(&a, 1, 1024); /* posted in INIT: waits for the connection */
	post_recv(&b, 2, 1024);
	REQUIRE(to_rtr(&a, &b.gid, b.qp->qp_num) == 0);
	REQUIRE(to_rts(&a) == 0);
	CHECK(qp_state(a.qp) == IBV_QPS_RTS);
	strcpy(a.buf, "hello from a");
	CHECK(post_send(&a, 3, IBV_WR_SEND, 0, 13, 0, 0) == 0); /* waits for the connection */
	usleep(1200 * 1000);
	REQUIRE(to_rtr(&b, &a.gid, a.qp->qp_num) == 0);
	REQUIRE(to_rts(&b) == 0);
	strcpy(b.buf, "hello from b");
	CHECK(post_send(&b, 4, IBV_WR_SEND, 0, 13, 0, 0) == 0);
	for (int i = 0; i < 2; i++) {
		wc = poll_one(&a, 5);
		CHECK(wc.status == IBV_WC_SUCCESS);
		wc = poll_one(&b, 5);
		CHECK(wc.status == IBV_WC_SUCCESS);
	}
	CHECK(strcmp(a.buf + 1024, "hello from b") == 0);
	CHECK(strcmp(b.buf + 1024, "hello from a") == 0);
	/* an RDMA Write into b */
	strcpy(a.buf + 64, "written by a");
	CHECK(post_send(&a, 5, IBV_WR_RDMA_WRITE, 64, 13, (uintptr_t)b.buf + 2048, b.mr->rkey) == 0);
	wc = poll_one(&a, 5);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 5);
	/* (a Write completes when it is on the stream: b places it soon after) */
	for (double end = giw_now() + 5; giw_now() < end && strcmp(b.buf + 2048, "written by a");)
		usleep(1000);
	CHECK(strcmp(b.buf + 2048, "written by a") == 0);
	/* what the program set is what ibv_query_qp reports */
	REQUIRE(ibv_query_qp(a.qp, &qa, IBV_QP_DEST_QPN | IBV_QP_AV | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN,
			     &ia) == 0);
	CHECK(qa.dest_qp_num == b.qp->qp_num);
	CHECK(qa.rq_psn == 0x1234 && qa.sq_psn == 0x4321);
	CHECK(qa.ah_attr.is_global && memcmp(qa.ah_attr.grh.dgid.raw, b.gid.raw, 16) == 0);
	CHECK(async_event(a.ctx, a.qp, 0) == -1);
	/* b goes away: a lingers (GOIWARP_QP_LINGER), then fails */
	post_recv(&a, 6, 0);
	CHECK(ibv_destroy_qp(b.qp) == 0);
	b.qp = NULL;
	expect_failed(&a, 6, 3, "peer destroyed");
	end_fini(&a);
	end_fini(&b);
}

/* A QP the program leaves in RTR (perftest's send_bw server returns its
 * credits so) may post before its stream is up: the work waits and goes
 * out once the peer comes; the QP is then in RTS. */
static void test_post_in_rtr(struct ibv_context *lo)
{
	struct end a, b;
	struct ibv_wc wc;

	end_init(&a, "a", lo);
	end_init(&b, "b", lo);
	post_recv(&a, 21, 1024);
	REQUIRE(to_rtr(&b, &a.gid, a.qp->qp_num) == 0);
	strcpy(b.buf, "sent in RTR");
	CHECK(post_send(&b, 22, IBV_WR_SEND, 0, 12, 0, 0) == 0);
	strcpy(b.buf + 64, "written in RTR");
	CHECK(post_send(&b, 23, IBV_WR_RDMA_WRITE, 64, 15, (uintptr_t)a.buf + 2048, a.mr->rkey) == 0);
	usleep(300 * 1000);
	CHECK(ibv_poll_cq(b.cq, 1, &wc) == 0); /* nothing went out yet */
	REQUIRE(to_rtr(&a, &b.gid, b.qp->qp_num) == 0);
	REQUIRE(to_rts(&a) == 0);
	wc = poll_one(&b, 5);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 22);
	wc = poll_one(&b, 5);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 23);
	wc = poll_one(&a, 5);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 21 && wc.byte_len == 12);
	CHECK(strcmp(a.buf + 1024, "sent in RTR") == 0);
	for (double end = giw_now() + 5; giw_now() < end && strcmp(a.buf + 2048, "written in RTR");)
		usleep(1000);
	CHECK(strcmp(a.buf + 2048, "written in RTR") == 0);
	CHECK(qp_state(b.qp) == IBV_QPS_RTS);
	end_fini(&a);
	end_fini(&b);

	/* in INIT, posting a send is still refused */
	end_init(&a, "a", lo);
	CHECK(post_send(&a, 24, IBV_WR_SEND, 0, 4, 0, 0) == EINVAL);
	end_fini(&a);
}

static void test_errors(struct ibv_context *lo)
{
	struct end a, b;
	double t0;

	/* wrong QPN: a dials b's process, which has no such QP */
	end_init(&a, "a", lo);
	end_init(&b, "b", lo);
	post_recv(&a, 7, 0);
	REQUIRE(to_rtr(&a, &b.gid, b.qp->qp_num + 1000) == 0);
	REQUIRE(to_rts(&a) == 0);
	expect_failed(&a, 7, 3, "wrong QPN");
	end_fini(&a);
	end_fini(&b);

	/* a peer that never comes: b (the larger QPN: it waits) times out */
	end_init(&a, "a", lo);
	end_init(&b, "b", lo);
	post_recv(&b, 8, 0);
	REQUIRE(to_rtr(&b, &a.gid, a.qp->qp_num) == 0);
	expect_failed(&b, 8, 5, "peer never comes");
	/* ERR to RESET is clean */
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
	CHECK(ibv_modify_qp(b.qp, &r, IBV_QP_STATE) == 0);
	CHECK(qp_state(b.qp) == IBV_QPS_RESET);
	end_fini(&a);
	end_fini(&b);

	/* destroy while connecting: returns at once, no event */
	end_init(&a, "a", lo);
	end_init(&b, "b", lo);
	REQUIRE(to_rtr(&a, &b.gid, b.qp->qp_num) == 0); /* b stays in INIT: a retries */
	usleep(100 * 1000);
	t0 = giw_now();
	CHECK(ibv_destroy_qp(a.qp) == 0);
	a.qp = NULL;
	CHECK(giw_now() - t0 < 1);
	CHECK(async_event(a.ctx, NULL, 0.3) == -1);
	end_fini(&a);
	end_fini(&b);

	/* a QP connected to itself is refused, the QP stays in INIT */
	end_init(&a, "a", lo);
	CHECK(to_rtr(&a, &a.gid, a.qp->qp_num) == EOPNOTSUPP);
	CHECK(qp_state(a.qp) == IBV_QPS_INIT);
	/* an sgid index beyond the table is EINVAL */
	a.gid_index = 15;
	CHECK(to_rtr(&a, &a.gid, a.qp->qp_num + 1) == EINVAL);
	end_fini(&a);
}

int main(void)
{
	struct ibv_context *lo = open_lo();
	struct ibv_context *other = open_dev("other");
	union ibv_gid g;

	setvbuf(stdout, NULL, _IONBF, 0);
	test_gid_table(lo);
	if (other && ipv4_gid(other, &g) > 0) {
		printf("two devices: giw_lo and %s\n", ibv_get_device_name(other->device));
		test_two_devices(lo, other);
	} else {
		printf("one device: giw_lo twice (no other device with an IPv4 address)\n");
		test_two_devices(lo, open_lo());
	}
	test_post_in_rtr(lo);
	test_errors(lo);
	printf("%s\n", failures ? "FAIL" : "ok");
	return failures != 0;
}
