/* C tests of the librdmacm ABI of libgoiwarp: cm_test <case> [args].
 * Each case exits 0 on success; ctest runs them (tests/rdmacm/CMakeLists.txt). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "giw_test.h"
#include "giw_cm.h"

static void addr_of(const char *host, int port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *ai;

	REQUIRE(getaddrinfo(host, NULL, &hints, &ai) == 0);
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	((struct sockaddr_in *)ss)->sin_port = htons(port); /* same offset for in6 */
	freeaddrinfo(ai);
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 4, .max_recv_wr = 4,
					     .max_send_sge = 1, .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};

	REQUIRE(id->verbs != NULL);
	REQUIRE(rdma_create_qp(id, NULL, &a) == 0);
}

/* A listener on host:0; returns its port. */
static int listen_on(struct rdma_event_channel *ch, const char *host, struct rdma_cm_id **lid)
{
	struct sockaddr_storage ss;

	addr_of(host, 0, &ss);
	REQUIRE(rdma_create_id(ch, lid, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(*lid, (struct sockaddr *)&ss) == 0);
	REQUIRE(rdma_listen(*lid, 8) == 0);
	REQUIRE(rdma_get_src_port(*lid) != 0);
	return ntohs(rdma_get_src_port(*lid));
}

static struct rdma_cm_id *resolve(struct rdma_event_channel *ch, const char *host, int port)
{
	struct sockaddr_storage ss;
	struct rdma_cm_id *id;

	addr_of(host, port, &ss);
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 10000));
	REQUIRE(rdma_resolve_route(id, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 10000));
	REQUIRE(id->verbs != NULL && id->pd != NULL && rdma_get_src_port(id) != 0);
	return id;
}

static void fill(uint8_t *b, int n, int seed)
{
	for (int i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7 + seed);
}

