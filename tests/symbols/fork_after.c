/* fork_after: a process forks AFTER its first RDMA call, with a connection
 * moving data. The child has no Go runtime (fork keeps one thread):
 *   - it keeps running plain C code (malloc, stdio) without deadlock;
 *   - every verbs/rdmacm call it makes fails at once with EPERM (never hangs):
 *     device list, open, PD on the parent's context, post_send/post_recv/
 *     poll_cq/req_notify_cq on the parent's objects, CM channel;
 *   - it stays alive while the parent goes on: the parent's connection keeps
 *     moving data, and its disconnect still reaches the other side (both
 *     sides get DISCONNECTED) although the child holds copies of the sockets.
 * One process holds both ends of the connection (client and server ids on
 * 127.0.0.1); every wait has a deadline. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static const char *role = "parent";
#define GIW_TEST_ROLE role
#include "giw_test.h"
#include "giw_cm.h"

struct ep {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char buf[64];
};

static void resources(struct ep *e)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};

	REQUIRE((e->pd = ibv_alloc_pd(e->id->verbs)));
	REQUIRE((e->cq = ibv_create_cq(e->id->verbs, 16, NULL, NULL, 0)));
	a.send_cq = a.recv_cq = e->cq;
	REQUIRE(rdma_create_qp(e->id, e->pd, &a) == 0);
	REQUIRE((e->mr = ibv_reg_mr(e->pd, e->buf, sizeof e->buf, IBV_ACCESS_LOCAL_WRITE)));
}

static int post_recv(struct ep *e)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf, .length = sizeof e->buf, .lkey = e->mr->lkey};
	struct ibv_recv_wr w = {.sg_list = &s, .num_sge = 1}, *bad;

	return ibv_post_recv(e->id->qp, &w, &bad);
}

static int post_send(struct ep *e)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf, .length = sizeof e->buf, .lkey = e->mr->lkey};
	struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *bad;

	return ibv_post_send(e->id->qp, &w, &bad);
}

static struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;

	for (long i = 0; i < 100000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		REQUIRE(n >= 0);
		if (n == 1)
			return wc;
	}
	REQUIRE(!"no completion");
	return wc;
}

/* One Send from c to s, its payload checked. */
static void ping(struct ep *c, struct ep *s, int n)
{
	REQUIRE(post_recv(s) == 0);
	snprintf(c->buf, sizeof c->buf, "message %d", n);
	REQUIRE(post_send(c) == 0);
	struct ibv_wc wc = poll1(c->cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS);
	wc = poll1(s->cq);
	REQUIRE(wc.status == IBV_WC_SUCCESS && strcmp(s->buf, c->buf) == 0);
}

/* The child: no RDMA call may hang or succeed. */
static int child(struct ep *c, int go_fd)
{
	struct ibv_wc wc;
	char *p;
	int n = -1;

	role = "child";
	REQUIRE((p = malloc(1 << 20)));
	memset(p, 1, 1 << 20);
	free(p);
	printf("[child] pid %d: plain C runs\n", (int)getpid());

	errno = 0;
	CHECK(ibv_get_device_list(&n) == NULL && errno == EPERM);
	errno = 0;
	CHECK(ibv_alloc_pd(c->id->verbs) == NULL && errno == EPERM);
	errno = 0;
	CHECK(rdma_create_event_channel() == NULL && errno == EPERM);
	CHECK(post_send(c) == EPERM);
	CHECK(post_recv(c) == EPERM);
	CHECK(ibv_poll_cq(c->cq, 1, &wc) < 0);
	CHECK(ibv_req_notify_cq(c->cq, 0) == EPERM);
	printf("[child] every RDMA call failed with EPERM\n");

	/* Stay alive, holding copies of the parent's sockets, until told. */
	char x;
	CHECK(read(go_fd, &x, 1) == 1);
	return failures ? 1 : 0;
}

int main(void)
{
	struct ep s = {0}, c = {0};
	struct rdma_cm_id *lid;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rdma_conn_param cp = {0};
	int go[2], st;

	setvbuf(stdout, NULL, _IONBF, 0);
	REQUIRE((s.ch = rdma_create_event_channel()) && (c.ch = rdma_create_event_channel()));
	REQUIRE(rdma_create_id(s.ch, &lid, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(lid, (struct sockaddr *)&sa) == 0 && rdma_listen(lid, 1) == 0);
	sa.sin_port = rdma_get_src_port(lid);
	REQUIRE(rdma_create_id(c.ch, &c.id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(c.id, NULL, (struct sockaddr *)&sa, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(c.ch, RDMA_CM_EVENT_ADDR_RESOLVED, 10000));
	REQUIRE(rdma_resolve_route(c.id, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(c.ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 10000));
	resources(&c);
	REQUIRE(rdma_connect(c.id, &cp) == 0);
	struct rdma_cm_event *ev = giw_expect_cm(s.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	s.id = ev->id;
	rdma_ack_cm_event(ev);
	resources(&s);
	REQUIRE(rdma_accept(s.id, &cp) == 0);
	rdma_ack_cm_event(giw_expect_cm(s.ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	rdma_ack_cm_event(giw_expect_cm(c.ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	ping(&c, &s, 0);

	REQUIRE(pipe(go) == 0);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		close(go[1]);
		_exit(child(&c, go[0]));
	}
	close(go[0]);
	/* The parent's connection works on while the child lives. */
	for (int i = 1; i <= 1000; i++)
		ping(&c, &s, i);
	REQUIRE(rdma_disconnect(c.id) == 0);
	rdma_ack_cm_event(giw_expect_cm(c.ch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	rdma_ack_cm_event(giw_expect_cm(s.ch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	printf("[parent] 1000 messages and a disconnect with the child alive\n");
	CHECK(write(go[1], "x", 1) == 1);
	REQUIRE(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	rdma_destroy_qp(c.id);
	rdma_destroy_qp(s.id);
	rdma_destroy_id(c.id);
	rdma_destroy_id(s.id);
	rdma_destroy_id(lid);
	printf("fork_after: %s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
