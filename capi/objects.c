/* Control path of PDs, MRs, completion channels, CQs, QPs and SRQs, and
 * the verbs iWARP refuses. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capi.h"
#include "_cgo_export.h"

#define ATOMIC_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)
#define ATOMIC_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

/* Waits until the application acked every event handed out for an object,
 * as rdma-core's destroy calls do; *delivered no longer moves (the object
 * left the registry). */
static void wait_acked(pthread_mutex_t *mu, pthread_cond_t *cond, uint32_t *completed,
		       uint32_t *delivered)
{
	pthread_mutex_lock(mu);
	while (*completed != ATOMIC_LOAD(delivered))
		pthread_cond_wait(cond, mu);
	pthread_mutex_unlock(mu);
}

static void sync_init(pthread_mutex_t *mu, pthread_cond_t *cond)
{
	pthread_mutex_init(mu, NULL);
	pthread_cond_init(cond, NULL);
}

static void sync_destroy(pthread_mutex_t *mu, pthread_cond_t *cond)
{
	pthread_mutex_destroy(mu);
	pthread_cond_destroy(cond);
}

/* ---- PD ----------------------------------------------------------------- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct gcapi_pd *p;
	int e;

	if (!ctx)
		return gcapi_errp(EINVAL);
	if (gcapi_foreign_ctx(ctx))
		return gcapi_errp(EPERM);
	p = calloc(1, sizeof(*p));
	if (!p)
		return gcapi_errp(ENOMEM);
	e = goVerbsAllocPD(gcapi_context_handle(ctx), &p->h);
	if (e) {
		free(p);
		return gcapi_errp(e);
	}
	p->pd.context = ctx;
	p->pd.handle = (uint32_t)(uintptr_t)p;
	return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct gcapi_pd *p = (struct gcapi_pd *)pd;

	if (!pd)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(pd))
		return gcapi_err(EPERM);
	if (ATOMIC_LOAD(&p->usecnt))
		return gcapi_err(EBUSY);
	goVerbsDeallocPD(p->h);
	free(p);
	return 0;
}

/* ---- MR ----------------------------------------------------------------- */

static int check_access(unsigned int access)
{
	if (access & IBV_ACCESS_ON_DEMAND)
		return EOPNOTSUPP;
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	return 0;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct gcapi_mr *m;
	uint32_t stag = 0;
	int e;

	if (!pd || length == 0)
		return gcapi_errp(EINVAL);
	if (gcapi_foreign(pd))
		return gcapi_errp(EPERM);
	access &= ~IBV_ACCESS_OPTIONAL_RANGE; /* best-effort bits may be ignored */
	e = check_access(access);
	if (e)
		return gcapi_errp(e);
	m = calloc(1, sizeof(*m));
	if (!m)
		return gcapi_errp(ENOMEM);
	e = goVerbsRegMR(((struct gcapi_pd *)pd)->h, (uintptr_t)addr, length, iova, (int)access,
			 &m->h, &stag);
	if (e) {
		free(m);
		return gcapi_errp(e);
	}
	ATOMIC_ADD(&((struct gcapi_pd *)pd)->usecnt, 1);
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = stag;
	m->mr.lkey = stag;
	m->mr.rkey = stag;
	return &m->mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				 int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
				 int fd, int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	return gcapi_errp(EOPNOTSUPP);
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
		 int access)
{
	struct gcapi_mr *m = (struct gcapi_mr *)mr;
	uintptr_t pdh = 0;
	int e;

	if (!mr || flags <= 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (gcapi_foreign(mr) || ((flags & IBV_REREG_MR_CHANGE_PD) && gcapi_foreign(pd))) {
		errno = EPERM;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
		access &= ~IBV_ACCESS_OPTIONAL_RANGE;
		e = check_access((unsigned int)access);
		if (e) {
			errno = e;
			return IBV_REREG_MR_ERR_INPUT;
		}
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		pdh = ((struct gcapi_pd *)pd)->h;
	e = goVerbsReregMR(m->h, flags, pdh, (uintptr_t)addr, length, (uintptr_t)addr, access);
	if (e) {
		errno = e;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->addr = addr;
		mr->length = length;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		ATOMIC_ADD(&((struct gcapi_pd *)mr->pd)->usecnt, -1);
		ATOMIC_ADD(&((struct gcapi_pd *)pd)->usecnt, 1);
		mr->pd = pd;
	}
	return 0;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct gcapi_mr *m = (struct gcapi_mr *)mr;

	if (!mr)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(mr))
		return gcapi_err(EPERM);
	goVerbsDeregMR(m->h); /* waits for in-flight placement into it */
	ATOMIC_ADD(&((struct gcapi_pd *)mr->pd)->usecnt, -1);
	free(m);
	return 0;
}

/* ---- completion channels ------------------------------------------------ */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct gcapi_channel *c;
	int fd = -1, e;

	if (!ctx)
		return gcapi_errp(EINVAL);
	if (gcapi_foreign_ctx(ctx))
		return gcapi_errp(EPERM);
	c = calloc(1, sizeof(*c));
	if (!c)
		return gcapi_errp(ENOMEM);
	e = goVerbsCreateChannel(&c->h, &fd, &c->fired);
	if (e) {
		free(c);
		return gcapi_errp(e);
	}
	pthread_mutex_init(&c->lock, NULL);
	c->ch.context = ctx;
	c->ch.fd = fd;
	c->ch.refcnt = 0;
	return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct gcapi_channel *c = (struct gcapi_channel *)ch;

	if (!ch)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(ch))
		return gcapi_err(EPERM);
	pthread_mutex_lock(&c->lock);
	if (ch->refcnt) {
		pthread_mutex_unlock(&c->lock);
		return gcapi_err(EBUSY);
	}
	pthread_mutex_unlock(&c->lock);
	goVerbsDestroyChannel(c->h);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return 0;
}

