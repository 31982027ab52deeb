/*
 * giw_perf.h: the perftest-style bandwidth and latency engine behind
 * giw_{write,read,send}_{bw,lat}. Each of those programs is a three-line main
 * that calls giw_perf_main with its operation and kind.
 *
 * Server: `giw_write_bw [options]`; client: `giw_write_bw [options] HOST`.
 * The client's options decide the test: they travel to the server in the
 * connect private data, so the server needs only -d and -p.
 *
 * Per size ("phase"): a start barrier, the measured loop, an end barrier that
 * carries each QP's cumulative message count. Barriers are RDMA writes into
 * the peer's control block (giw_common.h).
 *
 *  - bandwidth: the client keeps up to -t WRs outstanding per QP, signals every
 *    cq_mod-th WR (and the last), busy-polls the send CQ. send_bw: the server
 *    keeps -r receives posted per QP and returns credits to the client, so a
 *    send never finds the receive queue empty (iWARP has no RNR retry).
 *  - write_lat: both sides write into the peer's buffer and poll its last
 *    byte (perftest's scheme); read_lat: one outstanding read at a time;
 *    send_lat: send/receive ping-pong. write/send report half the round trip,
 *    read the whole read, as perftest does.
 */
#ifndef GIW_PERF_H
#define GIW_PERF_H

#include <getopt.h>
#include <math.h>

#include "giw_common.h"

enum giw_op { GIW_WRITE, GIW_READ, GIW_SEND };
enum giw_kind { GIW_BW, GIW_LAT };

#define GIW_MAX_ALL (8u << 20)

struct giw_opts {
	enum giw_op op;
	enum giw_kind kind;
	const char *host;
	uint64_t size, iters;
	unsigned duration, nqp, tx_depth, rx_depth, cq_mod;
	int all;
};

static inline void giw_perf_usage(const struct giw_opts *o, FILE *f)
{
	fprintf(f,
		"Usage:\n"
		"  %s [options]        start a server\n"
		"  %s [options] HOST   connect to the server on HOST\n"
		"\n"
		"Options (the client's test options are used by both ends):\n"
		"  -d DEV     device (default %s); the connection must run on it\n"
		"  -p PORT    port (default %d)\n"
		"  -s SIZE    message size in bytes, K/M suffixes allowed (default %s)\n"
		"  -n ITERS   iterations per size and QP (default %s)\n"
		"  -D SECS    run each size for SECS seconds instead of -n\n"
		"  -a         all sizes, 2 B .. 8 MiB (powers of two)\n"
		"  -c         one CQ for sends and receives (perftest's write tests do)\n"
		"  -q NUM     number of QPs (connections)%s (default 1)\n"
		"  -t DEPTH   TX depth: WRs outstanding per QP (default %s)\n"
		"  -r DEPTH   receives posted per QP%s (default 512)\n"
		"  -h         this help\n",
		giw_prog, giw_prog, GIW_DEFAULT_DEV, GIW_DEFAULT_PORT, o->kind == GIW_BW ? "65536" : "2",
		o->kind == GIW_BW ? "5000" : "1000", o->kind == GIW_BW ? "" : " (bandwidth tests only)",
		o->kind == GIW_BW ? "128" : "1", o->op == GIW_SEND ? "" : " (send tests)");
}

static inline uint8_t giw_test_id(const struct giw_opts *o) { return (uint8_t)(1 + o->op * 2 + o->kind); }

static inline uint64_t giw_max_size(const struct giw_opts *o) { return o->all ? GIW_MAX_ALL : o->size; }

/* Both ends derive the same resources from the same options. */
static inline void giw_perf_caps(struct giw_ctx *x, const struct giw_opts *o, int client, struct giw_qp_caps *caps)
{
	memset(caps, 0, sizeof(*caps));
	caps->max_send_wr = o->tx_depth + GIW_CTRL_SLOTS;
	caps->recv_len = (uint32_t)giw_max_size(o);
	if (o->op == GIW_SEND && o->kind == GIW_BW) {
		caps->max_recv_wr = client ? 1 : o->rx_depth;
		caps->prepost = client ? 0 : o->rx_depth;
	} else if (o->op == GIW_SEND) {
		caps->max_recv_wr = caps->prepost = 2;
	} else {
		caps->max_recv_wr = 1;
	}
	x->scq_size = (int)(o->nqp * caps->max_send_wr);
	x->rcq_size = (int)(o->nqp * (caps->max_recv_wr + 1));
}

