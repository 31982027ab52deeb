/* rsockets: sockets over RDMA connections (<rdma/rsocket.h>), a library on
 * top of the public rdma_* and ibv_* API, as librdmacm's rsocket.c is: the
 * files of this directory include only the public headers of include/ (and
 * their own), and reach goiwarp through the calls every program makes.
 *
 * Where it is linked: into the Go core, libgoiwarp-core.so.1, as a static
 * archive linked whole (CMakeLists.txt: -Wl,--whole-archive in go build's
 * -extldflags), not into the loader shim libgoiwarp.so.1. Why:
 *  - fork. The shim outlives a fork, a core does not: a child forked after
 *    the first call gets a fresh copy of the core (capi/loader/shim.c). In
 *    the core, rsockets' state -- the fd table below, each rsocket's locks,
 *    buffers, ids and CQ -- lives and dies with the objects it names: a
 *    child starts from an empty table, its new rsockets run on its own core,
 *    and its parent's rsockets are no rsockets there (EBADF), as the parent's
 *    ids are foreign there (EPERM). In the shim the parent's table would
 *    reach the child, naming objects of a dead core, with any of its mutexes
 *    that another thread of the parent held at the fork still locked.
 *  - the calls stay inside the core, which is linked -Bsymbolic: no
 *    trampoline per call, and nothing loaded beside goiwarp (a librdmacm the
 *    program also links) can come between rsockets and goiwarp's rdma_*.
 *  - the exports do not change: the core exports rsocket, rsend, ... by name
 *    (build/libgoiwarp.map) and the shim forwards them as it forwards every
 *    call of the core (capi/loader/gen-symbols.sh, which also reads their
 *    failure kinds from these files).
 *
 * This file: the socket calls and their options.
 *
 * An rsocket is numbered by the fd of its own CM event channel, as
 * librdmacm's are, so its number never collides with the application's
 * descriptors and rpoll can sleep on it.
 *
 * Files, each calling only the ones listed after it (build/c-calls.py
 * checks that no two call each other):
 *   rsocket.c   the socket calls: rsocket, rbind, rlisten, rconnect, raccept,
 *               rshutdown, rclose, options, rfcntl
 *   poll.c      rpoll, rselect
 *   data.c      the data calls: rrecv, rsend and their variants, riomap,
 *               riounmap, riowrite
 *   connect.c   connection set-up, one CM event at a time; peer and local names
 *   table.c     rsocket number -> struct grs
 *   endpoint.c  one rsocket's QP, CQ, buffers, credits, completions, waiting
 *   rsocket.h   the private header; rsocket_wire.h the wire encoding (pure)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "rsocket.h"

/* ---- life cycle ------------------------------------------------------------ */

static struct grs *grs_alloc(const struct grs *from)
{
	struct grs *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return NULL;
	rs->fd = -1;
	rs->type = SOCK_STREAM;
	if (from) { /* an accepted rsocket takes its listener's sizes */
		rs->domain = from->domain;
		rs->sbuf_size = from->sbuf_size;
		rs->rbuf_size = from->rbuf_size;
		rs->sq_size = from->sq_size;
		rs->rq_size = from->rq_size;
		rs->sq_inline = from->sq_inline;
		rs->iomap_size = from->iomap_size;
	} else {
		rs->sbuf_size = GRS_DEF_WMEM;
		rs->rbuf_size = GRS_DEF_RMEM;
		rs->sq_size = GRS_DEF_SQSIZE;
		rs->rq_size = GRS_DEF_RQSIZE;
		rs->sq_inline = GRS_DEF_INLINE;
	}
	pthread_mutex_init(&rs->slock, NULL);
	pthread_mutex_init(&rs->rlock, NULL);
	pthread_mutex_init(&rs->cq_lock, NULL);
	pthread_mutex_init(&rs->cq_wait, NULL);
	pthread_mutex_init(&rs->map_lock, NULL);
	return rs;
}

static void grs_free(struct grs *rs)
{
	grs_remove(rs);
	grs_free_ep(rs);
	if (rs->id)
		rdma_destroy_id(rs->id);
	if (rs->ch)
		rdma_destroy_event_channel(rs->ch);
	pthread_mutex_destroy(&rs->slock);
	pthread_mutex_destroy(&rs->rlock);
	pthread_mutex_destroy(&rs->cq_lock);
	pthread_mutex_destroy(&rs->cq_wait);
	pthread_mutex_destroy(&rs->map_lock);
	free(rs);
}

