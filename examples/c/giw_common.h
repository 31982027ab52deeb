/*
 * giw_common.h: what the goiwarp example programs share (giw_perf.h and
 * giw_ping.c). Header-only, every function static inline: the examples' CMake
 * glob builds each .c file of examples/c as its own program.
 *
 * Connections are set up with librdmacm (event channel, listen/connect/accept);
 * the private data of connect and accept carries a struct giw_info: the test
 * parameters (client to server) and where each side's buffer and control
 * block live (address + rkey), so the peers can RDMA-write/read each other.
 *
 * The control block (struct giw_ctrl) is a small remotely writable region per
 * connection. Barriers and counts travel as RDMA writes into it
 * ({arg, seq, chk}); the receiver of a send test returns receive credits the
 * same way ({credit, ~credit}). Readers accept a value only when its check
 * word matches, so a torn read is simply read again.
 */
#ifndef GIW_COMMON_H
#define GIW_COMMON_H

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define GIW_MAGIC 0x67697770u /* "giwp" */
#define GIW_VERSION 1
#define GIW_DEFAULT_DEV "giw_lo"
#define GIW_DEFAULT_PORT 18515
#define GIW_CTRL_SLOTS 64
#define GIW_CTRL_TAG (1ull << 63)
#define GIW_CM_TIMEOUT_MS 10000
#define GIW_CONNECT_TRIES 50 /* 100 ms apart: the server may start late */

static const char *giw_prog = "giw";

__attribute__((format(printf, 1, 2), noreturn)) static inline void giw_die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", giw_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stdout);
	exit(1);
}

static inline double giw_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t giw_parse_size(const char *s, const char *what)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s)
		giw_die("bad %s '%s'", what, s);
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end)
		giw_die("bad %s '%s'", what, s);
	return v;
}

/* What connect/accept private data carries, big-endian on the wire. */
struct giw_info {
	uint32_t magic;
	uint16_t version;
	uint8_t test; /* program id: both ends must run the same test */
	uint8_t flags;
	uint32_t nqp;
	uint32_t tx_depth;
	uint32_t rx_depth;
	uint32_t qp_index;
	uint64_t size; /* 0: all sizes (-a) */
	uint64_t iters;
	uint32_t duration;
	uint32_t buf_rkey;
	uint64_t buf_addr;
	uint64_t buf_len;
	uint64_t ctrl_addr;
	uint32_t ctrl_rkey;
	uint32_t pad;
};

static inline void giw_info_swap(struct giw_info *d, const struct giw_info *s, int to_wire)
{
	(void)to_wire; /* byte swapping is its own inverse */
	d->magic = htobe32(s->magic);
	d->version = htobe16(s->version);
	d->test = s->test;
	d->flags = s->flags;
	d->nqp = htobe32(s->nqp);
	d->tx_depth = htobe32(s->tx_depth);
	d->rx_depth = htobe32(s->rx_depth);
	d->qp_index = htobe32(s->qp_index);
	d->size = htobe64(s->size);
	d->iters = htobe64(s->iters);
	d->duration = htobe32(s->duration);
	d->buf_rkey = htobe32(s->buf_rkey);
	d->buf_addr = htobe64(s->buf_addr);
	d->buf_len = htobe64(s->buf_len);
	d->ctrl_addr = htobe64(s->ctrl_addr);
	d->ctrl_rkey = htobe32(s->ctrl_rkey);
	d->pad = 0;
}

/* One 64-byte slot: slot 0 of a connection's control region is written by the
 * peer; slots 1..GIW_CTRL_SLOTS are sources of our own control writes. */
struct giw_ctrl {
	uint64_t arg, seq, chk; /* barrier / count */
	uint64_t credit, credit_chk; /* receive credits (send tests) */
	uint64_t pad[3];
};
#define GIW_CHK(a, s) ((a) ^ (s) ^ 0x5a5aa5a5c3c33c3cull)

struct giw_conn {
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	char *buf;
	size_t buf_len;
	struct ibv_mr *mr;
	struct giw_ctrl *ctrl; /* GIW_CTRL_SLOTS + 1 slots */
	struct ibv_mr *ctrl_mr;
	struct giw_info peer; /* host order */
	unsigned slot;
	int ctrl_out; /* control writes not completed yet */
	uint64_t scnt, ccnt; /* data WRs posted / completed (cumulative) */
	uint64_t target; /* scnt to reach in this phase */
	uint64_t rcnt; /* receives completed (cumulative) */
	uint64_t reposted, credit_sent, credit_seen;
	uint64_t seen_seq, seen_arg;
};

