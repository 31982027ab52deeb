/* Completions are causal: a request's completion is on its CQ before the
 * completion of the peer's answer to it, as on hardware (the peer could not
 * answer a message it had not received).
 *
 *   causal KIND CQS WAIT N
 *     KIND  send       the request is a signaled Send, the answer a Send
 *           writesend  a signaled Write, then a signaled Send; answer a Send
 *           write      a signaled Write the server sees in its memory
 *                      (it watches it, as ib_write_lat does); answer a Send
 *     CQS   one        one CQ for sends and receives (answer's CQE must come
 *                      after the request's), or two (the request's CQE must
 *                      be on the send CQ once the answer's is on the recv CQ)
 *     WAIT  event      both sides sleep on a completion channel between
 *                      completions (the server in write mode watches memory)
 *           poll       both busy-poll
 *     N     round trips
 *
 * The server is this binary spawned (posix_spawn) with "serve"; the path
 * (TCP or same-host) is the environment's (GOIWARP_SHM). Passes when no
 * answer's completion came before its request's. Prints the count. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

static const char *role = "client";
#define GIW_TEST_ROLE role
#include "giw_test.h"
#include "giw_cm.h"

extern char **environ;

enum kind { K_SEND, K_WRITESEND, K_WRITE };
enum { WR_REQ_WRITE = 1, WR_REQ_SEND, WR_ANSWER, WR_RECV };
#define MSG 64

struct side {
	enum kind kind;
	int twocq, event;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid, *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	uint8_t *buf; /* [0, MSG): receive slot; [MSG, 2 MSG): send slot; [2 MSG, 3 MSG): Write target */
	struct ibv_mr *mr;
	uint64_t raddr;
	uint32_t rkey;
};

static void setup(struct side *s, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
					     .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};

	REQUIRE((s->pd = ibv_alloc_pd(id->verbs)));
	REQUIRE((s->cc = ibv_create_comp_channel(id->verbs)));
	REQUIRE((s->scq = ibv_create_cq(id->verbs, 32, NULL, s->cc, 0)));
	s->rcq = s->scq;
	if (s->twocq)
		REQUIRE((s->rcq = ibv_create_cq(id->verbs, 32, NULL, s->cc, 0)));
	a.send_cq = s->scq;
	a.recv_cq = s->rcq;
	REQUIRE(rdma_create_qp(id, s->pd, &a) == 0);
	s->qp = id->qp;
	REQUIRE((s->buf = aligned_alloc(64, 3 * MSG)));
	memset(s->buf, 0, 3 * MSG);
	REQUIRE((s->mr = ibv_reg_mr(s->pd, s->buf, 3 * MSG,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)));
}

static void post_recv(struct side *s)
{
	struct ibv_sge g = {.addr = (uintptr_t)s->buf, .length = MSG, .lkey = s->mr->lkey};
	struct ibv_recv_wr w = {.wr_id = WR_RECV, .sg_list = &g, .num_sge = 1}, *bad;

	REQUIRE(ibv_post_recv(s->qp, &w, &bad) == 0);
}

static void post(struct side *s, uint64_t wrid, enum ibv_wr_opcode op, uint64_t seq)
{
	uint8_t *src = s->buf + MSG;
	struct ibv_sge g = {.addr = (uintptr_t)src, .length = sizeof seq, .lkey = s->mr->lkey};
	struct ibv_send_wr w = {.wr_id = wrid, .sg_list = &g, .num_sge = 1, .opcode = op,
				.send_flags = IBV_SEND_SIGNALED}, *bad;

	memcpy(src, &seq, sizeof seq);
	w.wr.rdma.remote_addr = s->raddr + 2 * MSG;
	w.wr.rdma.rkey = s->rkey;
	REQUIRE(ibv_post_send(s->qp, &w, &bad) == 0);
}

/* Next completions of cq (up to n), sleeping on the channel in event mode. */
static int next_wcs(struct side *s, struct ibv_cq *cq, struct ibv_wc *wc, int n, int wait)
{
	int got = ibv_poll_cq(cq, n, wc);

	REQUIRE(got >= 0);
	if (got > 0 || !wait || !s->event)
		return got;
	REQUIRE(ibv_req_notify_cq(cq, 0) == 0);
	got = ibv_poll_cq(cq, n, wc); /* what came before the arm */
	if (got != 0)
		return got;
	struct ibv_cq *ev_cq;
	void *ctx;
	REQUIRE(ibv_get_cq_event(s->cc, &ev_cq, &ctx) == 0);
	ibv_ack_cq_events(ev_cq, 1);
	return ibv_poll_cq(cq, n, wc);
}