static void channel_ref(struct ibv_comp_channel *ch, int d)
{
	struct gcapi_channel *c = (struct gcapi_channel *)ch;

	if (!ch)
		return;
	pthread_mutex_lock(&c->lock);
	ch->refcnt += d;
	pthread_mutex_unlock(&c->lock);
}

/* poll(2) fails with EINTR whenever a signal handler ran, where read(2) on
 * the channel would have restarted for a handler installed with
 * SA_RESTART: the caller sees EINTR only if some handler lacks it. */
static int eintr_visible(void)
{
	for (int s = 1; s < NSIG; s++) {
		struct sigaction sa;

		if (s == SIGKILL || s == SIGSTOP || sigaction(s, NULL, &sa) != 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return 1;
	}
	return 0;
}

#define WAIT_FDS 16

static int64_t mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/*
 * wait_poll is poll(2) with no timeout, after up to spin_ns of looking
 * without sleeping (the opt-in spin, GOIWARP_RX_SPIN): an arrival within
 * it wakes nobody.
 */
static int wait_poll(struct pollfd *p, int n, int64_t spin_ns)
{
	if (spin_ns > 0) {
		int64_t end = mono_ns() + spin_ns;
		do {
			int r = poll(p, n, 0);
			if (r != 0)
				return r;
		} while (mono_ns() < end);
	}
	return poll(p, n, -1);
}

/*
 * channel_wait returns when the channel has an event to read (or -1 with
 * errno EINTR). Meanwhile the thread waits on the connections of the QPs
 * that complete into the channel's armed CQs as well (same-host rings'
 * eventfds, TCP sockets the engine lends it), and reads them itself when
 * data comes: what it waits for is usually in it, and the application's
 * own thread places it instead of the engine's waking first and then this
 * one. Where the engine reads instead, it waits for the channel alone.
 * With the opt-in spin it looks that long before it sleeps (wait_poll).
 */
static int channel_wait(struct gcapi_channel *c)
{
	struct pollfd p[1 + WAIT_FDS];
	int32_t fds[WAIT_FDS];
	int64_t spin_ns;

	for (;;) {
		int n = goVerbsChannelWaitFDs(c->h, fds, WAIT_FDS, &spin_ns);
		if (n <= 0)
			return 0;
		p[0] = (struct pollfd){ .fd = c->ch.fd, .events = POLLIN };
		for (int i = 0; i < n; i++)
			p[1 + i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		if (wait_poll(p, n + 1, spin_ns) < 0) {
			if (errno != EINTR)
				return 0;
			if (eintr_visible())
				return -1;
			continue;
		}
		if (p[0].revents)
			return 0;
		int did = 0;
		for (int i = 0; i < n; i++)
			if (p[1 + i].revents)
				did |= goVerbsChannelWaitRead(c->h, fds[i]);
		if (!did || __atomic_load_n(&c->fired, __ATOMIC_ACQUIRE) != __atomic_load_n(&c->taken, __ATOMIC_RELAXED))
			return 0; /* the engine reads, or the event came */
	}
}

int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	uint64_t rec;

	if (!ch || !cq || !cq_context) {
		errno = EINVAL;
		return -1;
	}
	if (gcapi_foreign(ch)) { /* its fd carries the parent's events */
		errno = EPERM;
		return -1;
	}
	struct gcapi_channel *gc = (struct gcapi_channel *)ch;
	for (;;) {
		if (__atomic_load_n(&gc->fired, __ATOMIC_ACQUIRE) == __atomic_load_n(&gc->taken, __ATOMIC_RELAXED)) {
			/* nothing to read yet: a blocking channel waits here */
			int fl = fcntl(ch->fd, F_GETFL);
			if (fl >= 0 && !(fl & O_NONBLOCK) && channel_wait(gc) < 0)
				return -1;
		}
		ssize_t n = read(ch->fd, &rec, sizeof(rec));
		if (n < 0)
			return -1; /* EAGAIN on an O_NONBLOCK channel; EINTR as rdma-core */
		if (n != sizeof(rec)) {
			errno = EIO;
			return -1;
		}
		__atomic_add_fetch(&gc->taken, 1, __ATOMIC_RELAXED);
		struct gcapi_cq *c = (struct gcapi_cq *)(uintptr_t)rec;
		if (!gcapi_live_deliver(c, &c->comp_delivered))
			continue; /* the CQ was destroyed after the event was queued */
		*cq = (struct ibv_cq *)c;
		*cq_context = c->cq.cq_context;
		return 0;
	}
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	if (!cq || gcapi_foreign(cq))
		return;
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* ---- CQ ----------------------------------------------------------------- */

#define GCAPI_WC_FLAGS_SUP (IBV_WC_STANDARD_FLAGS)

static struct gcapi_cq *cq_create(struct ibv_context *ctx, int cqe, void *cq_context,
				  struct ibv_comp_channel *ch, int comp_vector, uint64_t wc_flags)
{
	struct gcapi_cq *c;
	int e;

	if (!ctx || cqe < 1)
		return gcapi_errp(EINVAL);
	if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors)
		return gcapi_errp(EINVAL);
	if (gcapi_foreign_ctx(ctx) || gcapi_foreign(ch))
		return gcapi_errp(EPERM);
	if (ch && ch->context != ctx)
		return gcapi_errp(EINVAL);
	c = calloc(1, sizeof(*c));
	if (!c)
		return gcapi_errp(ENOMEM);
	e = goVerbsCreateCQ(gcapi_context_handle(ctx), cqe,
			    ch ? ((struct gcapi_channel *)ch)->h : 0, (uintptr_t)c, &c->h, &c->ring);
	if (e) {
		free(c);
		return gcapi_errp(e);
	}
	pthread_spin_init(&c->lock, PTHREAD_PROCESS_PRIVATE);
	sync_init(&c->cq.mutex, &c->cq.cond);
	c->cq.context = ctx;
	c->cq.channel = ch;
	c->cq.cq_context = cq_context;
	c->cq.handle = (uint32_t)(uintptr_t)c;
	c->cq.cqe = (int)c->ring->size;
	c->wc_flags = wc_flags;
	gcapi_cq_ex_init(c);
	channel_ref(ch, 1);
	gcapi_live_add(c);
	return c;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *ch, int comp_vector)
{
	struct gcapi_cq *c = cq_create(ctx, cqe, cq_context, ch, comp_vector,
				       IBV_WC_STANDARD_FLAGS);
	return c ? (struct ibv_cq *)&c->cq : NULL;
}

struct ibv_cq_ex *gcapi_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	struct gcapi_cq *c;

	if (gcapi_in_forked_child())
		return gcapi_errp(EPERM);
	if (!a)
		return gcapi_errp(EINVAL);
	if (a->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return gcapi_errp(EINVAL);
	if (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD)
		return gcapi_errp(EOPNOTSUPP); /* no parent domains */
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (a->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
		return gcapi_errp(EOPNOTSUPP);
	if (a->wc_flags & ~(uint64_t)GCAPI_WC_FLAGS_SUP)
		return gcapi_errp(EOPNOTSUPP);
	c = cq_create(ctx, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector,
		      a->wc_flags);
	return c ? &c->cq : NULL;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	struct gcapi_cq *c = gcapi_cq(cq);
	struct giw_ring *r = NULL;
	int e;

	if (!cq || cqe < 1)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(cq))
		return gcapi_err(EPERM);
	pthread_spin_lock(&c->lock);
	e = goVerbsResizeCQ(c->h, cqe, &r);
	if (!e) {
		c->ring = r;
		cq->cqe = (int)r->size;
	}
	pthread_spin_unlock(&c->lock);
	return e ? gcapi_err(e) : 0;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct gcapi_cq *c = gcapi_cq(cq);

	if (!cq)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(cq))
		return gcapi_err(EPERM);
	if (ATOMIC_LOAD(&c->usecnt))
		return gcapi_err(EBUSY);
	gcapi_live_del(c);
	wait_acked(&cq->mutex, &cq->cond, &cq->comp_events_completed, &c->comp_delivered);
	wait_acked(&cq->mutex, &cq->cond, &cq->async_events_completed, &c->async_delivered);
	goVerbsDestroyCQ(c->h);
	channel_ref(cq->channel, -1);
	pthread_spin_destroy(&c->lock);
	sync_destroy(&cq->mutex, &cq->cond);
	free(c);
	return 0;
}

