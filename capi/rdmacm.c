/* librdmacm ABI: event channels, ids, events, connections and QP helpers.
 * The CM itself is the Go package rdmacm; this file owns the C structs
 * (rdmacm.h), keeps the rdma_cm_id fields as librdmacm keeps them, sets
 * errno, and implements synchronous mode (NULL channel) as librdmacm does:
 * the id gets a private channel and each call waits for its event. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "rdmacm.h"
#include "_cgo_export.h"

static int gcm_ret(int e)
{
	return e ? gcm_err(e) : 0;
}

/* ---- devices and their default PDs ------------------------------------- */

static pthread_mutex_t gcm_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gcm_devpd {
	struct ibv_context *verbs;
	struct ibv_pd *pd;
} gcm_devpds[64];
#define GCM_NDEVPDS (sizeof(gcm_devpds) / sizeof(gcm_devpds[0]))

/* The device's default PD, as librdmacm's cma_dev->pd. */
static struct ibv_pd *gcm_default_pd(struct ibv_context *verbs)
{
	struct ibv_pd *pd = NULL;
	size_t i;

	pthread_mutex_lock(&gcm_dev_lock);
	for (i = 0; i < GCM_NDEVPDS && gcm_devpds[i].verbs; i++)
		if (gcm_devpds[i].verbs == verbs) {
			pd = gcm_devpds[i].pd;
			goto out;
		}
	if (i < GCM_NDEVPDS) {
		pd = ibv_alloc_pd(verbs);
		if (pd) {
			gcm_devpds[i].verbs = verbs;
			gcm_devpds[i].pd = pd;
		}
	}
out:
	pthread_mutex_unlock(&gcm_dev_lock);
	return pd;
}

static socklen_t gcm_addrlen(const struct sockaddr *sa)
{
	if (!sa)
		return 0;
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	}
	return 0;
}

/* Refresh the id from what Go knows: addresses, device, default PD, GID. */
static void gcm_apply(struct rdma_cm_id *id, const struct gcm_addrs *a)
{
	if (a->src.ss_family)
		memcpy(&id->route.addr.src_storage, &a->src, sizeof(a->src));
	if (a->dst.ss_family)
		memcpy(&id->route.addr.dst_storage, &a->dst, sizeof(a->dst));
	if (a->dev[0] && !id->verbs) {
		struct ibv_context *verbs = gcapi_open_device_by_name(a->dev);

		if (verbs) {
			union ibv_gid gid;

			id->verbs = verbs;
			id->port_num = 1;
			if (!id->pd)
				id->pd = gcm_default_pd(verbs);
			if (!ibv_query_gid(verbs, 1, 0, &gid))
				id->route.addr.addr.ibaddr.sgid = gid;
		}
	}
}

static void gcm_query(struct rdma_cm_id *id)
{
	struct gcm_addrs a;

	memset(&a, 0, sizeof(a));
	goCMQuery(gcm_id_of(id)->h, &a);
	gcm_apply(id, &a);
}

/* ---- event channels ----------------------------------------------------- */

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct gcm_channel *ch = calloc(1, sizeof(*ch));
	int fd = -1, e;

	if (!ch)
		return gcapi_errp(ENOMEM);
	e = goCMCreateChannel(&fd, &ch->h);
	if (e) {
		free(ch);
		return gcapi_errp(e);
	}
	ch->ch.fd = fd;
	ch->core = &gcapi_core_mark;
	pthread_mutex_init(&ch->mu, NULL);
	return &ch->ch;
}

static void gcm_channel_free(struct gcm_channel *ch)
{
	goCMDestroyChannel(ch->h);
	pthread_mutex_destroy(&ch->mu);
	free(ch);
}

/* A thread may still wait in rdma_get_cm_event (rping's CM thread does when
 * its main thread tears down): as with the kernel's channel, whose blocked
 * read holds the file, that thread keeps waiting on a live fd -- it is not
 * woken with EBADF, nor does it read a reused fd number -- and the channel is
 * released when the last reader leaves. */
