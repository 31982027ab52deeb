/* C tests of goiwarp's rsocket API: rs_api <case> <port>.
 * A server thread and a client thread in one process over 127.0.0.1 (both
 * ends are goiwarp's rsockets); each case exits 0 on success. The installed
 * rstream/riostream/rcopy run against it in run_tools.sh. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "giw_test.h"
#include "../../rsockets/rsocket_wire.h"

static int port;

static struct sockaddr_in lo(void)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int listener(int nonblock, int iomap)
{
	struct sockaddr_in a = lo();
	int fd = rsocket(AF_INET, SOCK_STREAM, 0), one = 1;

	REQUIRE(fd >= 0);
	REQUIRE(rsetsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	if (iomap)
		REQUIRE(rsetsockopt(fd, SOL_RDMA, RDMA_IOMAPSIZE, &iomap, sizeof(iomap)) == 0);
	REQUIRE(rbind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	REQUIRE(rlisten(fd, 4) == 0);
	if (nonblock)
		REQUIRE(rfcntl(fd, F_SETFL, O_NONBLOCK) == 0);
	return fd;
}

static int connect_to(int iomap)
{
	struct sockaddr_in a = lo();
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);

	REQUIRE(fd >= 0);
	if (iomap)
		REQUIRE(rsetsockopt(fd, SOL_RDMA, RDMA_IOMAPSIZE, &iomap, sizeof(iomap)) == 0);
	REQUIRE(rconnect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	return fd;
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7 + seed + (i >> 11));
}

static void send_all(int fd, const uint8_t *b, size_t n)
{
	while (n) {
		ssize_t w = rsend(fd, b, n, 0);

		REQUIRE(w > 0);
		b += w;
		n -= (size_t)w;
	}
}

/* ---- stream: blocking transfer both ways, names, peek, half close -------- */

#define BIG (3u << 20)