/* ---- SRQ ---------------------------------------------------------------- */

static struct ibv_srq *srq_create(struct ibv_context *ctx, struct ibv_pd *pd, void *srq_context,
				  struct ibv_srq_attr *attr)
{
	struct gcapi_srq *s;
	int e;

	if (!ctx || !pd || !attr)
		return gcapi_errp(EINVAL);
	if (gcapi_foreign_ctx(ctx) || gcapi_foreign(pd))
		return gcapi_errp(EPERM);
	if (attr->max_sge > GIW_MAX_SGE)
		return gcapi_errp(EINVAL);
	s = calloc(1, sizeof(*s));
	if (!s)
		return gcapi_errp(ENOMEM);
	e = goVerbsCreateSRQ(gcapi_context_handle(ctx), ((struct gcapi_pd *)pd)->h, attr,
			     (uintptr_t)s, &s->h, &s->ring);
	if (e) {
		free(s);
		return gcapi_errp(e);
	}
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	sync_init(&s->srq.mutex, &s->srq.cond);
	s->srq.context = ctx;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	s->srq.handle = (uint32_t)(uintptr_t)s;
	s->max_sge = attr->max_sge;
	ATOMIC_ADD(&((struct gcapi_pd *)pd)->usecnt, 1);
	gcapi_live_add(s);
	return &s->srq;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	if (!pd || !a)
		return gcapi_errp(EINVAL);
	return srq_create(pd->context, pd, a->srq_context, &a->attr);
}