void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct gcm_channel *ch = (struct gcm_channel *)channel;
	int last;

	if (gcm_foreign_channel(channel))
		return;
	if (!ch)
		return;
	pthread_mutex_lock(&ch->mu);
	ch->destroyed = 1;
	last = ch->readers == 0;
	pthread_mutex_unlock(&ch->mu);
	if (last)
		gcm_channel_free(ch);
}

static void gcm_channel_leave(struct gcm_channel *ch)
{
	int last;

	pthread_mutex_lock(&ch->mu);
	last = --ch->readers == 0 && ch->destroyed;
	pthread_mutex_unlock(&ch->mu);
	if (last)
		gcm_channel_free(ch);
}

struct rdma_cm_id *gcm_new_child(struct rdma_cm_id *listen, uintptr_t h)
{
	struct gcm_id *n = calloc(1, sizeof(*n));

	if (!n)
		abort();
	n->h = h;
	n->core = &gcapi_core_mark;
	n->id.channel = listen->channel;
	n->id.context = listen->context;
	n->id.ps = listen->ps;
	n->id.qp_type = listen->qp_type;
	return &n->id;
}

static int gcm_modify_qp_err(struct rdma_cm_id *id)
{
	struct ibv_qp_attr attr;

	if (!id->qp)
		return 0;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(id->qp, &attr, IBV_QP_STATE);
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct gcm_channel *ch = (struct gcm_channel *)channel;
	struct gcm_evinfo info;
	struct gcm_event *evt;
	struct rdma_conn_param *c;
	uint64_t v;

	if (gcm_foreign_channel(channel) /* its fd carries the parent's events */)
		return gcm_err(EPERM);
	if (!ch || !event)
		return gcm_err(EINVAL);
	pthread_mutex_lock(&ch->mu);
	ch->readers++;
	pthread_mutex_unlock(&ch->mu);
	for (;;) {
		ssize_t n = read(ch->ch.fd, &v, sizeof(v));

		if (n < 0) {
			int e = errno; /* EAGAIN with O_NONBLOCK; EINTR reaches the caller */

			gcm_channel_leave(ch);
			return gcm_err(e);
		}
		memset(&info, 0, sizeof(info));
		if (goCMPop(ch->h, &info))
			break;
	}
	gcm_channel_leave(ch);
	evt = calloc(1, sizeof(*evt));
	if (!evt) {
		goCMAck(info.owner);
		return gcm_err(ENOMEM);
	}
	evt->owner = info.owner;
	evt->event.id = info.id;
	evt->event.listen_id = info.listen_id;
	evt->event.event = info.event;
	evt->event.status = info.status;
	c = &evt->event.param.conn;
	c->private_data_len = info.pdata_len;
	if (info.pdata_len) {
		memcpy(evt->private_data, info.pdata, info.pdata_len);
		c->private_data = evt->private_data;
	}
	c->responder_resources = info.responder_resources;
	c->initiator_depth = info.initiator_depth;
	gcm_apply(info.id, &info.addrs);

	switch (info.event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST: {
		struct gcm_id *n = gcm_id_of(info.id);

		n->initiator_depth = info.initiator_depth;
		n->responder_resources = info.responder_resources;
		if (gcm_id_of(info.listen_id)->sync)
			rdma_migrate_id(info.id, NULL);
		break;
	}
	case RDMA_CM_EVENT_REJECTED:
		gcm_modify_qp_err(info.id);
		break;
	}
	*event = &evt->event;
	return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct gcm_event *evt = (struct gcm_event *)event;

	if (event && gcm_foreign_id(event->id))
		return gcm_err(EPERM);
	if (!event)
		return gcm_err(EINVAL);
	goCMAck(evt->owner);
	free(evt);
	return 0;
}

/* The names again in rdmacm/event.go, for Go's logs (TestEventNamesMatchC). */
const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	return GCAPI_NAME(names, event, "UNKNOWN EVENT");
}