static void *stream_server(void *arg)
{
	int lfd = *(int *)arg, fd;
	struct sockaddr_in peer;
	socklen_t plen = sizeof(peer);
	uint8_t *in = malloc(BIG), *want = malloc(BIG), peek[8], c;

	REQUIRE(in && want);
	fd = raccept(lfd, (struct sockaddr *)&peer, &plen);
	REQUIRE(fd >= 0);
	CHECK(plen == sizeof(peer) && peer.sin_family == AF_INET &&
	      peer.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
	CHECK(rrecv(fd, peek, 0, 0) == 0);
	CHECK(rrecv(fd, peek, sizeof(peek), MSG_PEEK | MSG_WAITALL) > 0);
	CHECK(rrecv(fd, in, BIG, MSG_WAITALL) == (ssize_t)BIG);
	fill(want, BIG, 1);
	CHECK(memcmp(in, want, BIG) == 0);
	CHECK(memcmp(peek, want, sizeof(peek)) == 0);
	/* echo it back in odd-sized pieces */
	for (size_t off = 0; off < BIG;) {
		size_t n = BIG - off < 77777 ? BIG - off : 77777;

		send_all(fd, in + off, n);
		off += n;
	}
	/* the client shut its sending side: end of stream after the data */
	CHECK(rrecv(fd, &c, 1, 0) == 0);
	CHECK(rclose(fd) == 0);
	free(in);
	free(want);
	return NULL;
}

static int case_stream(void)
{
	int lfd = listener(0, 0), fd, v;
	pthread_t t;
	uint8_t *out = malloc(BIG), *back = malloc(BIG);
	struct sockaddr_in me, peer;
	socklen_t len;
	struct iovec iov[3];

	REQUIRE(out && back);
	REQUIRE(pthread_create(&t, NULL, stream_server, &lfd) == 0);
	fd = connect_to(0);
	len = sizeof(peer);
	CHECK(rgetpeername(fd, (struct sockaddr *)&peer, &len) == 0 && peer.sin_port == htons((uint16_t)port));
	len = sizeof(me);
	CHECK(rgetsockname(fd, (struct sockaddr *)&me, &len) == 0 && me.sin_family == AF_INET &&
	      me.sin_port != 0);
	len = sizeof(v);
	CHECK(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == 0);
	fill(out, BIG, 1);
	/* first bytes through rwritev, the rest through rsend */
	iov[0] = (struct iovec){ out, 10 };
	iov[1] = (struct iovec){ out + 10, 0 };
	iov[2] = (struct iovec){ out + 10, 4000 };
	CHECK(rwritev(fd, iov, 3) == 4010);
	/* An address on a connected stream socket is ignored, as by TCP. */
	CHECK(rsendto(fd, out + 4010, 90, 0, (struct sockaddr *)&peer, sizeof(peer)) == 90);
	send_all(fd, out + 4100, BIG - 4100);
	struct tcp_info ti;
	len = sizeof(ti);
	CHECK(rgetsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && len == sizeof(ti) &&
	      ti.tcpi_state == TCP_ESTABLISHED && ti.tcpi_snd_mss > 0);
	CHECK(rrecv(fd, back, BIG, MSG_WAITALL) == (ssize_t)BIG);
	CHECK(memcmp(out, back, BIG) == 0);
	CHECK(rshutdown(fd, SHUT_WR) == 0);
	CHECK(rsend(fd, out, 1, 0) < 0); /* no sending after SHUT_WR */
	pthread_join(t, NULL);
	CHECK(rclose(fd) == 0);
	CHECK(rclose(lfd) == 0);
	CHECK(rclose(lfd) < 0 && errno == EBADF);
	free(out);
	free(back);
	return failures != 0;
}

/* ---- nonblock: EINPROGRESS, rpoll, EAGAIN, rselect ------------------------ */

static int wait_ev(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int n = rpoll(&p, 1, ms);

	return n == 1 ? p.revents : 0;
}

static int case_nonblock(void)
{
	int lfd = listener(1, 0), fd, sfd, v;
	struct sockaddr_in a = lo();
	uint8_t buf[65536], got[65536];
	socklen_t len = sizeof(v);
	fd_set r, w;
	struct timeval tv;
	size_t sent = 0, rcvd = 0;

	errno = 0;
	CHECK(raccept(lfd, NULL, NULL) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	CHECK(wait_ev(lfd, POLLIN, 0) == 0); /* nobody connects yet */
	fd = rsocket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	REQUIRE(fd >= 0);
	CHECK(rfcntl(fd, F_GETFL) & O_NONBLOCK);
	errno = 0;
	v = rconnect(fd, (struct sockaddr *)&a, sizeof(a));
	CHECK(v == 0 || errno == EINPROGRESS);
	/* One thread drives both ends: rpoll takes the client's connection a
	 * step further each time its CM channel has news, until the listener
	 * has the request; the accept then completes while the client waits. */
	struct pollfd p[2] = { { .fd = lfd, .events = POLLIN }, { .fd = fd, .events = POLLOUT } };
	for (int i = 0; i < 100 && !(p[0].revents & POLLIN); i++)
		CHECK(rpoll(p, 2, 100) >= 0);
	CHECK(p[0].revents & POLLIN);
	sfd = raccept(lfd, NULL, NULL);
	REQUIRE(sfd >= 0);
	CHECK(rfcntl(sfd, F_SETFL, O_NONBLOCK) == 0);
	p[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
	p[1].revents = 0;
	for (int i = 0; i < 100 && !(p[1].revents & POLLOUT); i++)
		CHECK(rpoll(p, 2, 100) >= 0);
	CHECK(p[1].revents & POLLOUT);
	CHECK(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == 0);
	errno = 0;
	CHECK(rrecv(sfd, got, sizeof(got), 0) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	fill(buf, sizeof(buf), 3);
	/* 64 KiB at a time through one thread: send what fits, read what came */
	for (int round = 0; round < 40; round++) {
		ssize_t n;

		sent = rcvd = 0;
		while (rcvd < sizeof(buf)) {
			if (sent < sizeof(buf)) {
				n = rsend(fd, buf + sent, sizeof(buf) - sent, 0);
				if (n > 0)
					sent += (size_t)n;
				else
					CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
			}
			/* wait for either end: the sender may need the credits
			 * the receiver grants as it reads */
			FD_ZERO(&r);
			FD_ZERO(&w);
			FD_SET(sfd, &r);
			if (sent < sizeof(buf))
				FD_SET(fd, &w);
			tv = (struct timeval){ 5, 0 };
			if (rselect((sfd > fd ? sfd : fd) + 1, &r, &w, NULL, &tv) <= 0) {
				CHECK(!"rselect saw nothing to do");
				break;
			}
			n = rrecv(sfd, got + rcvd, sizeof(got) - rcvd, MSG_DONTWAIT);
			if (n > 0)
				rcvd += (size_t)n;
		}
		CHECK(memcmp(buf, got, sizeof(buf)) == 0);
	}
	/* the server closes: the client reads end of stream, and a hangup */
	CHECK(rclose(sfd) == 0);
	CHECK(wait_ev(fd, POLLIN, 5000) & (POLLIN | POLLHUP));
	CHECK(rrecv(fd, got, 1, 0) == 0);
	CHECK(rclose(fd) == 0);
	CHECK(rclose(lfd) == 0);
	return failures != 0;
}

/* ---- refused: nobody listens ------------------------------------------------ */

static int case_refused(void)
{
	struct sockaddr_in a = lo();
	int fd = rsocket(AF_INET, SOCK_STREAM, 0), v = -1;
	socklen_t len = sizeof(v);

	REQUIRE(fd >= 0);
	CHECK(rconnect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno == ECONNREFUSED);
	CHECK(rclose(fd) == 0);

	fd = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(fd >= 0);
	REQUIRE(rfcntl(fd, F_SETFL, O_NONBLOCK) == 0);
	if (rconnect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		CHECK(errno == EINPROGRESS || errno == ECONNREFUSED);
		CHECK(wait_ev(fd, POLLOUT, 10000) & POLLERR);
	}
	CHECK(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == ECONNREFUSED);
	CHECK(rclose(fd) == 0);
	return failures != 0;
}

/* ---- misc: what is refused, and how ----------------------------------------- */

static int case_misc(void)
{
	int fd, v = 0;
	socklen_t len = sizeof(v);
	char b[4];

	errno = 0;
	CHECK(rsocket(AF_INET, SOCK_DGRAM, 0) < 0 && errno == EOPNOTSUPP);
	CHECK(rsocket(AF_UNIX, SOCK_STREAM, 0) < 0 && errno == EAFNOSUPPORT);
	CHECK(rsend(123456, b, 1, 0) < 0 && errno == EBADF);
	CHECK(rrecv(-1, b, 1, 0) < 0 && errno == EBADF);
	CHECK(rpoll(NULL, 0, 0) == 0);
	fd = rsocket(AF_INET6, SOCK_STREAM, 0);
	REQUIRE(fd >= 0);
	CHECK(rsend(fd, b, 1, 0) < 0 && errno == ENOTCONN);
	CHECK(rrecv(fd, b, 1, 0) < 0 && errno == ENOTCONN);
	CHECK(rgetpeername(fd, NULL, &len) < 0 && errno == ENOTCONN);
	v = 128;
	CHECK(rsetsockopt(fd, SOL_RDMA, RDMA_SQSIZE, &v, sizeof(v)) == 0);
	len = sizeof(v);
	CHECK(rgetsockopt(fd, SOL_RDMA, RDMA_SQSIZE, &v, &len) == 0 && v == 128);
	v = 1;
	CHECK(rsetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)) < 0 && errno == EOPNOTSUPP);
	CHECK(rsetsockopt(fd, SOL_RDMA, RDMA_ROUTE, &v, sizeof(v)) < 0 && errno == EOPNOTSUPP);
	CHECK(rsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)) == 0);
	CHECK(rfcntl(fd, F_GETFD) < 0 && errno == EOPNOTSUPP);
	CHECK(rshutdown(fd, SHUT_RDWR) < 0 && errno == ENOTCONN);
	CHECK(rclose(fd) == 0);
	return failures != 0;
}