/* ---- barriers ------------------------------------------------------------ */

typedef void (*giw_progress_fn)(struct giw_ctx *, const struct giw_opts *);

static inline void giw_post_all(struct giw_ctx *x, uint64_t seq, int with_counts, int recv_counts)
{
	for (int i = 0; i < x->nconn; i++) {
		struct giw_conn *c = &x->conns[i];
		giw_ctrl_post(x, i, seq, with_counts ? (recv_counts ? c->rcnt : c->scnt) : 0);
	}
}

static inline void giw_wait_all(struct giw_ctx *x, const struct giw_opts *o, uint64_t seq, giw_progress_fn fn)
{
	for (unsigned spins = 0;; spins++) {
		int all = 1;
		for (int i = 0; i < x->nconn; i++)
			all &= giw_ctrl_seen(&x->conns[i], seq);
		if (all)
			return;
		giw_poll_send(x);
		if (fn)
			fn(x, o);
		if ((spins & 1023) == 0)
			giw_cm_check(x, giw_now());
	}
}

/* ---- bandwidth ----------------------------------------------------------- */

static inline void giw_post_data(struct giw_ctx *x, const struct giw_opts *o, int idx, uint64_t size, int signaled,
				 char *local)
{
	struct giw_conn *c = &x->conns[idx];
	struct ibv_sge sge = {.addr = (uintptr_t)local, .length = (uint32_t)size, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = giw_wrid(idx, c->scnt + 1),
		.sg_list = &sge,
		.num_sge = 1,
		.send_flags = signaled ? IBV_SEND_SIGNALED : 0,
		.wr.rdma = {.remote_addr = c->peer.buf_addr, .rkey = c->peer.buf_rkey},
	}, *bad;
	wr.opcode = o->op == GIW_WRITE ? IBV_WR_RDMA_WRITE : o->op == GIW_READ ? IBV_WR_RDMA_READ : IBV_WR_SEND;
	int r = ibv_post_send(c->qp, &wr, &bad);
	if (r)
		giw_die("ibv_post_send(%s, %llu bytes): %s", o->op == GIW_WRITE ? "RDMA write" : o->op == GIW_READ ? "RDMA read" : "send",
			(unsigned long long)size, strerror(r));
	c->scnt++;
}

/* Server of send_bw: reap receives, repost, return credits. */
static inline void giw_rx_progress(struct giw_ctx *x, const struct giw_opts *o)
{
	struct ibv_wc wc[16];
	int n = giw_poll(x, 1, 16, wc);
	if (n < 0)
		giw_die("ibv_poll_cq(recv): %d", n);
	for (int i = 0; i < n; i++) {
		int idx = (int)((wc[i].wr_id >> 48) & 0x7fff);
		if (giw_stale(x, &wc[i]))
			continue;
		if (wc[i].status != IBV_WC_SUCCESS)
			giw_die("recv CQ: completion error on QP %d: %s (status %d, vendor_err %#x)", idx,
				ibv_wc_status_str(wc[i].status), wc[i].status, wc[i].vendor_err);
		struct giw_conn *c = &x->conns[idx];
		c->rcnt++;
		giw_post_recv(c, idx, (uint32_t)giw_max_size(o));
		c->reposted++;
		uint64_t step = o->rx_depth / 8 ? o->rx_depth / 8 : 1;
		if (c->reposted - c->credit_sent >= step)
			giw_credit_post(x, idx, c->reposted);
	}
}

static inline void giw_print_bw_header(void)
{
	printf("---------------------------------------------------------------------------------------------------\n");
	printf(" %-10s %-14s %-18s %-21s %-20s %s\n", "#bytes", "#iterations", "BW peak[MiB/sec]",
	       "BW average[MiB/sec]", "BW average[Gb/sec]", "MsgRate[Mpps]");
	fflush(stdout);
}

