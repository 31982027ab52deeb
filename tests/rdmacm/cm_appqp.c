/* librdmacm with QPs the application creates itself, and the active side's
 * events when the peer resets during MPA: cm_appqp <case>.
 *   init_qp_attr  rdma_init_qp_attr in every state of both sides, against the
 *                 answers measured on Linux 6.1 siw + rdma-core 44
 *   appqp         ibv_create_qp'd QPs on both sides, bound by conn_param.qp_num
 *                 (rping -q's sequence: INIT, RTR, RTS from rdma_init_qp_attr),
 *                 a Send each way and an RDMA Write, rdma_establish, disconnect;
 *                 an unknown qp_num and a missing conn_param are EINVAL
 *   mpa_reset     a hand-made listener reads the MPA request and resets the
 *                 connection, every time the connect tries again within
 *                 GOIWARP_CONNECT_RETRY (1 s: a close before any reply byte
 *                 counts as refused): then REJECTED, status -ECONNRESET
 *                 (siw: -104); the id's QP is in ERR
 *   mpa_close     the same with a FIN: REJECTED -ECONNRESET
 *   mpa_reset_appqp  mpa_reset with the application's own QP: left in ERR
 * Listeners use ports in 31100-31199. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "giw_test.h"
#include "giw_cm.h"

#define PORT_BASE 31100

/* ---- rdma_init_qp_attr ----------------------------------------------------- */

enum answer { REFUSED, NO_CONN, CONN };

/* Checks rdma_init_qp_attr for every QP state (and one beyond ERR) against
 * the kernel's iWARP answers: REFUSED: EINVAL throughout; NO_CONN (no
 * connection yet): mask STATE|ACCESS_FLAGS|PORT, no access, for RESET..ERR;
 * CONN: INIT and RTR mask STATE|ACCESS_FLAGS|PORT with remote write + read,
 * RTS mask PORT alone, other states EINVAL. Every other field is zero. */
static void check_answers(const char *what, struct rdma_cm_id *id, enum answer kind)
{
	for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR + 1; s++) {
		struct ibv_qp_attr a, zero;
		int mask = -1, r, want_mask = 0, want_access = 0, refused;

		memset(&a, 0x5a, sizeof(a));
		a.qp_state = s;
		a.rate_limit = 77;
		errno = 0;
		r = rdma_init_qp_attr(id, &a, &mask);
		refused = kind == REFUSED || s > IBV_QPS_ERR ||
			  (kind == CONN && s != IBV_QPS_INIT && s != IBV_QPS_RTR && s != IBV_QPS_RTS);
		if (refused) {
			if (!(r == -1 && errno == EINVAL)) {
				fprintf(stderr, "%s: state %d: ret %d errno %d, want EINVAL\n", what, s, r, errno);
				failures++;
			}
			continue;
		}
		if (kind == NO_CONN || s != IBV_QPS_RTS)
			want_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT;
		else
			want_mask = IBV_QP_PORT;
		if (kind == CONN && s != IBV_QPS_RTS)
			want_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		if (r != 0 || mask != want_mask || (int)a.qp_state != s || (int)a.qp_access_flags != want_access ||
		    a.port_num != 1 || a.rate_limit != 77) {
			fprintf(stderr, "%s: state %d: ret %d mask %#x state %d access %#x port %d rate_limit %u, "
					"want mask %#x access %#x port 1 (rate_limit kept)\n",
				what, s, r, mask, a.qp_state, a.qp_access_flags, a.port_num, a.rate_limit,
				want_mask, want_access);
			failures++;
			continue;
		}
		/* the rest as the kernel copies it: zero */
		memset(&zero, 0, sizeof(zero));
		zero.qp_state = a.qp_state;
		zero.qp_access_flags = a.qp_access_flags;
		zero.port_num = a.port_num;
		zero.rate_limit = a.rate_limit;
		if (memcmp(&a, &zero, sizeof(a))) {
			fprintf(stderr, "%s: state %d: fields beyond state, access, port are not zero\n", what, s);
			failures++;
		}
	}
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &i) == 0);
	return a.qp_state;
}

