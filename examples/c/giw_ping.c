/*
 * giw_ping: rping-style ping-pong with data verification over goiwarp.
 *
 *   giw_ping [-d DEV] [-p PORT]                          server (serves one client)
 *   giw_ping [-d DEV] [-p PORT] [-s SIZE] [-C N] [-v] HOST   client
 *
 * Each ping: the client fills its source buffer with a fresh pattern, clears
 * its sink buffer and sends a PING message; the server RDMA-reads the
 * client's source into its own buffer, RDMA-writes that back into the
 * client's sink and sends DONE; the client checks sink == source. A mismatch
 * or any completion error ends the program with exit code 1.
 *
 * Buffer of each side: [0, 64) receive area for messages | [64, 64+size)
 * source | [64+size, 64+2*size) sink | [64+2*size, +64) send area.
 */
#include <getopt.h>

#include "giw_common.h"

#define PING_TEST 10
#define MSG 64

struct ping_msg {
	uint64_t iter; /* big-endian */
	uint64_t magic;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage:\n"
		"  giw_ping [options]        start a server (serves one client, then exits)\n"
		"  giw_ping [options] HOST   ping the server on HOST\n"
		"\n"
		"  -d DEV     device (default %s)\n"
		"  -p PORT    port (default %d)\n"
		"  -s SIZE    ping size in bytes (default 64, at least 16)\n"
		"  -C COUNT   number of pings (default 10; -n is the same)\n"
		"  -v         print each ping's data\n"
		"  -h         this help\n",
		GIW_DEFAULT_DEV, GIW_DEFAULT_PORT);
}

static void post(struct giw_ctx *x, enum ibv_wr_opcode op, void *local, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct giw_conn *c = &x->conns[0];
	struct ibv_sge sge = {.addr = (uintptr_t)local, .length = len, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = giw_wrid(0, c->scnt + 1),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = raddr, .rkey = rkey},
	}, *bad;
	int r = ibv_post_send(c->qp, &wr, &bad);
	if (r)
		giw_die("ibv_post_send: %s", strerror(r));
	c->scnt++;
}

static void wait_sends(struct giw_ctx *x)
{
	struct giw_conn *c = &x->conns[0];
	for (unsigned spins = 0; c->ccnt != c->scnt; spins++) {
		giw_poll_send(x);
		if ((spins & 4095) == 0)
			giw_cm_check(x, giw_now());
	}
}

/* Polls for one message; returns 1 and its iteration, or 0. */
static int poll_msg(struct giw_ctx *x, uint64_t *iter)
{
	struct giw_conn *c = &x->conns[0];
	struct ibv_wc wc;
	if (!giw_poll_recv_one(x, &wc))
		return 0;
	struct ping_msg m;
	if (wc.byte_len != sizeof(m))
		giw_die("message of %u bytes, expected %zu", wc.byte_len, sizeof(m));
	memcpy(&m, c->buf, sizeof(m));
	if (be64toh(m.magic) != GIW_MAGIC)
		giw_die("bad message magic %#llx", (unsigned long long)be64toh(m.magic));
	*iter = be64toh(m.iter);
	giw_post_recv(c, 0, MSG);
	return 1;
}

static void send_msg(struct giw_ctx *x, size_t size, uint64_t iter)
{
	struct giw_conn *c = &x->conns[0];
	char *area = c->buf + MSG + 2 * size;
	struct ping_msg m = {.iter = htobe64(iter), .magic = htobe64(GIW_MAGIC)};
	memcpy(area, &m, sizeof(m));
	post(x, IBV_WR_SEND, area, sizeof(m), 0, 0);
}

/* rping's pattern: a header naming the ping, then rotating printable characters. */
static void fill(char *p, size_t size, uint64_t iter)
{
	int n = snprintf(p, size, "rdma-ping-%llu: ", (unsigned long long)iter);
	size_t i = n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
	for (unsigned k = (unsigned)(iter % 94); i < size - 1; i++, k++)
		p[i] = (char)(33 + k % 94);
	p[size - 1] = 0;
}

