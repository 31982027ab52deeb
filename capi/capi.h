/* The verbs glue's header: the C objects behind the libibverbs ABI.
 *
 * capi holds two ABI glues, each a set of .c files with one header: the
 * verbs glue (this header; device.c, objects.c, datapath.c, live.c, and the
 * ring layout giw_ring.h it shares with the Go engine) and the rdmacm glue
 * (rdmacm.h; rdmacm.c, rdmacm_ep.c), which builds on this one as librdmacm
 * builds on libibverbs. giw_ext.c (goiwarp's giw_* calls), fork.c and
 * sigmask.c serve both. rsockets are not here: they are a library on top of
 * the public API (rsockets/ at the top of the tree).
 *
 * ---------------------------------------------------------------------------
 * Interface notes for the rest of capi (rdmacm glue, giw_* extensions)
 * ---------------------------------------------------------------------------
 * Every struct the ABI fixes is allocated by C (calloc) and embeds the public
 * struct first; its private tail holds `uintptr_t h`, a runtime/cgo.Handle to
 * the Go object. Go objects never cross into C; handles do.
 *
 *   C object                    private struct        Go object (cgo.Handle(h).Value())
 *   struct ibv_context *        struct gcapi_context  *verbs.Context
 *   struct ibv_pd *             struct gcapi_pd       *verbs.PD
 *   struct ibv_mr *             struct gcapi_mr       *verbs.MR
 *   struct ibv_comp_channel *   struct gcapi_channel  *verbs.CompChannel
 *   struct ibv_cq * / _cq_ex *  struct gcapi_cq       *verbs.CQ
 *   struct ibv_qp * / _qp_ex *  struct gcapi_qp       *verbs.QP
 *   struct ibv_srq *            struct gcapi_srq      *verbs.SRQ
 *
 * From C:  uintptr_t gcapi_context_handle(struct ibv_context *);
 *          uintptr_t gcapi_pd_handle(struct ibv_pd *);
 *          uintptr_t gcapi_mr_handle(struct ibv_mr *);
 *          uintptr_t gcapi_cq_handle(struct ibv_cq *);
 *          uintptr_t gcapi_qp_handle(struct ibv_qp *);
 *          uintptr_t gcapi_srq_handle(struct ibv_srq *);
 *   (0 for NULL; static inline, below.)
 * From Go (package main, same cgo namespace; see capi/handles.go):
 *          contextOf(*C.struct_ibv_context) *verbs.Context
 *          pdOf(*C.struct_ibv_pd) *verbs.PD
 *          cqOf(*C.struct_ibv_cq) *verbs.CQ
 *          qpOf(*C.struct_ibv_qp) *verbs.QP
 *          srqOf(*C.struct_ibv_srq) *verbs.SRQ
 *   or, with a bare handle, handleValue[T](h uintptr) T.
 *   A QP's async-event/completion cookie (verbs.QP.Cookie, CQ.Cookie,
 *   SRQ.Cookie) is the address of the C struct, so Go can name the object to
 *   C: (*C.struct_ibv_qp)(unsafe.Pointer(qp.Cookie)).
 *
 * Devices and contexts for rdma_cm:
 *   struct ibv_device *gcapi_device_by_name(const char *name);
 *       the (never freed) struct ibv_device of "giw_<if>", refreshing the
 *       device table; NULL+ENODEV when there is no such device.
 *   struct ibv_context *gcapi_open_device_by_name(const char *name);
 *       one shared context per device, opened on first use and kept open for
 *       the life of the process (what librdmacm does with its cma_dev
 *       contexts); rdma_get_devices / cm_id->verbs should use these.
 *       NULL+errno on failure.
 *   int gcapi_context_ifindex(struct ibv_context *);  interface index of its device
 *
 * QP state: after the CM attaches a connection (verbs.QP.Attach) the QP is in
 * RTS in Go; the C side reads the state from the ring header (ring->state), so
 * nothing else must be updated. ibv_modify_qp to RTS without a connection
 * returns EOPNOTSUPP (verbs decides), unless RTR carried an address vector and
 * a peer QPN: then the provider connects underneath (provider/cmless.go,
 * installed as verbs' Connector in main.go).
 *
 * errno: Go exports return an errno value (0 = success); the C glue sets
 * errno (gcapi_err / gcapi_errp below).
 * Internal C helpers use the gcapi_ prefix (kept local by the version script),
 * Go exports use goVerbs*.
 * ---------------------------------------------------------------------------
 */
#ifndef GCAPI_H
#define GCAPI_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#include "giw_ring.h"

#define gcapi_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* GID table entries a device reports at most (verbs.MaxGIDs). */
#define GCAPI_MAX_GIDS 16