static inline void giw_bw_client_phase(struct giw_ctx *x, const struct giw_opts *o, uint64_t size, uint64_t seq)
{
	uint64_t base[x->nconn], last_sig[x->nconn];
	for (int i = 0; i < x->nconn; i++) {
		struct giw_conn *c = &x->conns[i];
		base[i] = last_sig[i] = c->scnt;
		c->target = o->duration ? UINT64_MAX : c->scnt + o->iters;
	}
	giw_post_all(x, seq, 0, 0);
	giw_wait_all(x, o, seq, NULL);

	double t0 = giw_now(), tend = t0 + o->duration, tlast = t0, tsample = t0, tprog = t0 + 1, peak = 0;
	uint64_t done = 0, dsample = 0;
	int stopping = 0;
	for (unsigned spins = 0;; spins++) {
		int finished = 1;
		for (int i = 0; i < x->nconn; i++) {
			struct giw_conn *c = &x->conns[i];
			while (c->scnt < c->target && c->scnt - c->ccnt < o->tx_depth) {
				if (o->op == GIW_SEND && c->scnt >= giw_credit_seen(c) + o->rx_depth)
					break;
				int sig = (c->scnt + 1 - base[i]) % o->cq_mod == 0 || c->scnt + 1 == c->target;
				giw_post_data(x, o, i, size, sig, c->buf);
				if (sig)
					last_sig[i] = c->scnt;
			}
			finished &= c->ccnt == c->target;
		}
		if (finished)
			break;
		int n = giw_poll_send(x);
		if (n == 0 && (spins & 255))
			continue;
		double t = giw_now();
		if (n > 0) {
			done = 0;
			for (int i = 0; i < x->nconn; i++)
				done += x->conns[i].ccnt - base[i];
			tlast = t;
			if (t - tsample >= 0.1) {
				double bw = (double)(done - dsample) * (double)size / (t - tsample);
				if (bw > peak)
					peak = bw;
				tsample = t;
				dsample = done;
			}
		}
		if (o->duration && !stopping && t >= tend) {
			stopping = 1;
			for (int i = 0; i < x->nconn; i++) {
				struct giw_conn *c = &x->conns[i];
				c->target = c->scnt == last_sig[i] ? c->scnt : c->scnt + 1;
			}
		}
		if (t >= tprog && (o->duration || t - t0 >= 2)) {
			fprintf(stderr, "%s: %llu bytes: %.0f s, %llu messages, %.2f MiB/sec\n", giw_prog,
				(unsigned long long)size, t - t0, (unsigned long long)done,
				(double)done * (double)size / (t - t0) / 1048576.0);
			while (tprog <= t)
				while (tprog <= t)
					tprog += 1;
		}
		giw_cm_check(x, t);
	}
	done = 0;
	for (int i = 0; i < x->nconn; i++)
		done += x->conns[i].ccnt - base[i];
	giw_post_all(x, seq + 1, 1, 0);
	giw_wait_all(x, o, seq + 1, NULL);

	double secs = tlast - t0;
	if (secs <= 0)
		secs = 1e-9;
	double avg = (double)done * (double)size / secs;
	if (peak < avg)
		peak = avg;
	printf(" %-10llu %-14llu %-18.2f %-21.2f %-20.2f %.6f\n", (unsigned long long)size,
	       (unsigned long long)(done / (uint64_t)x->nconn), peak / 1048576.0, avg / 1048576.0, avg * 8 / 1e9,
	       (double)done / secs / 1e6);
	fflush(stdout);
}

static inline void giw_bw_server_phase(struct giw_ctx *x, const struct giw_opts *o, uint64_t seq)
{
	giw_progress_fn fn = o->op == GIW_SEND ? giw_rx_progress : NULL;
	giw_post_all(x, seq, 0, 0);
	giw_wait_all(x, o, seq, fn);
	giw_wait_all(x, o, seq + 1, fn);
	if (o->op == GIW_SEND) {
		for (int i = 0; i < x->nconn; i++) {
			double t0 = giw_now();
			while (x->conns[i].rcnt < x->conns[i].seen_arg) {
				giw_rx_progress(x, o);
				giw_poll_send(x);
				double t = giw_now();
				giw_cm_check(x, t);
				if (t - t0 > 10)
					giw_die("QP %d: %llu of %llu sends received after 10 s", i,
						(unsigned long long)x->conns[i].rcnt, (unsigned long long)x->conns[i].seen_arg);
			}
		}
	}
	giw_post_all(x, seq + 1, 1, o->op == GIW_SEND);
}