/* connect/accept (or reject) with n bytes of private data each way. */
static int t_conn(const char *host, int n, int reject)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *cid, *sid;
	struct rdma_cm_event *e;
	uint8_t req[255], rep[255];
	struct rdma_conn_param cp = {.private_data = req, .private_data_len = n,
				     .responder_resources = 1, .initiator_depth = 1};
	int port = listen_on(sch, host, &lid);

	fill(req, n, 1);
	fill(rep, n, 2);
	cid = resolve(cch, host, port);
	make_qp(cid);
	if (n > 252) {
		REQUIRE(rdma_connect(cid, &cp) == -1 && errno == EINVAL);
		goto out_cli;
	}
	/* Depths beyond the device's max_qp_init_rd_atom / max_qp_rd_atom (128). */
	cp.initiator_depth = 129;
	REQUIRE(rdma_connect(cid, &cp) == -1 && errno == EINVAL);
	cp.initiator_depth = 1;
	cp.responder_resources = 129;
	REQUIRE(rdma_connect(cid, &cp) == -1 && errno == EINVAL);
	cp.responder_resources = 1;
	REQUIRE(rdma_connect(cid, &cp) == 0);
	e = giw_expect_cm(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	REQUIRE(e->listen_id == lid && e->param.conn.private_data_len == n);
	REQUIRE(n == 0 || memcmp(e->param.conn.private_data, req, n) == 0);
	REQUIRE(e->param.conn.responder_resources == 1 && e->param.conn.initiator_depth == 1);
	sid = e->id;
	REQUIRE(sid->verbs != NULL && rdma_get_dst_port(sid) == rdma_get_src_port(cid));
	rdma_ack_cm_event(e);
	if (reject) {
		REQUIRE(rdma_reject(sid, rep, n) == 0);
		e = giw_expect_cm(cch, RDMA_CM_EVENT_REJECTED, 10000);
		REQUIRE(e->status == -ECONNREFUSED && e->param.conn.private_data_len == n);
		REQUIRE(n == 0 || memcmp(e->param.conn.private_data, rep, n) == 0);
		rdma_ack_cm_event(e);
		goto out;
	}
	make_qp(sid);
	cp.private_data = rep;
	REQUIRE(rdma_accept(sid, &cp) == 0);
	e = giw_expect_cm(cch, RDMA_CM_EVENT_ESTABLISHED, 10000);
	REQUIRE(e->param.conn.private_data_len == n);
	REQUIRE(n == 0 || memcmp(e->param.conn.private_data, rep, n) == 0);
	rdma_ack_cm_event(e);
	{ /* the initiator's first FPDU lets the responder report ESTABLISHED */
		static char buf[16];
		struct ibv_mr *mr = ibv_reg_mr(cid->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 0, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.wr.rdma.rkey = 0;
		REQUIRE(ibv_post_send(cid->qp, &wr, &bad) == 0);
		rdma_ack_cm_event(giw_expect_cm(sch, RDMA_CM_EVENT_ESTABLISHED, 10000));
		REQUIRE(ibv_dereg_mr(mr) == 0);
	}
	REQUIRE(rdma_disconnect(cid) == 0);
	rdma_ack_cm_event(giw_expect_cm(cch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	rdma_ack_cm_event(giw_expect_cm(sch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	REQUIRE(rdma_disconnect(cid) == 0); /* idempotent */
	REQUIRE(rdma_disconnect(sid) == 0); /* peer already closed */
	rdma_destroy_qp(sid);
out:
	rdma_destroy_id(sid);
out_cli:
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	return 0;
}

static int t_nobody(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *cid;
	struct rdma_cm_event *e;
	int port = listen_on(ch, "127.0.0.1", &lid);

	rdma_destroy_id(lid); /* the port is free again: nobody listens */
	cid = resolve(ch, "127.0.0.1", port);
	make_qp(cid);
	REQUIRE(rdma_connect(cid, NULL) == 0);
	e = giw_expect_cm(ch, RDMA_CM_EVENT_REJECTED, 10000);
	REQUIRE(e->status == -ECONNRESET); /* iw_cxgb4's failed active open */
	rdma_ack_cm_event(e);
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	rdma_destroy_event_channel(ch);
	return 0;
}

static int t_addrinuse(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *id2;
	struct sockaddr_storage ss;
	int port = listen_on(ch, "127.0.0.1", &lid), r;

	addr_of("127.0.0.1", port, &ss);
	REQUIRE(rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP) == 0);
	r = rdma_bind_addr(id2, (struct sockaddr *)&ss);
	if (r == 0)
		r = rdma_listen(id2, 1);
	REQUIRE(r == -1 && errno == EADDRINUSE);
	rdma_destroy_id(id2);
	rdma_destroy_id(lid);
	REQUIRE(rdma_create_id(NULL, &id2, NULL, RDMA_PS_UDP) == -1);
	rdma_destroy_event_channel(ch);
	return 0;
}

static int t_nonblock(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *e;
	struct rdma_cm_id *ids[16];
	struct sockaddr_storage ss;
	int got = 0;

	REQUIRE(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
	REQUIRE(rdma_get_cm_event(ch, &e) == -1 && errno == EAGAIN);
	addr_of("127.0.0.1", 4791, &ss);
	for (int i = 0; i < 16; i++) {
		REQUIRE(rdma_create_id(ch, &ids[i], NULL, RDMA_PS_TCP) == 0);
		REQUIRE(rdma_resolve_addr(ids[i], NULL, (struct sockaddr *)&ss, 1000) == 0);
	}
	while (got < 16) {
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};

		REQUIRE(poll(&p, 1, 2000) == 1);
		while (rdma_get_cm_event(ch, &e) == 0) {
			REQUIRE(e->event == RDMA_CM_EVENT_ADDR_RESOLVED);
			rdma_ack_cm_event(e);
			got++;
		}
		REQUIRE(errno == EAGAIN);
	}
	for (int i = 0; i < 16; i++)
		rdma_destroy_id(ids[i]);
	rdma_destroy_event_channel(ch);
	return 0;
}

static int t_migrate(void)
{
	struct rdma_event_channel *a = rdma_create_event_channel(), *b = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_storage ss;

	addr_of("127.0.0.1", 4791, &ss);
	REQUIRE(rdma_create_id(a, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, 1000) == 0);
	/* The event is queued on a (not read): it moves with the id. */
	REQUIRE(poll(&(struct pollfd){.fd = a->fd, .events = POLLIN}, 1, 5000) == 1);
	REQUIRE(rdma_migrate_id(id, b) == 0 && id->channel == b);
	rdma_ack_cm_event(giw_expect_cm(b, RDMA_CM_EVENT_ADDR_RESOLVED, 10000));
	REQUIRE(rdma_migrate_id(id, NULL) == 0); /* to synchronous mode */
	REQUIRE(rdma_resolve_route(id, 1000) == 0);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(a);
	rdma_destroy_event_channel(b);
	return 0;
}

static struct rdma_cm_event *held;
static atomic_int acked;
static void *ack_later(void *arg)
{
	(void)arg;
	/* A duration: how long rdma_destroy_id must stay blocked. */
	usleep(200000);
	atomic_store(&acked, 1);
	rdma_ack_cm_event(held);
	return NULL;
}

static int t_destroy_unacked(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_storage ss;
	pthread_t th;

	addr_of("127.0.0.1", 4791, &ss);
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, 1000) == 0);
	held = giw_expect_cm(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 10000);
	pthread_create(&th, NULL, ack_later, NULL);
	REQUIRE(rdma_destroy_id(id) == 0);
	REQUIRE(atomic_load(&acked)); /* returned only after the ack */
	pthread_join(th, NULL);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* rdma_server / rdma_client style, synchronous mode. */
static const char *sync_port = "7471";
static void *sync_server(void *arg)
{
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP}, *res;
	struct ibv_qp_init_attr attr = {.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						.max_recv_sge = 1}, .sq_sig_all = 1};
	struct rdma_cm_id *listen_id, *id;
	static uint8_t buf[16];
	struct ibv_mr *mr;
	struct ibv_wc wc;

	REQUIRE(rdma_getaddrinfo("127.0.0.1", sync_port, &hints, &res) == 0);
	REQUIRE(rdma_create_ep(&listen_id, res, NULL, &attr) == 0);
	rdma_freeaddrinfo(res);
	REQUIRE(rdma_listen(listen_id, 0) == 0);
	sem_post(arg);
	REQUIRE(rdma_get_request(listen_id, &id) == 0);
	mr = rdma_reg_msgs(id, buf, sizeof(buf));
	REQUIRE(mr && rdma_post_recv(id, NULL, buf, sizeof(buf), mr) == 0);
	REQUIRE(rdma_accept(id, NULL) == 0);
	REQUIRE(rdma_get_recv_comp(id, &wc) > 0 && wc.status == IBV_WC_SUCCESS);
	REQUIRE(rdma_post_send(id, NULL, buf, sizeof(buf), mr, 0) == 0);
	REQUIRE(rdma_get_send_comp(id, &wc) > 0 && wc.status == IBV_WC_SUCCESS);
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	return NULL;
}

static int t_sync(void)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res;
	struct ibv_qp_init_attr attr = {.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						.max_recv_sge = 1}, .sq_sig_all = 1, .qp_context = NULL};
	struct rdma_cm_id *id;
	static uint8_t sbuf[16] = "hello", rbuf[16];
	struct ibv_mr *smr, *rmr;
	struct ibv_wc wc;
	sem_t listening;
	pthread_t th;

	sem_init(&listening, 0, 0);
	pthread_create(&th, NULL, sync_server, &listening);
	sem_wait(&listening);
	REQUIRE(rdma_getaddrinfo("127.0.0.1", sync_port, &hints, &res) == 0);
	REQUIRE(rdma_create_ep(&id, res, NULL, &attr) == 0);
	rdma_freeaddrinfo(res);
	smr = rdma_reg_msgs(id, sbuf, sizeof(sbuf));
	rmr = rdma_reg_msgs(id, rbuf, sizeof(rbuf));
	REQUIRE(rdma_post_recv(id, NULL, rbuf, sizeof(rbuf), rmr) == 0);
	REQUIRE(rdma_connect(id, NULL) == 0);
	REQUIRE(rdma_post_send(id, NULL, sbuf, sizeof(sbuf), smr, 0) == 0);
	REQUIRE(rdma_get_send_comp(id, &wc) > 0 && wc.status == IBV_WC_SUCCESS);
	REQUIRE(rdma_get_recv_comp(id, &wc) > 0 && wc.status == IBV_WC_SUCCESS);
	REQUIRE(memcmp(rbuf, "hello", 6) == 0);
	rdma_disconnect(id);
	rdma_dereg_mr(smr);
	rdma_dereg_mr(rmr);
	rdma_destroy_ep(id);
	pthread_join(th, NULL);
	sem_destroy(&listening);
	return 0;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";

	if (!strcmp(c, "conn"))
		return t_conn(argv[2], atoi(argv[3]), 0);
	if (!strcmp(c, "reject"))
		return t_conn(argv[2], atoi(argv[3]), 1);
	if (!strcmp(c, "nobody"))
		return t_nobody();
	if (!strcmp(c, "addrinuse"))
		return t_addrinuse();
	if (!strcmp(c, "nonblock"))
		return t_nonblock();
	if (!strcmp(c, "migrate"))
		return t_migrate();
	if (!strcmp(c, "destroy_unacked"))
		return t_destroy_unacked();
	if (!strcmp(c, "sync"))
		return t_sync();
	fprintf(stderr, "usage: cm_test conn|reject HOST N | nobody | addrinuse | nonblock | migrate | destroy_unacked | sync\n");
	return 2;
}