struct giw_qp_caps {
	uint32_t max_send_wr, max_recv_wr;
	uint32_t prepost; /* receives to post before connect/accept */
	uint32_t recv_len; /* each one covers buf[0, recv_len) */
};

/* Completions polled from a shared CQ for the other kind of poller. */
struct giw_wcq {
	struct ibv_wc *wc;
	int head, n, cap;
};

struct giw_ctx {
	const char *dev;
	int port;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen;
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq; /* the same CQ with shared_cq */
	int scq_size, rcq_size;
	int shared_cq; /* one CQ for both queues, as perftest's write tests */
	struct giw_wcq pend[2]; /* shared_cq: [0] send, [1] receive completions */
	uint8_t rd_atom;
	int nconn;
	struct giw_conn *conns;
	double last_cm_check;
	int closing; /* teardown: flushed control writes are expected */
	int last_status; /* status of the last CM event giw_cm_wait returned as bad */
};

static inline const char *giw_test_name(unsigned id)
{
	static const char *names[] = {"?", "giw_write_bw", "giw_write_lat", "giw_read_bw", "giw_read_lat",
				      "giw_send_bw", "giw_send_lat", "?", "?", "?", "giw_ping"};
	return id < sizeof(names) / sizeof(names[0]) ? names[id] : "?";
}

static inline uint64_t giw_wrid(int idx, uint64_t cnt) { return ((uint64_t)idx << 48) | cnt; }

static inline struct rdma_cm_event *giw_cm_get(struct giw_ctx *x, int timeout_ms)
{
	struct pollfd p = {.fd = x->ch->fd, .events = POLLIN};
	int r = poll(&p, 1, timeout_ms);
	if (r < 0)
		giw_die("poll on the CM event channel: %s", strerror(errno));
	if (r == 0)
		return NULL;
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(x->ch, &ev))
		giw_die("rdma_get_cm_event: %s", strerror(errno));
	return ev;
}

/* Waits for one event of type want (on id, when id != NULL). Any other event
 * is fatal, except that REJECTED/UNREACHABLE/CONNECT_ERROR are returned to the
 * caller when it passes bad != NULL. The event is acked (private data copied
 * into pd_out first). */
static inline int giw_cm_wait(struct giw_ctx *x, enum rdma_cm_event_type want, struct rdma_cm_id **id_out,
			      void *pd_out, size_t pd_len, int *bad)
{
	struct rdma_cm_event *ev = giw_cm_get(x, GIW_CM_TIMEOUT_MS);
	if (!ev)
		giw_die("timed out after %d s waiting for %s", GIW_CM_TIMEOUT_MS / 1000, rdma_event_str(want));
	enum rdma_cm_event_type t = ev->event;
	int status = ev->status;
	if (t == want) {
		if (id_out)
			*id_out = ev->id;
		if (pd_out) {
			memset(pd_out, 0, pd_len);
			size_t n = ev->param.conn.private_data_len;
			if (!ev->param.conn.private_data || n < pd_len)
				giw_die("%s: private data too short (%zu bytes, need %zu)", rdma_event_str(t), n, pd_len);
			memcpy(pd_out, ev->param.conn.private_data, pd_len);
		}
		rdma_ack_cm_event(ev);
		return 0;
	}
	/* a giw server's own reject carries "giw!" */
	int ours = t == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data &&
		   ev->param.conn.private_data_len >= 4 && memcmp(ev->param.conn.private_data, "giw!", 4) == 0;
	rdma_ack_cm_event(ev);
	if (bad && (t == RDMA_CM_EVENT_REJECTED || t == RDMA_CM_EVENT_UNREACHABLE ||
		    t == RDMA_CM_EVENT_CONNECT_ERROR || t == RDMA_CM_EVENT_ADDR_ERROR ||
		    t == RDMA_CM_EVENT_ROUTE_ERROR)) {
		*bad = t;
		x->last_status = ours ? 1 : status;
		return -1;
	}
	giw_die("waiting for %s got %s (status %d%s%s)", rdma_event_str(want), rdma_event_str(t), status,
		status < 0 ? ": " : "", status < 0 ? strerror(-status) : "");
}