int rsocket(int domain, int type, int protocol)
{
	int flags = type & (SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct grs *rs;

	type &= ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (domain != AF_INET && domain != AF_INET6) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (type != SOCK_STREAM || (protocol && protocol != IPPROTO_TCP)) {
		/* datagram rsockets need UD QPs: iWARP has none */
		errno = EOPNOTSUPP;
		return -1;
	}
	rs = grs_alloc(NULL);
	if (!rs) {
		errno = ENOMEM;
		return -1;
	}
	rs->domain = domain;
	rs->ch = rdma_create_event_channel();
	if (!rs->ch || rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_TCP))
		goto err;
	rs->fd = rs->ch->fd;
	if (flags & SOCK_CLOEXEC)
		(void)fcntl(rs->fd, F_SETFD, FD_CLOEXEC);
	if (flags & SOCK_NONBLOCK) {
		rs->fd_flags = O_NONBLOCK;
		if (fcntl(rs->fd, F_SETFL, O_NONBLOCK))
			goto err;
	}
	if (grs_insert(rs))
		goto err;
	return rs->fd;
err: {
	int e = errno;

	grs_free(rs);
	errno = e;
	return -1;
}
}

int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct grs *rs = grs_get(socket);

	if (!rs)
		return -1;
	if (!addr || addrlen < sizeof(struct sockaddr_in)) {
		errno = EINVAL;
		return -1;
	}
	if (rs->state != GRS_IDLE) {
		errno = EINVAL;
		return -1;
	}
	if (rdma_bind_addr(rs->id, (struct sockaddr *)addr))
		return -1;
	rs->state = GRS_BOUND;
	return 0;
}

int rlisten(int socket, int backlog)
{
	struct grs *rs = grs_get(socket);

	if (!rs)
		return -1;
	if (rs->state == GRS_LISTENING)
		return 0;
	if (rs->state != GRS_BOUND && rs->state != GRS_IDLE) {
		errno = EINVAL;
		return -1;
	}
	if (rdma_listen(rs->id, backlog))
		return -1;
	rs->state = GRS_LISTENING;
	return 0;
}

/* ---- connecting and accepting --------------------------------------------------------- */

int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	struct grs *rs = grs_get(socket);

	if (!rs)
		return -1;
	switch (rs->state) {
	case GRS_IDLE:
	case GRS_BOUND:
		if (!addr || addrlen < sizeof(struct sockaddr_in) ||
		    addrlen > sizeof(rs->id->route.addr.dst_storage)) {
			errno = EINVAL;
			return -1;
		}
		memcpy(&rs->id->route.addr.dst_storage, addr, addrlen);
		return grs_do_connect(rs);
	case GRS_OPENING:
		return grs_do_connect(rs);
	case GRS_CONNECTED:
		errno = EISCONN;
		return -1;
	default:
		errno = rs->err ? rs->err : EINVAL;
		return -1;
	}
}

/* The listener's next connection. Its channel's O_NONBLOCK decides whether
 * this waits; a blocking listener also waits for the connection to be
 * established, a non-blocking one leaves that to the first call on the new
 * rsocket (rpoll, rsend, rrecv), so one thread can connect to itself. */
int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct grs *rs = grs_get(socket), *n;
	struct rdma_conn_param param;
	struct grs_event ev;
	struct grs_conn c;
	uint8_t pd[GRS_CONN_LEN];
	int e;

	if (!rs)
		return -1;
	if (rs->state != GRS_LISTENING) {
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		if (grs_next_event(rs->ch, &ev))
			return -1;
		if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
	}
	if (grs_conn_decode(ev.pdata, ev.pdata_len, &c)) {
		/* not an rsocket peer */
		rdma_reject(ev.id, NULL, 0);
		rdma_destroy_id(ev.id);
		errno = ECONNABORTED;
		return -1;
	}
	n = grs_alloc(rs);
	if (!n) {
		rdma_reject(ev.id, NULL, 0);
		rdma_destroy_id(ev.id);
		errno = ENOMEM;
		return -1;
	}
	n->id = ev.id;
	n->id->context = n;
	n->passive = 1;
	n->ch = rdma_create_event_channel();
	if (!n->ch || rdma_migrate_id(n->id, n->ch))
		goto err;
	n->fd = n->ch->fd;
	if (rs->fd_flags & O_NONBLOCK)
		grs_set_channel_block(n, 1);
	if (grs_create_ep(n))
		goto err;
	pthread_mutex_lock(&n->cq_lock);
	grs_conn_save(n, &c);
	pthread_mutex_unlock(&n->cq_lock);
	grs_conn_fill(n, &c);
	grs_conn_encode(pd, &c);
	memset(&param, 0, sizeof(param));
	param.private_data = pd;
	param.private_data_len = sizeof(pd);
	param.initiator_depth = ev.initiator_depth;
	param.responder_resources = ev.responder_resources;
	param.flow_control = 1;
	param.rnr_retry_count = 7;
	if (rdma_accept(n->id, &param))
		goto err;
	n->state = GRS_OPENING;
	n->phase = GRS_ACCEPTING;
	if (grs_insert(n))
		goto err;
	if (!(rs->fd_flags & O_NONBLOCK) && grs_do_connect(n)) {
		e = errno;
		grs_free(n);
		errno = e;
		return -1;
	}
	if (addr && addrlen)
		rgetpeername(n->fd, addr, addrlen);
	return n->fd;