/* Acks the event a synchronous id still holds in id->event. */
static void gcm_ack_held(struct rdma_cm_id *id)
{
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
}

/* Synchronous mode: wait for the id's event (librdmacm's ucma_complete). */
static int gcm_complete(struct rdma_cm_id *id)
{
	struct gcm_id *g = gcm_id_of(id);
	int ret;

	if (!g->sync)
		return 0;
	gcm_ack_held(id);
	ret = rdma_get_cm_event(id->channel, &id->event);
	if (ret)
		return ret;
	if (id->event->status) {
		if (id->event->event == RDMA_CM_EVENT_REJECTED)
			return gcm_err(ECONNREFUSED);
		return gcm_err(id->event->status < 0 ? -id->event->status : id->event->status);
	}
	return 0;
}

/* ---- ids ---------------------------------------------------------------- */

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
		   void *context, enum rdma_port_space ps)
{
	struct gcm_id *g;
	int sync = !channel, e;

	if (gcm_foreign_channel(channel))
		return gcm_err(EPERM);
	if (!id)
		return gcm_err(EINVAL);
	if (sync) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
	}
	g = calloc(1, sizeof(*g));
	if (!g) {
		e = ENOMEM;
		goto err;
	}
	g->sync = sync;
	g->core = &gcapi_core_mark;
	g->id.channel = channel;
	g->id.context = context;
	g->id.ps = ps;
	g->id.qp_type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
	e = goCMCreateID(((struct gcm_channel *)channel)->h, ps, g, &g->h);
	if (e)
		goto err;
	*id = &g->id;
	return 0;
err:
	free(g);
	if (sync)
		rdma_destroy_event_channel(channel);
	return gcm_err(e);
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct gcm_id *g = gcm_id_of(id);

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id)
		return gcm_err(EINVAL);
	goCMCloseID(g->h, id->qp != NULL);
	gcm_ack_held(id);
	goCMFreeID(g->h);
	if (g->sync)
		rdma_destroy_event_channel(id->channel);
	free(g->qp_init_attr);
	free(g->connect);
	free(g);
	return 0;
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct gcm_id *g = gcm_id_of(id);
	struct rdma_event_channel *old = id->channel;
	int sync = !channel, e;

	if (gcm_foreign_id(id) || gcm_foreign_channel(channel))
		return gcm_err(EPERM);
	if (g->sync && !channel)
		return gcm_err(EINVAL);
	if (sync) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
	}
	if (g->sync)
		gcm_ack_held(id);
	e = goCMMigrate(g->h, ((struct gcm_channel *)channel)->h);
	if (e) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return gcm_err(e);
	}
	if (g->sync)
		rdma_destroy_event_channel(old);
	g->sync = sync;
	id->channel = channel;
	return 0;
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id)
		return gcm_err(EINVAL);
	return gcm_ret(goCMSetOption(gcm_id_of(id)->h, level, optname, optval, optlen));
}

/* ---- addressing ------------------------------------------------------------ */

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct gcm_addrs a;
	int e;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || !gcm_addrlen(addr))
		return gcm_err(EINVAL);
	memset(&a, 0, sizeof(a));
	e = goCMBind(gcm_id_of(id)->h, addr, &a);
	if (e)
		return gcm_err(e);
	gcm_apply(id, &a);
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
		      struct sockaddr *dst_addr, int timeout_ms)
{
	socklen_t dlen = gcm_addrlen(dst_addr);
	int e;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || !dlen || (src_addr && !gcm_addrlen(src_addr)))
		return gcm_err(EINVAL);
	e = goCMResolveAddr(gcm_id_of(id)->h, src_addr, dst_addr, timeout_ms);
	if (e)
		return gcm_err(e);
	memcpy(&id->route.addr.dst_storage, dst_addr, dlen);
	return gcm_complete(id);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	int e;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id)
		return gcm_err(EINVAL);
	e = goCMResolveRoute(gcm_id_of(id)->h, timeout_ms);
	if (e)
		return gcm_err(e);
	return gcm_complete(id);
}