/* ---- latency ------------------------------------------------------------- */

static inline int giw_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static inline void giw_print_lat_header(void)
{
	printf("---------------------------------------------------------------------------------------------------------------------------------------\n");
	printf(" %-8s %-12s %-12s %-12s %-16s %-12s %-14s %-22s %s\n", "#bytes", "#iterations", "t_min[usec]",
	       "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]",
	       "99.9% percentile[usec]");
	fflush(stdout);
}

static inline void giw_print_lat(uint64_t size, double *s, size_t n)
{
	if (n == 0)
		giw_die("no latency samples");
	qsort(s, n, sizeof(*s), giw_cmp_double);
	double sum = 0, sq = 0;
	for (size_t i = 0; i < n; i++)
		sum += s[i];
	double avg = sum / (double)n;
	for (size_t i = 0; i < n; i++)
		sq += (s[i] - avg) * (s[i] - avg);
	size_t p99 = (size_t)ceil(0.99 * (double)n), p999 = (size_t)ceil(0.999 * (double)n);
	printf(" %-8llu %-12zu %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-22.2f %.2f\n", (unsigned long long)size, n,
	       s[0], s[n - 1], s[n / 2], avg, sqrt(sq / (double)n), s[p99 ? p99 - 1 : 0], s[p999 ? p999 - 1 : 0]);
	fflush(stdout);
}

static inline void giw_wait_send_room(struct giw_ctx *x, const struct giw_opts *o, struct giw_conn *c)
{
	while (c->scnt - c->ccnt >= o->tx_depth)
		giw_poll_send(x);
}

/* One receive completion on the recv CQ, reposted. Returns 0 if none. */
static inline int giw_lat_recv(struct giw_ctx *x, const struct giw_opts *o)
{
	struct ibv_wc wc;
	if (!giw_poll_recv_one(x, &wc))
		return 0;
	struct giw_conn *c = &x->conns[0];
	c->rcnt++;
	giw_post_recv(c, 0, (uint32_t)giw_max_size(o));
	return 1;
}

static inline void giw_lat_phase(struct giw_ctx *x, const struct giw_opts *o, uint64_t size, uint64_t seq, int client)
{
	struct giw_conn *c = &x->conns[0];
	volatile uint8_t *poll_byte = (volatile uint8_t *)c->buf + size - 1;
	char *src = c->buf + giw_max_size(o);
	*poll_byte = 0;
	giw_post_all(x, seq, 0, 0);
	giw_wait_all(x, o, seq, NULL);

	size_t cap = o->duration ? 1u << 16 : o->iters, n = 0;
	double *samples = client ? malloc(cap * sizeof(double)) : NULL;
	if (client && !samples)
		giw_die("out of memory");
	double t0 = giw_now(), tend = t0 + o->duration, tprog = t0 + 1;
	uint64_t i = 0;
	for (;;) {
		if (client) {
			double t = giw_now();
			if (o->duration ? t >= tend : i >= o->iters)
				break;
			if (t >= tprog && (o->duration || t - t0 >= 2)) {
				fprintf(stderr, "%s: %llu bytes: %.0f s, %llu iterations\n", giw_prog,
					(unsigned long long)size, t - t0, (unsigned long long)i);
				while (tprog <= t)
				while (tprog <= t)
					tprog += 1;
			}
		}
		i++;
		uint8_t tag = (uint8_t)i;
		giw_wait_send_room(x, o, c);
		double ts = giw_now();
		unsigned spins = 0;
		if (o->op == GIW_WRITE) {
			if (!client) { /* wait for the ping, or for the end of the phase */
				while (*poll_byte != tag) {
					if (giw_ctrl_seen(c, seq + 1))
						goto end;
					giw_poll_send(x);
					if ((++spins & 4095) == 0)
						giw_cm_check(x, giw_now());
				}
			}
			src[size - 1] = (char)tag;
			giw_post_data(x, o, 0, size, 1, src);
			if (client) {
				while (*poll_byte != tag) {
					giw_poll_send(x);
					if ((++spins & 4095) == 0)
						giw_cm_check(x, giw_now());
				}
			}
		} else if (o->op == GIW_READ) {
			if (!client) {
				giw_wait_all(x, o, seq + 1, NULL);
				goto end;
			}
			giw_post_data(x, o, 0, size, 1, c->buf);
			while (c->ccnt != c->scnt) {
				giw_poll_send(x);
				if ((++spins & 4095) == 0)
					giw_cm_check(x, giw_now());
			}
		} else {
			if (!client) {
				while (!giw_lat_recv(x, o)) {
					if (giw_ctrl_seen(c, seq + 1))
						goto end;
					giw_poll_send(x);
					if ((++spins & 4095) == 0)
						giw_cm_check(x, giw_now());
				}
			}
			giw_post_data(x, o, 0, size, 1, src);
			if (client) {
				while (!giw_lat_recv(x, o)) {
					giw_poll_send(x);
					if ((++spins & 4095) == 0)
						giw_cm_check(x, giw_now());
				}
			}
		}
		if (client) {
			double d = (giw_now() - ts) * 1e6;
			if (o->op != GIW_READ)
				d /= 2;
			if (n == cap) {
				cap *= 2;
				samples = realloc(samples, cap * sizeof(double));
				if (!samples)
					giw_die("out of memory");
			}
			samples[n++] = d;
		}
	}
end:
	while (c->ccnt != c->scnt)
		giw_poll_send(x);
	if (client) {
		giw_post_all(x, seq + 1, 1, 0);
		giw_wait_all(x, o, seq + 1, NULL);
		giw_print_lat(size, samples, n);
		free(samples);
	} else {
		giw_post_all(x, seq + 1, 1, 0);
	}
}