err:
	e = errno;
	if (n->id && !n->id->qp)
		rdma_reject(n->id, NULL, 0);
	grs_free(n);
	errno = e;
	return -1;
}

/* ---- shutdown and close ------------------------------------------------------------ */

int rshutdown(int socket, int how)
{
	struct grs *rs = grs_get(socket);
	uint32_t ctrl;
	int ret = 0, nb;

	if (!rs)
		return -1;
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
		errno = EINVAL;
		return -1;
	}
	if (rs->state != GRS_CONNECTED && rs->state != GRS_CLOSED && rs->state != GRS_FAILED) {
		errno = ENOTCONN;
		return -1;
	}
	nb = rs->fd_flags & O_NONBLOCK;
	if (nb)
		(void)fcntl(rs->cch->fd, F_SETFL, 0); /* shutdown waits for its sends */
	pthread_mutex_lock(&rs->cq_lock);
	if (rs->state == GRS_CONNECTED) {
		if (how == SHUT_RDWR) {
			ctrl = GRS_CTRL_DISCONNECT;
			rs->readable = rs->writable = 0;
		} else if (how == SHUT_WR) {
			rs->writable = 0;
			ctrl = rs->readable ? GRS_CTRL_SHUTDOWN : GRS_CTRL_DISCONNECT;
		} else {
			rs->readable = 0;
			ctrl = GRS_CTRL_DISCONNECT;
			if (rs->writable) {
				pthread_mutex_unlock(&rs->cq_lock);
				goto out;
			}
		}
		pthread_mutex_unlock(&rs->cq_lock);
		if (rs->ctrl_used >= GRS_CTRL_SLOTS)
			ret = grs_process(rs, 0, grs_any);
		pthread_mutex_lock(&rs->cq_lock);
		while (!ret && rs->state == GRS_CONNECTED && rs->ctrl_used >= GRS_CTRL_SLOTS) {
			pthread_mutex_unlock(&rs->cq_lock);
			ret = grs_process(rs, 0, grs_any);
			pthread_mutex_lock(&rs->cq_lock);
		}
		if (!ret && rs->state == GRS_CONNECTED && !grs_may_speak(rs)) {
			/* the peer never spoke, so we may not: the disconnect says it */
			if (ctrl == GRS_CTRL_DISCONNECT)
				rs->state = GRS_CLOSED;
		} else if (!ret && rs->state == GRS_CONNECTED) {
			ret = grs_send_ctrl(rs, ctrl);
		}
	}
	pthread_mutex_unlock(&rs->cq_lock);
	if (!ret && rs->state == GRS_CONNECTED)
		ret = grs_process(rs, 0, grs_all_sent);
out:
	if (nb && rs->state == GRS_CONNECTED)
		(void)fcntl(rs->cch->fd, F_SETFL, O_NONBLOCK);
	if (rs->state == GRS_CLOSED || rs->state == GRS_FAILED)
		rdma_disconnect(rs->id); /* flushes the QP: wakes pollers on both sides */
	return ret;
}

/* After our disconnect, until the peer's (its TCP FIN: DISCONNECTED) or
 * GRS_LINGER_MS. Why: a socket closed while the peer still sends (its last
 * credit grants) is reset, and a peer that has not read all our data yet
 * loses it to the reset (seen with librdmacm on siw over qemu's slirp).
 * Meanwhile the CQ is drained, so the peer's last messages find receives. */