/* An application's own QP on id's device, as rping -q makes it. */
struct app {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[4096];
};

static void app_qp(struct rdma_cm_id *id, struct app *a)
{
	struct ibv_qp_init_attr ia = {.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};

	REQUIRE(id->verbs != NULL);
	REQUIRE((a->pd = ibv_alloc_pd(id->verbs)) != NULL);
	REQUIRE((a->cq = ibv_create_cq(id->verbs, 32, NULL, NULL, 0)) != NULL);
	ia.send_cq = ia.recv_cq = a->cq;
	REQUIRE((a->qp = ibv_create_qp(a->pd, &ia)) != NULL);
	REQUIRE((a->mr = ibv_reg_mr(a->pd, a->buf, sizeof(a->buf),
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					    IBV_ACCESS_REMOTE_READ)) != NULL);
}

static void app_free(struct app *a)
{
	ibv_dereg_mr(a->mr);
	ibv_destroy_qp(a->qp);
	ibv_destroy_cq(a->cq);
	ibv_dealloc_pd(a->pd);
}

/* rping -q's rping_self_modify_qp: INIT, RTR, RTS from rdma_init_qp_attr. */
static void self_modify(struct rdma_cm_id *id, struct ibv_qp *qp)
{
	for (int s = IBV_QPS_INIT; s <= IBV_QPS_RTS; s++) {
		struct ibv_qp_attr a = {.qp_state = s};
		int mask;

		REQUIRE(rdma_init_qp_attr(id, &a, &mask) == 0);
		REQUIRE(ibv_modify_qp(qp, &a, mask) == 0);
	}
}

static struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double end = giw_now() + 10;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && giw_now() < end)
		;
	REQUIRE(n == 1);
	return wc;
}

static int t_init_qp_attr(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *unbound, *wild, *lid, *cid, *sid;
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct sockaddr_in any;
	struct rdma_cm_event *e;
	struct app ca, sa;
	int port;

	REQUIRE(sch && cch);
	REQUIRE(rdma_create_id(cch, &unbound, NULL, RDMA_PS_TCP) == 0);
	check_answers("unbound", unbound, REFUSED);
	REQUIRE(rdma_create_id(cch, &wild, NULL, RDMA_PS_TCP) == 0);
	giw_sin_lo(0, &any);
	any.sin_addr.s_addr = htonl(INADDR_ANY);
	REQUIRE(rdma_bind_addr(wild, (struct sockaddr *)&any) == 0);
	check_answers("bound to 0.0.0.0 (no device)", wild, REFUSED);
	port = giw_listen_range(sch, PORT_BASE, 4, NULL, &lid);
	check_answers("listening", lid, REFUSED);
	cid = giw_resolve_lo(cch, port);
	check_answers("route resolved", cid, NO_CONN);
	app_qp(cid, &ca);
	{
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = cid->port_num};

		REQUIRE(ibv_modify_qp(ca.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
							 IBV_QP_ACCESS_FLAGS) == 0);
	}
	cp.qp_num = ca.qp->qp_num;
	REQUIRE(rdma_connect(cid, &cp) == 0);
	check_answers("connecting", cid, CONN);
	e = giw_expect_cm(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 5000);
	sid = e->id;
	rdma_ack_cm_event(e);
	check_answers("connect request", sid, CONN);
	app_qp(sid, &sa);
	self_modify(sid, sa.qp);
	CHECK(qp_state(sa.qp) == IBV_QPS_RTR); /* RTS's answer (PORT alone) moves nothing */
	cp.qp_num = sa.qp->qp_num;
	REQUIRE(rdma_accept(sid, &cp) == 0);
	rdma_ack_cm_event(giw_expect_cm(cch, RDMA_CM_EVENT_ESTABLISHED, 5000));
	check_answers("established (active)", cid, CONN);
	self_modify(cid, ca.qp); /* rping -c -q after ESTABLISHED: ignored by a connected QP */
	CHECK(qp_state(ca.qp) == IBV_QPS_RTS);
	{
		/* the passive side is ESTABLISHED once the initiator's first FPDU came */
		struct ibv_sge sge = {.addr = (uintptr_t)ca.buf, .length = 8, .lkey = ca.mr->lkey};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *rbad;

		sge.addr = (uintptr_t)sa.buf;
		sge.lkey = sa.mr->lkey;
		REQUIRE(ibv_post_recv(sa.qp, &rwr, &rbad) == 0);
		sge.addr = (uintptr_t)ca.buf;
		sge.lkey = ca.mr->lkey;
		REQUIRE(ibv_post_send(ca.qp, &wr, &bad) == 0);
		CHECK(poll1(ca.cq).status == IBV_WC_SUCCESS);
		CHECK(poll1(sa.cq).status == IBV_WC_SUCCESS);
	}
	rdma_ack_cm_event(giw_expect_cm(sch, RDMA_CM_EVENT_ESTABLISHED, 5000));
	check_answers("established (passive)", sid, CONN);
	REQUIRE(rdma_disconnect(cid) == 0);
	check_answers("disconnecting", cid, CONN);
	rdma_ack_cm_event(giw_expect_cm(cch, RDMA_CM_EVENT_DISCONNECTED, 5000));
	rdma_ack_cm_event(giw_expect_cm(sch, RDMA_CM_EVENT_DISCONNECTED, 5000));
	check_answers("disconnected (active)", cid, CONN);
	check_answers("disconnected (passive)", sid, CONN);
	rdma_destroy_id(sid);
	rdma_destroy_id(cid);
	app_free(&sa);
	app_free(&ca);
	rdma_destroy_id(lid);
	rdma_destroy_id(wild);
	rdma_destroy_id(unbound);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	return failures != 0;
}