/* What Go tells C about a device. */
struct gcapi_devinfo {
	char name[IBV_SYSFS_NAME_MAX]; /* giw_<ifname> */
	char ifname[IBV_SYSFS_NAME_MAX];
	uint64_t guid; /* host order; big-endian on the ABI */
	uint8_t gid[16];
	/* The GID table (verbs.Device.GIDs): gids[0] is gid; then the
	 * interface's addresses in RoCE v2 form (IPv4-mapped, IPv6). */
	uint8_t gids[GCAPI_MAX_GIDS][16];
	int32_t ngids;
	uint16_t lid; /* verbs.Device.LID */
	int32_t ifindex;
	int32_t mtu;
	uint32_t vendor_id;
	uint32_t part_id;
};

/* Device limits, from the verbs constants (goVerbsLimits, once). */
struct gcapi_limits {
	uint32_t max_qp, max_qp_wr, max_cq, max_cqe, max_mr, max_pd;
	uint32_t max_srq, max_srq_wr, max_ird, max_ord, max_sge, max_inline;
	uint64_t max_mr_size, max_msg_size, page_size_cap;
};
const struct gcapi_limits *gcapi_dev_limits(void);

struct gcapi_device {
	struct ibv_device dev;
	struct gcapi_devinfo info;
	int index; /* position in the device table, stable */
	const void *core; /* &gcapi_core_mark of the copy that listed it */
};

struct gcapi_context {
	struct verbs_context vctx; /* ibv_context is last inside it */
	struct gcapi_device *gdev;
	uintptr_t h;
};

struct gcapi_pd {
	struct ibv_pd pd;
	int usecnt; /* MRs, QPs, SRQs on it: dealloc is EBUSY meanwhile */
	uintptr_t h;
};

struct gcapi_mr {
	struct ibv_mr mr;
	uintptr_t h;
};

struct gcapi_channel {
	struct ibv_comp_channel ch;
	pthread_mutex_t lock; /* guards ch.refcnt */
	uintptr_t h;
	/* events the engine wrote to the fd, and those ibv_get_cq_event read
	 * (atomics): while they differ, one is there to read */
	uint64_t fired __attribute__((aligned(8)));
	uint64_t taken;
};

struct gcapi_cq {
	struct ibv_cq_ex cq; /* struct ibv_cq is its prefix */
	/* The poll lock: every use of ring (poll_cq, start_poll..end_poll,
	 * req_notify_cq) and its swap by ibv_resize_cq, which unmaps the old one. */
	pthread_spinlock_t lock;
	struct giw_ring *ring;
	uint64_t wc_flags; /* create_cq_ex: what the read_* ops may be asked */
	struct giw_cqe cur; /* start_poll/next_poll: the current entry */
	uint32_t comp_delivered; /* events handed out by ibv_get_cq_event */
	uint32_t async_delivered;
	int usecnt; /* QPs using it */
	uintptr_t h;
};

struct gcapi_srq {
	struct ibv_srq srq;
	pthread_spinlock_t lock;
	struct giw_ring *ring;
	uint32_t max_sge;
	uint32_t async_delivered;
	int usecnt; /* QPs using it */
	uintptr_t h;
};

struct gcapi_qp {
	struct ibv_qp_ex qpx; /* struct ibv_qp first */
	pthread_spinlock_t sq_lock;
	pthread_spinlock_t rq_lock;
	struct giw_ring *sq;
	struct giw_ring *rq; /* NULL with an SRQ */
	uint32_t max_send_sge, max_recv_sge, max_inline;
	uint32_t max_send_wr, max_recv_wr;
	int sq_sig_all;
	/* ibv_wr_* builder state, valid between wr_start and wr_complete/abort */
	struct giw_sqe *wr_cur; /* entry of the current WR, NULL before the first */
	uint32_t wr_prod; /* next free slot */
	int wr_err;
	uint32_t async_delivered;
	uintptr_t h;
};

static inline struct gcapi_context *gcapi_ctx(struct ibv_context *c)
{
	return gcapi_container_of(c, struct gcapi_context, vctx.context);
}
static inline struct gcapi_cq *gcapi_cq(struct ibv_cq *cq)
{
	return (struct gcapi_cq *)cq;
}
static inline struct gcapi_cq *gcapi_cqx(struct ibv_cq_ex *cq)
{
	return (struct gcapi_cq *)cq;
}
static inline struct gcapi_qp *gcapi_qp(struct ibv_qp *qp)
{
	return (struct gcapi_qp *)qp;
}
static inline struct gcapi_qp *gcapi_qpx(struct ibv_qp_ex *qp)
{
	return (struct gcapi_qp *)qp;
}
static inline struct gcapi_srq *gcapi_srq(struct ibv_srq *srq)
{
	return (struct gcapi_srq *)srq;
}

/* Set in a child forked after this copy of the core was loaded (fork.c):
 * every op that could enter Go fails with EPERM there. */
extern int gcapi_forked;
static inline int gcapi_in_forked_child(void)
{
	return __builtin_expect(__atomic_load_n(&gcapi_forked, __ATOMIC_RELAXED), 0);
}