static __be16 gcm_port(struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return ((struct sockaddr_in *)sa)->sin_port;
	case AF_INET6:
		return ((struct sockaddr_in6 *)sa)->sin6_port;
	}
	return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return gcm_port(&id->route.addr.src_addr);
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return gcm_port(&id->route.addr.dst_addr);
}

/* ---- QPs ------------------------------------------------------------------- */

/* The answers are rdmacm.ID.InitQPAttr's: what the kernel gives for iWARP in
 * each state of the id. */
int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	int access = 0, port = 0, mask = 0, e;
	enum ibv_qp_state state;
	uint32_t rate_limit;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || !qp_attr || !qp_attr_mask)
		return gcm_err(EINVAL);
	state = qp_attr->qp_state;
	e = goCMInitQPAttr(gcm_id_of(id)->h, (int)state, &access, &port, &mask);
	if (e)
		return gcm_err(e);
	/* librdmacm copies the kernel's whole answer over the attributes
	 * (ibv_copy_qp_attr_from_kern): all but rate_limit, zero but these. */
	rate_limit = qp_attr->rate_limit;
	memset(qp_attr, 0, sizeof(*qp_attr));
	qp_attr->rate_limit = rate_limit;
	qp_attr->qp_state = state;
	qp_attr->qp_access_flags = access;
	qp_attr->port_num = port;
	*qp_attr_mask = mask;
	return 0;
}

static int gcm_init_conn_qp(struct rdma_cm_id *id, struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;
	int mask, ret;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	ret = rdma_init_qp_attr(id, &attr, &mask);
	if (ret)
		return ret;
	/* iw_cm grants remote writes and reads once there is a connection; the
	 * CM's own QP also serves RFC 7306 atomics, as IB's CM grants them with
	 * reads (responder resources), or rdma_cm programs (perftest -R) could
	 * not use them. Before a connection there are no rights yet: the
	 * connect grants all three (rdmacm setUpQP). */
	if (attr.qp_access_flags & IBV_ACCESS_REMOTE_READ)
		attr.qp_access_flags |= IBV_ACCESS_REMOTE_ATOMIC;
	ret = ibv_modify_qp(qp, &attr, mask);
	return ret ? gcm_err(ret) : 0;
}

static void gcm_destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq) {
			ibv_destroy_cq(id->send_cq);
			id->send_cq = NULL;
		}
		id->recv_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel) {
			ibv_destroy_comp_channel(id->send_cq_channel);
			id->send_cq_channel = NULL;
		}
		id->recv_cq_channel = NULL;
	}
}

/* One CQ of the id with its own completion channel; the caller cleans up. */
static int gcm_create_cq(struct rdma_cm_id *id, uint32_t size, struct ibv_comp_channel **channel,
			 struct ibv_cq **cq)
{
	*channel = ibv_create_comp_channel(id->verbs);
	if (!*channel)
		return -1;
	*cq = ibv_create_cq(id->verbs, size, id, *channel, 0);
	return *cq ? 0 : -1;
}

static int gcm_create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if ((recv_size && gcm_create_cq(id, recv_size, &id->recv_cq_channel, &id->recv_cq)) ||
	    (send_size && gcm_create_cq(id, send_size, &id->send_cq_channel, &id->send_cq))) {
		gcm_destroy_cqs(id);
		return -1;
	}
	return 0;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp *qp;
	int ret;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || !attr || id->qp)
		return gcm_err(EINVAL);
	if (!id->verbs)
		return gcm_err(ENODEV);
	if (attr->qp_type != IBV_QPT_RC)
		return gcm_err(EOPNOTSUPP); /* iWARP has RC only */
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (id->verbs != attr->pd->context) {
		return gcm_err(EINVAL);
	}
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return gcm_err(EINVAL);
	ret = gcm_create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
			     attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr);
	if (ret)
		return ret;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		ret = -1;
		goto err1;
	}
	ret = gcm_init_conn_qp(id, qp);
	if (ret)
		goto err2;
	id->pd = qp->pd;
	id->qp = qp;
	return 0;