/* Between busy-poll iterations, at most every 100 ms: a peer that went away
 * shows up as a CM event; stop instead of spinning forever. */
static inline void giw_cm_check(struct giw_ctx *x, double now)
{
	if (now - x->last_cm_check < 0.1)
		return;
	x->last_cm_check = now;
	struct rdma_cm_event *ev = giw_cm_get(x, 0);
	if (!ev)
		return;
	enum rdma_cm_event_type t = ev->event;
	rdma_ack_cm_event(ev);
	giw_die("unexpected CM event %s during the test (peer gone?)", rdma_event_str(t));
}

static inline void giw_open_resources(struct giw_ctx *x, struct ibv_context *verbs)
{
	if (!verbs)
		giw_die("CM id has no device (is the address on an RDMA device?)");
	const char *name = ibv_get_device_name(verbs->device);
	if (strcmp(name, x->dev) != 0)
		giw_die("the connection runs on device %s, not %s (-d); use an address of %s", name, x->dev, x->dev);
	if (x->verbs) {
		if (x->verbs != verbs)
			giw_die("connections on different device contexts");
		return;
	}
	x->verbs = verbs;
	struct ibv_device_attr da;
	int r = ibv_query_device(verbs, &da);
	if (r)
		giw_die("ibv_query_device(%s): %s", name, strerror(r));
	if (x->scq_size > da.max_cqe || x->rcq_size > da.max_cqe)
		giw_die("CQ of %d entries exceeds device max_cqe %d (lower -t/-r/-q)",
			x->scq_size > x->rcq_size ? x->scq_size : x->rcq_size, da.max_cqe);
	x->rd_atom = da.max_qp_rd_atom > 255 ? 255 : (uint8_t)da.max_qp_rd_atom;
	x->pd = ibv_alloc_pd(verbs);
	if (!x->pd)
		giw_die("ibv_alloc_pd: %s", strerror(errno));
	if (x->shared_cq) {
		int n = x->scq_size + x->rcq_size;
		x->scq = x->rcq = ibv_create_cq(verbs, n, NULL, NULL, 0);
		if (!x->scq)
			giw_die("ibv_create_cq(%d): %s", n, strerror(errno));
		for (int k = 0; k < 2; k++) {
			x->pend[k].cap = n;
			x->pend[k].wc = calloc((size_t)n, sizeof(struct ibv_wc));
			if (!x->pend[k].wc)
				giw_die("out of memory");
		}
		return;
	}
	x->scq = ibv_create_cq(verbs, x->scq_size, NULL, NULL, 0);
	if (!x->scq)
		giw_die("ibv_create_cq(%d): %s", x->scq_size, strerror(errno));
	x->rcq = ibv_create_cq(verbs, x->rcq_size, NULL, NULL, 0);
	if (!x->rcq)
		giw_die("ibv_create_cq(%d): %s", x->rcq_size, strerror(errno));
}

/* Polls up to max send (recv 0) or receive (recv 1) completions. With a
 * shared CQ each poll sorts what it finds by opcode and keeps the other
 * kind's completions for their poller; at most a CQ's worth are pending. */
static inline int giw_poll(struct giw_ctx *x, int recv, int max, struct ibv_wc *out)
{
	if (!x->shared_cq)
		return ibv_poll_cq(recv ? x->rcq : x->scq, max, out);
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(x->scq, 16, wc);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		struct giw_wcq *q = &x->pend[(wc[i].opcode & IBV_WC_RECV) != 0];
		if (q->n == q->cap)
			giw_die("shared CQ: more completions pending than the CQ holds");
		q->wc[(q->head + q->n++) % q->cap] = wc[i];
	}
	struct giw_wcq *q = &x->pend[recv != 0];
	int k = 0;
	for (; k < max && q->n > 0; k++, q->n--) {
		out[k] = q->wc[q->head];
		q->head = (q->head + 1) % q->cap;
	}
	return k;
}