static void grs_linger(struct grs *rs)
{
	uint64_t end = grs_now_ms() + GRS_LINGER_MS, now;
	struct grs_event ev;

	if (!rs->cq)
		return;
	pthread_mutex_lock(&rs->cq_lock);
	if (!rs->cq_armed) {
		ibv_req_notify_cq(rs->cq, 0);
		rs->cq_armed = 1;
	}
	pthread_mutex_unlock(&rs->cq_lock);
	while ((now = grs_now_ms()) < end) {
		struct pollfd p[2] = { { .fd = rs->ch->fd, .events = POLLIN },
				       { .fd = rs->cch->fd, .events = POLLIN } };

		if (poll(p, 2, (int)(end - now)) <= 0)
			break;
		if (p[0].revents) {
			if (grs_next_event(rs->ch, &ev))
				break;
			if (ev.type == RDMA_CM_EVENT_DISCONNECTED)
				break;
		}
		if (p[1].revents) {
			(void)grs_cq_event(rs);
			(void)grs_process(rs, 1, grs_any);
			pthread_mutex_lock(&rs->cq_lock);
			ibv_req_notify_cq(rs->cq, 0);
			rs->cq_armed = 1;
			pthread_mutex_unlock(&rs->cq_lock);
		}
	}
}

int rclose(int socket)
{
	struct grs *rs = grs_get(socket);

	if (!rs)
		return -1;
	if (rs->state == GRS_CONNECTED)
		rshutdown(socket, SHUT_RDWR);
	if (rs->state == GRS_CLOSED) {
		rdma_disconnect(rs->id); /* a no-op when rshutdown did it */
		grs_linger(rs);
	}
	grs_free(rs);
	return 0;
}

/* ---- options ---------------------------------------------------------------------------- */

static void grs_flag(uint64_t *set, int optname, int on)
{
	if (optname < 0 || optname >= 64)
		return;
	if (on)
		*set |= 1ull << optname;
	else
		*set &= ~(1ull << optname);
}

static int grs_int_opt(const void *optval, socklen_t optlen, int *v)
{
	if (!optval || optlen < sizeof(int)) {
		errno = EINVAL;
		return -1;
	}
	memcpy(v, optval, sizeof(int));
	return 0;
}

int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	struct grs *rs = grs_get(socket);
	int v;

	if (!rs)
		return -1;
	if (level == SOL_SOCKET && optname == SO_LINGER) {
		const struct linger *l = optval;

		if (!l || optlen < sizeof(*l)) {
			errno = EINVAL;
			return -1;
		}
		grs_flag(&rs->so_opts, SO_LINGER, l->l_onoff);
		return 0;
	}
	if (grs_int_opt(optval, optlen, &v))
		return -1;
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
			if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof(v)) &&
			    errno != ENOSYS && errno != EOPNOTSUPP && errno != ENOPROTOOPT)
				return -1;
			grs_flag(&rs->so_opts, optname, v);
			return 0;
		case SO_RCVBUF:
			if (!rs->rbuf && v > 0)
				rs->rbuf_size = (uint32_t)v << 1;
			return 0;
		case SO_SNDBUF:
			if (!rs->sbuf && v > 0)
				rs->sbuf_size = (uint32_t)v << 1;
			if (rs->sbuf_size < 2 * GRS_SNDLOWAT)
				rs->sbuf_size = 2 * GRS_SNDLOWAT;
			return 0;
		case SO_OOBINLINE:
			grs_flag(&rs->so_opts, optname, v);
			return 0;
		case SO_KEEPALIVE:
			/* librdmacm runs a thread sending keepalive messages; not here */
			errno = EOPNOTSUPP;
			return -1;
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_NODELAY: /* every send goes out at once anyway */
			grs_flag(&rs->tcp_opts, optname, v);
			return 0;
		case TCP_MAXSEG:
			return 0;
		case TCP_KEEPIDLE:
		case TCP_KEEPINTVL:
		case TCP_KEEPCNT:
			errno = EOPNOTSUPP;
			return -1;
		}
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY) {
			if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof(v)))
				return -1;
			grs_flag(&rs->ipv6_opts, optname, v);
			return 0;
		}
		break;
	case SOL_RDMA:
		if (rs->state >= GRS_OPENING || rs->cq) {
			errno = EINVAL;
			return -1;
		}
		switch (optname) {
		case RDMA_SQSIZE:
			rs->sq_size = (uint16_t)((uint32_t)v > GRS_QP_MAX ? GRS_QP_MAX : (uint32_t)v);
			return 0;
		case RDMA_RQSIZE:
			rs->rq_size = (uint16_t)((uint32_t)v > GRS_QP_MAX ? GRS_QP_MAX : (uint32_t)v);
			return 0;
		case RDMA_INLINE:
			rs->sq_inline = (uint16_t)((uint32_t)v > GRS_QP_MAX ? GRS_QP_MAX : (uint32_t)v);
			return 0;
		case RDMA_IOMAPSIZE:
			rs->iomap_size = grs_scale_to_value(grs_value_to_scale(v < 0 ? 0 : (uint32_t)v));
			return 0;
		case RDMA_ROUTE: /* an InfiniBand path record: nothing to do with it on iWARP */
			errno = EOPNOTSUPP;
			return -1;
		}
		break;
	}
	errno = ENOPROTOOPT;
	return -1;
}

