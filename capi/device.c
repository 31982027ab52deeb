/* Devices, contexts, queries, async events and the *_str helpers. */
#define _GNU_SOURCE
#include <endian.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi.h"
#include "_cgo_export.h"

static struct gcapi_limits limits;
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;

static void load_limits(void)
{
	goVerbsLimits(&limits);
}

const struct gcapi_limits *gcapi_dev_limits(void)
{
	pthread_once(&limits_once, load_limits);
	return &limits;
}

/* ---- device table ------------------------------------------------------ */

/* struct ibv_device objects outlive device lists (contexts point at them), so
 * the table only grows: one entry per device name ever seen. */
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gcapi_device **dev_table;
static int dev_count;

static struct gcapi_device *dev_lookup_locked(const char *name)
{
	for (int i = 0; i < dev_count; i++)
		if (strcmp(dev_table[i]->info.name, name) == 0)
			return dev_table[i];
	return NULL;
}

static struct gcapi_device *dev_intern_locked(const struct gcapi_devinfo *info)
{
	struct gcapi_device *d = dev_lookup_locked(info->name);

	if (d) {
		d->info = *info;
		return d;
	}
	struct gcapi_device **t = realloc(dev_table, sizeof(*t) * (dev_count + 1));
	if (!t)
		return NULL;
	dev_table = t;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->core = &gcapi_core_mark;
	d->info = *info;
	d->index = dev_count;
	d->dev.node_type = IBV_NODE_RNIC;
	d->dev.transport_type = IBV_TRANSPORT_IWARP;
	snprintf(d->dev.name, sizeof(d->dev.name), "%s", info->name);
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", d->index);
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path),
		 "/sys/class/infiniband_verbs/uverbs%d", d->index);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path),
		 "/sys/class/infiniband/%s", info->name);
	dev_table[dev_count++] = d;
	return d;
}

/* Refreshes the table from Go; returns the current devices (malloc'd) or NULL. */
static struct gcapi_device **dev_refresh(int *num)
{
	int n = goVerbsDevices(NULL, 0);
	struct gcapi_devinfo *infos;
	struct gcapi_device **list;
	int got;

	for (;;) {
		infos = calloc(n + 1, sizeof(*infos));
		if (!infos)
			return gcapi_errp(ENOMEM);
		got = goVerbsDevices(infos, n + 1);
		if (got <= n + 1)
			break;
		free(infos);
		n = got;
	}
	list = calloc(got + 1, sizeof(*list));
	if (!list) {
		free(infos);
		return gcapi_errp(ENOMEM);
	}
	pthread_mutex_lock(&dev_lock);
	int k = 0;
	for (int i = 0; i < got; i++) {
		struct gcapi_device *d = dev_intern_locked(&infos[i]);
		if (d)
			list[k++] = d;
	}
	pthread_mutex_unlock(&dev_lock);
	free(infos);
	*num = k;
	return list;
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
	int n = 0;
	struct gcapi_device **l = dev_refresh(&n);
	struct ibv_device **out;

	if (num_devices)
		*num_devices = 0;
	if (!l)
		return NULL;
	out = calloc(n + 1, sizeof(*out));
	if (!out) {
		free(l);
		return gcapi_errp(ENOMEM);
	}
	for (int i = 0; i < n; i++)
		out[i] = &l[i]->dev;
	free(l);
	if (num_devices)
		*num_devices = n;
	return out;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

static struct gcapi_device *gdev(struct ibv_device *d)
{
	return gcapi_container_of(d, struct gcapi_device, dev);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

int ibv_get_device_index(struct ibv_device *device)
{
	return device ? gdev(device)->index : -1;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	return device ? htobe64(gdev(device)->info.guid) : 0;
}

struct ibv_device *gcapi_device_by_name(const char *name)
{
	int n = 0;
	struct gcapi_device **l = dev_refresh(&n);
	struct ibv_device *found = NULL;

