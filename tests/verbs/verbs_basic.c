/* C tests of goiwarp's libibverbs ABI that need no connection: devices and
 * queries, PD/MR, CQs and completion channels, QP creation and state,
 * flushing in ERR, the ibv_wr_* API, SRQs, async events, refused verbs.
 *
 *   verbs_basic <case>      (one ctest per case; no case runs them all)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "giw_test.h"

static void test_device(void)
{
	int n = -1, found = 0;
	struct ibv_device **l = ibv_get_device_list(&n);

	REQUIRE(l != NULL);
	CHECK(n >= 1);
	CHECK(l[n] == NULL);
	for (int i = 0; i < n; i++) {
		CHECK(strncmp(l[i]->name, "giw_", 4) == 0);
		CHECK(l[i]->node_type == IBV_NODE_RNIC);
		CHECK(l[i]->transport_type == IBV_TRANSPORT_IWARP);
		CHECK(ibv_get_device_index(l[i]) >= 0);
		if (strcmp(ibv_get_device_name(l[i]), "giw_lo") == 0) {
			found = 1;
			CHECK(ibv_get_device_guid(l[i]) != 0);
		}
	}
	CHECK(found);
	ibv_free_device_list(l);
	CHECK(strcmp(ibv_node_type_str(IBV_NODE_RNIC), "iWARP NIC") == 0);
	CHECK(strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active") == 0);
	CHECK(strlen(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR)) > 0);
	CHECK(strlen(ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED)) > 0);
	/* Out of the tables, below them, and a hole (node type 0). */
	CHECK(strcmp(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown") == 0);
	CHECK(strcmp(ibv_node_type_str((enum ibv_node_type)0), "unknown") == 0);
	CHECK(strcmp(ibv_port_state_str((enum ibv_port_state)99), "unknown") == 0);
	CHECK(strcmp(ibv_wc_status_str((enum ibv_wc_status)99), "unknown") == 0);
	CHECK(strcmp(ibv_event_type_str((enum ibv_event_type)-1), "unknown") == 0);
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT") == 0);
	CHECK(strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT") == 0);

	struct ibv_context *ctx = open_lo();
	CHECK(ctx->num_comp_vectors == 1);
	CHECK(ctx->async_fd >= 0);
	CHECK(verbs_get_ctx(ctx) != NULL);

	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0);
	CHECK(da.phys_port_cnt == 1);
	CHECK(da.max_qp > 0 && da.max_qp_wr > 0 && da.max_sge > 0 && da.max_cqe > 0);
	CHECK(da.max_qp_rd_atom > 0 && da.max_qp_init_rd_atom > 0);
	CHECK(da.atomic_cap == IBV_ATOMIC_HCA);
	CHECK(da.node_guid == ibv_get_device_guid(ctx->device));

	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0);
	CHECK(dx.orig_attr.max_qp == da.max_qp);

	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0);
	CHECK(pa.state == IBV_PORT_ACTIVE);
	CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET);
	CHECK(pa.active_mtu >= IBV_MTU_256 && pa.active_mtu <= IBV_MTU_4096);
	/* entry 0, ::ffff:127.0.0.1, ::1 (docs/without-librdmacm.md) */
	CHECK(pa.gid_tbl_len >= 3 && pa.pkey_tbl_len == 1);
	int ngids = pa.gid_tbl_len;
	CHECK(ibv_query_port(ctx, 2, &pa) != 0);

	union ibv_gid gid, zero;
	memset(&zero, 0, sizeof(zero));
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0);
	CHECK(memcmp(&gid, &zero, sizeof(gid)) != 0);
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0);
	CHECK(memcmp(&ge.gid, &gid, sizeof(gid)) == 0 && ge.port_num == 1);
	struct ibv_gid_entry tab[16];
	CHECK(ibv_query_gid_table(ctx, tab, 16, 0) == ngids);
	CHECK(memcmp(&tab[0].gid, &gid, sizeof(gid)) == 0);
	CHECK(ibv_query_gid_table(ctx, tab, 1, 0) == -EINVAL); /* does not fit */

	__be16 pkey;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff);
	CHECK(ibv_close_device(ctx) == 0);
}