int main(int argc, char **argv)
{
	giw_prog = "giw_ping";
	struct giw_ctx x = {.dev = GIW_DEFAULT_DEV, .port = GIW_DEFAULT_PORT};
	uint64_t size = 64, count = 10;
	int verbose = 0, ch;
	while ((ch = getopt(argc, argv, "d:p:s:C:n:vh")) != -1) {
		switch (ch) {
		case 'd': x.dev = optarg; break;
		case 'p':
			x.port = (int)giw_parse_size(optarg, "port (-p)");
			if (x.port < 1 || x.port > 65535)
				giw_die("port (-p) must be in 1..65535");
			break;
		case 's':
			size = giw_parse_size(optarg, "size (-s)");
			if (size < 16 || size > (1u << 30))
				giw_die("size (-s) must be in 16..1G");
			break;
		case 'C': case 'n':
			count = giw_parse_size(optarg, "count (-C)");
			if (count < 1)
				giw_die("count (-C) must be >= 1");
			break;
		case 'v': verbose = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 1;
		}
	}
	const char *host = optind < argc ? argv[optind++] : NULL;
	if (optind < argc)
		giw_die("unexpected argument '%s' (-h for help)", argv[optind]);

	struct giw_conn conn = {0};
	x.conns = &conn;
	x.nconn = 1;
	x.scq_size = 16 + GIW_CTRL_SLOTS;
	x.rcq_size = 8;
	struct giw_qp_caps caps = {.max_send_wr = 16 + GIW_CTRL_SLOTS, .max_recv_wr = 4, .prepost = 2, .recv_len = MSG};
	struct giw_info tmpl = {.test = PING_TEST, .nqp = 1};

	if (host) {
		tmpl.size = size;
		tmpl.iters = count;
		giw_client_connect(&x, 0, host, MSG * 2 + 2 * size, &caps, &tmpl, PING_TEST);
		char *src = conn.buf + MSG, *sink = conn.buf + MSG + size;
		double t0 = giw_now();
		for (uint64_t i = 1; i <= count; i++) {
			fill(src, size, i);
			memset(sink, 0, size);
			send_msg(&x, size, i);
			uint64_t got;
			for (unsigned spins = 0; !poll_msg(&x, &got); spins++) {
				giw_poll_send(&x);
				if ((spins & 4095) == 0)
					giw_cm_check(&x, giw_now());
			}
			if (got != i)
				giw_die("ping %llu: DONE for ping %llu", (unsigned long long)i, (unsigned long long)got);
			if (memcmp(src, sink, size) != 0) {
				size_t k = 0;
				while (src[k] == sink[k])
					k++;
				giw_die("ping %llu: data mismatch at offset %zu of %llu (sent %#x, got back %#x)",
					(unsigned long long)i, k, (unsigned long long)size, (unsigned char)src[k],
					(unsigned char)sink[k]);
			}
			if (verbose)
				printf("ping data: %.*s\n", (int)(size < 100 ? size : 100), src);
			wait_sends(&x);
		}
		double secs = giw_now() - t0;
		giw_ctrl_post(&x, 0, 1, count);
		while (!giw_ctrl_seen(&conn, 1))
			giw_poll_send(&x);
		printf("giw_ping: %llu pings of %llu bytes verified, %.2f usec per ping\n", (unsigned long long)count,
		       (unsigned long long)size, secs * 1e6 / (double)count);
	} else {
		giw_server_listen(&x, 4);
		printf("giw_ping: server on port %d, device %s, waiting for a client\n", x.port, x.dev);
		fflush(stdout);
		struct giw_info peer;
		struct rdma_cm_id *id = giw_server_request(&x, &peer);
		if (peer.magic != GIW_MAGIC || peer.version != GIW_VERSION || peer.test != PING_TEST) {
			rdma_reject(id, "giw!", 4);
			giw_check_info(&peer, PING_TEST);
		}
		size = peer.size;
		if (size < 16 || size > (1u << 30))
			giw_die("client sent a bad size %llu", (unsigned long long)size);
		giw_server_accept(&x, 0, id, &peer, MSG * 2 + 2 * size, &caps, &tmpl);
		char *mine = conn.buf + MSG;
		uint64_t pings = 0;
		for (unsigned spins = 0;; spins++) {
			uint64_t i;
			if (poll_msg(&x, &i)) {
				post(&x, IBV_WR_RDMA_READ, mine, (uint32_t)size, peer.buf_addr + MSG, peer.buf_rkey);
				wait_sends(&x);
				if (verbose)
					printf("server ping data: %.*s\n", (int)(size < 100 ? size : 100), mine);
				post(&x, IBV_WR_RDMA_WRITE, mine, (uint32_t)size, peer.buf_addr + MSG + size, peer.buf_rkey);
				send_msg(&x, size, i);
				wait_sends(&x);
				pings++;
				continue;
			}
			if (giw_ctrl_seen(&conn, 1))
				break;
			giw_poll_send(&x);
			if ((spins & 4095) == 0)
				giw_cm_check(&x, giw_now());
		}
		if (conn.seen_arg != pings)
			giw_die("client sent %llu pings, served %llu", (unsigned long long)conn.seen_arg,
				(unsigned long long)pings);
		giw_ctrl_post(&x, 0, 1, pings);
		printf("giw_ping: served %llu pings of %llu bytes\n", (unsigned long long)pings, (unsigned long long)size);
	}
	giw_teardown(&x, host != NULL);
	return 0;
}
