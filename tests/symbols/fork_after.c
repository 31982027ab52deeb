/* fork_after: a process forks AFTER its first RDMA call, with a connection
 * moving data, and the child uses RDMA of its own:
 *   - three servers are forked first (before any RDMA call), one for the
 *     parent, one for the child, one for the grandchild;
 *   - the parent connects to A and moves data, then forks; the child
 *     connects to its server and moves data (Sends and RDMA Writes, content checked)
 *     while the parent moves data on its connection, and again after the
 *     child has exited; then the parent disconnects and its server sees it;
 *   - in the child every call on a parent's object fails cleanly (EPERM,
 *     NULL/-1/the errno value as the call fails): verbs and rdma_cm calls,
 *     the inline ops of context->ops and ibv_wr_*; the parent's connection
 *     is unaffected (it goes on moving data);
 *   - the child forks again after its own traffic: the grandchild uses RDMA
 *     the same way and gets the same errors for the child's objects;
 *   - with two Go runtimes in the process (the dead copy's signal handlers
 *     are still installed under the new one's): an interval timer's SIGALRM
 *     reaches the handler the child installs with signal() (perftest -D),
 *     and a Send from registered memory the grandchild unmapped completes
 *     IBV_WC_LOC_PROT_ERR (the new core's fault recovery, a SIGSEGV).
 * Each connection: the server accepts with its buffer's address and rkey in
 * the private data; per round the client Writes a pattern there and Sends
 * the round's tag, the server checks the buffer and Sends the tag back.
 * Every wait has a deadline. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static const char *role = "parent";
#define GIW_TEST_ROLE role
#include "giw_test.h"
#include "giw_cm.h"

#define BUF 4096

struct ep {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;  /* [0, BUF): the Write target or source; then the Send slots */
	uint64_t addr; /* the server's buffer, at the client */
	uint32_t rkey;
};

struct rkey_msg {
	uint64_t addr;
	uint32_t rkey;
};

static void pattern(uint8_t *p, uint64_t tag)
{
	for (int i = 0; i < BUF; i++)
		p[i] = (uint8_t)(tag * 31 + (uint64_t)i);
}

static void resources(struct ep *e)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};

	REQUIRE((e->buf = calloc(1, BUF + 64)));
	REQUIRE((e->pd = ibv_alloc_pd(e->id->verbs)));
	REQUIRE((e->cc = ibv_create_comp_channel(e->id->verbs)));
	REQUIRE((e->cq = ibv_create_cq(e->id->verbs, 16, NULL, e->cc, 0)));
	a.send_cq = a.recv_cq = e->cq;
	REQUIRE(rdma_create_qp(e->id, e->pd, &a) == 0);
	REQUIRE((e->mr = ibv_reg_mr(e->pd, e->buf, BUF + 64,
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)));
}

static int post_recv(struct ep *e)
{
	struct ibv_sge s = {.addr = (uintptr_t)(e->buf + BUF), .length = 8, .lkey = e->mr->lkey};
	struct ibv_recv_wr w = {.sg_list = &s, .num_sge = 1}, *bad;

	return ibv_post_recv(e->id->qp, &w, &bad);
}

static int post_send(struct ep *e, uint64_t tag)
{
	struct ibv_sge s = {.addr = (uintptr_t)(e->buf + BUF + 8), .length = 8, .lkey = e->mr->lkey};
	struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *bad;

	memcpy(e->buf + BUF + 8, &tag, 8);
	return ibv_post_send(e->id->qp, &w, &bad);
}

static int post_write(struct ep *e)
{
	struct ibv_sge s = {.addr = (uintptr_t)e->buf, .length = BUF, .lkey = e->mr->lkey};
	struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.wr.rdma = {.remote_addr = e->addr, .rkey = e->rkey}}, *bad;

	return ibv_post_send(e->id->qp, &w, &bad);
}

static struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double end = giw_now() + 10;

	while (giw_now() < end) {
		int n = ibv_poll_cq(cq, 1, &wc);
		REQUIRE(n >= 0);
		if (n == 1)
			return wc;
	}
	REQUIRE(!"no completion within 10 s");
	return wc;
}

/* One round: Write the pattern of tag, Send tag, get tag back. */
static void round_trip(struct ep *c, uint64_t tag)
{
	uint64_t got;

	REQUIRE(post_recv(c) == 0);
	pattern(c->buf, tag);
	REQUIRE(post_write(c) == 0);
	REQUIRE(post_send(c, tag) == 0);
	for (int done = 0; done < 2;) {
		struct ibv_wc wc = poll1(c->cq);
		REQUIRE(wc.status == IBV_WC_SUCCESS);
		if (wc.opcode == IBV_WC_RECV) {
			memcpy(&got, c->buf + BUF, 8);
			CHECK(got == tag);
		}
		done++;
	}
}

/* A server process: accepts one connection and checks every round until
 * the client disconnects. Forked before any RDMA call. */