/* ---- application QPs carrying data ----------------------------------------- */

struct rinfo {
	uint64_t addr;
	uint32_t rkey;
};

static int t_appqp(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7};
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *e;
	struct ibv_send_wr *bad;
	struct ibv_recv_wr *rbad;
	struct app ca, sa;
	struct ibv_wc wc;
	int port;

	REQUIRE(sch && cch);
	port = giw_listen_range(sch, PORT_BASE + 20, 4, NULL, &lid);
	cid = giw_resolve_lo(cch, port);
	app_qp(cid, &ca);
	/* iWARP connects a QP: none on the id and no conn_param, or a number
	 * that names no QP, is EINVAL at once (librdmacm, iw_cm_connect). */
	errno = 0;
	CHECK(rdma_connect(cid, NULL) == -1 && errno == EINVAL);
	cp.qp_num = ca.qp->qp_num + 100000;
	errno = 0;
	CHECK(rdma_connect(cid, &cp) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(rdma_establish(cid) == -1 && errno == EINVAL); /* not connected */
	/* A QP left as created (INIT, siw's IDLE, without rights) gets iw_cm's
	 * INIT attributes, as a RESET one does. */
	CHECK(qp_state(ca.qp) == IBV_QPS_INIT);
	cp.qp_num = ca.qp->qp_num;
	REQUIRE(rdma_connect(cid, &cp) == 0);
	CHECK(qp_state(ca.qp) == IBV_QPS_INIT);
	CHECK(cid->qp == NULL);

	e = giw_expect_cm(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 5000);
	sid = e->id;
	rdma_ack_cm_event(e);
	app_qp(sid, &sa);
	{
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = sid->port_num};

		REQUIRE(ibv_modify_qp(sa.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
							 IBV_QP_ACCESS_FLAGS) == 0);
	}
	self_modify(sid, sa.qp);
	errno = 0;
	CHECK(rdma_accept(sid, NULL) == -1 && errno == EINVAL);
	/* the server's buffer address and rkey go in the accept's private data */
	struct rinfo ri = {.addr = (uintptr_t)sa.buf, .rkey = sa.mr->rkey};
	struct ibv_sge rsge = {.addr = (uintptr_t)sa.buf, .length = 64, .lkey = sa.mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1};

	REQUIRE(ibv_post_recv(sa.qp, &rwr, &rbad) == 0);
	cp.qp_num = sa.qp->qp_num;
	cp.private_data = &ri;
	cp.private_data_len = sizeof(ri);
	REQUIRE(rdma_accept(sid, &cp) == 0);
	CHECK(sid->qp == NULL);

	e = giw_expect_cm(cch, RDMA_CM_EVENT_ESTABLISHED, 5000);
	REQUIRE(e->param.conn.private_data_len >= sizeof(ri));
	memcpy(&ri, e->param.conn.private_data, sizeof(ri));
	rdma_ack_cm_event(e);
	CHECK(qp_state(ca.qp) == IBV_QPS_RTS);
	self_modify(cid, ca.qp);
	CHECK(rdma_establish(cid) == 0); /* nothing to do on iWARP: see docs/rdma-cm.md */
	errno = 0;
	CHECK(rdma_establish(sid) == -1 && errno == EINVAL);

	/* a Send client -> server, then an RDMA Write of a pattern */
	strcpy(ca.buf, "hello from an application's QP");
	struct ibv_sge sge = {.addr = (uintptr_t)ca.buf, .length = 32, .lkey = ca.mr->lkey};
	struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED};

	REQUIRE(ibv_post_send(ca.qp, &swr, &bad) == 0);
	wc = poll1(ca.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.qp_num == ca.qp->qp_num);
	wc = poll1(sa.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 32 &&
	      wc.qp_num == sa.qp->qp_num);
	CHECK(strcmp(sa.buf, "hello from an application's QP") == 0);
	rdma_ack_cm_event(giw_expect_cm(sch, RDMA_CM_EVENT_ESTABLISHED, 5000));

	for (int i = 0; i < 1024; i++)
		ca.buf[i] = (char)(i * 7 + 3);
	sge.length = 1024;
	swr.wr_id = 3;
	swr.opcode = IBV_WR_RDMA_WRITE;
	swr.wr.rdma.remote_addr = ri.addr + 1024;
	swr.wr.rdma.rkey = ri.rkey;
	REQUIRE(ibv_post_send(ca.qp, &swr, &bad) == 0);
	wc = poll1(ca.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE);
	/* The Write completes when sent; a Send after it arrives once it is placed. */
	rsge.addr = (uintptr_t)sa.buf + 3072;
	REQUIRE(ibv_post_recv(sa.qp, &rwr, &rbad) == 0);
	sge.length = 8;
	swr.wr_id = 4;
	swr.opcode = IBV_WR_SEND;
	REQUIRE(ibv_post_send(ca.qp, &swr, &bad) == 0);
	CHECK(poll1(ca.cq).status == IBV_WC_SUCCESS);
	wc = poll1(sa.cq);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 8);
	CHECK(memcmp(sa.buf + 1024, ca.buf, 1024) == 0);

	/* rping -q's disconnect: the QP to ERR first, then rdma_disconnect */
	{
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

		REQUIRE(ibv_modify_qp(ca.qp, &a, IBV_QP_STATE) == 0);
	}
	CHECK(rdma_disconnect(cid) == 0);
	rdma_ack_cm_event(giw_expect_cm(cch, RDMA_CM_EVENT_DISCONNECTED, 5000));
	rdma_ack_cm_event(giw_expect_cm(sch, RDMA_CM_EVENT_DISCONNECTED, 5000));
	CHECK(qp_state(sa.qp) == IBV_QPS_ERR);
	CHECK(rdma_disconnect(sid) == 0);
	/* rping's server destroys the id before its QP, its client the QP first */
	rdma_destroy_id(sid);
	app_free(&sa);
	app_free(&ca);
	rdma_destroy_id(cid);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	return failures != 0;
}

