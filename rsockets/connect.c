/* rsockets: connection set-up, one CM event at a time, and the names of a
 * connection (rgetpeername, rgetsockname).
 *
 * Ids are asynchronous (own channel, not librdmacm's synchronous mode) so
 * that a non-blocking rsocket can connect step by step: each step reads one
 * event, and O_NONBLOCK on the channel turns "no event yet" into
 * EINPROGRESS/EAGAIN. rconnect and raccept (rsocket.c) start the steps; the
 * first data call or rpoll on a connection still opening takes the next.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "rsocket.h"

/* ---- connection set-up --------------------------------------------------------- */

/* Reads (and acks) the next event of the channel. */
int grs_next_event(struct rdma_event_channel *ch, struct grs_event *out)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ch, &ev))
		return -1;
	out->type = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->initiator_depth = ev->param.conn.initiator_depth;
	out->responder_resources = ev->param.conn.responder_resources;
	out->pdata_len = 0;
	if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
		out->pdata_len = ev->param.conn.private_data_len;
		if (out->pdata_len > sizeof(out->pdata))
			out->pdata_len = sizeof(out->pdata);
		memcpy(out->pdata, ev->param.conn.private_data, out->pdata_len);
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static int grs_event_errno(const struct grs_event *ev)
{
	switch (ev->type) {
	case RDMA_CM_EVENT_REJECTED:
		return ECONNREFUSED;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		return ev->status < 0 && ev->status != -ETIMEDOUT ? -ev->status : EHOSTUNREACH;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return ev->status < 0 ? -ev->status : ECONNREFUSED;
	default:
		return ECONNRESET;
	}
}


/* One step further towards CONNECTED; -1 with EINPROGRESS while the next
 * event is not there yet on a non-blocking rsocket. */
int grs_do_connect(struct grs *rs)
{
	struct rdma_conn_param param;
	struct grs_conn c;
	struct grs_event ev;
	uint8_t pd[GRS_CONN_LEN];

	if (rs->state == GRS_IDLE || rs->state == GRS_BOUND) {
		if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)&rs->id->route.addr.dst_storage,
				      GRS_RESOLVE_MS))
			goto fail;
		rs->state = GRS_OPENING;
		rs->phase = GRS_RESOLVE_ADDR;
	}
	if (rs->state != GRS_OPENING) {
		errno = rs->state == GRS_CONNECTED ? EISCONN : EINVAL;
		return -1;
	}
	for (;;) {
		if (rs->phase == GRS_ACCEPTING && !(rs->fd_flags & O_NONBLOCK))
			grs_set_channel_block(rs, 0);
		if (grs_next_event(rs->ch, &ev)) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				errno = EINPROGRESS;
				return -1;
			}
			if (errno == EINTR)
				return -1;
			goto fail;
		}
		switch (rs->phase) {
		case GRS_RESOLVE_ADDR:
			if (ev.type != RDMA_CM_EVENT_ADDR_RESOLVED)
				goto fail_ev;
			if (rdma_resolve_route(rs->id, GRS_RESOLVE_MS))
				goto fail;
			rs->phase = GRS_RESOLVE_ROUTE;
			break;
		case GRS_RESOLVE_ROUTE:
			if (ev.type != RDMA_CM_EVENT_ROUTE_RESOLVED)
				goto fail_ev;
			if (grs_create_ep(rs))
				goto fail;
			grs_conn_fill(rs, &c);
			grs_conn_encode(pd, &c);
			memset(&param, 0, sizeof(param));
			param.private_data = pd;
			param.private_data_len = sizeof(pd);
			param.flow_control = 1;
			param.retry_count = 7;
			param.rnr_retry_count = 7;
			/* as librdmacm on iWARP: the peer may use a zero-length RDMA
			 * Read as its ready-to-receive, which needs an ORD of 1 here */
			param.initiator_depth = 1;
			if (rdma_connect(rs->id, &param))
				goto fail;
			rs->phase = GRS_CONNECTING;
			break;
		case GRS_CONNECTING:
			if (ev.type != RDMA_CM_EVENT_ESTABLISHED)
				goto fail_ev;
			if (grs_conn_decode(ev.pdata, ev.pdata_len, &c)) {
				errno = EPROTO;
				goto fail;
			}
			pthread_mutex_lock(&rs->cq_lock);
			grs_conn_save(rs, &c);
			rs->readable = rs->writable = 1;
			rs->connected_ms = grs_now_ms();
			rs->state = GRS_CONNECTED;
			pthread_mutex_unlock(&rs->cq_lock);
			/* speak first (our credit grant), so the accepting side,
			 * which waits for that, may send at once */
			(void)grs_process(rs, 1, grs_any);
			return 0;
		case GRS_ACCEPTING:
			if (ev.type != RDMA_CM_EVENT_ESTABLISHED)
				goto fail_ev;
			pthread_mutex_lock(&rs->cq_lock);
			rs->readable = rs->writable = 1;
			rs->state = GRS_CONNECTED;
			pthread_mutex_unlock(&rs->cq_lock);
			return 0;
		}
	}
fail_ev:
	errno = grs_event_errno(&ev);
fail:
	rs->state = GRS_CONNECT_ERROR;
	rs->err = errno;
	return -1;
}

/* ---- names ---------------------------------------------------------------------------- */

static int grs_copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src)
{
	socklen_t n;

	if (!dst || !len) {
		errno = EFAULT;
		return -1;
	}
	n = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	memcpy(dst, src, *len < n ? *len : n);
	*len = n;
	return 0;
}

int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct grs *rs = grs_get(socket);

	if (!rs)
		return -1;
	if (rs->state != GRS_CONNECTED && rs->state != GRS_CLOSED && rs->state != GRS_FAILED) {
		errno = ENOTCONN;
		return -1;
	}
	return grs_copy_addr(addr, addrlen, rdma_get_peer_addr(rs->id));
}

int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	struct grs *rs = grs_get(socket);
	struct sockaddr_storage any;

	if (!rs)
		return -1;
	if (rdma_get_local_addr(rs->id)->sa_family)
		return grs_copy_addr(addr, addrlen, rdma_get_local_addr(rs->id));
	memset(&any, 0, sizeof(any)); /* unbound: the wildcard, as getsockname says */
	any.ss_family = (sa_family_t)rs->domain;
	return grs_copy_addr(addr, addrlen, (struct sockaddr *)&any);
}
