/* Load with integrity: many connections between two processes carrying RDMA
 * Writes, Reads and Sends with checked payloads, for a bounded time.
 *
 *   load [-n CONNS] [-t SECONDS] [-p PORT]      (defaults 1000, 25, 34500;
 *                                               ctest runs -t 30)
 *
 * This process is the client; it posix_spawns itself as the server
 * ("load srv PORT FD") and talks to it over a socketpair. Per connection
 * the client keeps WIN operations in flight, each in its own slot:
 *
 *   Send   a message: header (sequence number, length, checksum) + payload;
 *          the server checks the sequence number (no gap, no repeat) and
 *          the checksum, reposts its receive and answers with an ack
 *          (a Send carrying the sequence number), which the client checks
 *          in turn;
 *   Write  a payload into the slot's area of the server's memory, followed
 *          by a note (a message as above, carrying the payload's length and
 *          checksum): the server checksums the area when the note arrives
 *          (RDMA ordering: the Write is placed before the Send is
 *          delivered) and acks;
 *   Read   a range of the connection's read area on the server, whose
 *          content is a known function of connection and offset; the
 *          client checks every byte.
 *
 * Sizes vary from 1 to SLOT - header bytes. After SECONDS the client stops
 * issuing, waits for what is in flight, and compares its totals with the
 * server's; then both disconnect everything. Any corrupt, lost or repeated
 * message or completion error fails the run. Both processes print their
 * figures (set-up time, fds, threads, goroutines, RSS with all connections
 * up).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <goiwarp.h>

static const char *role = "cli";
#define GIW_TEST_ROLE role
#include "giw_test.h"

extern char **environ;

#define WIN 4        /* operations in flight per connection */
#define SLOT 4096    /* bytes per slot */
#define RAREA 4096   /* read area per connection */
#define ACKSZ 64     /* ack message */
#define MAGIC 0x6c6f6164u

enum { OP_SEND, OP_WRITE, OP_READ, NOPS };
static const char *opname[NOPS] = {"send", "write", "read"};

struct msg {
	uint32_t magic;
	uint32_t op;  /* OP_SEND: payload follows; OP_WRITE: a note for slot */
	uint64_t seq; /* per connection, client to server messages */
	uint32_t slot;
	uint32_t len; /* payload bytes */
	uint64_t sum; /* checksum of the payload */
};

struct ack {
	uint32_t magic;
	uint32_t slot;
	uint64_t seq;
};

/* What the server's accept private data tells the client. */
struct srv_info {
	uint64_t warea; /* WIN slots the client Writes into */
	uint64_t rarea; /* RAREA bytes the client Reads */
	uint32_t rkey;
};

struct totals {
	uint64_t msgs[NOPS], bytes[NOPS];
	uint64_t errors;
};