static int server(int port_fd)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid;
	int port;

	REQUIRE((ch = rdma_create_event_channel()));
	port = giw_listen_range(ch, 21000 + (int)(getpid() % 50) * 20, 1, NULL, &lid);
	REQUIRE(write(port_fd, &port, sizeof port) == sizeof port);
	struct rdma_cm_event *ev = giw_expect_cm(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
	struct ep s = {.ch = ch, .id = ev->id};
	struct rkey_msg m;
	struct rdma_conn_param cp = {.private_data = &m, .private_data_len = sizeof m};
	uint8_t *want;
	int rounds = 0;

	rdma_ack_cm_event(ev);
	resources(&s);
	REQUIRE((want = malloc(BUF)));
	m.addr = (uintptr_t)s.buf;
	m.rkey = s.mr->rkey;
	REQUIRE(post_recv(&s) == 0);
	REQUIRE(rdma_accept(s.id, &cp) == 0);
	rdma_ack_cm_event(giw_expect_cm(ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	for (;;) {
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		struct ibv_wc wc;
		uint64_t tag;
		int got = ibv_poll_cq(s.cq, 1, &wc);

		REQUIRE(got >= 0);
		if (got == 0) {
			if (poll(&p, 1, 0) == 1) /* the client's disconnect */
				break;
			continue;
		}
		if (wc.status == IBV_WC_WR_FLUSH_ERR) /* the client disconnected, or its QP failed */
			break;
		REQUIRE(wc.status == IBV_WC_SUCCESS);
		if (wc.opcode != IBV_WC_RECV)
			continue;
		memcpy(&tag, s.buf + BUF, 8);
		pattern(want, tag);
		CHECK(memcmp(s.buf, want, BUF) == 0);
		REQUIRE(post_recv(&s) == 0);
		REQUIRE(post_send(&s, tag) == 0);
		rounds++;
	}
	rdma_ack_cm_event(giw_expect_cm(ch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	printf("[server %d] %d rounds checked\n", (int)getpid(), rounds);
	rdma_destroy_qp(s.id);
	rdma_destroy_id(s.id);
	free(want);
	rdma_destroy_id(lid);
	return failures ? 1 : 0;
}

static pid_t start_server(int *port)
{
	int p[2];
	pid_t pid;

	REQUIRE(pipe(p) == 0);
	REQUIRE((pid = fork()) >= 0);
	if (pid == 0) {
		role = "server";
		close(p[0]);
		_exit(server(p[1]));
	}
	close(p[1]);
	REQUIRE(read(p[0], port, sizeof *port) == sizeof *port);
	close(p[0]);
	return pid;
}

static void connect_to(struct ep *c, int port)
{
	struct rdma_conn_param cp = {0};
	struct rkey_msg m;

	REQUIRE((c->ch = rdma_create_event_channel()));
	c->id = giw_resolve_lo(c->ch, port);
	resources(c);
	REQUIRE(rdma_connect(c->id, &cp) == 0);
	struct rdma_cm_event *ev = giw_expect_cm(c->ch, RDMA_CM_EVENT_ESTABLISHED, 10000);
	REQUIRE(ev->param.conn.private_data_len >= sizeof m);
	memcpy(&m, ev->param.conn.private_data, sizeof m);
	rdma_ack_cm_event(ev);
	c->addr = m.addr;
	c->rkey = m.rkey;
}

static void disconnect(struct ep *c)
{
	REQUIRE(rdma_disconnect(c->id) == 0);
	rdma_ack_cm_event(giw_expect_cm(c->ch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	rdma_destroy_qp(c->id);
	rdma_destroy_id(c->id);
}

/* Every call on an object of the process we were forked from fails cleanly
 * (ibv_post_* and ibv_poll_cq/req_notify_cq are context->ops, inline). */
static void foreign_objects_refused(struct ep *p, struct ibv_qp_ex *qpx)
{
	struct ibv_port_attr pa;
	struct rdma_cm_event *ev;
	struct ibv_cq *cq;
	struct ibv_wc wc;
	void *cqctx;

#define EPERM_IS(call) (errno = 0, (call) && errno == EPERM)
	CHECK(EPERM_IS(ibv_alloc_pd(p->id->verbs) == NULL));
	CHECK(EPERM_IS(ibv_reg_mr(p->pd, p->buf, 64, IBV_ACCESS_LOCAL_WRITE) == NULL));
	CHECK(EPERM_IS(ibv_create_cq(p->id->verbs, 4, NULL, NULL, 0) == NULL));
	CHECK(EPERM_IS(ibv_create_comp_channel(p->id->verbs) == NULL));
	CHECK(EPERM_IS(ibv_query_port(p->id->verbs, 1, &pa) == EPERM));
	CHECK(EPERM_IS(ibv_get_cq_event(p->cc, &cq, &cqctx) == -1));
	CHECK(post_send(p, 1) == EPERM);
	CHECK(post_recv(p) == EPERM);
	CHECK(ibv_poll_cq(p->cq, 1, &wc) < 0);
	CHECK(ibv_req_notify_cq(p->cq, 0) == EPERM);
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	CHECK(ibv_wr_complete(qpx) == EPERM);
	CHECK(EPERM_IS(ibv_qp_to_qp_ex(p->id->qp) == NULL));
	CHECK(EPERM_IS(ibv_dereg_mr(p->mr) == EPERM));
	CHECK(EPERM_IS(ibv_destroy_qp(p->id->qp) == EPERM));
	CHECK(EPERM_IS(ibv_destroy_cq(p->cq) == EPERM));
	CHECK(EPERM_IS(ibv_dealloc_pd(p->pd) == EPERM));
	CHECK(EPERM_IS(rdma_get_cm_event(p->ch, &ev) == -1));
	CHECK(EPERM_IS(rdma_disconnect(p->id) == -1));
	CHECK(EPERM_IS(rdma_destroy_id(p->id) == -1));
	CHECK(EPERM_IS(rdma_create_qp(p->id, p->pd, &(struct ibv_qp_init_attr){0}) == -1));
#undef EPERM_IS
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* A Send from registered memory that is no longer mapped fails its QP
 * cleanly: the engine's read faults (SIGSEGV) and the fault is recovered. */
static void send_unmapped(struct ep *c)
{
	long pg = sysconf(_SC_PAGESIZE);
	void *m = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;

	REQUIRE(m != MAP_FAILED);
	REQUIRE((mr = ibv_reg_mr(c->pd, m, (size_t)pg, IBV_ACCESS_LOCAL_WRITE)));
	REQUIRE(munmap(m, (size_t)pg) == 0);
	struct ibv_sge s = {.addr = (uintptr_t)m, .length = (uint32_t)pg, .lkey = mr->lkey};
	struct ibv_send_wr w = {.sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	REQUIRE(ibv_post_send(c->id->qp, &w, &bad) == 0);
	struct ibv_wc wc = poll1(c->cq);
	CHECK(wc.status == IBV_WC_LOC_PROT_ERR);
	ibv_dereg_mr(mr);
}

/* A process forked after its parent's first call: refuses the parent's
 * objects, connects to ports[0] and moves data; forks a grandchild (which
 * uses ports[1]) while generations > 1. */
static int child(struct ep *parent, struct ibv_qp_ex *parent_qpx, const int *ports, int generations)
{
	struct ep c = {0};
	pid_t pid = 0;
	int st;

	struct itimerval every_ms = {.it_interval = {0, 1000}, .it_value = {0, 1000}};
	struct itimerval off = {0};

	foreign_objects_refused(parent, parent_qpx);
	REQUIRE(signal(SIGALRM, on_alarm) != SIG_ERR);
	REQUIRE(setitimer(ITIMER_REAL, &every_ms, NULL) == 0);
	connect_to(&c, ports[0]);
	for (uint64_t t = 1; t <= 100; t++)
		round_trip(&c, t << 8 | (uint64_t)generations);
	usleep(20000); /* returns early on the first SIGALRM; at least one is due */
	REQUIRE(setitimer(ITIMER_REAL, &off, NULL) == 0);
	CHECK(alarms > 0);
	printf("[%s] pid %d: the parent's objects refused, 100 rounds of its own, %d SIGALRMs\n",
	       role, (int)getpid(), (int)alarms);
	if (generations > 1) {
		struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(c.id->qp);

		REQUIRE(qpx);
		REQUIRE((pid = fork()) >= 0);
		if (pid == 0) {
			role = "grandchild";
			_exit(child(&c, qpx, ports + 1, generations - 1));
		}
		/* our connection goes on while the grandchild lives */
		for (uint64_t t = 101; t <= 200; t++)
			round_trip(&c, t << 8 | (uint64_t)generations);
		REQUIRE(waitpid(pid, &st, 0) == pid);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	} else {
		send_unmapped(&c);
	}
	disconnect(&c);
	return failures ? 1 : 0;
}

int main(void)
{
	struct ep p = {0};
	int ports[3], st;
	pid_t servers[3], c;

	setvbuf(stdout, NULL, _IONBF, 0);
	/* the servers, forked before any RDMA call */
	for (int i = 0; i < 3; i++)
		servers[i] = start_server(&ports[i]);

	connect_to(&p, ports[0]);
	for (uint64_t t = 1; t <= 100; t++)
		round_trip(&p, t);
	struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(p.id->qp);
	REQUIRE(qpx);

	REQUIRE((c = fork()) >= 0);
	if (c == 0) {
		role = "child";
		_exit(child(&p, qpx, ports + 1, 2));
	}
	/* the parent's connection works on while the child lives, and after */
	for (uint64_t t = 101; t <= 1100; t++)
		round_trip(&p, t);
	REQUIRE(waitpid(c, &st, 0) == c);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	for (uint64_t t = 1101; t <= 1200; t++)
		round_trip(&p, t);
	disconnect(&p);
	printf("[parent] 1200 rounds and a disconnect, a child and a grandchild of its own\n");
	for (int i = 0; i < 3; i++) {
		REQUIRE(waitpid(servers[i], &st, 0) == servers[i]);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	printf("fork_after: %s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