static int grs_put_int(void *optval, socklen_t *optlen, int v)
{
	if (!optval || !optlen || *optlen < sizeof(int)) {
		errno = EINVAL;
		return -1;
	}
	memcpy(optval, &v, sizeof(v));
	*optlen = sizeof(int);
	return 0;
}

/* TCP_INFO: programs that print it every interval (iperf3, sockperf) get the
 * state and segment size an rsocket has; the kernel's counters (RTT,
 * retransmits, congestion window) are those of a connection we do not see,
 * and read 0. Truncated to the caller's length, as the kernel does. */
static int grs_tcp_info(const struct grs *rs, void *optval, socklen_t *optlen)
{
	struct tcp_info ti;

	if (!optval || !optlen) {
		errno = EFAULT;
		return -1;
	}
	memset(&ti, 0, sizeof(ti));
	switch (rs->state) {
	case GRS_LISTENING:
		ti.tcpi_state = TCP_LISTEN;
		break;
	case GRS_OPENING:
		ti.tcpi_state = rs->passive ? TCP_SYN_RECV : TCP_SYN_SENT;
		break;
	case GRS_CONNECTED:
		ti.tcpi_state = TCP_ESTABLISHED;
		break;
	default:
		ti.tcpi_state = TCP_CLOSE;
		break;
	}
	ti.tcpi_snd_mss = ti.tcpi_rcv_mss = ti.tcpi_advmss = GRS_MSS;
	if (*optlen > sizeof(ti))
		*optlen = sizeof(ti);
	memcpy(optval, &ti, *optlen);
	return 0;
}

int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	struct grs *rs = grs_get(socket);
	int v;

	if (!rs)
		return -1;
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			return grs_put_int(optval, optlen, !!(rs->so_opts & (1ull << optname)));
		case SO_RCVBUF:
			return grs_put_int(optval, optlen, (int)rs->rbuf_size);
		case SO_SNDBUF:
			return grs_put_int(optval, optlen, (int)rs->sbuf_size);
		case SO_TYPE:
			return grs_put_int(optval, optlen, rs->type);
		case SO_ERROR:
			v = rs->err;
			if (grs_put_int(optval, optlen, v))
				return -1;
			rs->err = 0;
			return 0;
		case SO_LINGER: {
			struct linger l = { !!(rs->so_opts & (1ull << SO_LINGER)), 0 };

			if (!optval || !optlen || *optlen < sizeof(l)) {
				errno = EINVAL;
				return -1;
			}
			memcpy(optval, &l, sizeof(l));
			*optlen = sizeof(l);
			return 0;
		}
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_NODELAY:
			return grs_put_int(optval, optlen, !!(rs->tcp_opts & (1ull << optname)));
		case TCP_MAXSEG:
			return grs_put_int(optval, optlen, GRS_MSS);
		case TCP_INFO:
			return grs_tcp_info(rs, optval, optlen);
		}
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY)
			return grs_put_int(optval, optlen, !!(rs->ipv6_opts & (1ull << optname)));
		break;
	case SOL_RDMA:
		switch (optname) {
		case RDMA_SQSIZE:
			return grs_put_int(optval, optlen, rs->sq_size);
		case RDMA_RQSIZE:
			return grs_put_int(optval, optlen, rs->rq_size);
		case RDMA_INLINE:
			return grs_put_int(optval, optlen, rs->sq_inline);
		case RDMA_IOMAPSIZE:
			return grs_put_int(optval, optlen, (int)rs->iomap_size);
		}
		break;
	}
	errno = ENOPROTOOPT;
	return -1;
}

int rfcntl(int socket, int cmd, ... /* arg */)
{
	struct grs *rs = grs_get(socket);
	va_list ap;
	int arg, nb;

	if (!rs)
		return -1;
	switch (cmd) {
	case F_GETFL:
		return rs->fd_flags;
	case F_SETFL:
		va_start(ap, cmd);
		arg = va_arg(ap, int);
		va_end(ap);
		nb = arg & O_NONBLOCK;
		if (rs->cch && fcntl(rs->cch->fd, F_SETFL, nb))
			return -1;
		if (rs->state != GRS_CONNECTED && fcntl(rs->ch->fd, F_SETFL, nb))
			return -1;
		rs->fd_flags = arg;
		return 0;
	default:
		errno = EOPNOTSUPP;
		return -1;
	}
}