/* --- helpers ---------------------------------------------------------------- */
static uint64_t fnv1a(const uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* The read area's content: a function of connection and offset. */
static uint8_t rbyte(uint32_t conn, uint32_t off)
{
	return (uint8_t)((off * 131u + conn * 7u + (off >> 8)) ^ 0x5a);
}

static void print_process(const char *when)
{
	struct giw_runtime rt;
	REQUIRE(giw_query_runtime(&rt) == 0);
	printf("[%s] %s: fds %ld threads %ld goroutines %llu rss %ld kB go heap %llu kB go mapped %llu kB\n",
	       role, when, giw_count_dir("/proc/self/fd") - 1, giw_count_dir("/proc/self/task"),
	       (unsigned long long)rt.goroutines, giw_rss_kb(), (unsigned long long)rt.heap_live_bytes >> 10,
	       (unsigned long long)rt.mapped_bytes >> 10);
	fflush(stdout);
}

/* 1,000 connections need 1,000+ descriptors: soft limit up to the hard one. */
static void raise_nofile(void)
{
	struct rlimit r;
	REQUIRE(getrlimit(RLIMIT_NOFILE, &r) == 0);
	r.rlim_cur = r.rlim_max;
	REQUIRE(setrlimit(RLIMIT_NOFILE, &r) == 0);
}

static int error_budget = 20; /* detailed lines printed */
#define BAD(tot, ...)                                                   \
	do {                                                            \
		(tot)->errors++;                                        \
		if (error_budget-- > 0) {                               \
			fprintf(stderr, "[%s] ", role);                 \
			fprintf(stderr, __VA_ARGS__);                   \
			fputc('\n', stderr);                            \
		}                                                       \
	} while (0)

/* --- shared set-up ---------------------------------------------------------- */
static int nconns = 1000;
static struct ibv_pd *pd;
static struct ibv_cq *scq, *rcq;
static struct ibv_mr *mr;
static uint8_t *mem;
static struct rdma_event_channel *ch;

static void setup_process(struct ibv_context *ctx, size_t per_conn)
{
	int cqe = nconns * (2 * WIN + 2);
	REQUIRE((pd = ibv_alloc_pd(ctx)));
	REQUIRE((scq = ibv_create_cq(ctx, cqe, NULL, NULL, 0)));
	REQUIRE((rcq = ibv_create_cq(ctx, cqe, NULL, NULL, 0)));
	REQUIRE(posix_memalign((void **)&mem, 4096, per_conn * nconns) == 0);
	memset(mem, 0, per_conn * nconns);
	REQUIRE((mr = ibv_reg_mr(pd, mem, per_conn * nconns,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)));
}

static void create_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 2 * WIN + 2, .max_recv_wr = WIN, .max_send_sge = 1,
					     .max_recv_sge = 1}};
	REQUIRE(rdma_create_qp(id, pd, &a) == 0);
}

static void post_recv(struct ibv_qp *qp, uint64_t wrid, void *p, uint32_t n)
{
	struct ibv_sge s = {(uintptr_t)p, n, mr->lkey};
	struct ibv_recv_wr w = {.wr_id = wrid, .sg_list = &s, .num_sge = 1}, *bad;
	REQUIRE(ibv_post_recv(qp, &w, &bad) == 0);
}

static void post_send(struct ibv_qp *qp, uint64_t wrid, enum ibv_wr_opcode op, void *p, uint32_t n,
		      uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = {(uintptr_t)p, n, mr->lkey};
	struct ibv_send_wr w = {.wr_id = wrid, .sg_list = &s, .num_sge = 1, .opcode = op,
				.send_flags = IBV_SEND_SIGNALED}, *bad;
	w.wr.rdma.remote_addr = raddr;
	w.wr.rdma.rkey = rkey;
	int e = ibv_post_send(qp, &w, &bad);
	if (e) {
		errno = e;
		REQUIRE(!"ibv_post_send");
	}
}

static struct rdma_cm_event *get_event(int timeout_ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;
	if (poll(&p, 1, timeout_ms) != 1)
		return NULL;
	REQUIRE(rdma_get_cm_event(ch, &ev) == 0);
	return ev;
}

static void check_wc(const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "[%s] completion wr_id %#llx: %s\n", role, (unsigned long long)wc->wr_id,
			ibv_wc_status_str(wc->status));
		exit(1);
	}
}

/* wr_id: connection << 16 | slot << 4 | kind */
enum { K_SEND, K_WRITE, K_NOTE, K_READ, K_RECV };
static uint64_t wrid(uint32_t conn, uint32_t slot, int kind) { return (uint64_t)conn << 16 | slot << 4 | kind; }

/* --- server ----------------------------------------------------------------- */
/* Per connection: WIN write slots, the read area, WIN receive slots, WIN
 * ack buffers. */
#define SRV_PER_CONN (WIN * SLOT + RAREA + WIN * SLOT + WIN * ACKSZ)

struct sconn {
	struct rdma_cm_id *id;
	uint64_t next_seq;
	int up;
};