static void test_pd_mr(void)
{
	struct ibv_context *ctx = open_lo();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[8192];

	REQUIRE(pd != NULL);
	CHECK(pd->context == ctx);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ);
	REQUIRE(mr != NULL);
	CHECK(mr->lkey == mr->rkey && mr->lkey != 0);
	CHECK(mr->addr == buf && mr->length == sizeof(buf) && mr->pd == pd);

	struct ibv_mr *mr2 = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr2 != NULL);
	CHECK(mr2->lkey != mr->lkey);

	/* remote write/atomic without local write is refused */
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_ATOMIC) == NULL && errno == EINVAL);
	/* non-constant access goes through ibv_reg_mr_iova2 */
	volatile unsigned int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *mr3 = ibv_reg_mr_iova2(pd, buf, 4096, 0x10000, acc);
	CHECK(mr3 != NULL);
	if (mr3)
		CHECK(ibv_dereg_mr(mr3) == 0);

	CHECK(ibv_rereg_mr(mr2, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) == 0);
	CHECK(ibv_rereg_mr(mr2, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_REMOTE_WRITE) < 0);
	CHECK(ibv_rereg_mr(mr2, 0x80, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT);

	errno = 0;
	CHECK(ibv_dealloc_pd(pd) == EBUSY);
	CHECK(ibv_dereg_mr(mr2) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
}

static void test_cq(void)
{
	struct ibv_context *ctx = open_lo();
	struct ibv_wc wc[4];
	struct ibv_cq *cq = ibv_create_cq(ctx, 10, (void *)0x1234, NULL, 0);

	REQUIRE(cq != NULL);
	CHECK(cq->cqe >= 10);
	CHECK(cq->cq_context == (void *)0x1234);
	CHECK(ibv_poll_cq(cq, 4, wc) == 0);
	CHECK(ibv_req_notify_cq(cq, 0) == 0);
	CHECK(ibv_req_notify_cq(cq, 1) == 0);
	CHECK(ibv_resize_cq(cq, 100) == 0);
	CHECK(cq->cqe >= 100);
	CHECK(ibv_poll_cq(cq, 4, wc) == 0);
	CHECK(ibv_destroy_cq(cq) == 0);

	errno = 0;
	CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(ibv_create_cq(ctx, 1, NULL, NULL, 5) == NULL && errno == EINVAL);

	struct ibv_cq_init_attr_ex ax = {
		.cqe = 16,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_IMM,
	};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ax);
	REQUIRE(cqx != NULL);
	CHECK(cqx->read_byte_len != NULL && cqx->read_qp_num != NULL);
	CHECK(cqx->read_completion_ts == NULL);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK(ibv_start_poll(cqx, &pa) == ENOENT);
	CHECK(ibv_poll_cq(ibv_cq_ex_to_cq(cqx), 4, wc) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0);

	ax.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &ax) == NULL && errno == EOPNOTSUPP);
	CHECK(ibv_close_device(ctx) == 0);
}

static void test_channel(void)
{
	struct ibv_context *ctx = open_lo();
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *got;
	void *cq_ctx;

	REQUIRE(ch != NULL);
	CHECK(ch->fd >= 0 && ch->context == ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	REQUIRE(cq != NULL);
	CHECK(cq->channel == ch);

	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 0) == 0);
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0);
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &got, &cq_ctx) == -1 && errno == EAGAIN);

	errno = 0;
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_destroy_comp_channel(ch) == 0);
	CHECK(ibv_close_device(ctx) == 0);
}

struct qp_env {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_mr *mr;
	char buf[4096];
};