struct ibv_srq *gcapi_create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *a)
{
	if (gcapi_in_forked_child())
		return gcapi_errp(EPERM);
	if (!a)
		return gcapi_errp(EINVAL);
	if (a->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE))
		return gcapi_errp(EOPNOTSUPP);
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC)
		return gcapi_errp(EOPNOTSUPP);
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD))
		return gcapi_errp(EINVAL);
	return srq_create(ctx, a->pd, a->srq_context, &a->attr);
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	if (!srq || !attr)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(srq))
		return gcapi_err(EPERM);
	int e = goVerbsModifySRQ(gcapi_srq(srq)->h, attr, mask);
	return e ? gcapi_err(e) : 0;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (!srq || !attr)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(srq))
		return gcapi_err(EPERM);
	int e = goVerbsQuerySRQ(gcapi_srq(srq)->h, attr);
	return e ? gcapi_err(e) : 0;
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct gcapi_srq *s = gcapi_srq(srq);

	if (!srq)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(srq))
		return gcapi_err(EPERM);
	if (ATOMIC_LOAD(&s->usecnt))
		return gcapi_err(EBUSY);
	gcapi_live_del(s);
	wait_acked(&srq->mutex, &srq->cond, &srq->events_completed, &s->async_delivered);
	goVerbsDestroySRQ(s->h);
	ATOMIC_ADD(&((struct gcapi_pd *)srq->pd)->usecnt, -1);
	pthread_spin_destroy(&s->lock);
	sync_destroy(&srq->mutex, &srq->cond);
	free(s);
	return 0;
}

/* ---- QP ----------------------------------------------------------------- */