static uint8_t *s_warea(uint32_t c) { return mem + (size_t)c * SRV_PER_CONN; }
static uint8_t *s_rarea(uint32_t c) { return s_warea(c) + WIN * SLOT; }
static uint8_t *s_rslot(uint32_t c, uint32_t s) { return s_rarea(c) + RAREA + s * SLOT; }
static uint8_t *s_ack(uint32_t c, uint32_t s) { return s_rarea(c) + RAREA + WIN * SLOT + s * ACKSZ; }

static int server_main(uint16_t port0, int fd)
{
	struct ibv_context *ctx;
	struct rdma_cm_id *lid;
	struct sconn *cs;
	struct totals t = {0};
	int accepted = 0, established = 0, disconnected = 0, quit = 0, printed = 0;
	uint16_t port;

	role = "srv";
	raise_nofile();
	REQUIRE((ch = rdma_create_event_channel()));
	REQUIRE(rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) == 0);
	for (port = port0; port < port0 + 100; port++) {
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		if (rdma_bind_addr(lid, (struct sockaddr *)&sa) == 0)
			break;
		REQUIRE(errno == EADDRINUSE);
	}
	REQUIRE(port < port0 + 100);
	REQUIRE(rdma_listen(lid, 1024) == 0);
	/* A listener bound to 127.0.0.1 has no device (as the kernel binds a
	 * loopback address); rdma_get_devices gives the contexts its
	 * connections will carry. */
	{
		int n = 0;
		struct ibv_context **l = rdma_get_devices(&n);

		ctx = NULL;
		for (int i = 0; l && i < n; i++)
			if (!strcmp(ibv_get_device_name(l[i]->device), "giw_lo"))
				ctx = l[i];
		rdma_free_devices(l);
	}
	REQUIRE(ctx != NULL);
	setup_process(ctx, SRV_PER_CONN);
	REQUIRE((cs = calloc(nconns, sizeof(*cs))));
	for (int c = 0; c < nconns; c++)
		for (uint32_t o = 0; o < RAREA; o++)
			s_rarea(c)[o] = rbyte(c, o);
	REQUIRE(write(fd, &port, sizeof(port)) == sizeof(port));

	/* Serve until the client, done and disconnected, says so. */
	while (!quit || disconnected < accepted) {
		struct rdma_cm_event *ev;
		struct ibv_wc wc[32];
		int n;

		while ((ev = get_event(0))) {
			struct rdma_cm_id *id = ev->id;
			uint32_t c;
			switch (ev->event) {
			case RDMA_CM_EVENT_CONNECT_REQUEST: {
				struct srv_info si;
				struct rdma_conn_param cp = {.responder_resources = 4, .initiator_depth = 4,
							     .private_data = &si, .private_data_len = sizeof(si)};
				REQUIRE(ev->param.conn.private_data_len >= sizeof(c));
				memcpy(&c, ev->param.conn.private_data, sizeof(c));
				REQUIRE(c < (uint32_t)nconns && !cs[c].id);
				cs[c].id = id;
				id->context = (void *)(uintptr_t)c;
				create_qp(id);
				for (uint32_t s = 0; s < WIN; s++)
					post_recv(id->qp, wrid(c, s, K_RECV), s_rslot(c, s), SLOT);
				si = (struct srv_info){(uintptr_t)s_warea(c), (uintptr_t)s_rarea(c), mr->rkey};
				REQUIRE(rdma_accept(id, &cp) == 0);
				accepted++;
				break;
			}
			case RDMA_CM_EVENT_ESTABLISHED:
				cs[(uintptr_t)id->context].up = 1;
				established++;
				break;
			case RDMA_CM_EVENT_DISCONNECTED:
				c = (uintptr_t)id->context;
				cs[c].up = 0;
				disconnected++;
				break;
			default:
				fprintf(stderr, "[srv] unexpected %s (status %d)\n", rdma_event_str(ev->event),
					ev->status);
				exit(1);
			}
			rdma_ack_cm_event(ev);
			if (established == nconns && !printed) {
				print_process("all connections up");
				printed = 1;
			}
		}
		while ((n = ibv_poll_cq(rcq, 32, wc)) > 0) {
			for (int i = 0; i < n; i++) {
				uint32_t c = wc[i].wr_id >> 16, s = (wc[i].wr_id >> 4) & 0xfff;
				struct sconn *sc = &cs[c];
				struct msg m;
				struct ack *a = (struct ack *)s_ack(c, s);
				/* Disconnecting flushes the receives still posted. */
				if (quit && wc[i].status == IBV_WC_WR_FLUSH_ERR)
					continue;
				check_wc(&wc[i]);
				memcpy(&m, s_rslot(c, s), sizeof(m));
				if (m.magic != MAGIC || m.op > OP_WRITE || m.slot >= WIN) {
					BAD(&t, "conn %u: bad message header", c);
				} else if (m.seq != sc->next_seq) {
					BAD(&t, "conn %u: message seq %llu, expected %llu (%s)", c,
					    (unsigned long long)m.seq, (unsigned long long)sc->next_seq,
					    m.seq < sc->next_seq ? "repeated" : "lost");
				} else {
					const uint8_t *p = m.op == OP_SEND ? s_rslot(c, s) + sizeof(m)
									   : s_warea(c) + m.slot * SLOT;
					uint32_t max = m.op == OP_SEND ? SLOT - sizeof(m) : SLOT;
					if (m.len > max || wc[i].byte_len != sizeof(m) + (m.op == OP_SEND ? m.len : 0) ||
					    fnv1a(p, m.len, m.seq) != m.sum)
						BAD(&t, "conn %u seq %llu: %s payload corrupt (len %u, wc %u)", c,
						    (unsigned long long)m.seq, opname[m.op], m.len, wc[i].byte_len);
					t.msgs[m.op]++;
					t.bytes[m.op] += m.len;
				}
				sc->next_seq = m.seq + 1;
				/* Receive first, then the ack: the client sends again only after it. */
				post_recv(sc->id->qp, wrid(c, s, K_RECV), s_rslot(c, s), SLOT);
				*a = (struct ack){MAGIC, m.slot, m.seq};
				post_send(sc->id->qp, wrid(c, s, K_SEND), IBV_WR_SEND, a, sizeof(*a), 0, 0);
			}
		}
		REQUIRE(n >= 0);
		while ((n = ibv_poll_cq(scq, 32, wc)) > 0)
			for (int i = 0; i < n; i++)
				check_wc(&wc[i]);
		REQUIRE(n >= 0);
		if (!quit) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			if (poll(&p, 1, 0) == 1) {
				char q;
				REQUIRE(read(fd, &q, 1) == 1);
				/* The client is done; it disconnects next. */
				REQUIRE(write(fd, &t, sizeof(t)) == sizeof(t));
				quit = 1;
			}
		}
	}
	for (int c = 0; c < nconns; c++) {
		rdma_destroy_qp(cs[c].id);
		REQUIRE(rdma_destroy_id(cs[c].id) == 0);
	}
	REQUIRE(rdma_destroy_id(lid) == 0);
	REQUIRE(ibv_dereg_mr(mr) == 0);
	REQUIRE(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
	REQUIRE(ibv_dealloc_pd(pd) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* --- client ----------------------------------------------------------------- */
/* Per connection: WIN slots (message or write source, read destination),
 * WIN ack receive buffers. */
#define CLI_PER_CONN (WIN * SLOT + WIN * ACKSZ)

struct slot {
	int op;       /* -1: free */
	int pending;  /* completions and ack still awaited */
	uint64_t seq; /* message sequence number (send, write) */
	uint32_t off, len;
};

struct cconn {
	struct rdma_cm_id *id;
	struct srv_info si;
	uint64_t next_seq, next_ack;
	struct slot sl[WIN];
	int up;
};

static uint8_t *c_slot(uint32_t c, uint32_t s) { return mem + (size_t)c * CLI_PER_CONN + s * SLOT; }
static uint8_t *c_ack(uint32_t c, uint32_t s) { return mem + (size_t)c * CLI_PER_CONN + WIN * SLOT + s * ACKSZ; }

static struct cconn *cc;
static struct totals ct;
static long inflight;

static void fill(uint8_t *p, uint32_t n)
{
	uint64_t x = rnd();
	for (uint32_t i = 0; i < n; i++) {
		if ((i & 7) == 0)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(x >> (8 * (i & 7)));
	}
}

static void issue(uint32_t c, uint32_t s)
{
	struct cconn *k = &cc[c];
	struct slot *sl = &k->sl[s];
	uint8_t *p = c_slot(c, s);
	struct msg m = {MAGIC, 0, 0, s, 0, 0};
	int op = rnd() % NOPS;

	sl->op = op;
	switch (op) {
	case OP_SEND:
		m.op = OP_SEND;
		m.seq = sl->seq = k->next_seq++;
		m.len = 1 + rnd() % (SLOT - sizeof(m));
		fill(p + sizeof(m), m.len);
		m.sum = fnv1a(p + sizeof(m), m.len, m.seq);
		memcpy(p, &m, sizeof(m));
		sl->len = m.len;
		sl->pending = 2;
		post_send(k->id->qp, wrid(c, s, K_SEND), IBV_WR_SEND, p, sizeof(m) + m.len, 0, 0);
		break;
	case OP_WRITE:
		/* The payload at the slot's start, the note (sent from
		 * registered memory too) in its last bytes. */
		m.op = OP_WRITE;
		m.seq = sl->seq = k->next_seq++;
		m.len = 1 + rnd() % (SLOT - sizeof(m));
		fill(p, m.len);
		m.sum = fnv1a(p, m.len, m.seq);
		memcpy(p + SLOT - sizeof(m), &m, sizeof(m));
		sl->len = m.len;
		sl->pending = 3;
		post_send(k->id->qp, wrid(c, s, K_WRITE), IBV_WR_RDMA_WRITE, p, m.len, k->si.warea + s * SLOT,
			  k->si.rkey);
		post_send(k->id->qp, wrid(c, s, K_NOTE), IBV_WR_SEND, p + SLOT - sizeof(m), sizeof(m), 0, 0);
		break;
	default:
		sl->len = 1 + rnd() % RAREA;
		sl->off = rnd() % (RAREA - sl->len + 1);
		sl->pending = 1;
		memset(p, 0, sl->len);
		post_send(k->id->qp, wrid(c, s, K_READ), IBV_WR_RDMA_READ, p, sl->len, k->si.rarea + sl->off,
			  k->si.rkey);
	}
	inflight++;
}

static void slot_done(uint32_t c, uint32_t s, int stopping)
{
	struct slot *sl = &cc[c].sl[s];
	if (--sl->pending > 0)
		return;
	ct.msgs[sl->op]++;
	ct.bytes[sl->op] += sl->len;
	sl->op = -1;
	inflight--;
	if (!stopping)
		issue(c, s);
}

static void client_poll(int stopping)
{
	struct ibv_wc wc[32];
	int n;

	while ((n = ibv_poll_cq(scq, 32, wc)) > 0)
		for (int i = 0; i < n; i++) {
			uint32_t c = wc[i].wr_id >> 16, s = (wc[i].wr_id >> 4) & 0xfff;
			int kind = wc[i].wr_id & 15;
			struct slot *sl = &cc[c].sl[s];
			check_wc(&wc[i]);
			if (kind == K_READ) {
				const uint8_t *p = c_slot(c, s);
				uint32_t bad = 0;
				for (uint32_t o = 0; o < sl->len; o++)
					bad += p[o] != rbyte(c, sl->off + o);
				if (bad || wc[i].byte_len != sl->len)
					BAD(&ct, "conn %u: read of %u at %u: %u bytes differ", c, sl->len, sl->off, bad);
			}
			slot_done(c, s, stopping);
		}
	REQUIRE(n >= 0);
	while ((n = ibv_poll_cq(rcq, 32, wc)) > 0)
		for (int i = 0; i < n; i++) {
			uint32_t c = wc[i].wr_id >> 16, s = (wc[i].wr_id >> 4) & 0xfff;
			struct cconn *k = &cc[c];
			struct ack a;
			check_wc(&wc[i]);
			memcpy(&a, c_ack(c, s), sizeof(a));
			post_recv(k->id->qp, wrid(c, s, K_RECV), c_ack(c, s), ACKSZ);
			if (a.magic != MAGIC || a.slot >= WIN || a.seq != k->next_ack ||
			    k->sl[a.slot].op == OP_READ || k->sl[a.slot].op < 0 || k->sl[a.slot].seq != a.seq) {
				BAD(&ct, "conn %u: ack seq %llu slot %u, expected seq %llu", c,
				    (unsigned long long)a.seq, a.slot, (unsigned long long)k->next_ack);
				continue;
			}
			k->next_ack++;
			slot_done(c, a.slot, stopping);
		}
	REQUIRE(n >= 0);
}

static pid_t srv_pid;
static int srv_fd;

static void start_server(uint16_t port0, uint16_t *port)
{
	int sv[2];
	char fdarg[16], portarg[16], narg[16];
	char *av[] = {"load", "srv", portarg, fdarg, narg, NULL};

	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	snprintf(portarg, sizeof(portarg), "%u", port0);
	snprintf(narg, sizeof(narg), "%d", nconns);
	REQUIRE(posix_spawn(&srv_pid, "/proc/self/exe", NULL, NULL, av, environ) == 0);
	close(sv[1]);
	srv_fd = sv[0];
	REQUIRE(read(srv_fd, port, sizeof(*port)) == sizeof(*port));
}

/* Connects all, at most 64 attempts outstanding (the listen backlog is
 * the server's to size, not ours to overrun). */
static double connect_all(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	double t0 = giw_now(), deadline = t0 + 60 + nconns / 10;
	int started = 0, up = 0, pending = 0;

	while (up < nconns) {
		struct rdma_cm_event *ev;
		while (started < nconns && pending < 64) {
			struct rdma_cm_id *id;
			REQUIRE(rdma_create_id(ch, &id, (void *)(uintptr_t)started, RDMA_PS_TCP) == 0);
			cc[started].id = id;
			REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 5000) == 0);
			started++;
			pending++;
		}
		REQUIRE(giw_now() < deadline);
		if (!(ev = get_event(1000)))
			continue;
		uint32_t c = (uintptr_t)ev->id->context;
		struct rdma_cm_id *id = ev->id;
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			/* PD, CQs and MR on the device rdma_cm opened for the ids. */
			if (!pd)
				setup_process(id->verbs, CLI_PER_CONN);
			REQUIRE(rdma_resolve_route(id, 5000) == 0);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED: {
			struct rdma_conn_param cp = {.responder_resources = 4, .initiator_depth = 4,
						     .private_data = &c, .private_data_len = sizeof(c)};
			create_qp(id);
			for (uint32_t s = 0; s < WIN; s++)
				post_recv(id->qp, wrid(c, s, K_RECV), c_ack(c, s), ACKSZ);
			REQUIRE(rdma_connect(id, &cp) == 0);
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			REQUIRE(ev->param.conn.private_data_len >= sizeof(struct srv_info));
			memcpy(&cc[c].si, ev->param.conn.private_data, sizeof(struct srv_info));
			cc[c].up = 1;
			up++;
			pending--;
			break;
		default:
			fprintf(stderr, "[cli] conn %u: %s (status %d) after %d up\n", c, rdma_event_str(ev->event),
				ev->status, up);
			exit(1);
		}
		rdma_ack_cm_event(ev);
	}
	return giw_now() - t0;
}