static void env_open(struct qp_env *e)
{
	e->ctx = open_lo();
	e->pd = ibv_alloc_pd(e->ctx);
	e->scq = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
	e->rcq = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
	REQUIRE(e->pd && e->scq && e->rcq);
	e->mr = ibv_reg_mr(e->pd, e->buf, sizeof(e->buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(e->mr != NULL);
}

static void env_close(struct qp_env *e)
{
	CHECK(ibv_dereg_mr(e->mr) == 0);
	CHECK(ibv_destroy_cq(e->scq) == 0);
	CHECK(ibv_destroy_cq(e->rcq) == 0);
	CHECK(ibv_dealloc_pd(e->pd) == 0);
	CHECK(ibv_close_device(e->ctx) == 0);
}

static struct ibv_qp *rc_qp(struct qp_env *e, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = e->scq,
		.recv_cq = e->rcq,
		.srq = srq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(e->pd, &ia);

	REQUIRE(qp != NULL);
	CHECK(ia.cap.max_send_wr >= 8 && ia.cap.max_send_sge >= 2);
	CHECK(ia.cap.max_inline_data >= 64);
	if (!srq)
		CHECK(ia.cap.max_recv_wr >= 8 && ia.cap.max_recv_sge >= 2);
	return qp;
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS);
}

static int to_state(struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* Polls until n completions arrived (the engine may complete from another thread). */
static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int got = 0;

	for (int spins = 0; got < n && spins < 2000000; spins++) {
		int k = ibv_poll_cq(cq, n - got, wc + got);
		if (k < 0)
			return k;
		got += k;
		if (!k && spins > 1000)
			usleep(10);
	}
	return got;
}

static void test_qp(void)
{
	struct qp_env e;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	struct ibv_wc wc[8];

	env_open(&e);
	struct ibv_qp *qp = rc_qp(&e, NULL);
	CHECK(qp->qp_num != 0 && qp->state == IBV_QPS_RESET && qp->qp_type == IBV_QPT_RC);
	/* libibverbs' struct says RESET; the QP is in INIT, siw's IDLE (the
	 * rdma-core suite's RNIC answer) */
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_INIT);
	CHECK(ibv_modify_qp(qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET }, IBV_QP_STATE) == 0);

	/* a QP in use keeps its CQs and PD */
	errno = 0;
	CHECK(ibv_destroy_cq(e.scq) == EBUSY);
	CHECK(ibv_dealloc_pd(e.pd) == EBUSY);

	struct ibv_sge sge = { .addr = (uintptr_t)e.buf, .length = 64, .lkey = e.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *rbad = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == EINVAL && rbad == &rwr); /* RESET */

	CHECK(to_init(qp) == 0);
	CHECK(qp->state == IBV_QPS_INIT);
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_CAP, &qi) == 0);
	CHECK(qa.qp_state == IBV_QPS_INIT);
	CHECK(qa.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
	CHECK(qa.port_num == 1);
	CHECK(qa.cap.max_send_wr >= 8 && qa.cap.max_inline_data >= 64);
	CHECK(qi.send_cq == e.scq && qi.recv_cq == e.rcq && qi.qp_type == IBV_QPT_RC);

	/* INIT -> INIT with a bad port, INIT -> RTS without a connection */
	qa.port_num = 2;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_PORT) == EINVAL);
	CHECK(to_state(qp, IBV_QPS_RTS) != 0);
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_INIT);

	/* sends need RTS; receives may be posted in INIT */
	struct ibv_send_wr swr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *sbad = NULL;
	CHECK(ibv_post_send(qp, &swr, &sbad) == EINVAL && sbad == &swr);
	rbad = NULL;
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0);
	struct ibv_sge many[3] = { sge, sge, sge };
	struct ibv_recv_wr rwr2 = { .wr_id = 8, .sg_list = many, .num_sge = 3 };
	CHECK(ibv_post_recv(qp, &rwr2, &rbad) == EINVAL && rbad == &rwr2);
	CHECK(ibv_poll_cq(e.rcq, 8, wc) == 0);

	/* ERR flushes the posted receive; later work is flushed as it is posted */
	CHECK(to_state(qp, IBV_QPS_ERR) == 0);
	CHECK(poll_n(e.rcq, wc, 1) == 1);
	CHECK(wc[0].wr_id == 7 && wc[0].status == IBV_WC_WR_FLUSH_ERR);
	CHECK(wc[0].qp_num == qp->qp_num);
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0);
	CHECK(poll_n(e.rcq, wc, 1) == 1 && wc[0].status == IBV_WC_WR_FLUSH_ERR);

	struct ibv_send_wr swr2 = swr;
	swr2.wr_id = 10;
	swr2.send_flags = 0; /* unsignaled, but flushed work always completes */
	swr.next = &swr2;
	CHECK(ibv_post_send(qp, &swr, &sbad) == 0);
	CHECK(poll_n(e.scq, wc, 2) == 2);
	CHECK(wc[0].wr_id == 9 && wc[0].status == IBV_WC_WR_FLUSH_ERR);
	CHECK(wc[1].wr_id == 10 && wc[1].status == IBV_WC_WR_FLUSH_ERR);
	swr.next = NULL;

	/* per-WR validation: bad opcode, too many SGEs, inline too long */
	struct ibv_send_wr bad = swr;
	bad.opcode = IBV_WR_LOCAL_INV;
	CHECK(ibv_post_send(qp, &bad, &sbad) == EINVAL && sbad == &bad);
	bad = swr;
	bad.sg_list = many;
	bad.num_sge = 3;
	CHECK(ibv_post_send(qp, &bad, &sbad) == EINVAL && sbad == &bad);
	bad = swr;
	sge.length = 4000;
	bad.send_flags |= IBV_SEND_INLINE;
	CHECK(ibv_post_send(qp, &bad, &sbad) == EINVAL);
	sge.length = 64;

	/* RESET empties the queues; back to INIT works */
	CHECK(to_state(qp, IBV_QPS_RESET) == 0);
	CHECK(to_init(qp) == 0);
	CHECK(ibv_destroy_qp(qp) == 0);
	env_close(&e);
}