	if (!l)
		return NULL;
	for (int i = 0; i < n && name; i++)
		if (strcmp(l[i]->info.name, name) == 0)
			found = &l[i]->dev;
	free(l);
	if (!found)
		errno = ENODEV;
	return found;
}

/* ---- contexts ---------------------------------------------------------- */

static int query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
			 size_t len);
static int query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *attr, size_t len);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct gcapi_context *c;
	struct gcapi_devinfo info;
	int async_fd = -1, e;

	if (!device)
		return gcapi_errp(EINVAL);
	/* one from the device list of the parent, before a fork: ours of that name */
	if (gdev(device)->core != &gcapi_core_mark && !(device = gcapi_device_by_name(device->name)))
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return gcapi_errp(ENOMEM);
	e = goVerbsOpen(device->name, &info, &c->h, &async_fd);
	if (e) {
		free(c);
		return gcapi_errp(e);
	}
	pthread_mutex_lock(&dev_lock);
	c->gdev = gdev(device);
	c->gdev->info = info;
	pthread_mutex_unlock(&dev_lock);

	struct verbs_context *v = &c->vctx;
	struct ibv_context *ctx = &v->context;
	v->query_port = query_port_ex;
	v->query_device_ex = query_device_ex;
	v->create_cq_ex = gcapi_create_cq_ex;
	v->create_qp_ex = gcapi_create_qp_ex;
	v->create_srq_ex = gcapi_create_srq_ex;
	v->sz = sizeof(*v);
	ctx->device = device;
	ctx->ops.alloc_mw = gcapi_alloc_mw;
	ctx->ops.bind_mw = gcapi_bind_mw;
	ctx->ops.dealloc_mw = gcapi_dealloc_mw;
	ctx->ops.poll_cq = gcapi_poll_cq;
	ctx->ops.req_notify_cq = gcapi_req_notify_cq;
	ctx->ops.post_srq_recv = gcapi_post_srq_recv;
	ctx->ops.post_send = gcapi_post_send;
	ctx->ops.post_recv = gcapi_post_recv;
	/* Nothing reads cmd_fd (there is no kernel); it is a real fd so that
	 * programs that poll, dup or close it see an ordinary descriptor. */
	ctx->cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	ctx->async_fd = async_fd;
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	return ctx;
}

int ibv_close_device(struct ibv_context *ctx)
{
	struct gcapi_context *c;

	if (!ctx)
		return gcapi_err(EINVAL);
	if (gcapi_foreign_ctx(ctx))
		return gcapi_err(EPERM);
	c = gcapi_ctx(ctx);
	if (ctx->cmd_fd >= 0)
		close(ctx->cmd_fd);
	goVerbsClose(c->h);
	pthread_mutex_destroy(&ctx->mutex);
	free(c);
	return 0;
}

int gcapi_context_ifindex(struct ibv_context *ctx)
{
	return ctx ? gcapi_ctx(ctx)->gdev->info.ifindex : -1;
}

/* One shared context per device for rdma_cm, kept for the life of the process. */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct gcapi_device *dev;
	struct ibv_context *ctx;
} *shared;
static int nshared;

struct ibv_context *gcapi_open_device_by_name(const char *name)
{
	struct ibv_device *d = gcapi_device_by_name(name);
	struct ibv_context *ctx = NULL;

	if (!d)
		return NULL;
	pthread_mutex_lock(&shared_lock);
	for (int i = 0; i < nshared; i++)
		if (shared[i].dev == gdev(d))
			ctx = shared[i].ctx;
	if (!ctx) {
		void *t = realloc(shared, sizeof(*shared) * (nshared + 1));
		if (t) {
			shared = t;
			ctx = ibv_open_device(d);
			if (ctx) {
				shared[nshared].dev = gdev(d);
				shared[nshared].ctx = ctx;
				nshared++;
			}
		} else {
			errno = ENOMEM;
		}
	}
	pthread_mutex_unlock(&shared_lock);
	return ctx;
}

/* ---- queries ----------------------------------------------------------- */

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	const struct gcapi_limits *l = gcapi_dev_limits();
	const struct gcapi_devinfo *info;

	if (!ctx || !a)
		return gcapi_err(EINVAL);
	if (gcapi_foreign_ctx(ctx))
		return gcapi_err(EPERM);
	info = &gcapi_ctx(ctx)->gdev->info;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "goiwarp 0.1");
	a->node_guid = htobe64(info->guid);
	a->sys_image_guid = htobe64(info->guid);
	a->max_mr_size = l->max_mr_size;
	a->page_size_cap = l->page_size_cap;
	a->vendor_id = info->vendor_id;
	a->vendor_part_id = info->part_id;
	a->hw_ver = 0;
	a->max_qp = l->max_qp;
	a->max_qp_wr = l->max_qp_wr;
	a->device_cap_flags = 0;
	a->max_sge = l->max_sge;
	a->max_sge_rd = l->max_sge;
	a->max_cq = l->max_cq;
	a->max_cqe = l->max_cqe;
	a->max_mr = l->max_mr;
	a->max_pd = l->max_pd;
	a->max_qp_rd_atom = l->max_ird;
	a->max_res_rd_atom = l->max_ird * l->max_qp;
	a->max_qp_init_rd_atom = l->max_ord;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_srq = l->max_srq;
	a->max_srq_wr = l->max_srq_wr;
	a->max_srq_sge = l->max_sge;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 0;
	a->phys_port_cnt = 1;
	return 0;
}