int main(int argc, char **argv)
{
	struct totals st;
	double secs = 25, t0, t_setup, t_run, t_down;
	uint16_t port0 = 34500, port;
	int opt, down = 0, st_code;
	char q = 'q';

	if (argc == 5 && !strcmp(argv[1], "srv")) {
		nconns = atoi(argv[4]);
		return server_main((uint16_t)atoi(argv[2]), atoi(argv[3]));
	}
	while ((opt = getopt(argc, argv, "n:t:p:")) != -1) {
		switch (opt) {
		case 'n': nconns = atoi(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'p': port0 = (uint16_t)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: load [-n CONNS] [-t SECONDS] [-p PORT]\n");
			return 2;
		}
	}
	REQUIRE(nconns > 0 && nconns < (1 << 20));
	setvbuf(stdout, NULL, _IOLBF, 0);
	raise_nofile();
	start_server(port0, &port);
	REQUIRE((ch = rdma_create_event_channel()));
	REQUIRE((cc = calloc(nconns, sizeof(*cc))));
	print_process("before connecting");

	t_setup = connect_all(port);
	printf("[cli] %d connections up in %.2f s\n", nconns, t_setup);
	print_process("all connections up");

	t0 = giw_now();
	for (int c = 0; c < nconns; c++)
		for (uint32_t s = 0; s < WIN; s++) {
			cc[c].sl[s].op = -1;
			issue(c, s);
		}
	while (giw_now() - t0 < secs)
		client_poll(0);
	while (inflight > 0) {
		REQUIRE(giw_now() - t0 < secs + 30);
		client_poll(1);
	}
	t_run = giw_now() - t0;

	REQUIRE(write(srv_fd, &q, 1) == 1);
	REQUIRE(read(srv_fd, &st, sizeof(st)) == sizeof(st));
	t0 = giw_now();
	for (int c = 0; c < nconns; c++)
		REQUIRE(rdma_disconnect(cc[c].id) == 0);
	while (down < nconns) {
		struct rdma_cm_event *ev = get_event(10000);
		REQUIRE(ev != NULL);
		REQUIRE(ev->event == RDMA_CM_EVENT_DISCONNECTED);
		rdma_ack_cm_event(ev);
		down++;
	}
	for (int c = 0; c < nconns; c++) {
		rdma_destroy_qp(cc[c].id);
		REQUIRE(rdma_destroy_id(cc[c].id) == 0);
	}
	t_down = giw_now() - t0;
	REQUIRE(waitpid(srv_pid, &st_code, 0) == srv_pid);
	print_process("all connections destroyed");

	printf("[cli] %d connections, %.1f s of traffic, disconnect+destroy %.2f s\n", nconns, t_run, t_down);
	printf("%-6s %12s %14s %12s %14s\n", "op", "cli done", "cli bytes", "srv checked", "srv bytes");
	for (int o = 0; o < NOPS; o++) {
		printf("%-6s %12llu %14llu %12llu %14llu\n", opname[o], (unsigned long long)ct.msgs[o],
		       (unsigned long long)ct.bytes[o], (unsigned long long)st.msgs[o],
		       (unsigned long long)st.bytes[o]);
		/* Reads are checked by the client only. */
		if (o != OP_READ && (ct.msgs[o] != st.msgs[o] || ct.bytes[o] != st.bytes[o]))
			BAD(&ct, "%s: client and server totals differ", opname[o]);
	}
	printf("errors: client %llu server %llu; server exit %d\n", (unsigned long long)ct.errors,
	       (unsigned long long)st.errors, WIFEXITED(st_code) ? WEXITSTATUS(st_code) : -1);
	REQUIRE(ibv_dereg_mr(mr) == 0);
	REQUIRE(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
	REQUIRE(ibv_dealloc_pd(pd) == 0);
	rdma_destroy_event_channel(ch);
	int ok = !ct.errors && !st.errors && WIFEXITED(st_code) && WEXITSTATUS(st_code) == 0 &&
		 ct.msgs[OP_SEND] + ct.msgs[OP_WRITE] + ct.msgs[OP_READ] > 0;
	printf("%s\n", ok ? "PASS" : "FAIL");
	return !ok;
}