/* ---- a peer that goes away during MPA --------------------------------------- */

struct resetter {
	int ls, reset, got, conns;
};

/* Reads the whole MPA request on c (header, then its PD_Length bytes) and
 * resets (SO_LINGER 0) or closes c. */
static void resetter_one(struct resetter *r, int c)
{
	unsigned char hdr[20], pd[512];
	int n = 0, k;

	while (n < 20 && (k = read(c, hdr + n, 20 - n)) > 0)
		n += k;
	if (n == 20 && memcmp(hdr, "MPA ID Req Frame", 16) == 0) {
		int len = hdr[18] << 8 | hdr[19], m = 0;

		while (m < len && (k = read(c, pd + m, len - m)) > 0)
			m += k;
		r->got = 20 + m;
	}
	if (r->reset) {
		struct linger l = {.l_onoff = 1, .l_linger = 0};

		setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	}
	close(c);
}

/* Accepts connections until ls is shut down; resetter_one each. */
static void *resetter_run(void *arg)
{
	struct resetter *r = arg;
	int c;

	while ((c = accept(r->ls, NULL, NULL)) >= 0) {
		r->conns++;
		resetter_one(r, c);
	}
	return NULL;
}

static int t_mpa_gone(int reset, int own_qp)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct resetter r = {.reset = reset};
	struct ibv_qp_init_attr ia = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;
	struct sockaddr_in sa;
	struct app a;
	pthread_t th;
	int port, one = 1;

	REQUIRE(ch);
	REQUIRE((r.ls = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	setsockopt(r.ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	for (port = PORT_BASE + 40; port < PORT_BASE + 60; port++) {
		giw_sin_lo(port, &sa);
		if (bind(r.ls, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
	}
	REQUIRE(port < PORT_BASE + 60);
	REQUIRE(listen(r.ls, 4) == 0);
	REQUIRE(pthread_create(&th, NULL, resetter_run, &r) == 0);
	id = giw_resolve_lo(ch, port);
	if (own_qp) {
		app_qp(id, &a);
		cp.qp_num = a.qp->qp_num;
	} else {
		REQUIRE(rdma_create_qp(id, NULL, &ia) == 0);
	}
	cp.private_data = "who is there";
	cp.private_data_len = 12;
	REQUIRE(rdma_connect(id, &cp) == 0);
	e = giw_expect_cm(ch, RDMA_CM_EVENT_REJECTED, 10000);
	fprintf(stderr, "%s during MPA: %s, status %d\n", reset ? "reset" : "close",
		rdma_event_str(e->event), e->status);
	CHECK(e->status == -ECONNRESET);
	CHECK(e->param.conn.private_data_len == 0);
	rdma_ack_cm_event(e);
	shutdown(r.ls, SHUT_RDWR); /* ends the resetter's accept */
	pthread_join(th, NULL);
	CHECK(r.got == 20 + 4 + 12); /* header, MPA v2 IRD/ORD, our private data */
	/* tried again within GOIWARP_CONNECT_RETRY's default 1 s */
	CHECK(r.conns >= 2);
	/* the QP is in ERR: librdmacm's for its own QP, siw's for the application's */
	CHECK(qp_state(own_qp ? a.qp : id->qp) == IBV_QPS_ERR);
	if (own_qp)
		app_free(&a);
	else
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	close(r.ls);
	return failures != 0;
}

int main(int argc, char **argv)
{
	const char *t = argc > 1 ? argv[1] : "";

	if (!strcmp(t, "init_qp_attr"))
		return t_init_qp_attr();
	if (!strcmp(t, "appqp"))
		return t_appqp();
	if (!strcmp(t, "mpa_reset"))
		return t_mpa_gone(1, 0);
	if (!strcmp(t, "mpa_close"))
		return t_mpa_gone(0, 0);
	if (!strcmp(t, "mpa_reset_appqp"))
		return t_mpa_gone(1, 1);
	fprintf(stderr, "usage: cm_appqp init_qp_attr|appqp|mpa_reset|mpa_close|mpa_reset_appqp\n");
	return 2;
}
