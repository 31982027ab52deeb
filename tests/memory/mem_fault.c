/* Memory the application hands over to goiwarp (issue 9 item 4).
 *
 *   mem_fault reg                    ibv_reg_mr & co. on unmapped ranges: EFAULT
 *   mem_fault guard_write|guard_read a peer's access across the end of a
 *                                    region followed by a guard page
 *   mem_fault <case> munmap|protnone
 *
 * A case connects two QP pairs through rdma_cm on 127.0.0.1 in this process,
 * registers a 64 KiB region on one side, breaks it (munmap or
 * mprotect(PROT_NONE)) while it is registered, and accesses it through the
 * first pair: remote_write (8 B), remote_write_big (64 KiB), remote_send
 * (into a posted receive), remote_read, remote_atomic (the region is the
 * target's), local_send (the region is a post_send source), local_read (a
 * Read's sink). The access becomes an error on that pair (completion
 * status, async event, both ids DISCONNECTED); the process lives and the
 * second pair still moves data.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "giw_test.h"
#include "giw_cm.h"

#define REGION (64 << 10)
#define ALL_ACCESS                                                                          \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |       \
	 IBV_ACCESS_REMOTE_ATOMIC)

struct side {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf; /* REGION bytes, mapped for the whole test */
	struct ibv_mr *mr;
};

struct pair {
	struct rdma_cm_id *lid;
	struct side c, s;
};

static uint8_t *map_region(void)
{
	void *p = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(p != MAP_FAILED);
	return p;
}

static void setup(struct side *sd, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};

	sd->id = id;
	REQUIRE((sd->pd = ibv_alloc_pd(id->verbs)));
	REQUIRE((sd->cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0)));
	a.send_cq = a.recv_cq = sd->cq;
	REQUIRE(rdma_create_qp(id, sd->pd, &a) == 0);
	sd->qp = id->qp;
	sd->buf = map_region();
	REQUIRE((sd->mr = ibv_reg_mr(sd->pd, sd->buf, REGION, ALL_ACCESS)));
}