static int query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex full;
	int e;

	if (in && in->comp_mask)
		return EINVAL;
	if (gcapi_in_forked_child())
		return gcapi_err(EPERM);
	if (len < sizeof(attr->orig_attr))
		return EINVAL;
	memset(&full, 0, sizeof(full));
	e = ibv_query_device(ctx, &full.orig_attr);
	if (e)
		return e;
	full.phys_port_cnt_ex = 1;
	memcpy(attr, &full, len < sizeof(full) ? len : sizeof(full));
	if (len > sizeof(full))
		memset((char *)attr + sizeof(full), 0, len - sizeof(full));
	return 0;
}

static int gid_count(struct ibv_context *ctx);

static int fill_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a)
{
	const struct gcapi_devinfo *info;

	if (!ctx || !a)
		return EINVAL;
	if (port != 1)
		return EINVAL;
	info = &gcapi_ctx(ctx)->gdev->info;
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = gcapi_mtu_enum(info->mtu);
	a->gid_tbl_len = gid_count(ctx);
	pthread_mutex_lock(&dev_lock);
	a->lid = info->lid;
	pthread_mutex_unlock(&dev_lock);
	a->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP | IBV_PORT_VENDOR_CLASS_SUP;
	a->max_msg_sz = (uint32_t)gcapi_dev_limits()->max_msg_size;
	a->pkey_tbl_len = 1;
	a->lmc = 0;
	a->max_vl_num = 1;
	a->active_width = 2;	/* 4X */
	a->active_speed = 32;	/* EDR: 4X EDR is what 100 Gb/s software reports */
	a->phys_state = 5;	/* LinkUp */
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

static int query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
			 size_t len)
{
	struct ibv_port_attr full;
	int e = gcapi_in_forked_child() || gcapi_foreign_ctx(ctx) ? gcapi_err(EPERM)
								  : fill_port(ctx, port, &full);

	if (e)
		return e;
	memcpy(attr, &full, len < sizeof(full) ? len : sizeof(full));
	return 0;
}

/* The exported symbol takes the pre-1.1 layout, which ends before
 * port_cap_flags2 (the inline ___ibv_query_port uses the extended op). */
int (ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return query_port_ex(ctx, port, (struct ibv_port_attr *)attr,
			     offsetof(struct ibv_port_attr, port_cap_flags2));
}

/* The GID table: entry 0 is the MAC-based GID (type IB, as siw's), the
 * others the interface's addresses in RoCE v2 form (verbs.Device.GIDs).
 * Read under dev_lock: ibv_open_device and device-list refreshes rewrite
 * info. */
static int gid_at(struct ibv_context *ctx, uint32_t index, uint8_t out[16])
{
	const struct gcapi_devinfo *info = &gcapi_ctx(ctx)->gdev->info;
	int ok;

	pthread_mutex_lock(&dev_lock);
	ok = index < (uint32_t)info->ngids;
	if (ok)
		memcpy(out, info->gids[index], 16);
	pthread_mutex_unlock(&dev_lock);
	return ok;
}