static void test_wr_api(void)
{
	struct qp_env e;
	struct ibv_wc wc[8];

	env_open(&e);
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = e.scq,
		.recv_cq = e.rcq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 1,
			 .max_inline_data = 32 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e.pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_READ,
	};
	struct ibv_qp *qp = ibv_create_qp_ex(e.ctx, &ia);
	REQUIRE(qp != NULL);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
	REQUIRE(qx != NULL);
	CHECK(to_init(qp) == 0);

	/* INIT: the batch is refused as a whole */
	ibv_wr_start(qx);
	qx->wr_id = 1;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, e.mr->lkey, (uintptr_t)e.buf, 16);
	CHECK(ibv_wr_complete(qx) == EINVAL);

	CHECK(to_state(qp, IBV_QPS_ERR) == 0);
	ibv_wr_start(qx);
	qx->wr_id = 2;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, 0x1234, 0x1000);
	ibv_wr_set_inline_data(qx, e.buf, 16);
	qx->wr_id = 3;
	ibv_wr_rdma_read(qx, 0x1234, 0x1000);
	ibv_wr_set_sge(qx, e.mr->lkey, (uintptr_t)e.buf, 16);
	CHECK(ibv_wr_complete(qx) == 0);
	CHECK(poll_n(e.scq, wc, 2) == 2);
	CHECK(wc[0].wr_id == 2 && wc[0].status == IBV_WC_WR_FLUSH_ERR);
	CHECK(wc[1].wr_id == 3 && wc[1].status == IBV_WC_WR_FLUSH_ERR);

	/* abort discards; an unsupported op fails the batch */
	ibv_wr_start(qx);
	qx->wr_id = 4;
	ibv_wr_send(qx);
	ibv_wr_abort(qx);
	ibv_wr_start(qx);
	ibv_wr_local_inv(qx, 5);
	CHECK(ibv_wr_complete(qx) == EOPNOTSUPP);
	/* inline longer than max_inline_data */
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, e.buf, 4000);
	CHECK(ibv_wr_complete(qx) == EINVAL);
	/* more WRs than the queue holds */
	ibv_wr_start(qx);
	for (int i = 0; i < 64; i++)
		ibv_wr_send(qx);
	CHECK(ibv_wr_complete(qx) == ENOMEM);
	/* None of the refused WRs was queued: a WR posted now (flushed, the QP
	 * is in ERR) is the next completion. */
	ibv_wr_start(qx);
	qx->wr_id = 6;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, e.mr->lkey, (uintptr_t)e.buf, 16);
	CHECK(ibv_wr_complete(qx) == 0);
	CHECK(poll_n(e.scq, wc, 1) == 1);
	CHECK(wc[0].wr_id == 6 && wc[0].status == IBV_WC_WR_FLUSH_ERR);
	CHECK(ibv_poll_cq(e.scq, 8, wc) == 0);

	CHECK(ibv_destroy_qp(qp) == 0);
	env_close(&e);
}