/* ---- iomap: riowrite lands in the peer's riomap'd buffer -------------------- */

#define IOLEN (256u << 10)

static void *iomap_server(void *arg)
{
	int lfd = *(int *)arg, fd;
	uint8_t *buf = mmap(NULL, IOLEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *want = malloc(IOLEN);
	char m[4];

	REQUIRE(buf != MAP_FAILED && want);
	fd = raccept(lfd, NULL, NULL);
	REQUIRE(fd >= 0);
	CHECK(riomap(fd, buf, IOLEN, PROT_WRITE, 0, 0) == 0);
	CHECK(riomap(fd, want, IOLEN, PROT_READ, 0, -1) < 0 && errno == EINVAL);
	send_all(fd, (const uint8_t *)"go", 2); /* carries the mapping to the client first */
	CHECK(rrecv(fd, m, 4, MSG_WAITALL) == 4 && memcmp(m, "done", 4) == 0);
	fill(want, IOLEN, 9);
	CHECK(memcmp(buf, want, IOLEN) == 0);
	CHECK(riounmap(fd, buf, IOLEN) == 0);
	CHECK(riounmap(fd, buf, IOLEN) < 0 && errno == EINVAL);
	CHECK(rclose(fd) == 0);
	munmap(buf, IOLEN);
	free(want);
	return NULL;
}

static int case_iomap(void)
{
	int lfd = listener(0, 4), fd;
	pthread_t t;
	uint8_t *src = malloc(IOLEN);
	char m[2];

	REQUIRE(src);
	REQUIRE(pthread_create(&t, NULL, iomap_server, &lfd) == 0);
	fd = connect_to(4);
	CHECK(rrecv(fd, m, 2, MSG_WAITALL) == 2);
	fill(src, IOLEN, 9);
	CHECK(riowrite(fd, src, 1000, 0, 0) == 1000);
	CHECK(riowrite(fd, src + 1000, IOLEN - 1000, 1000, 0) == IOLEN - 1000);
	CHECK(riowrite(fd, src, 1, IOLEN + 5, 0) == (size_t)-1 && errno == EINVAL); /* not mapped */
	send_all(fd, (const uint8_t *)"done", 4); /* after the writes: placed before it arrives */
	pthread_join(t, NULL);
	CHECK(rclose(fd) == 0);
	CHECK(rclose(lfd) == 0);
	free(src);
	return failures != 0;
}

/* ---- greet: the accepting side speaks first ---------------------------------- */

static void *greet_server(void *arg)
{
	int lfd = *(int *)arg, fd = raccept(lfd, NULL, NULL);
	double t0 = giw_now();

	REQUIRE(fd >= 0);
	send_all(fd, (const uint8_t *)"hello", 5); /* the client is busy elsewhere */
	CHECK(giw_now() - t0 < 0.15);               /* sent before the client's next call */
	CHECK(rclose(fd) == 0);
	return NULL;
}

static int case_greet(void)
{
	int lfd = listener(0, 0), fd;
	pthread_t t;
	char b[8];

	REQUIRE(pthread_create(&t, NULL, greet_server, &lfd) == 0);
	fd = connect_to(0);
	usleep(300 * 1000);
	CHECK(rrecv(fd, b, 5, MSG_WAITALL) == 5 && memcmp(b, "hello", 5) == 0);
	CHECK(rrecv(fd, b, 1, 0) == 0);
	pthread_join(t, NULL);
	CHECK(rclose(fd) == 0);
	CHECK(rclose(lfd) == 0);
	return failures != 0;
}

/* ---- hostile: a hand-made peer (rdma_cm + verbs) with bad connection data
 * and a bad message: refused or failed, never a crash or a read past rbuf --- */

struct raw {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	uint8_t buf[4096];
};

static struct rdma_cm_event *raw_event(struct raw *r)
{
	struct pollfd p = { .fd = r->ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	REQUIRE(poll(&p, 1, 10000) == 1);
	REQUIRE(rdma_get_cm_event(r->ch, &e) == 0);
	return e;
}

/* Connects with pdata; the event that ends the attempt. */
static enum rdma_cm_event_type raw_connect(struct raw *r, const uint8_t *pdata, uint8_t len)
{
	struct sockaddr_in a = lo();
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1, .max_inline_data = 64 },
				       .qp_type = IBV_QPT_RC };
	struct rdma_conn_param cp = { .private_data = pdata, .private_data_len = len,
				      .initiator_depth = 1 };
	struct rdma_cm_event *e;
	enum rdma_cm_event_type t;

	REQUIRE((r->ch = rdma_create_event_channel()) != NULL);
	REQUIRE(rdma_create_id(r->ch, &r->id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(r->id, NULL, (struct sockaddr *)&a, 2000) == 0);
	e = raw_event(r);
	REQUIRE(e->event == RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(e);
	REQUIRE(rdma_resolve_route(r->id, 2000) == 0);
	e = raw_event(r);
	REQUIRE(e->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
	rdma_ack_cm_event(e);
	REQUIRE(rdma_create_qp(r->id, NULL, &qa) == 0);
	REQUIRE((r->mr = ibv_reg_mr(r->id->qp->pd, r->buf, sizeof(r->buf),
				    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) != NULL);
	for (int i = 0; i < 8; i++) {
		struct ibv_sge sg = { (uintptr_t)r->buf + 4000 + 4 * (unsigned)i, 4, r->mr->lkey };
		struct ibv_recv_wr wr = { .sg_list = &sg, .num_sge = 1 }, *bad;

		REQUIRE(ibv_post_recv(r->id->qp, &wr, &bad) == 0);
	}
	REQUIRE(rdma_connect(r->id, &cp) == 0);
	e = raw_event(r);
	t = e->event;
	rdma_ack_cm_event(e);
	return t;
}

static void raw_close(struct raw *r)
{
	rdma_disconnect(r->id);
	rdma_destroy_qp(r->id);
	ibv_dereg_mr(r->mr);
	rdma_destroy_id(r->id);
	rdma_destroy_event_channel(r->ch);
}

static void *hostile_server(void *arg)
{
	int lfd = *(int *)arg, fd;
	char b[64];

	errno = 0;
	CHECK(raccept(lfd, NULL, NULL) < 0 && errno == ECONNABORTED); /* version 2 */
	fd = raccept(lfd, NULL, NULL);
	REQUIRE(fd >= 0);
	errno = 0;
	CHECK(rrecv(fd, b, sizeof(b), 0) < 0 && errno == EPROTO); /* a 512 MiB "write" */
	CHECK(rclose(fd) == 0);
	return NULL;
}

static int case_hostile(void)
{
	int lfd = listener(0, 0);
	pthread_t t;
	struct raw r1, r2;
	struct grs_conn c;
	uint8_t pd[GRS_CONN_LEN];

	memset(&r1, 0, sizeof(r1));
	memset(&r2, 0, sizeof(r2));
	REQUIRE(pthread_create(&t, NULL, hostile_server, &lfd) == 0);
	memset(&c, 0, sizeof(c));
	c.version = 2;
	c.credits = 8;
	c.target.length = 2;
	grs_conn_encode(pd, &c);
	CHECK(raw_connect(&r1, pd, sizeof(pd)) == RDMA_CM_EVENT_REJECTED);

	c.version = GRS_CONN_VERSION;
	c.target = (struct grs_sge){ (uintptr_t)r2.buf, 0, 2 };
	c.data_buf = (struct grs_sge){ (uintptr_t)r2.buf + 64, 0, 2048 };
	grs_conn_encode(pd, &c); /* keys 0: the server fails before it writes here */
	REQUIRE(raw_connect(&r2, pd, sizeof(pd)) == RDMA_CM_EVENT_ESTABLISHED);
	uint32_t msg = grs_msg(GRS_OP_DATA, 0x1fffffff);
	struct ibv_sge sg = { (uintptr_t)&msg, 4, 0 };
	struct ibv_send_wr wr = { .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED },
			   *bad;
	CHECK(ibv_post_send(r2.id->qp, &wr, &bad) == 0);
	pthread_join(t, NULL);
	raw_close(&r2);
	rdma_destroy_qp(r1.id);
	ibv_dereg_mr(r1.mr);
	rdma_destroy_id(r1.id);
	rdma_destroy_event_channel(r1.ch);
	CHECK(rclose(lfd) == 0);
	return failures != 0;
}

/* ---- many: connections one after another (ids, fds and memory come back) ---- */

static void *many_server(void *arg)
{
	int lfd = *(int *)arg;

	for (int i = 0; i < 30; i++) {
		int fd = raccept(lfd, NULL, NULL);
		char b[64];

		REQUIRE(fd >= 0);
		CHECK(rrecv(fd, b, sizeof(b), MSG_WAITALL) == (ssize_t)sizeof(b));
		send_all(fd, (const uint8_t *)b, sizeof(b));
		CHECK(rclose(fd) == 0);
	}
	return NULL;
}

static int case_many(void)
{
	int lfd = listener(0, 0), first = -1;
	pthread_t t;

	REQUIRE(pthread_create(&t, NULL, many_server, &lfd) == 0);
	for (int i = 0; i < 30; i++) {
		int fd = connect_to(0);
		char b[64], c[64];

		if (first < 0)
			first = fd;
		memset(b, i, sizeof(b));
		send_all(fd, (const uint8_t *)b, sizeof(b));
		CHECK(rrecv(fd, c, sizeof(c), MSG_WAITALL) == (ssize_t)sizeof(c) && memcmp(b, c, sizeof(b)) == 0);
		CHECK(rclose(fd) == 0);
	}
	pthread_join(t, NULL);
	CHECK(rclose(lfd) == 0);
	/* every descriptor was given back */
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0 && fd <= first);
	rclose(fd);
	return failures != 0;
}

/* ---- fork: a child forked after its parent's rsockets were made ------------
 * rsockets live in the core (rsockets/rsocket.c), so the child, which gets a
 * fresh copy of the core at its first call (capi/loader/shim.c), starts from
 * an empty rsocket table: its parent's rsockets are none there (EBADF), and
 * its own new rsockets work -- here one connects to its parent's listener
 * while the parent keeps using a connection it made before the fork. */

static void *accept_one(void *arg)
{
	int *fds = arg;

	fds[1] = raccept(fds[0], NULL, NULL);
	return NULL;
}

static int case_fork(void)
{
	int fds[2] = { listener(0, 0), -1 }, c, n, status = -1;
	pthread_t t;
	pid_t pid;
	char b[8];

	REQUIRE(pthread_create(&t, NULL, accept_one, fds) == 0);
	c = connect_to(0);
	pthread_join(t, NULL);
	REQUIRE(fds[1] >= 0);
	send_all(c, (const uint8_t *)"x", 1);
	CHECK(rrecv(fds[1], b, 1, MSG_WAITALL) == 1 && b[0] == 'x');

	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		int fd;

		errno = 0;
		CHECK(rsend(c, "y", 1, 0) == -1 && errno == EBADF);
		CHECK(rclose(fds[0]) == -1 && errno == EBADF);
		fd = connect_to(0);
		send_all(fd, (const uint8_t *)"child", 5);
		CHECK(rrecv(fd, b, 2, MSG_WAITALL) == 2 && memcmp(b, "ok", 2) == 0);
		CHECK(rclose(fd) == 0);
		_exit(failures != 0);
	}
	n = raccept(fds[0], NULL, NULL);
	REQUIRE(n >= 0);
	CHECK(rrecv(n, b, 5, MSG_WAITALL) == 5 && memcmp(b, "child", 5) == 0);
	send_all(n, (const uint8_t *)"ok", 2);
	send_all(c, (const uint8_t *)"z", 1); /* the parent's own connection still works */
	CHECK(rrecv(fds[1], b, 1, MSG_WAITALL) == 1 && b[0] == 'z');
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(rclose(n) == 0);
	CHECK(rclose(c) == 0);
	CHECK(rclose(fds[1]) == 0);
	CHECK(rclose(fds[0]) == 0);
	return failures != 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(void);
	} cases[] = {
		{ "stream", case_stream },   { "nonblock", case_nonblock }, { "refused", case_refused },
		{ "misc", case_misc },       { "iomap", case_iomap },       { "many", case_many },
		{ "greet", case_greet },     { "hostile", case_hostile },   { "fork", case_fork },
	};

	if (argc < 2) {
		fprintf(stderr, "usage: rs_api case [port]\n");
		return 2;
	}
	port = argc > 2 ? atoi(argv[2]) : 32500;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (strcmp(argv[1], cases[i].name) == 0) {
			int r = cases[i].run();

			printf("%s: %s\n", argv[1], r ? "FAIL" : "PASS");
			return r;
		}
	fprintf(stderr, "unknown case %s\n", argv[1]);
	return 2;
}