#define GCAPI_SEND_OPS_SUP                                                        \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |         \
	 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ | \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | \
	 IBV_QP_EX_WITH_SEND_WITH_INV)

struct ibv_qp *gcapi_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	struct gcapi_qp *q;
	uint32_t qpn = 0;
	int e;

	if (gcapi_in_forked_child())
		return gcapi_errp(EPERM);
	if (!ctx || !a)
		return gcapi_errp(EINVAL);
	if (gcapi_foreign_ctx(ctx) || gcapi_foreign(a->send_cq) || gcapi_foreign(a->recv_cq) ||
	    gcapi_foreign(a->srq) || ((a->comp_mask & IBV_QP_INIT_ATTR_PD) && gcapi_foreign(a->pd)))
		return gcapi_errp(EPERM);
	if (a->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
				       IBV_QP_INIT_ATTR_CREATE_FLAGS |
				       IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
				       IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
				       IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return gcapi_errp(EINVAL);
	if (a->comp_mask & (IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
			    IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH))
		return gcapi_errp(EOPNOTSUPP);
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags)
		return gcapi_errp(EOPNOTSUPP);
	if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	    (a->send_ops_flags & ~(uint64_t)GCAPI_SEND_OPS_SUP))
		return gcapi_errp(EOPNOTSUPP);
	/* iWARP has reliable connections only (siw answers EOPNOTSUPP too). */
	if (a->qp_type != IBV_QPT_RC)
		return gcapi_errp(EOPNOTSUPP);
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || !a->send_cq || !a->recv_cq)
		return gcapi_errp(EINVAL);
	if (a->pd->context != ctx || a->send_cq->context != ctx || a->recv_cq->context != ctx ||
	    (a->srq && a->srq->context != ctx))
		return gcapi_errp(EINVAL);

	q = calloc(1, sizeof(*q));
	if (!q)
		return gcapi_errp(ENOMEM);
	struct ibv_qp_cap cap = a->cap;
	if (a->srq)
		cap.max_recv_wr = cap.max_recv_sge = 0;
	e = goVerbsCreateQP(gcapi_context_handle(ctx), ((struct gcapi_pd *)a->pd)->h,
			    gcapi_cq(a->send_cq)->h, gcapi_cq(a->recv_cq)->h,
			    a->srq ? gcapi_srq(a->srq)->h : 0, &cap, a->sq_sig_all, (uintptr_t)q,
			    &q->h, &qpn, &q->sq, &q->rq);
	if (e) {
		free(q);
		return gcapi_errp(e);
	}
	a->cap = cap;
	q->max_send_wr = cap.max_send_wr;
	q->max_recv_wr = cap.max_recv_wr;
	q->max_send_sge = cap.max_send_sge;
	q->max_recv_sge = cap.max_recv_sge;
	q->max_inline = cap.max_inline_data;
	q->sq_sig_all = a->sq_sig_all;
	pthread_spin_init(&q->sq_lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&q->rq_lock, PTHREAD_PROCESS_PRIVATE);

	struct ibv_qp *qp = &q->qpx.qp_base;
	sync_init(&qp->mutex, &qp->cond);
	qp->context = ctx;
	qp->qp_context = a->qp_context;
	qp->pd = a->pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->handle = qpn;
	qp->qp_num = qpn;
	qp->state = IBV_QPS_RESET; /* as libibverbs sets it; ibv_query_qp says INIT (siw) */
	qp->qp_type = IBV_QPT_RC;
	gcapi_qp_ex_init(q);

	ATOMIC_ADD(&((struct gcapi_pd *)a->pd)->usecnt, 1);
	ATOMIC_ADD(&gcapi_cq(a->send_cq)->usecnt, 1);
	ATOMIC_ADD(&gcapi_cq(a->recv_cq)->usecnt, 1);
	if (a->srq)
		ATOMIC_ADD(&gcapi_srq(a->srq)->usecnt, 1);
	gcapi_live_add(q);
	return qp;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct ibv_qp_init_attr_ex ax;
	struct ibv_qp *qp;

	if (!pd || !a)
		return gcapi_errp(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, a, sizeof(*a));
	ax.comp_mask = IBV_QP_INIT_ATTR_PD;
	ax.pd = pd;
	qp = gcapi_create_qp_ex(pd->context, &ax);
	if (qp)
		a->cap = ax.cap;
	return qp;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	if (gcapi_foreign(qp))
		return gcapi_errp(EPERM);
	return qp ? &gcapi_qp(qp)->qpx : NULL;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	int e;

	if (!qp || !attr)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(qp))
		return gcapi_err(EPERM);
	e = goVerbsModifyQP(gcapi_qp(qp)->h, attr, mask);
	if (e)
		return gcapi_err(e);
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
		 struct ibv_qp_init_attr *init)
{
	struct gcapi_qp *q = gcapi_qp(qp);
	int e;