static inline void giw_conn_buffers(struct giw_ctx *x, struct giw_conn *c, size_t buf_len)
{
	if (c->mr)
		return;
	long pg = sysconf(_SC_PAGESIZE);
	c->buf_len = buf_len;
	if (posix_memalign((void **)&c->buf, (size_t)pg, (buf_len + (size_t)pg - 1) / (size_t)pg * (size_t)pg))
		giw_die("out of memory for a %zu-byte buffer", buf_len);
	memset(c->buf, 0, buf_len);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	c->mr = ibv_reg_mr(x->pd, c->buf, buf_len, acc);
	if (!c->mr)
		giw_die("ibv_reg_mr(%zu bytes): %s", buf_len, strerror(errno));
	size_t cl = sizeof(struct giw_ctrl) * (GIW_CTRL_SLOTS + 1);
	if (posix_memalign((void **)&c->ctrl, 64, cl))
		giw_die("out of memory");
	memset(c->ctrl, 0, cl);
	c->ctrl_mr = ibv_reg_mr(x->pd, c->ctrl, cl, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!c->ctrl_mr)
		giw_die("ibv_reg_mr(control): %s", strerror(errno));
}

static inline void giw_post_recv(struct giw_conn *c, int idx, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)c->buf, .length = len, .lkey = c->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = giw_wrid(idx, 0), .sg_list = &sge, .num_sge = 1}, *bad;
	int r = ibv_post_recv(c->qp, &wr, &bad);
	if (r)
		giw_die("ibv_post_recv: %s", strerror(r));
}