static void connect_pair(struct pair *p)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct rdma_conn_param cp = {.responder_resources = 4, .initiator_depth = 4};
	struct rdma_cm_event *ev;
	uint16_t port;

	REQUIRE((p->s.ch = rdma_create_event_channel()));
	REQUIRE((p->c.ch = rdma_create_event_channel()));
	for (port = 31400; port < 31500; port++) {
		sa.sin_port = htons(port);
		REQUIRE(rdma_create_id(p->s.ch, &p->lid, NULL, RDMA_PS_TCP) == 0);
		if (rdma_bind_addr(p->lid, (struct sockaddr *)&sa) == 0 && rdma_listen(p->lid, 1) == 0)
			break;
		rdma_destroy_id(p->lid);
	}
	REQUIRE(port < 31500);
	REQUIRE(rdma_create_id(p->c.ch, &p->c.id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(p->c.id, NULL, (struct sockaddr *)&sa, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(p->c.ch, RDMA_CM_EVENT_ADDR_RESOLVED, 10000));
	REQUIRE(rdma_resolve_route(p->c.id, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(p->c.ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 10000));
	setup(&p->c, p->c.id);
	REQUIRE(rdma_connect(p->c.id, &cp) == 0);
	ev = giw_expect_cm(p->s.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	struct rdma_cm_id *sid = ev->id;
	rdma_ack_cm_event(ev);
	setup(&p->s, sid);
	REQUIRE(rdma_accept(sid, &cp) == 0);
	rdma_ack_cm_event(giw_expect_cm(p->c.ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	rdma_ack_cm_event(giw_expect_cm(p->s.ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
}

static void post_recv(struct side *sd, uint64_t wrid, void *a, uint32_t n, uint32_t lkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)a, .length = n, .lkey = lkey};
	struct ibv_recv_wr w = {.wr_id = wrid, .sg_list = &s, .num_sge = n ? 1 : 0}, *bad;
	REQUIRE(ibv_post_recv(sd->qp, &w, &bad) == 0);
}

/* Posts one signaled work request. */
static void post(struct side *sd, uint64_t wrid, enum ibv_wr_opcode op, void *a, uint32_t n,
		 uint32_t lkey, void *raddr, uint32_t rkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)a, .length = n, .lkey = lkey};
	struct ibv_send_wr w = {.wr_id = wrid, .sg_list = &s, .num_sge = 1, .opcode = op,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w.wr.atomic.remote_addr = (uintptr_t)raddr;
		w.wr.atomic.rkey = rkey;
		w.wr.atomic.compare_add = 1;
	} else {
		w.wr.rdma.remote_addr = (uintptr_t)raddr;
		w.wr.rdma.rkey = rkey;
	}
	REQUIRE(ibv_post_send(sd->qp, &w, &bad) == 0);
}

/* The next completion of sd's CQ (10 s bound, busy poll as apps do). */
static struct ibv_wc poll1(struct side *sd)
{
	struct ibv_wc wc;
	double end = giw_now() + 10;

	while (giw_now() < end) {
		int n = ibv_poll_cq(sd->cq, 1, &wc);
		REQUIRE(n >= 0);
		if (n == 1)
			return wc;
		sched_yield();
	}
	fprintf(stderr, "no completion within 10 s\n");
	exit(1);
}

static void expect_wc(struct side *sd, uint64_t wrid, enum ibv_wc_status st1,
		      enum ibv_wc_status st2)
{
	struct ibv_wc wc = poll1(sd);
	CHECK(wc.wr_id == wrid);
	if (wc.status != st1 && wc.status != st2)
		fprintf(stderr, "wr %llu: status %s, want %s\n", (unsigned long long)wc.wr_id,
			ibv_wc_status_str(wc.status), ibv_wc_status_str(st1));
	CHECK(wc.status == st1 || wc.status == st2);
}

/* Async events of the one context both sides share (giw_lo), read until
 * (qp, type) shows up; events of other QPs are kept for later calls. */
static struct {
	struct ibv_qp *qp;
	enum ibv_event_type type;
} seen[16];
static int nseen;

static int wait_async(struct ibv_context *ctx, struct ibv_qp *qp, enum ibv_event_type t)
{
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	struct ibv_async_event ev;

	for (;;) {
		for (int i = 0; i < nseen; i++)
			if (seen[i].qp == qp && seen[i].type == t)
				return 1;
		if (poll(&p, 1, 10000) != 1)
			return 0;
		REQUIRE(ibv_get_async_event(ctx, &ev) == 0);
		REQUIRE(nseen < 16);
		seen[nseen].qp = ev.element.qp;
		seen[nseen++].type = ev.event_type;
		ibv_ack_async_event(&ev);
	}
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	REQUIRE(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0);
	return a.qp_state;
}

/* A registered region broken while registered: munmap or PROT_NONE. It is
 * mapped far below where mmap places new mappings (top-down), so that once
 * unmapped it stays a hole instead of becoming the next mapping of the
 * process (which goiwarp would then write into, as the application asked). */
static void break_region(struct side *sd, const char *how, struct ibv_mr **mr, uint8_t **buf)
{
	void *p = MAP_FAILED;

	for (uintptr_t a = 16 << 20; p == MAP_FAILED; a += REGION) {
		p = mmap((void *)a, REGION, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		REQUIRE(p != MAP_FAILED || errno == EEXIST);
	}
	*buf = p;
	REQUIRE((*mr = ibv_reg_mr(sd->pd, *buf, REGION, ALL_ACCESS)));
	if (strcmp(how, "munmap") == 0)
		REQUIRE(munmap(*buf, REGION) == 0);
	else
		REQUIRE(mprotect(*buf, REGION, PROT_NONE) == 0);
}

/* Two pages at the lowest address a process may map (vm.mmap_min_addr):
 * the page below can never be mapped, a hole no other thread can fill
 * (a hole made by munmap can be, by the next mmap of the process). */
static uint8_t *low_mapped(long pg)
{
	unsigned long min = 0;
	FILE *f = fopen("/proc/sys/vm/mmap_min_addr", "r");

	if (f) {
		if (fscanf(f, "%lu", &min) != 1)
			min = 0;
		fclose(f);
	}
	if (min < (unsigned long)pg)
		min = pg;
	min = (min + pg - 1) & ~(unsigned long)(pg - 1);
	void *p = mmap((void *)min, 2 * pg, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	REQUIRE(p == (void *)min);
	return p;
}

static int test_reg(void)
{
	struct ibv_context *ctx = open_lo();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *p = low_mapped(pg);
	struct ibv_mr *mr;

	REQUIRE(pd);
	errno = 0;
	CHECK(ibv_reg_mr(pd, p - pg, 2 * pg, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EFAULT);
	errno = 0;
	CHECK(ibv_reg_mr(pd, p - 1, 2, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EFAULT);
	errno = 0;
	CHECK(ibv_reg_mr_iova(pd, p - 8, 16, 0x1000, IBV_ACCESS_LOCAL_WRITE) == NULL &&
	      errno == EFAULT);
	errno = 0;
	CHECK(ibv_reg_mr_iova2(pd, p - pg, 3 * pg, 0, IBV_ACCESS_LOCAL_WRITE) == NULL &&
	      errno == EFAULT);
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, 64, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EFAULT);
	/* Length 0 is EINVAL, as siw's reg_user_mr. */
	errno = 0;
	CHECK(ibv_reg_mr(pd, p, 0, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE) == NULL &&
	      errno == EOPNOTSUPP);
	/* The mapped pages register; a translation that leaves them does not. */
	REQUIRE((mr = ibv_reg_mr(pd, p + 1, 2 * pg - 1, IBV_ACCESS_LOCAL_WRITE)));
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, p - 8, 2 * pg, 0) ==
		      IBV_REREG_MR_ERR_CMD &&
	      errno == EFAULT);
	CHECK(mr->addr == p + 1 && mr->length == (size_t)(2 * pg - 1));
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, p + pg, pg, 0) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	munmap(p, 2 * pg);
	return failures;
}

/* rdma_reg_msgs goes through ibv_reg_mr: EFAULT for an unmapped range. */
static void reg_msgs_unmapped(struct side *sd)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *p = low_mapped(pg);

	errno = 0;
	CHECK(rdma_reg_msgs(sd->id, p - pg, 2 * pg) == NULL && errno == EFAULT);
	munmap(p, 2 * pg);
}

/* The second pair still moves data both ways. */
static void still_works(struct pair *p)
{
	uint32_t lk = p->c.mr->lkey, rk = p->s.mr->rkey;

	memset(p->c.buf, 0x5a, 4096);
	post_recv(&p->s, 70, p->s.buf + 8192, 4096, p->s.mr->lkey);
	post(&p->c, 71, IBV_WR_RDMA_WRITE, p->c.buf, 4096, lk, p->s.buf, rk);
	post(&p->c, 72, IBV_WR_SEND, p->c.buf, 4096, lk, NULL, 0);
	expect_wc(&p->c, 71, IBV_WC_SUCCESS, IBV_WC_SUCCESS);
	expect_wc(&p->c, 72, IBV_WC_SUCCESS, IBV_WC_SUCCESS);
	expect_wc(&p->s, 70, IBV_WC_SUCCESS, IBV_WC_SUCCESS);
	CHECK(memcmp(p->s.buf, p->c.buf, 4096) == 0);
	CHECK(memcmp(p->s.buf + 8192, p->c.buf, 4096) == 0);
	post(&p->c, 73, IBV_WR_RDMA_READ, p->c.buf + 16384, 4096, lk, p->s.buf, rk);
	expect_wc(&p->c, 73, IBV_WC_SUCCESS, IBV_WC_SUCCESS);
	CHECK(memcmp(p->c.buf + 16384, p->c.buf, 4096) == 0);
}

static int test_fault(const char *cs, const char *how)
{
	static struct pair a, b;
	struct ibv_mr *mr;
	uint8_t *bad;
	int remote = strncmp(cs, "remote_", 7) == 0;

	connect_pair(&a);
	connect_pair(&b);
	if (strcmp(cs, "remote_write") == 0)
		reg_msgs_unmapped(&a.c);
	/* The target's region for remote cases, the initiator's for local ones. */
	break_region(remote ? &a.s : &a.c, how, &mr, &bad);
	uint32_t key = mr->lkey, lk = a.c.mr->lkey; /* lkey == rkey */

	post_recv(&a.c, 50, a.c.buf, 64, lk);
	if (!strcmp(cs, "remote_send"))
		post_recv(&a.s, 60, bad, REGION, key);
	else
		post_recv(&a.s, 60, a.s.buf, 64, a.s.mr->lkey);

	/* What the initiator's request completes with. */
	/* Write, Send: done once sent (or flushed if the Terminate came first) */
	enum ibv_wc_status st1 = IBV_WC_SUCCESS, st2 = IBV_WC_WR_FLUSH_ERR;
	if (!strcmp(cs, "remote_write"))
		post(&a.c, 1, IBV_WR_RDMA_WRITE, a.c.buf, 8, lk, bad, key);
	else if (!strcmp(cs, "remote_write_big"))
		post(&a.c, 1, IBV_WR_RDMA_WRITE, a.c.buf, REGION, lk, bad, key);
	else if (!strcmp(cs, "remote_send"))
		post(&a.c, 1, IBV_WR_SEND, a.c.buf, 4096, lk, NULL, 0);
	else if (!strcmp(cs, "remote_read") || !strcmp(cs, "remote_atomic")) {
		post(&a.c, 1, cs[7] == 'r' ? IBV_WR_RDMA_READ : IBV_WR_ATOMIC_FETCH_AND_ADD, a.c.buf, 8,
		     lk, bad, key);
		st1 = st2 = IBV_WC_GENERAL_ERR; /* the Terminate: local catastrophic error */
	} else if (!strcmp(cs, "local_send")) {
		post(&a.c, 1, IBV_WR_SEND, bad, 4096, key, NULL, 0);
		st1 = st2 = IBV_WC_LOC_PROT_ERR;
	} else if (!strcmp(cs, "local_read")) {
		post(&a.c, 1, IBV_WR_RDMA_READ, bad, 4096, key, a.s.buf, a.s.mr->rkey);
		st1 = st2 = IBV_WC_LOC_PROT_ERR;
	} else {
		fprintf(stderr, "unknown case %s\n", cs);
		return 2;
	}
	expect_wc(&a.c, 1, st1, st2);

	/* The pair is down: async events, states, flushed receives. */
	struct ibv_context *ctx = a.c.id->verbs;
	CHECK(wait_async(ctx, a.c.qp, IBV_EVENT_QP_FATAL)); /* local error, or the Terminate */
	if (remote || !strcmp(cs, "local_read"))
		CHECK(wait_async(ctx, a.s.qp, IBV_EVENT_QP_FATAL)); /* its error, or the Terminate */
	rdma_ack_cm_event(giw_expect_cm(a.c.ch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	rdma_ack_cm_event(giw_expect_cm(a.s.ch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	CHECK(qp_state(a.c.qp) == IBV_QPS_ERR);
	CHECK(qp_state(a.s.qp) == IBV_QPS_ERR);
	expect_wc(&a.c, 50, IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR);
	expect_wc(&a.s, 60, !strcmp(cs, "remote_send") ? IBV_WC_LOC_PROT_ERR : IBV_WC_WR_FLUSH_ERR,
		  IBV_WC_WR_FLUSH_ERR);

	still_works(&b);
	CHECK(ibv_dereg_mr(mr) == 0);
	if (!strcmp(how, "protnone"))
		munmap(bad, REGION);
	return failures;
}

/* A region whose next page is a guard page (PROT_NONE): a peer's Write and
 * Read that run past the region's end are refused by the bounds check (base
 * or bounds Terminate, QP_ACCESS_ERR), not by a fault on the guard page
 * (which would be a local catastrophic error, QP_FATAL). */
static int test_guard(const char *cs)
{
	static struct pair a, b;
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *p = mmap(NULL, REGION + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;
	int read = !strcmp(cs, "guard_read");

	REQUIRE(p != MAP_FAILED);
	REQUIRE(mprotect(p + REGION, pg, PROT_NONE) == 0);
	memset(p, 0xa5, REGION);
	connect_pair(&a);
	connect_pair(&b);
	REQUIRE((mr = ibv_reg_mr(a.s.pd, p, REGION, ALL_ACCESS)));
	post_recv(&a.c, 50, a.c.buf, 64, a.c.mr->lkey);
	post(&a.c, 1, read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE, a.c.buf, 16, a.c.mr->lkey,
	     p + REGION - 8, mr->rkey);
	if (read)
		expect_wc(&a.c, 1, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR);
	else
		expect_wc(&a.c, 1, IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR);
	struct ibv_context *ctx = a.c.id->verbs;
	CHECK(wait_async(ctx, a.s.qp, IBV_EVENT_QP_ACCESS_ERR));
	CHECK(wait_async(ctx, a.c.qp, IBV_EVENT_QP_ACCESS_ERR));
	rdma_ack_cm_event(giw_expect_cm(a.c.ch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	rdma_ack_cm_event(giw_expect_cm(a.s.ch, RDMA_CM_EVENT_DISCONNECTED, 10000));
	for (int i = 0; i < REGION; i++)
		if (p[i] != 0xa5) {
			CHECK(!"the region was written");
			break;
		}
	still_works(&b);
	CHECK(ibv_dereg_mr(mr) == 0);
	munmap(p, REGION + pg);
	return failures;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "reg"))
		return test_reg();
	if (argc == 2 && !strncmp(argv[1], "guard_", 6))
		return test_guard(argv[1]);
	if (argc == 3 && (!strcmp(argv[2], "munmap") || !strcmp(argv[2], "protnone")))
		return test_fault(argv[1], argv[2]);
	fprintf(stderr, "usage: %s reg | guard_write | guard_read | <case> munmap|protnone\n",
		argv[0]);
	return 2;
}