	(void)mask; /* everything is cheap: fill it all, as providers do */
	if (!qp || !attr || !init)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(qp))
		return gcapi_err(EPERM);
	memset(attr, 0, sizeof(*attr));
	e = goVerbsQueryQP(q->h, attr);
	if (e)
		return gcapi_err(e);
	/* what ibv_query_port reports as the port's active MTU */
	attr->path_mtu = gcapi_mtu_enum(gcapi_ctx(qp->context)->gdev->info.mtu);
	attr->cap.max_send_wr = q->max_send_wr;
	attr->cap.max_recv_wr = q->max_recv_wr;
	attr->cap.max_send_sge = q->max_send_sge;
	attr->cap.max_recv_sge = q->max_recv_sge;
	attr->cap.max_inline_data = q->max_inline;
	qp->state = attr->qp_state;

	memset(init, 0, sizeof(*init));
	init->qp_context = qp->qp_context;
	init->send_cq = qp->send_cq;
	init->recv_cq = qp->recv_cq;
	init->srq = qp->srq;
	init->cap = attr->cap;
	init->qp_type = qp->qp_type;
	init->sq_sig_all = q->sq_sig_all;
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct gcapi_qp *q = gcapi_qp(qp);

	if (!qp)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(qp))
		return gcapi_err(EPERM);
	gcapi_live_del(q);
	wait_acked(&qp->mutex, &qp->cond, &qp->events_completed, &q->async_delivered);
	/* Go aborts the connection, stops the engine on this QP, frees the rings. */
	goVerbsDestroyQP(q->h);
	ATOMIC_ADD(&((struct gcapi_pd *)qp->pd)->usecnt, -1);
	ATOMIC_ADD(&gcapi_cq(qp->send_cq)->usecnt, -1);
	ATOMIC_ADD(&gcapi_cq(qp->recv_cq)->usecnt, -1);
	if (qp->srq)
		ATOMIC_ADD(&gcapi_srq(qp->srq)->usecnt, -1);
	pthread_spin_destroy(&q->sq_lock);
	pthread_spin_destroy(&q->rq_lock);
	sync_destroy(&qp->mutex, &qp->cond);
	free(q);
	return 0;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp, (void)op, (void)flags;
	return 0; /* no guarantee beyond completion order */
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return gcapi_err(EOPNOTSUPP);
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return gcapi_err(EOPNOTSUPP);
}

/* ---- what iWARP lacks --------------------------------------------------- */

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	(void)pd, (void)attr;
	return gcapi_errp(EOPNOTSUPP);
}

int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *attr)
{
	(void)ctx, (void)port, (void)wc, (void)grh, (void)attr;
	return gcapi_err(EOPNOTSUPP);
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port)
{
	(void)pd, (void)wc, (void)grh, (void)port;
	return gcapi_errp(EOPNOTSUPP);
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	(void)ah;
	return gcapi_err(EOPNOTSUPP);
}

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp, (void)gid, (void)lid;
	return gcapi_err(EOPNOTSUPP);
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)qp, (void)gid, (void)lid;
	return gcapi_err(EOPNOTSUPP);
}

struct ibv_mw *gcapi_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	(void)pd, (void)type;
	return gcapi_errp(EOPNOTSUPP);
}

int gcapi_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	(void)qp, (void)mw, (void)bind;
	return gcapi_err(EOPNOTSUPP);
}

int gcapi_dealloc_mw(struct ibv_mw *mw)
{
	(void)mw;
	return gcapi_err(EOPNOTSUPP);
}

struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	return gcapi_errp(EOPNOTSUPP);
}

struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t h)
{
	(void)ctx, (void)h;
	return gcapi_errp(EOPNOTSUPP);
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t h)
{
	(void)pd, (void)h;
	return gcapi_errp(EOPNOTSUPP);
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t h)
{
	(void)ctx, (void)h;
	return gcapi_errp(EOPNOTSUPP);
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}