/* Address of a byte of this copy of the core (fork.c), unique per copy: a
 * child forked after its parent's first call loads a copy of its own
 * (capi/loader/shim.c), and the parent's objects it still holds belong to
 * the copy that died with the parent's Go runtime. The rdma_cm structs carry
 * it; verbs objects are ours when their context's ops are ours. */
extern const char gcapi_core_mark;

/* errno helpers: the one place errno is set. */
static inline int gcapi_err(int e)
{
	errno = e;
	return e;
}
static inline void *gcapi_errp(int e)
{
	errno = e;
	return NULL;
}

/* The name of enum value i in a designated-initializer table, fallback for a
 * value outside the table or a hole in it: the value comes from the caller. */
static inline const char *gcapi_name(const char *const *tab, size_t n, long i,
				     const char *fallback)
{
	return i >= 0 && (size_t)i < n && tab[i] ? tab[i] : fallback;
}
#define GCAPI_NAME(tab, i, fallback) gcapi_name(tab, sizeof(tab) / sizeof((tab)[0]), i, fallback)

/* Handles for Go (handles.go), the rdmacm glue and the giw_* extensions:
 * the handle of the Go object behind a C object, 0 for NULL. */
static inline uintptr_t gcapi_context_handle(struct ibv_context *ctx)
{
	return ctx ? gcapi_ctx(ctx)->h : 0;
}
static inline uintptr_t gcapi_pd_handle(struct ibv_pd *pd)
{
	return pd ? ((struct gcapi_pd *)pd)->h : 0;
}
static inline uintptr_t gcapi_mr_handle(struct ibv_mr *mr)
{
	return mr ? ((struct gcapi_mr *)mr)->h : 0;
}
static inline uintptr_t gcapi_cq_handle(struct ibv_cq *cq)
{
	return cq ? gcapi_cq(cq)->h : 0;
}
static inline uintptr_t gcapi_qp_handle(struct ibv_qp *qp)
{
	return qp ? gcapi_qp(qp)->h : 0;
}
static inline uintptr_t gcapi_srq_handle(struct ibv_srq *srq)
{
	return srq ? gcapi_srq(srq)->h : 0;
}

/* The port's active MTU for a device MTU in bytes (ibv_query_port, and
 * ibv_query_qp's path_mtu). */
static inline enum ibv_mtu gcapi_mtu_enum(int mtu)
{
	if (mtu >= 4096)
		return IBV_MTU_4096;
	if (mtu >= 2048)
		return IBV_MTU_2048;
	if (mtu >= 1024)
		return IBV_MTU_1024;
	if (mtu >= 512)
		return IBV_MTU_512;
	return IBV_MTU_256;
}

/* ---- who defines what ------------------------------------------------------
 * The files of the verbs glue call each other in one direction only
 * (build/c-calls.py checks): device.c -> objects.c -> datapath.c, and
 * device.c, objects.c -> live.c; everything may use fork.c's two symbols.
 * The rdmacm glue (rdmacm.h) and giw_ext.c call into these files, never the
 * other way. */

/* device.c: devices and the shared contexts of rdma_cm. */
struct ibv_device *gcapi_device_by_name(const char *name);
struct ibv_context *gcapi_open_device_by_name(const char *name);
int gcapi_context_ifindex(struct ibv_context *ctx);

/* live.c: the live-object registry. Events name C objects by address; a
 * record for an object destroyed meanwhile is dropped instead of handed out.
 * Delivery and the destroy-side wait are serialised by the registry lock. */
void gcapi_live_add(void *obj);
void gcapi_live_del(void *obj);
/* Under the registry lock: if obj is live, add 1 to *delivered and return 1. */
int gcapi_live_deliver(void *obj, uint32_t *delivered);

/* objects.c: the extended and memory-window ops ibv_open_device installs. */
struct ibv_cq_ex *gcapi_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *gcapi_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
struct ibv_srq *gcapi_create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr);
struct ibv_mw *gcapi_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int gcapi_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
int gcapi_dealloc_mw(struct ibv_mw *mw);

/* datapath.c: the data path ops installed in context->ops, and the
 * function pointers of the extended CQs and QPs. */
int gcapi_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int gcapi_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int gcapi_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int gcapi_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int gcapi_req_notify_cq(struct ibv_cq *cq, int solicited_only);
void gcapi_qp_ex_init(struct gcapi_qp *qp); /* ibv_wr_* function pointers */
void gcapi_cq_ex_init(struct gcapi_cq *cq); /* start_poll & co */

/* A context (an object of one) another copy of the core made: calls on it
 * fail with EPERM and never touch its rings, fds or sockets. */
static inline int gcapi_foreign_ctx(const struct ibv_context *ctx)
{
	return ctx && __builtin_expect(ctx->ops.poll_cq != gcapi_poll_cq, 0);
}
#define gcapi_foreign(obj) ((obj) && gcapi_foreign_ctx((obj)->context))

#endif