static int gid_count(struct ibv_context *ctx)
{
	int n;

	pthread_mutex_lock(&dev_lock);
	n = gcapi_ctx(ctx)->gdev->info.ngids;
	pthread_mutex_unlock(&dev_lock);
	return n > 0 ? n : 1;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	if (gcapi_foreign_ctx(ctx))
		return gcapi_err(EPERM);
	if (!ctx || !gid || port != 1 || index < 0 || !gid_at(ctx, (uint32_t)index, gid->raw))
		return -1;
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;

	if (!ctx || !entry || flags || entry_size < sizeof(e))
		return EINVAL;
	if (gcapi_foreign_ctx(ctx))
		return EPERM;
	if (port != 1)
		return EINVAL;
	memset(&e, 0, sizeof(e));
	if (!gid_at(ctx, index, e.gid.raw))
		return ENODATA;
	e.gid_index = index;
	e.port_num = 1;
	e.gid_type = index == 0 ? IBV_GID_TYPE_IB : IBV_GID_TYPE_ROCE_V2;
	e.ndev_ifindex = gcapi_ctx(ctx)->gdev->info.ifindex;
	memcpy(entry, &e, sizeof(e));
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	size_t n;

	if (!ctx || flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	if (gcapi_foreign_ctx(ctx))
		return -EPERM;
	n = (size_t)gid_count(ctx);
	if (max_entries < n)
		return -EINVAL; /* rdma-core: the table does not fit */
	for (size_t i = 0; i < n; i++) {
		int e = _ibv_query_gid_ex(ctx, 1, (uint32_t)i,
					  (struct ibv_gid_entry *)((char *)entries + i * entry_size),
					  0, entry_size);
		if (e)
			return -e;
	}
	return (ssize_t)n;
}

/* rdma-core private (IBVERBS_PRIVATE_34), imported by ibv_devinfo:
 * enum ibv_gid_type_sysfs { IB_ROCE_V1 = 0, ROCE_V2 = 1 }. */
int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, uint32_t *type)
{
	uint8_t g[16];

	if (gcapi_foreign_ctx(ctx)) {
		errno = EPERM;
		return -1;
	}
	if (!ctx || !type || port != 1 || !gid_at(ctx, index, g)) {
		errno = EINVAL;
		return -1;
	}
	*type = index == 0 ? 0 : 1;
	return 0;
}

int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	if (!ctx || !pkey || port != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	if (!ctx || port != 1)
		return -1;
	return be16toh(pkey) == 0xffff ? 0 : -1;
}

/* There is no sysfs behind goiwarp devices. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	(void)dir;
	(void)file;
	(void)buf;
	(void)size;
	errno = ENOENT;
	return -1;
}

int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr,
				uint8_t eth_mac[6], uint16_t *vid)
{
	(void)ctx;
	(void)attr;
	(void)eth_mac;
	(void)vid;
	return gcapi_err(EOPNOTSUPP);
}

int ibv_fork_init(void)
{
	return 0; /* rings and registered memory are plain process memory */
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

/* ---- async events ------------------------------------------------------ */

struct async_rec {
	uint32_t type;
	uint32_t pad;
	uint64_t obj;
};

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct async_rec r;

	if (!ctx || !event) {
		errno = EINVAL;
		return -1;
	}
	if (gcapi_foreign_ctx(ctx)) { /* its fd carries the parent's events */
		errno = EPERM;
		return -1;
	}
	for (;;) {
		ssize_t n = read(ctx->async_fd, &r, sizeof(r));
		if (n < 0)
			return -1; /* EINTR reaches the caller, as with rdma-core */
		if (n != sizeof(r)) {
			errno = EIO;
			return -1;
		}
		void *obj = (void *)(uintptr_t)r.obj;
		event->event_type = r.type;
		switch (r.type) {
		case IBV_EVENT_CQ_ERR:
			if (!gcapi_live_deliver(obj, &((struct gcapi_cq *)obj)->async_delivered))
				continue;
			event->element.cq = obj;
			return 0;
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
		case IBV_EVENT_COMM_EST:
		case IBV_EVENT_SQ_DRAINED:
		case IBV_EVENT_PATH_MIG:
		case IBV_EVENT_PATH_MIG_ERR:
		case IBV_EVENT_QP_LAST_WQE_REACHED:
			if (!gcapi_live_deliver(obj, &((struct gcapi_qp *)obj)->async_delivered))
				continue;
			event->element.qp = obj;
			return 0;
		case IBV_EVENT_SRQ_ERR:
		case IBV_EVENT_SRQ_LIMIT_REACHED:
			if (!gcapi_live_deliver(obj, &((struct gcapi_srq *)obj)->async_delivered))
				continue;
			event->element.srq = obj;
			return 0;
		default:
			event->element.port_num = (int)r.obj;
			return 0;
		}
	}
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	pthread_mutex_t *mu = NULL;
	pthread_cond_t *cond = NULL;
	uint32_t *done = NULL;

	if (!event)
		return;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;
		if (gcapi_foreign(cq))
			return;
		mu = &cq->mutex, cond = &cq->cond, done = &cq->async_events_completed;
		break;
	}
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct ibv_qp *qp = event->element.qp;
		if (gcapi_foreign(qp))
			return;
		mu = &qp->mutex, cond = &qp->cond, done = &qp->events_completed;
		break;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = event->element.srq;
		if (gcapi_foreign(srq))
			return;
		mu = &srq->mutex, cond = &srq->cond, done = &srq->events_completed;
		break;
	}
	default:
		return;
	}
	pthread_mutex_lock(mu);
	++*done;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mu);
}