static void test_refuse(void)
{
	struct qp_env e;

	env_open(&e);
	struct ibv_qp_init_attr ia = {
		.send_cq = e.scq, .recv_cq = e.rcq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	enum ibv_qp_type types[] = { IBV_QPT_UD, IBV_QPT_UC, IBV_QPT_RAW_PACKET };
	for (unsigned i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		ia.qp_type = types[i];
		errno = 0;
		CHECK(ibv_create_qp(e.pd, &ia) == NULL && errno == EOPNOTSUPP);
	}
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_sge = 1000;
	errno = 0;
	CHECK(ibv_create_qp(e.pd, &ia) == NULL && errno == EINVAL);

	struct ibv_ah_attr ah = { .port_num = 1 };
	errno = 0;
	CHECK(ibv_create_ah(e.pd, &ah) == NULL && errno == EOPNOTSUPP);
	union ibv_gid gid = { 0 };
	ia.cap.max_send_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(e.pd, &ia);
	REQUIRE(qp != NULL);
	CHECK(ibv_attach_mcast(qp, &gid, 0) == EOPNOTSUPP);
	CHECK(ibv_detach_mcast(qp, &gid, 0) == EOPNOTSUPP);
	errno = 0;
	CHECK(ibv_alloc_mw(e.pd, IBV_MW_TYPE_1) == NULL && errno == EOPNOTSUPP);
	CHECK(ibv_destroy_qp(qp) == 0);
	env_close(&e);
}

static void test_srq(void)
{
	struct qp_env e;
	struct ibv_srq_attr sa;
	struct ibv_wc wc[8];

	env_open(&e);
	struct ibv_srq_init_attr si = { .srq_context = &e, .attr = { .max_wr = 10, .max_sge = 2 } };
	struct ibv_srq *srq = ibv_create_srq(e.pd, &si);
	REQUIRE(srq != NULL);
	CHECK(si.attr.max_wr >= 10 && si.attr.max_sge >= 2);
	CHECK(srq->srq_context == &e && srq->pd == e.pd);

	struct ibv_sge sge = { .addr = (uintptr_t)e.buf, .length = 64, .lkey = e.mr->lkey };
	struct ibv_recv_wr rwr[3] = {
		{ .wr_id = 1, .sg_list = &sge, .num_sge = 1, .next = &rwr[1] },
		{ .wr_id = 2, .sg_list = &sge, .num_sge = 1, .next = &rwr[2] },
		{ .wr_id = 3, .sg_list = &sge, .num_sge = 1 },
	}, *bad = NULL;
	CHECK(ibv_post_srq_recv(srq, rwr, &bad) == 0);
	struct ibv_sge many[3] = { sge, sge, sge };
	struct ibv_recv_wr big = { .wr_id = 4, .sg_list = many, .num_sge = 3 };
	CHECK(ibv_post_srq_recv(srq, &big, &bad) == EINVAL && bad == &big);

	CHECK(ibv_query_srq(srq, &sa) == 0);
	CHECK(sa.max_wr >= 10 && sa.srq_limit == 0);
	sa.srq_limit = 2;
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0);
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 2);
	sa.max_wr = 100;
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == EINVAL); /* no resizing */

	/* a QP on the SRQ: no receive queue of its own */
	struct ibv_qp *qp = rc_qp(&e, srq);
	struct ibv_recv_wr one = { .wr_id = 5, .sg_list = &sge, .num_sge = 1 };
	CHECK(ibv_post_recv(qp, &one, &bad) == EINVAL && bad == &one);
	errno = 0;
	CHECK(ibv_destroy_srq(srq) == EBUSY);

	/* ERR on a QP of an SRQ raises "last WQE reached"; SRQ receives stay */
	int fl = fcntl(e.ctx->async_fd, F_GETFL);
	CHECK(fcntl(e.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	struct ibv_async_event ev;
	errno = 0;
	CHECK(ibv_get_async_event(e.ctx, &ev) == -1 && errno == EAGAIN);
	CHECK(to_init(qp) == 0);
	CHECK(to_state(qp, IBV_QPS_ERR) == 0);
	struct pollfd pfd = { .fd = e.ctx->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 2000) == 1);
	CHECK(ibv_get_async_event(e.ctx, &ev) == 0);
	CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == qp);
	ibv_ack_async_event(&ev);
	CHECK(ibv_poll_cq(e.rcq, 8, wc) == 0);

	CHECK(ibv_destroy_qp(qp) == 0);
	CHECK(ibv_destroy_srq(srq) == 0);
	env_close(&e);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{ "device", test_device }, { "pd_mr", test_pd_mr }, { "cq", test_cq },
	{ "channel", test_channel }, { "qp", test_qp }, { "wr_api", test_wr_api },
	{ "refuse", test_refuse }, { "srq", test_srq },
};

int main(int argc, char **argv)
{
	int ran = 0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
			continue;
		int before = failures;
		cases[i].fn();
		printf("%s: %s\n", cases[i].name, failures == before ? "ok" : "FAIL");
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "unknown case %s\n", argv[1]);
		return 2;
	}
	return failures ? 1 : 0;
}