err2:
	ibv_destroy_qp(qp);
err1:
	gcm_destroy_cqs(id);
	return ret;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex attr_ex;
	int ret;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || !qp_init_attr)
		return gcm_err(EINVAL);
	memset(&attr_ex, 0, sizeof(attr_ex));
	memcpy(&attr_ex, qp_init_attr, sizeof(*qp_init_attr));
	attr_ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	attr_ex.pd = pd ? pd : id->pd;
	ret = rdma_create_qp_ex(id, &attr_ex);
	memcpy(qp_init_attr, &attr_ex, sizeof(*qp_init_attr));
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (gcm_foreign_id(id))
		return;
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	gcm_destroy_cqs(id);
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || !attr || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return gcm_err(EINVAL);
	if (attr->srq_type != IBV_SRQT_BASIC)
		return gcm_err(EOPNOTSUPP);
	if (!id->verbs)
		return gcm_err(ENODEV);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex attr_ex;
	int ret;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || !attr)
		return gcm_err(EINVAL);
	memset(&attr_ex, 0, sizeof(attr_ex));
	memcpy(&attr_ex, attr, sizeof(*attr));
	attr_ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	attr_ex.srq_type = IBV_SRQT_BASIC;
	attr_ex.pd = pd;
	ret = rdma_create_srq_ex(id, &attr_ex);
	memcpy(attr, &attr_ex, sizeof(*attr));
	return ret;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (gcm_foreign_id(id))
		return;
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
	gcm_destroy_cqs(id);
}

/* ---- connections ---------------------------------------------------------- */

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct gcm_addrs a;
	int e;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id)
		return gcm_err(EINVAL);
	memset(&a, 0, sizeof(a));
	e = goCMListen(gcm_id_of(id)->h, backlog, &a);
	if (e)
		return gcm_err(e);
	gcm_apply(id, &a);
	return 0;
}

/* An IRD or ORD for the MPA negotiation, bounded by the device's
 * max_qp_rd_atom or max_qp_init_rd_atom as librdmacm bounds them: the value the
 * application asked for, or else dflt (capped); -1 when it asked for more.
 * Asking means a conn_param whose field is not the RDMA_MAX_* sentinel. */
#define GCM_ASKED(p, field, sentinel) ((p) && (p)->field != (sentinel) ? (int)(p)->field : -1)

static int gcm_depth(int asked, uint32_t dflt, uint32_t max)
{
	if (asked < 0)
		return (int)(dflt < max ? dflt : max);
	return (uint32_t)asked <= max ? asked : -1;
}

/* Private data for the MPA frame: the endpoint's stored connect data
 * (rdma_create_ep) followed by the call's, as librdmacm concatenates them. */