static inline void giw_create_qp(struct giw_ctx *x, struct giw_conn *c, int idx, const struct giw_qp_caps *caps)
{
	struct ibv_qp_init_attr a = {
		.send_cq = x->scq,
		.recv_cq = x->rcq,
		.cap = {.max_send_wr = caps->max_send_wr, .max_recv_wr = caps->max_recv_wr,
			.max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	if (rdma_create_qp(c->id, x->pd, &a))
		giw_die("rdma_create_qp(send %u, recv %u): %s", caps->max_send_wr, caps->max_recv_wr, strerror(errno));
	c->qp = c->id->qp;
	for (uint32_t i = 0; i < caps->prepost; i++)
		giw_post_recv(c, idx, caps->recv_len);
}

static inline void giw_fill_info(struct giw_info *wire, const struct giw_info *tmpl, struct giw_conn *c, int idx)
{
	struct giw_info h = *tmpl;
	h.magic = GIW_MAGIC;
	h.version = GIW_VERSION;
	h.qp_index = (uint32_t)idx;
	h.buf_addr = (uintptr_t)c->buf;
	h.buf_rkey = c->mr->rkey;
	h.buf_len = c->buf_len;
	h.ctrl_addr = (uintptr_t)c->ctrl;
	h.ctrl_rkey = c->ctrl_mr->rkey;
	giw_info_swap(wire, &h, 1);
}

static inline void giw_check_info(const struct giw_info *p, uint8_t test)
{
	if (p->magic != GIW_MAGIC || p->version != GIW_VERSION)
		giw_die("peer is not a giw_* program of this version (magic %#x version %u)", p->magic, p->version);
	if (p->test != test)
		giw_die("peer runs %s, we are %s: start the same program on both ends", giw_test_name(p->test),
			giw_test_name(test));
}

static inline void giw_server_listen(struct giw_ctx *x, int backlog)
{
	x->ch = rdma_create_event_channel();
	if (!x->ch)
		giw_die("rdma_create_event_channel: %s", strerror(errno));
	if (rdma_create_id(x->ch, &x->listen, NULL, RDMA_PS_TCP))
		giw_die("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)x->port)};
	sin.sin_addr.s_addr = htonl(INADDR_ANY);
	if (rdma_bind_addr(x->listen, (struct sockaddr *)&sin))
		giw_die("rdma_bind_addr(0.0.0.0:%d): %s", x->port, strerror(errno));
	if (rdma_listen(x->listen, backlog))
		giw_die("rdma_listen(port %d): %s", x->port, strerror(errno));
}

/* Next connect request; its info (host order) in *peer. */
static inline struct rdma_cm_id *giw_server_request(struct giw_ctx *x, struct giw_info *peer)
{
	struct rdma_cm_id *id;
	struct giw_info w;
	struct rdma_cm_event *ev;
	while (!(ev = giw_cm_get(x, 1000)))
		;
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		enum rdma_cm_event_type t = ev->event;
		rdma_ack_cm_event(ev);
		giw_die("waiting for a connection got %s", rdma_event_str(t));
	}
	id = ev->id;
	size_t n = ev->param.conn.private_data_len;
	if (!ev->param.conn.private_data || n < sizeof(w)) {
		rdma_ack_cm_event(ev);
		rdma_reject(id, "giw!", 4);
		giw_die("connect request without giw private data (%zu bytes): peer is not a giw_* program", n);
	}
	memcpy(&w, ev->param.conn.private_data, sizeof(w));
	rdma_ack_cm_event(ev);
	giw_info_swap(peer, &w, 0);
	return id;
}

static inline void giw_server_accept(struct giw_ctx *x, int idx, struct rdma_cm_id *id, const struct giw_info *peer,
				     size_t buf_len, const struct giw_qp_caps *caps, const struct giw_info *tmpl)
{
	struct giw_conn *c = &x->conns[idx];
	c->id = id;
	c->peer = *peer;
	giw_open_resources(x, id->verbs);
	giw_conn_buffers(x, c, buf_len);
	giw_create_qp(x, c, idx, caps);
	struct giw_info w;
	giw_fill_info(&w, tmpl, c, idx);
	struct rdma_conn_param cp = {.private_data = &w, .private_data_len = sizeof(w),
				     .responder_resources = x->rd_atom, .initiator_depth = x->rd_atom};
	if (rdma_accept(id, &cp))
		giw_die("rdma_accept: %s", strerror(errno));
	giw_cm_wait(x, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL, 0, NULL);
}

static inline void giw_client_connect(struct giw_ctx *x, int idx, const char *host, size_t buf_len,
				      const struct giw_qp_caps *caps, const struct giw_info *tmpl, uint8_t test)
{
	struct giw_conn *c = &x->conns[idx];
	if (!x->ch && !(x->ch = rdma_create_event_channel()))
		giw_die("rdma_create_event_channel: %s", strerror(errno));
	char port[16];
	snprintf(port, sizeof(port), "%d", x->port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
	int r = getaddrinfo(host, port, &hints, &res);
	if (r)
		giw_die("%s: %s", host, gai_strerror(r));
	for (int tries = 1;; tries++) {
		int bad = 0;
		if (rdma_create_id(x->ch, &c->id, NULL, RDMA_PS_TCP))
			giw_die("rdma_create_id: %s", strerror(errno));
		if (rdma_resolve_addr(c->id, NULL, res->ai_addr, 2000))
			giw_die("rdma_resolve_addr(%s): %s", host, strerror(errno));
		if (giw_cm_wait(x, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL, 0, &bad))
			giw_die("resolving %s: %s", host, rdma_event_str(bad));
		if (rdma_resolve_route(c->id, 2000))
			giw_die("rdma_resolve_route: %s", strerror(errno));
		if (giw_cm_wait(x, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL, 0, &bad))
			giw_die("route to %s: %s", host, rdma_event_str(bad));
		giw_open_resources(x, c->id->verbs);
		giw_conn_buffers(x, c, buf_len);
		giw_create_qp(x, c, idx, caps);
		struct giw_info w, pw;
		giw_fill_info(&w, tmpl, c, idx);
		struct rdma_conn_param cp = {.private_data = &w, .private_data_len = sizeof(w),
					     .responder_resources = x->rd_atom, .initiator_depth = x->rd_atom,
					     .retry_count = 7, .rnr_retry_count = 7};
		if (rdma_connect(c->id, &cp))
			giw_die("rdma_connect: %s", strerror(errno));
		if (giw_cm_wait(x, RDMA_CM_EVENT_ESTABLISHED, NULL, &pw, sizeof(pw), &bad) == 0) {
			giw_info_swap(&c->peer, &pw, 0);
			giw_check_info(&c->peer, test);
			break;
		}
		rdma_destroy_qp(c->id);
		c->qp = NULL;
		if (rdma_destroy_id(c->id))
			giw_die("rdma_destroy_id: %s", strerror(errno));
		c->id = NULL;
		if (bad == RDMA_CM_EVENT_REJECTED && x->last_status == 1)
			giw_die("connecting to %s port %d: the server rejected us: is it a %s server?", host, x->port,
				giw_test_name(test));
		if (idx > 0 || tries >= GIW_CONNECT_TRIES)
			giw_die("connecting to %s port %d: %s, status %d (%d tries in %.1f s)", host, x->port,
				rdma_event_str(bad), x->last_status, tries, GIW_CONNECT_TRIES * 0.1);
		usleep(100000);
	}
	freeaddrinfo(res);
}

/* A completion of a QP we destroyed (a connect attempt that was refused):
 * goiwarp leaves the flushed receives of a destroyed QP in the CQ. */
static inline int giw_stale(struct giw_ctx *x, const struct ibv_wc *wc)
{
	for (int i = 0; i < x->nconn; i++)
		if (x->conns[i].qp && x->conns[i].qp->qp_num == wc->qp_num)
			return 0;
	return 1;
}

/* Takes one completion of the recv CQ into *wc: 1, or 0 when there is none
 * (or only a stale one). Any error status is fatal. */
static inline int giw_poll_recv_one(struct giw_ctx *x, struct ibv_wc *wc)
{
	int n = giw_poll(x, 1, 1, wc);
	if (n < 0)
		giw_die("ibv_poll_cq(recv): %d", n);
	if (n == 0 || giw_stale(x, wc))
		return 0;
	if (wc->status != IBV_WC_SUCCESS)
		giw_die("recv CQ: completion error: %s (status %d, vendor_err %#x)", ibv_wc_status_str(wc->status),
			wc->status, wc->vendor_err);
	return 1;
}

/* Retires completions of the send CQ; data WRs update ccnt from their wr_id,
 * control writes ctrl_out. Any error status is fatal. */
static inline int giw_poll_send(struct giw_ctx *x)
{
	struct ibv_wc wc[16];
	int n = giw_poll(x, 0, 16, wc);
	if (n < 0)
		giw_die("ibv_poll_cq(send): %d", n);
	for (int i = 0; i < n; i++) {
		uint64_t id = wc[i].wr_id;
		int idx = (int)((id >> 48) & 0x7fff);
		if (giw_stale(x, &wc[i]))
			continue;
		if (idx >= x->nconn)
			giw_die("send CQ: bad wr_id %#llx", (unsigned long long)id);
		if (wc[i].status == IBV_WC_WR_FLUSH_ERR && x->closing && (id & GIW_CTRL_TAG)) {
			/* our last control write, already seen by the peer, which
			 * disconnected before its completion was generated */
			x->conns[idx].ctrl_out--;
			continue;
		}
		if (wc[i].status != IBV_WC_SUCCESS)
			giw_die("send CQ: completion error on QP %d: %s (status %d, opcode %d, vendor_err %#x)", idx,
				ibv_wc_status_str(wc[i].status), wc[i].status, wc[i].opcode, wc[i].vendor_err);
		if (id & GIW_CTRL_TAG)
			x->conns[idx].ctrl_out--;
		else
			x->conns[idx].ccnt = id & 0xffffffffffffull;
	}
	return n;
}

/* RDMA-writes len bytes of src (already filled in a fresh source slot) to
 * offset off of the peer's control block. */
static inline void giw_ctrl_write(struct giw_ctx *x, int idx, struct giw_ctrl *src, size_t off, uint32_t len)
{
	struct giw_conn *c = &x->conns[idx];
	struct ibv_sge sge = {.addr = (uintptr_t)src + off, .length = len, .lkey = c->ctrl_mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = GIW_CTRL_TAG | giw_wrid(idx, 0),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = c->peer.ctrl_addr + off, .rkey = c->peer.ctrl_rkey},
	}, *bad;
	int r = ibv_post_send(c->qp, &wr, &bad);
	if (r)
		giw_die("ibv_post_send(control write): %s", strerror(r));
	c->ctrl_out++;
}

static inline struct giw_ctrl *giw_ctrl_slot(struct giw_ctx *x, int idx)
{
	struct giw_conn *c = &x->conns[idx];
	while (c->ctrl_out >= GIW_CTRL_SLOTS / 2)
		giw_poll_send(x);
	return &c->ctrl[1 + (c->slot++ % GIW_CTRL_SLOTS)];
}

static inline void giw_ctrl_post(struct giw_ctx *x, int idx, uint64_t seq, uint64_t arg)
{
	struct giw_ctrl *s = giw_ctrl_slot(x, idx);
	s->arg = arg;
	s->seq = seq;
	s->chk = GIW_CHK(arg, seq);
	giw_ctrl_write(x, idx, s, 0, 3 * sizeof(uint64_t));
}

static inline void giw_credit_post(struct giw_ctx *x, int idx, uint64_t credit)
{
	struct giw_ctrl *s = giw_ctrl_slot(x, idx);
	s->credit = credit;
	s->credit_chk = ~credit;
	giw_ctrl_write(x, idx, s, offsetof(struct giw_ctrl, credit), 2 * sizeof(uint64_t));
	x->conns[idx].credit_sent = credit;
}

static inline uint64_t giw_load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

/* Has the peer's control write with sequence >= seq arrived? Sets seen_arg. */
static inline int giw_ctrl_seen(struct giw_conn *c, uint64_t seq)
{
	if (c->seen_seq >= seq)
		return 1;
	uint64_t s = giw_load(&c->ctrl[0].seq);
	if (s < seq)
		return 0;
	uint64_t a = giw_load(&c->ctrl[0].arg), k = giw_load(&c->ctrl[0].chk);
	if (giw_load(&c->ctrl[0].seq) != s || k != GIW_CHK(a, s))
		return 0; /* torn: read again */
	c->seen_seq = s;
	c->seen_arg = a;
	return 1;
}

static inline uint64_t giw_credit_seen(struct giw_conn *c)
{
	uint64_t v = giw_load(&c->ctrl[0].credit), k = giw_load(&c->ctrl[0].credit_chk);
	if (k == ~v && v > c->credit_seen)
		c->credit_seen = v;
	return c->credit_seen;
}

/* Tears down every connection. The client disconnects; the server waits for
 * the client's disconnect. */
static inline void giw_teardown(struct giw_ctx *x, int client)
{
	x->closing = 1;
	for (int i = 0; i < x->nconn; i++) {
		struct giw_conn *c = &x->conns[i];
		if (!c->id)
			continue;
		while (c->ctrl_out > 0)
			giw_poll_send(x);
		if (client && rdma_disconnect(c->id))
			giw_die("rdma_disconnect: %s", strerror(errno));
	}
	for (int left = x->nconn; left > 0;) {
		struct rdma_cm_event *ev = giw_cm_get(x, GIW_CM_TIMEOUT_MS);
		if (!ev)
			giw_die("timed out waiting for %d disconnect event(s)", left);
		enum rdma_cm_event_type t = ev->event;
		struct rdma_cm_id *id = ev->id;
		rdma_ack_cm_event(ev);
		if (t != RDMA_CM_EVENT_DISCONNECTED)
			giw_die("waiting for the disconnect got %s", rdma_event_str(t));
		if (!client)
			rdma_disconnect(id); /* our side too; harmless if already down */
		left--;
	}
	for (int i = 0; i < x->nconn; i++) {
		struct giw_conn *c = &x->conns[i];
		if (c->qp)
			rdma_destroy_qp(c->id);
		if (c->mr && ibv_dereg_mr(c->mr))
			giw_die("ibv_dereg_mr failed");
		if (c->ctrl_mr && ibv_dereg_mr(c->ctrl_mr))
			giw_die("ibv_dereg_mr failed");
		if (c->id && rdma_destroy_id(c->id))
			giw_die("rdma_destroy_id: %s", strerror(errno));
		free(c->buf);
		free(c->ctrl);
	}
	if (x->scq && ibv_destroy_cq(x->scq))
		giw_die("ibv_destroy_cq failed");
	if (x->rcq && x->rcq != x->scq && ibv_destroy_cq(x->rcq))
		giw_die("ibv_destroy_cq failed");
	free(x->pend[0].wc);
	free(x->pend[1].wc);
	if (x->pd && ibv_dealloc_pd(x->pd))
		giw_die("ibv_dealloc_pd failed");
	if (x->listen && rdma_destroy_id(x->listen))
		giw_die("rdma_destroy_id(listen): %s", strerror(errno));
	rdma_destroy_event_channel(x->ch);
}

#endif