/* ---- strings ----------------------------------------------------------- */

const char *ibv_node_type_str(enum ibv_node_type t)
{
	static const char *const s[] = {
		[IBV_NODE_CA] = "InfiniBand channel adapter",
		[IBV_NODE_SWITCH] = "InfiniBand switch",
		[IBV_NODE_ROUTER] = "InfiniBand router",
		[IBV_NODE_RNIC] = "iWARP NIC",
		[IBV_NODE_USNIC] = "usNIC",
		[IBV_NODE_USNIC_UDP] = "usNIC UDP",
		[IBV_NODE_UNSPECIFIED] = "unspecified",
	};
	return GCAPI_NAME(s, t, "unknown");
}

const char *ibv_port_state_str(enum ibv_port_state st)
{
	static const char *const s[] = {
		[IBV_PORT_NOP] = "no state change (NOP)",
		[IBV_PORT_DOWN] = "down",
		[IBV_PORT_INIT] = "init",
		[IBV_PORT_ARMED] = "armed",
		[IBV_PORT_ACTIVE] = "active",
		[IBV_PORT_ACTIVE_DEFER] = "active defer",
	};
	return GCAPI_NAME(s, st, "unknown");
}

const char *ibv_event_type_str(enum ibv_event_type ev)
{
	static const char *const s[] = {
		[IBV_EVENT_CQ_ERR] = "CQ error",
		[IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
		[IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
		[IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
		[IBV_EVENT_COMM_EST] = "communication established",
		[IBV_EVENT_SQ_DRAINED] = "send queue drained",
		[IBV_EVENT_PATH_MIG] = "path migrated",
		[IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
		[IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
		[IBV_EVENT_PORT_ACTIVE] = "port active",
		[IBV_EVENT_PORT_ERR] = "port error",
		[IBV_EVENT_LID_CHANGE] = "LID change",
		[IBV_EVENT_PKEY_CHANGE] = "P_Key change",
		[IBV_EVENT_SM_CHANGE] = "SM change",
		[IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
		[IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
		[IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
		[IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
		[IBV_EVENT_GID_CHANGE] = "GID table change",
		[IBV_EVENT_WQ_FATAL] = "WQ fatal",
	};
	return GCAPI_NAME(s, ev, "unknown");
}

const char *ibv_wc_status_str(enum ibv_wc_status st)
{
	static const char *const s[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	return GCAPI_NAME(s, st, "unknown");
}

/* ---- static rate conversions ------------------------------------------- */

static const struct {
	enum ibv_rate rate;
	int mult; /* multiple of 2.5 Gb/s, -1 if not one */
	int mbps;
} rates[] = {
	{ IBV_RATE_2_5_GBPS, 1, 2500 },	   { IBV_RATE_5_GBPS, 2, 5000 },
	{ IBV_RATE_10_GBPS, 4, 10000 },	   { IBV_RATE_20_GBPS, 8, 20000 },
	{ IBV_RATE_30_GBPS, 12, 30000 },   { IBV_RATE_40_GBPS, 16, 40000 },
	{ IBV_RATE_60_GBPS, 24, 60000 },   { IBV_RATE_80_GBPS, 32, 80000 },
	{ IBV_RATE_120_GBPS, 48, 120000 }, { IBV_RATE_14_GBPS, -1, 14062 },
	{ IBV_RATE_56_GBPS, -1, 56250 },   { IBV_RATE_112_GBPS, -1, 112500 },
	{ IBV_RATE_168_GBPS, -1, 168750 }, { IBV_RATE_25_GBPS, -1, 25781 },
	{ IBV_RATE_100_GBPS, -1, 103125 }, { IBV_RATE_200_GBPS, -1, 206250 },
	{ IBV_RATE_300_GBPS, -1, 309375 }, { IBV_RATE_28_GBPS, -1, 28125 },
	{ IBV_RATE_50_GBPS, -1, 53125 },   { IBV_RATE_400_GBPS, -1, 425000 },
	{ IBV_RATE_600_GBPS, -1, 637500 }, { IBV_RATE_800_GBPS, -1, 850000 },
	{ IBV_RATE_1200_GBPS, -1, 1275000 },
};
#define NRATES (sizeof(rates) / sizeof(rates[0]))

int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == rate)
			return rates[i].mult;
	return -1;
}

enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].mult == mult && mult > 0)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == rate)
			return rates[i].mbps;
	return -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}