static void ok_wc(const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "[%s] completion of wr %llu: %s\n", role, (unsigned long long)wc->wr_id,
			ibv_wc_status_str(wc->status));
		exit(1);
	}
}

/* ---- server: answer each request with a Send ----------------------------- */
/* Reaps the server's completions, sleeping in event mode if wait; returns
 * the requests received. */
static int server_reap(struct side *s, int wait)
{
	struct ibv_wc wc[4];
	int recvs = 0, n;

	if (s->twocq) {
		while ((n = ibv_poll_cq(s->scq, 4, wc)) > 0)
			for (int i = 0; i < n; i++)
				ok_wc(&wc[i]);
		REQUIRE(n == 0);
	}
	n = next_wcs(s, s->rcq, wc, 4, wait);
	for (int i = 0; i < n; i++) {
		ok_wc(&wc[i]);
		recvs += wc[i].opcode == IBV_WC_RECV;
	}
	return recvs;
}

static int serve(int fd, enum kind kind, int twocq, int event, long rounds)
{
	struct side s = {.kind = kind, .twocq = twocq, .event = event};
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	struct sockaddr_in sa;
	struct rdma_cm_event *ev;

	role = "server";
	giw_sin_lo(0, &sa);
	REQUIRE((s.ch = rdma_create_event_channel()));
	REQUIRE(rdma_create_id(s.ch, &s.lid, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_bind_addr(s.lid, (struct sockaddr *)&sa) == 0);
	REQUIRE(rdma_listen(s.lid, 1) == 0);
	uint16_t p = ntohs(rdma_get_src_port(s.lid));
	REQUIRE(write(fd, &p, sizeof p) == sizeof p);
	ev = giw_expect_cm(s.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	s.id = ev->id;
	rdma_ack_cm_event(ev);
	setup(&s, s.id);
	post_recv(&s);
	REQUIRE(rdma_accept(s.id, &cp) == 0);
	rdma_ack_cm_event(giw_expect_cm(s.ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	uint64_t m[2] = {(uintptr_t)s.buf, s.mr->rkey};
	REQUIRE(write(fd, m, sizeof m) == sizeof m);

	volatile uint64_t *target = (volatile uint64_t *)(s.buf + 2 * MSG);
	int pending = 0; /* requests received, not yet answered */
	for (long r = 0; r < rounds; r++) {
		if (kind == K_WRITE) {
			while (*target != (uint64_t)r + 1)
				server_reap(&s, 0);
		} else {
			while (!pending)
				pending += server_reap(&s, 1);
			pending--;
			post_recv(&s);
		}
		post(&s, WR_ANSWER, IBV_WR_SEND, (uint64_t)r);
	}
	/* The client disconnects once it has every answer. */
	while (!(ev = NULL) && rdma_get_cm_event(s.ch, &ev) == 0) {
		int done = ev->event == RDMA_CM_EVENT_DISCONNECTED;
		rdma_ack_cm_event(ev);
		if (done)
			break;
	}
	return 0;
}

/* ---- client: count answers completed before their requests --------------- */
static int client(const char *self, enum kind kind, int twocq, int event, long rounds,
		  const char *kname, const char *cqs, const char *wait)
{
	struct side s = {.kind = kind, .twocq = twocq, .event = event};
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1};
	int sv[2], status;
	char fdarg[16], nbuf[32];
	pid_t pid;
	uint16_t port;
	uint64_t m[2];
	long reversed = 0;
	double t0;

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	snprintf(fdarg, sizeof fdarg, "%d", sv[1]);
	snprintf(nbuf, sizeof nbuf, "%ld", rounds);
	char *argv[] = {(char *)self, "serve", fdarg, (char *)kname, (char *)cqs, (char *)wait, nbuf, NULL};
	REQUIRE(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0);
	close(sv[1]);
	REQUIRE(read(sv[0], &port, sizeof port) == sizeof port);

	REQUIRE((s.ch = rdma_create_event_channel()));
	s.id = giw_resolve_lo(s.ch, port);
	setup(&s, s.id);
	REQUIRE(rdma_connect(s.id, &cp) == 0);
	rdma_ack_cm_event(giw_expect_cm(s.ch, RDMA_CM_EVENT_ESTABLISHED, 10000));
	REQUIRE(read(sv[0], m, sizeof m) == sizeof m);
	s.raddr = m[0];
	s.rkey = (uint32_t)m[1];

	int want = kind == K_WRITESEND ? 2 : 1; /* request completions per round */
	t0 = giw_now();
	for (long r = 0; r < rounds; r++) {
		int reqs = 0, answered = 0;
		struct ibv_wc wc[4];

		post_recv(&s);
		if (kind != K_SEND)
			post(&s, WR_REQ_WRITE, IBV_WR_RDMA_WRITE, (uint64_t)r + 1);
		if (kind != K_WRITE)
			post(&s, WR_REQ_SEND, IBV_WR_SEND, (uint64_t)r);
		while (!answered || reqs < want) {
			/* Two CQs: the request's completion first, without sleeping
			 * while it may still come; then the answer's. */
			if (twocq) {
				int n = next_wcs(&s, s.scq, wc, 4, answered);
				for (int i = 0; i < n; i++, reqs++)
					ok_wc(&wc[i]);
				if (answered)
					continue;
				n = next_wcs(&s, s.rcq, wc, 4, reqs == want);
				if (n == 0)
					continue;
				ok_wc(&wc[0]);
				answered = 1;
				/* The request's completion must be there now. */
				while ((n = ibv_poll_cq(s.scq, 4, wc)) > 0)
					for (int i = 0; i < n; i++, reqs++)
						ok_wc(&wc[i]);
				if (reqs < want)
					reversed++;
				continue;
			}
			int n = next_wcs(&s, s.scq, wc, 4, 1);
			for (int i = 0; i < n; i++) {
				ok_wc(&wc[i]);
				if (wc[i].opcode == IBV_WC_RECV) {
					if (reqs < want)
						reversed++;
					answered = 1;
				} else {
					reqs++;
				}
			}
		}
	}
	double secs = giw_now() - t0;
	rdma_disconnect(s.id);
	REQUIRE(waitpid(pid, &status, 0) == pid);
	printf("causal %s %s %s (GOIWARP_SHM=%s): %ld round trips in %.2f s (%.1f us each), "
	       "%ld answers completed before their request\n",
	       kname, cqs, wait, getenv("GOIWARP_SHM") ? getenv("GOIWARP_SHM") : "default", rounds, secs,
	       secs / (double)rounds * 1e6, reversed);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(reversed == 0);
	return failures ? 1 : 0;
}

static int parse(const char *k, const char *c, const char *w, enum kind *kind, int *twocq, int *event)
{
	if (strcmp(k, "send") == 0)
		*kind = K_SEND;
	else if (strcmp(k, "writesend") == 0)
		*kind = K_WRITESEND;
	else if (strcmp(k, "write") == 0)
		*kind = K_WRITE;
	else
		return -1;
	if (strcmp(c, "one") != 0 && strcmp(c, "two") != 0)
		return -1;
	if (strcmp(w, "event") != 0 && strcmp(w, "poll") != 0)
		return -1;
	*twocq = strcmp(c, "two") == 0;
	*event = strcmp(w, "event") == 0;
	return 0;
}

int main(int argc, char **argv)
{
	enum kind kind;
	int twocq, event;

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc == 7 && strcmp(argv[1], "serve") == 0 &&
	    parse(argv[3], argv[4], argv[5], &kind, &twocq, &event) == 0)
		return serve(atoi(argv[2]), kind, twocq, event, atol(argv[6]));
	if (argc == 5 && parse(argv[1], argv[2], argv[3], &kind, &twocq, &event) == 0 && atol(argv[4]) > 0)
		return client("/proc/self/exe", kind, twocq, event, atol(argv[4]), argv[1], argv[2], argv[3]);
	fprintf(stderr, "usage: causal send|writesend|write one|two event|poll ROUNDS\n");
	return 2;
}