static int gcm_pdata(struct gcm_id *g, struct rdma_conn_param *p, uint8_t *buf)
{
	int n = 0;

	if (g->connect_len) {
		if (g->connect_len > GCM_PDATA_MAX)
			return -1;
		memcpy(buf, g->connect, g->connect_len);
		n = g->connect_len;
	}
	if (p && p->private_data && p->private_data_len) {
		if (n + p->private_data_len > GCM_PDATA_MAX)
			return -1;
		memcpy(buf + n, p->private_data, p->private_data_len);
		n += p->private_data_len;
	}
	return n;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	const struct gcapi_limits *lim;
	struct gcm_id *g = gcm_id_of(id);
	uint8_t pd[GCM_PDATA_MAX];
	int ird, ord, n, e;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	/* iWARP connects a QP: the id's, or without one the application's own
	 * named by conn_param->qp_num (librdmacm's ucma_valid_param, then the
	 * kernel's iw_cm_connect looks the number up). */
	if (!id || (!id->qp && !conn_param))
		return gcm_err(EINVAL);
	lim = gcapi_dev_limits();
	ord = gcm_depth(GCM_ASKED(conn_param, initiator_depth, RDMA_MAX_INIT_DEPTH), lim->max_ord,
			lim->max_ord);
	ird = gcm_depth(GCM_ASKED(conn_param, responder_resources, RDMA_MAX_RESP_RES),
			lim->max_ird, lim->max_ird);
	n = gcm_pdata(g, conn_param, pd);
	if (ord < 0 || ird < 0 || n < 0)
		return gcm_err(EINVAL);
	e = goCMConnect(g->h, id->qp, id->qp ? 0 : conn_param->qp_num, pd, n, ird, ord);
	if (e)
		return gcm_err(e);
	if (g->connect_len) {
		free(g->connect);
		g->connect = NULL;
		g->connect_len = 0;
	}
	return gcm_complete(id);
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	const struct gcapi_limits *lim;
	struct gcm_id *g = gcm_id_of(id);
	uint8_t pd[GCM_PDATA_MAX];
	int ird, ord, n, e;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || (!id->qp && !conn_param))
		return gcm_err(EINVAL);
	/* Unasked, the values of the connect request. */
	lim = gcapi_dev_limits();
	ord = gcm_depth(GCM_ASKED(conn_param, initiator_depth, RDMA_MAX_INIT_DEPTH),
			g->initiator_depth, lim->max_ord);
	ird = gcm_depth(GCM_ASKED(conn_param, responder_resources, RDMA_MAX_RESP_RES),
			g->responder_resources, lim->max_ird);
	n = gcm_pdata(g, conn_param, pd);
	if (ord < 0 || ird < 0 || n < 0)
		return gcm_err(EINVAL);
	e = goCMAccept(g->h, id->qp, id->qp ? 0 : conn_param->qp_num, pd, n, ird, ord);
	if (e)
		return gcm_err(e);
	return gcm_complete(id);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id)
		return gcm_err(EINVAL);
	return gcm_ret(goCMReject(gcm_id_of(id)->h, (void *)private_data,
				  private_data ? private_data_len : 0));
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	return rdma_reject(id, private_data, private_data_len);
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	int pending = 0, e;

	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id)
		return gcm_err(EINVAL);
	if (id->qp) {
		/* ucma_shutdown on iWARP: SQD, which closes gracefully after
		 * the queued work. A QP already in ERR (peer closed) is fine. */
		struct ibv_qp_attr attr;

		memset(&attr, 0, sizeof(attr));
		attr.qp_state = IBV_QPS_SQD;
		(void)ibv_modify_qp(id->qp, &attr, IBV_QP_STATE);
	}
	e = goCMDisconnect(gcm_id_of(id)->h, &pending);
	if (e)
		return gcm_err(e);
	return pending ? gcm_complete(id) : 0;
}

/* iWARP has no CONNECT_RESPONSE: see rdmacm.ID.Establish. */
int rdma_establish(struct rdma_cm_id *id)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	if (!id || id->qp)
		return gcm_err(EINVAL);
	return gcm_ret(goCMEstablish(gcm_id_of(id)->h));
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	(void)event;
	if (!id)
		return gcm_err(EINVAL);
	return 0; /* the kernel's rdma_notify is a no-op on iWARP */
}

/* ---- what iWARP does not have ------------------------------------------- */

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	(void)id, (void)addr, (void)context;
	return gcm_err(ENOSYS);
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr,
			   void *context)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	(void)id, (void)attr, (void)context;
	return gcm_err(ENOSYS);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	(void)id, (void)addr;
	return gcm_err(EADDRNOTAVAIL);
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	(void)id, (void)ece;
	return gcm_err(EOPNOTSUPP);
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (gcm_foreign_id(id))
		return gcm_err(EPERM);
	(void)id, (void)ece;
	return gcm_err(EOPNOTSUPP);
}