/* ---- main ---------------------------------------------------------------- */

static inline unsigned giw_parse_uint(const char *s, const char *what, unsigned min, unsigned max)
{
	uint64_t v = giw_parse_size(s, what);
	if (v < min || v > max)
		giw_die("%s must be in %u..%u (got %s)", what, min, max, s);
	return (unsigned)v;
}

static inline int giw_perf_main(int argc, char **argv, enum giw_op op, enum giw_kind kind, const char *prog)
{
	giw_prog = prog;
	struct giw_opts o = {.op = op, .kind = kind, .nqp = 1, .rx_depth = 512};
	int size_set = 0, iters_set = 0, tx_set = 0;
	struct giw_ctx x = {.dev = GIW_DEFAULT_DEV, .port = GIW_DEFAULT_PORT};
	int ch;
	while ((ch = getopt(argc, argv, "d:p:s:n:D:acq:t:r:h")) != -1) {
		switch (ch) {
		case 'd': x.dev = optarg; break;
		case 'p': x.port = (int)giw_parse_uint(optarg, "port (-p)", 1, 65535); break;
		case 's':
			o.size = giw_parse_size(optarg, "size (-s)");
			if (o.size < 1 || o.size > (1u << 30))
				giw_die("size (-s) must be in 1..1G");
			size_set = 1;
			break;
		case 'n':
			o.iters = giw_parse_size(optarg, "iterations (-n)");
			if (o.iters < 1 || o.iters > (1ull << 40))
				giw_die("iterations (-n) must be >= 1");
			iters_set = 1;
			break;
		case 'D': o.duration = giw_parse_uint(optarg, "duration (-D)", 1, 86400); break;
		case 'a': o.all = 1; break;
		case 'c': x.shared_cq = 1; break;
		case 'q': o.nqp = giw_parse_uint(optarg, "QPs (-q)", 1, 1024); break;
		case 't': o.tx_depth = giw_parse_uint(optarg, "TX depth (-t)", 1, 1u << 16); tx_set = 1; break;
		case 'r': o.rx_depth = giw_parse_uint(optarg, "RX depth (-r)", 1, 1u << 16); break;
		case 'h': giw_perf_usage(&o, stdout); return 0;
		default: giw_perf_usage(&o, stderr); return 1;
		}
	}
	if (optind < argc)
		o.host = argv[optind++];
	if (optind < argc)
		giw_die("unexpected argument '%s' (-h for help)", argv[optind]);
	if (!size_set)
		o.size = kind == GIW_BW ? 65536 : 2;
	if (!iters_set)
		o.iters = kind == GIW_BW ? 5000 : 1000;
	if (!tx_set)
		o.tx_depth = kind == GIW_BW ? 128 : 1;
	if (o.duration && iters_set)
		giw_die("-D and -n exclude each other");
	if (o.duration && o.all)
		giw_die("-D and -a exclude each other");
	if (kind == GIW_LAT && o.nqp != 1)
		giw_die("-q is for the bandwidth tests; latency runs on one QP");
	if (kind == GIW_LAT && op == GIW_WRITE && !o.all && o.size < 1)
		giw_die("size must be >= 1");
	if (o.host) {
		struct giw_qp_caps caps;
		giw_perf_caps(&x, &o, 1, &caps);
		x.nconn = (int)o.nqp;
		x.conns = calloc(o.nqp, sizeof(*x.conns));
		if (!x.conns)
			giw_die("out of memory");
		struct giw_info tmpl = {.test = giw_test_id(&o), .nqp = o.nqp, .tx_depth = o.tx_depth,
					.rx_depth = o.rx_depth, .size = o.all ? 0 : o.size, .iters = iters_set ? o.iters : 0,
					.duration = o.duration};
		for (int i = 0; i < x.nconn; i++)
			giw_client_connect(&x, i, o.host, 2 * giw_max_size(&o), &caps, &tmpl, giw_test_id(&o));
	} else {
		giw_server_listen(&x, 64);
		printf("%s: server on port %d, device %s, waiting for a client\n", prog, x.port, x.dev);
		fflush(stdout);
		struct giw_info peer;
		struct rdma_cm_id *id = giw_server_request(&x, &peer);
		if (peer.magic != GIW_MAGIC || peer.version != GIW_VERSION || peer.test != giw_test_id(&o)) {
			rdma_reject(id, "giw!", 4);
			giw_check_info(&peer, giw_test_id(&o));
		}
		/* The client's test options rule. */
		o.nqp = peer.nqp;
		o.tx_depth = peer.tx_depth;
		o.rx_depth = peer.rx_depth;
		o.all = peer.size == 0;
		o.size = peer.size;
		o.duration = peer.duration;
		o.iters = peer.iters ? peer.iters : (kind == GIW_BW ? 5000 : 1000);
		if (o.nqp < 1 || o.nqp > 1024 || o.tx_depth < 1 || o.rx_depth < 1 || (!o.all && o.size > (1u << 30)))
			giw_die("client sent bad test parameters");
		struct giw_qp_caps caps;
		giw_perf_caps(&x, &o, 0, &caps);
		x.nconn = (int)o.nqp;
		x.conns = calloc(o.nqp, sizeof(*x.conns));
		if (!x.conns)
			giw_die("out of memory");
		for (int i = 0; i < x.nconn; i++) {
			if (i > 0) {
				id = giw_server_request(&x, &peer);
				giw_check_info(&peer, giw_test_id(&o));
				if (peer.qp_index != (uint32_t)i)
					giw_die("client connections out of order");
			}
			giw_server_accept(&x, i, id, &peer, 2 * giw_max_size(&o), &caps, &peer);
		}
	}
	o.cq_mod = o.tx_depth < 100 ? o.tx_depth : 100;

	int client = o.host != NULL;
	if (client) {
		printf("%s: %s %s, device %s, %u QP(s), TX depth %u%s, %s\n", prog,
		       op == GIW_WRITE ? "RDMA write" : op == GIW_READ ? "RDMA read" : "send",
		       kind == GIW_BW ? "bandwidth" : "latency", x.dev, o.nqp, o.tx_depth,
		       kind == GIW_BW ? "" : "", o.duration ? "duration mode" : "iteration mode");
		if (kind == GIW_BW)
			giw_print_bw_header();
		else
			giw_print_lat_header();
	} else {
		printf("%s: client connected with %u QP(s)\n", prog, o.nqp);
		fflush(stdout);
	}
	uint64_t seq = 1;
	for (uint64_t size = o.all ? 2 : o.size; size <= giw_max_size(&o); size *= 2, seq += 2) {
		if (kind == GIW_BW)
			client ? giw_bw_client_phase(&x, &o, size, seq) : giw_bw_server_phase(&x, &o, seq);
		else
			giw_lat_phase(&x, &o, size, seq, client);
		if (!o.all)
			break;
	}
	if (client)
		printf("---------------------------------------------------------------------------------------------------\n");
	giw_teardown(&x, client);
	if (!client)
		printf("%s: test done\n", prog);
	free(x.conns);
	return 0;
}

#endif
