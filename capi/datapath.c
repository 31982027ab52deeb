#define _GNU_SOURCE /* sched_getcpu */
/* The fast path: post_send/post_recv/post_srq_recv, poll_cq/req_notify_cq,
 * the ibv_wr_* builders and the ibv_cq_ex poll ops, all over the rings of
 * giw_ring.h. The only calls into Go are the send doorbell (when the engine
 * is idle the posting thread transmits), the progress hook of a poll that
 * found its CQ empty (the polling thread reads the sockets of the CQ's QPs),
 * the flush of receives posted to a QP in ERR, and the receive doorbell
 * when a receive path waits for a receive (ring flag rnr_wait). */
#include <sched.h>
#include <string.h>

#include "capi.h"
#include "_cgo_export.h"

#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

#define GIW_SEND_FLAGS (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE)

/* Posting sends needs RTS (or SQD/SQE, where work waits); in ERR the work is
 * written and flushed by the doorbell. RESET, INIT and RTR refuse, but for
 * the RTR of a QP connected without a CM (early_posts: the work waits). */
static int sq_postable(const struct giw_ring *r)
{
	uint32_t st = LOAD_ACQ(&r->state);

	return st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE || st == IBV_QPS_ERR ||
	       (st == IBV_QPS_RTR && __atomic_load_n(&r->early_posts, __ATOMIC_RELAXED));
}

/* Publish-then-ring: the engine stores doorbell=1 and then reads prod, we store
 * prod and then swap doorbell, so both sides need sequential consistency. */
static void sq_ring(struct gcapi_qp *q)
{
	__atomic_store_n(&q->sq->post_cpu, (uint32_t)(sched_getcpu() + 1), __ATOMIC_RELAXED);
	if (__atomic_exchange_n(&q->sq->doorbell, 0, __ATOMIC_SEQ_CST))
		goVerbsQPDoorbell(q->h);
}

/* Whether ring r has room for entry prod; *cons is the consumer index last
 * read, read again only when the ring looks full. */
static int ring_room(struct giw_ring *r, uint32_t prod, uint32_t *cons)
{
	if (prod - *cons < r->size)
		return 1;
	*cons = LOAD_ACQ(&r->cons);
	return prod - *cons < r->size;
}

/* The SGE list of an SQE or RQE (post_send, the ibv_wr_* builders, post_recv). */
static void put_sges(struct giw_sge *dst, const struct ibv_sge *sg, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		dst[i].addr = sg[i].addr;
		dst[i].length = sg[i].length;
		dst[i].lkey = sg[i].lkey;
	}
}

static int fill_sqe(struct gcapi_qp *q, struct giw_sqe *e, const struct ibv_send_wr *wr)
{
	uint32_t flags = wr->send_flags & GIW_SEND_FLAGS;
	int nsge = wr->num_sge;

	if (nsge < 0 || (uint32_t)nsge > q->max_send_sge)
		return EINVAL;
	switch (wr->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		break;
	case IBV_WR_RDMA_READ:
		/* an RDMA Read sink is one tagged buffer (siw: one SGE) */
		if (nsge > 1 || (flags & IBV_SEND_INLINE))
			return EINVAL;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		if (nsge != 1 || wr->sg_list[0].length < 8 || (flags & IBV_SEND_INLINE))
			return EINVAL;
		break;
	default: /* SEND_WITH_IMM (see wrx_send_imm), LOCAL_INV, BIND_MW, TSO, DRIVER1, ATOMIC_WRITE */
		return EINVAL;
	}
	if (q->sq_sig_all)
		flags |= IBV_SEND_SIGNALED;

	e->wr_id = wr->wr_id;
	e->opcode = (uint8_t)wr->opcode;
	e->flags = (uint8_t)flags;
	e->rsvd = 0;
	e->imm_inv = 0;
	e->remote_addr = 0;
	e->rkey = 0;
	e->inline_len = 0;
	e->compare_add = 0;
	e->swap = 0;
	switch (wr->opcode) {
	case IBV_WR_SEND_WITH_INV:
		e->imm_inv = wr->invalidate_rkey;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		e->imm_inv = wr->imm_data;
		/* fallthrough */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		e->remote_addr = wr->wr.rdma.remote_addr;
		e->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		e->remote_addr = wr->wr.atomic.remote_addr;
		e->rkey = wr->wr.atomic.rkey;
		e->compare_add = wr->wr.atomic.compare_add;
		e->swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	if (flags & IBV_SEND_INLINE) {
		size_t total = 0;
		for (int i = 0; i < nsge; i++)
			total += wr->sg_list[i].length;
		if (total > q->max_inline || total > GIW_MAX_INLINE)
			return EINVAL;
		uint8_t *p = e->inline_data;
		for (int i = 0; i < nsge; i++) {
			memcpy(p, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			p += wr->sg_list[i].length;
		}
		e->inline_len = (uint32_t)total;
		e->num_sge = 0;
		return 0;
	}
	e->num_sge = (uint8_t)nsge;
	put_sges(e->sge, wr->sg_list, (size_t)nsge);
	return 0;
}

int gcapi_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct gcapi_qp *q = gcapi_qp(qp);
	struct giw_ring *r = q->sq;
	int err = 0, posted = 0;

	if (gcapi_in_forked_child()) {
		*bad = wr;
		return gcapi_err(EPERM);
	}
	pthread_spin_lock(&q->sq_lock);
	if (!sq_postable(r)) {
		pthread_spin_unlock(&q->sq_lock);
		*bad = wr;
		return EINVAL;
	}
	uint32_t prod = r->prod, cons = LOAD_ACQ(&r->cons);
	for (; wr; wr = wr->next) {
		if (!ring_room(r, prod, &cons)) {
			err = ENOMEM;
			break;
		}
		err = fill_sqe(q, GIW_RING_ENTRY(r, prod), wr);
		if (err)
			break;
		prod++;
		posted = 1;
	}
	if (posted)
		STORE_REL(&r->prod, prod);
	pthread_spin_unlock(&q->sq_lock);
	if (err)
		*bad = wr;
	if (posted)
		sq_ring(q);
	return err;
}

static int fill_rqe(struct giw_rqe *e, const struct ibv_recv_wr *wr, uint32_t max_sge)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge || wr->num_sge > GIW_MAX_SGE)
		return EINVAL;
	e->wr_id = wr->wr_id;
	e->num_sge = (uint32_t)wr->num_sge;
	e->rsvd = 0;
	put_sges(e->sge, wr->sg_list, (size_t)wr->num_sge);
	return 0;
}

/* Copies a chain of receive WRs into ring r; returns the errno of the first
 * one refused (*bad set) and whether any was posted. Caller holds the lock. */
static int post_rq(struct giw_ring *r, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad,
		   uint32_t max_sge, int *posted)
{
	uint32_t prod = r->prod, cons = LOAD_ACQ(&r->cons);
	int err = 0;

	for (; wr; wr = wr->next) {
		if (!ring_room(r, prod, &cons)) {
			err = ENOMEM;
			break;
		}
		err = fill_rqe(GIW_RING_ENTRY(r, prod), wr, max_sge);
		if (err)
			break;
		prod++;
		*posted = 1;
	}
	if (*posted)
		__atomic_store_n(&r->prod, prod, __ATOMIC_SEQ_CST);
	if (err)
		*bad = wr;
	return err;
}

int gcapi_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct gcapi_qp *q = gcapi_qp(qp);
	struct giw_ring *r = q->rq;
	int err, posted = 0;

	if (gcapi_in_forked_child()) {
		*bad = wr;
		return gcapi_err(EPERM);
	}
	if (!r) { /* the QP takes its receives from an SRQ */
		*bad = wr;
		return EINVAL;
	}
	pthread_spin_lock(&q->rq_lock);
	if (LOAD_ACQ(&r->state) == IBV_QPS_RESET) {
		pthread_spin_unlock(&q->rq_lock);
		*bad = wr;
		return EINVAL;
	}
	err = post_rq(r, wr, bad, q->max_recv_sge, &posted);
	pthread_spin_unlock(&q->rq_lock);
	/* The engine publishes ERR and then flushes; we publish prod and then
	 * look at the state (both seq-cst): a receive is never left behind.
	 * Likewise a receive path waiting for a receive sets rnr_wait and then
	 * looks at prod: one of us sees the other. */
	if (posted) {
		int wake = __atomic_exchange_n(&r->rnr_wait, 0, __ATOMIC_SEQ_CST) != 0;
		if (wake || __atomic_load_n(&r->state, __ATOMIC_SEQ_CST) == IBV_QPS_ERR)
			goVerbsQPRecvDoorbell(q->h);
	}
	return err;
}

int gcapi_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct gcapi_srq *s = gcapi_srq(srq);
	int err, posted = 0;

	if (gcapi_in_forked_child()) {
		*bad = wr;
		return gcapi_err(EPERM);
	}
	pthread_spin_lock(&s->lock);
	err = post_rq(s->ring, wr, bad, s->max_sge ? s->max_sge : 1, &posted);
	pthread_spin_unlock(&s->lock);
	/* Wake the QPs' receive paths waiting for a receive (see post_recv). */
	if (posted && __atomic_exchange_n(&s->ring->rnr_wait, 0, __ATOMIC_SEQ_CST))
		goVerbsSRQRecvDoorbell(s->h);
	return err;
}

/* ---- completions -------------------------------------------------------- */

static void cqe_to_wc(const struct giw_cqe *e, struct ibv_wc *wc)
{
	wc->wr_id = e->wr_id;
	wc->status = e->status;
	wc->opcode = e->opcode;
	wc->vendor_err = e->vendor_err;
	wc->byte_len = e->byte_len;
	wc->imm_data = e->imm_inv; /* union with invalidated_rkey */
	wc->qp_num = e->qp_num;
	wc->src_qp = 0;
	wc->wc_flags = e->wc_flags;
	wc->pkey_index = 0;
	wc->slid = 0;
	wc->sl = 0;
	wc->dlid_path_bits = 0;
}

static int poll_ring(struct gcapi_cq *c, int n, struct ibv_wc *wc, uint32_t *active)
{
	int i = 0;

	pthread_spin_lock(&c->lock);
	struct giw_ring *r = c->ring;
	uint32_t cons = r->cons, prod = LOAD_ACQ(&r->prod);
	for (; i < n && cons != prod; i++, cons++)
		cqe_to_wc(GIW_RING_ENTRY(r, cons), &wc[i]);
	if (i)
		STORE_REL(&r->cons, cons);
	else
		*active = __atomic_load_n(&r->active, __ATOMIC_RELAXED);
	pthread_spin_unlock(&c->lock);
	return i;
}

/* Progress belongs to whoever is spinning: an empty poll lets the CQ's
 * connected QPs read their sockets (non-blocking) on this thread, one call
 * into Go, and polls again if that produced anything. */
int gcapi_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct gcapi_cq *c = gcapi_cq(cq);
	uint32_t active = 0;
	int i;

	if (n < 0 || gcapi_in_forked_child()) {
		gcapi_err(n < 0 ? EINVAL : EPERM);
		return -1;
	}
	if (n == 0)
		return 0;
	i = poll_ring(c, n, wc, &active);
	if (i == 0 && active && goVerbsCQProgress(c->h))
		i = poll_ring(c, n, wc, &active);
	return i;
}

/* Under the poll lock: ibv_resize_cq swaps c->ring and unmaps the old ring
 * under it (an arm written to the old ring faults, or is lost once Resize
 * has copied the notify word over). */
int gcapi_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct gcapi_cq *c = gcapi_cq(cq);
	uint32_t active;

	if (gcapi_in_forked_child())
		return gcapi_err(EPERM);
	pthread_spin_lock(&c->lock);
	if (!solicited_only) {
		__atomic_store_n(&c->ring->notify, GIW_NOTIFY_NEXT, __ATOMIC_SEQ_CST);
	} else {
		/* an armed "next" already covers solicited completions */
		uint32_t none = GIW_NOTIFY_NONE;
		__atomic_compare_exchange_n(&c->ring->notify, &none, GIW_NOTIFY_SOLICITED, 0,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	}
	active = __atomic_load_n(&c->ring->active, __ATOMIC_RELAXED);
	pthread_spin_unlock(&c->lock);
	/* The connections may have left their sockets to this thread's polls
	 * (provider: muted), which are about to stop. */
	if (active)
		goVerbsCQArmed(c->h);
	return 0;
}

/* ibv_cq_ex: start_poll takes the poll lock and end_poll drops it (not taken
 * when start_poll finds nothing, as the API says). */
static int cqx_take(struct gcapi_cq *c)
{
	struct giw_ring *r = c->ring;
	uint32_t cons = r->cons;

	if (cons == LOAD_ACQ(&r->prod))
		return ENOENT;
	c->cur = *(struct giw_cqe *)GIW_RING_ENTRY(r, cons);
	STORE_REL(&r->cons, cons + 1);
	c->cq.wr_id = c->cur.wr_id;
	c->cq.status = c->cur.status;
	return 0;
}

static int cqx_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	struct gcapi_cq *c = gcapi_cqx(cq);
	int e;

	if (attr && attr->comp_mask)
		return EINVAL;
	if (gcapi_in_forked_child())
		return gcapi_err(EPERM);
	pthread_spin_lock(&c->lock);
	e = cqx_take(c);
	if (e) {
		uint32_t active = __atomic_load_n(&c->ring->active, __ATOMIC_RELAXED);
		pthread_spin_unlock(&c->lock);
		if (!active || !goVerbsCQProgress(c->h))
			return e;
		pthread_spin_lock(&c->lock);
		e = cqx_take(c);
		if (e)
			pthread_spin_unlock(&c->lock);
	}
	return e;
}

static int cqx_next_poll(struct ibv_cq_ex *cq)
{
	return cqx_take(gcapi_cqx(cq));
}

static void cqx_end_poll(struct ibv_cq_ex *cq)
{
	pthread_spin_unlock(&gcapi_cqx(cq)->lock);
}

static enum ibv_wc_opcode cqx_read_opcode(struct ibv_cq_ex *cq)
{
	return gcapi_cqx(cq)->cur.opcode;
}
static uint32_t cqx_read_vendor_err(struct ibv_cq_ex *cq)
{
	return gcapi_cqx(cq)->cur.vendor_err;
}
static uint32_t cqx_read_byte_len(struct ibv_cq_ex *cq)
{
	return gcapi_cqx(cq)->cur.byte_len;
}
static __be32 cqx_read_imm_data(struct ibv_cq_ex *cq)
{
	return gcapi_cqx(cq)->cur.imm_inv;
}
static uint32_t cqx_read_qp_num(struct ibv_cq_ex *cq)
{
	return gcapi_cqx(cq)->cur.qp_num;
}
static uint32_t cqx_read_zero32(struct ibv_cq_ex *cq)
{
	(void)cq;
	return 0;
}
static unsigned int cqx_read_wc_flags(struct ibv_cq_ex *cq)
{
	return gcapi_cqx(cq)->cur.wc_flags;
}
static uint8_t cqx_read_zero8(struct ibv_cq_ex *cq)
{
	(void)cq;
	return 0;
}

void gcapi_cq_ex_init(struct gcapi_cq *c)
{
	struct ibv_cq_ex *x = &c->cq;
	uint64_t f = c->wc_flags;

	x->start_poll = cqx_start_poll;
	x->next_poll = cqx_next_poll;
	x->end_poll = cqx_end_poll;
	x->read_opcode = cqx_read_opcode;
	x->read_vendor_err = cqx_read_vendor_err;
	x->read_wc_flags = cqx_read_wc_flags;
	if (f & IBV_WC_EX_WITH_BYTE_LEN)
		x->read_byte_len = cqx_read_byte_len;
	if (f & IBV_WC_EX_WITH_IMM)
		x->read_imm_data = cqx_read_imm_data;
	if (f & IBV_WC_EX_WITH_QP_NUM)
		x->read_qp_num = cqx_read_qp_num;
	if (f & IBV_WC_EX_WITH_SRC_QP)
		x->read_src_qp = cqx_read_zero32;
	if (f & IBV_WC_EX_WITH_SLID)
		x->read_slid = cqx_read_zero32;
	if (f & IBV_WC_EX_WITH_SL)
		x->read_sl = cqx_read_zero8;
	if (f & IBV_WC_EX_WITH_DLID_PATH_BITS)
		x->read_dlid_path_bits = cqx_read_zero8;
}

/* ---- ibv_wr_* ----------------------------------------------------------- */

/* wr_start takes the send lock; each builder claims the next slot past the
 * published prod; wr_complete publishes them all (or none if one failed). */
static void wrx_start(struct ibv_qp_ex *qpx)
{
	struct gcapi_qp *q = gcapi_qpx(qpx);

	q->wr_cur = NULL;
	if (gcapi_in_forked_child()) { /* no lock: the parent may have held it */
		q->wr_err = EPERM;
		return;
	}
	pthread_spin_lock(&q->sq_lock);
	q->wr_prod = q->sq->prod;
	q->wr_err = 0;
}

static struct giw_sqe *wrx_new(struct gcapi_qp *q, uint8_t opcode)
{
	struct giw_ring *r = q->sq;
	struct giw_sqe *e;

	q->wr_cur = NULL;
	if (q->wr_err)
		return NULL;
	if (q->wr_prod - LOAD_ACQ(&r->cons) >= r->size) {
		q->wr_err = ENOMEM;
		return NULL;
	}
	e = GIW_RING_ENTRY(r, q->wr_prod);
	q->wr_prod++;
	memset(e, 0, offsetof(struct giw_sqe, sge));
	e->wr_id = q->qpx.wr_id;
	e->opcode = opcode;
	e->flags = (uint8_t)(q->qpx.wr_flags & (GIW_SEND_FLAGS & ~IBV_SEND_INLINE));
	if (q->sq_sig_all)
		e->flags |= IBV_SEND_SIGNALED;
	q->wr_cur = e;
	return e;
}

static void wrx_fail(struct ibv_qp_ex *qpx, int err)
{
	struct gcapi_qp *q = gcapi_qpx(qpx);

	q->wr_cur = NULL;
	if (!q->wr_err)
		q->wr_err = err;
}

static void wrx_send(struct ibv_qp_ex *qpx)
{
	wrx_new(gcapi_qpx(qpx), IBV_WR_SEND);
}

/* Send with Immediate has no RFC 7306 message of its own (Immediate Data
 * after a Send would take a second receive): refused like an unsupported
 * opcode (RDMA Write with Immediate is a Write and Immediate Data). */
static void wrx_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	(void)imm;
	wrx_fail(qpx, EOPNOTSUPP);
}

static void wrx_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct giw_sqe *e = wrx_new(gcapi_qpx(qpx), IBV_WR_SEND_WITH_INV);
	if (e)
		e->imm_inv = rkey;
}

static void wrx_rdma(struct ibv_qp_ex *qpx, uint8_t op, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct giw_sqe *e = wrx_new(gcapi_qpx(qpx), op);
	if (e) {
		e->rkey = rkey;
		e->remote_addr = addr;
		e->imm_inv = imm;
	}
}

static void wrx_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	wrx_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, addr, 0);
}

static void wrx_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wrx_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}

static void wrx_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	wrx_rdma(qpx, IBV_WR_RDMA_READ, rkey, addr, 0);
}

static void wrx_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
			       uint64_t compare, uint64_t swap)
{
	struct giw_sqe *e = wrx_new(gcapi_qpx(qpx), IBV_WR_ATOMIC_CMP_AND_SWP);
	if (e) {
		e->rkey = rkey;
		e->remote_addr = addr;
		e->compare_add = compare;
		e->swap = swap;
	}
}

static void wrx_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr,
				 uint64_t add)
{
	struct giw_sqe *e = wrx_new(gcapi_qpx(qpx), IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (e) {
		e->rkey = rkey;
		e->remote_addr = addr;
		e->compare_add = add;
	}
}

static void wrx_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	(void)rkey;
	wrx_fail(qpx, EOPNOTSUPP);
}

static void wrx_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
			const struct ibv_mw_bind_info *info)
{
	(void)mw, (void)rkey, (void)info;
	wrx_fail(qpx, EOPNOTSUPP);
}

static void wrx_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr, (void)hdr_sz, (void)mss;
	wrx_fail(qpx, EOPNOTSUPP);
}

static void wrx_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	(void)ah, (void)qpn, (void)qkey;
	wrx_fail(qpx, EOPNOTSUPP);
}

static void wrx_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t srqn)
{
	(void)srqn;
	wrx_fail(qpx, EOPNOTSUPP);
}

static void wrx_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, const void *w)
{
	(void)rkey, (void)addr, (void)w;
	wrx_fail(qpx, EOPNOTSUPP);
}

static void wrx_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *sg)
{
	struct gcapi_qp *q = gcapi_qpx(qpx);
	struct giw_sqe *e = q->wr_cur;

	if (!e)
		return;
	if (n > q->max_send_sge || n > GIW_MAX_SGE ||
	    (e->opcode == IBV_WR_RDMA_READ && n > 1) ||
	    ((e->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || e->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) &&
	     (n != 1 || sg[0].length < 8))) {
		wrx_fail(qpx, EINVAL);
		return;
	}
	put_sges(e->sge, sg, n);
	e->num_sge = (uint8_t)n;
	e->inline_len = 0;
	e->flags &= ~IBV_SEND_INLINE;
}

static void wrx_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sg = { .addr = addr, .length = length, .lkey = lkey };

	wrx_set_sge_list(qpx, 1, &sg);
}

static void wrx_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_data_buf *b)
{
	struct gcapi_qp *q = gcapi_qpx(qpx);
	struct giw_sqe *e = q->wr_cur;
	size_t total = 0;

	if (!e)
		return;
	for (size_t i = 0; i < n; i++)
		total += b[i].length;
	if (total > q->max_inline || total > GIW_MAX_INLINE || e->opcode == IBV_WR_RDMA_READ ||
	    e->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || e->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wrx_fail(qpx, EINVAL);
		return;
	}
	uint8_t *p = e->inline_data;
	for (size_t i = 0; i < n; i++) {
		memcpy(p, b[i].addr, b[i].length);
		p += b[i].length;
	}
	e->inline_len = (uint32_t)total;
	e->num_sge = 0;
	e->flags |= IBV_SEND_INLINE;
}

static void wrx_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf b = { .addr = addr, .length = length };

	wrx_set_inline_data_list(qpx, 1, &b);
}

static int wrx_complete(struct ibv_qp_ex *qpx)
{
	struct gcapi_qp *q = gcapi_qpx(qpx);
	struct giw_ring *r = q->sq;
	int err = q->wr_err;
	int posted = 0;

	if (gcapi_in_forked_child()) /* wrx_start took no lock */
		return gcapi_err(EPERM);
	if (!err && !sq_postable(r))
		err = EINVAL;
	if (!err && q->wr_prod != r->prod) {
		STORE_REL(&r->prod, q->wr_prod);
		posted = 1;
	}
	q->wr_cur = NULL;
	q->wr_err = 0;
	pthread_spin_unlock(&q->sq_lock);
	if (posted)
		sq_ring(q);
	return err;
}

static void wrx_abort(struct ibv_qp_ex *qpx)
{
	struct gcapi_qp *q = gcapi_qpx(qpx);

	q->wr_cur = NULL;
	q->wr_err = 0;
	if (!gcapi_in_forked_child()) /* else wrx_start took no lock */
		pthread_spin_unlock(&q->sq_lock);
}

void gcapi_qp_ex_init(struct gcapi_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;

	x->comp_mask = 0;
	x->wr_atomic_cmp_swp = wrx_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wrx_atomic_fetch_add;
	x->wr_bind_mw = wrx_bind_mw;
	x->wr_local_inv = wrx_local_inv;
	x->wr_rdma_read = wrx_rdma_read;
	x->wr_rdma_write = wrx_rdma_write;
	x->wr_rdma_write_imm = wrx_rdma_write_imm;
	x->wr_send = wrx_send;
	x->wr_send_imm = wrx_send_imm;
	x->wr_send_inv = wrx_send_inv;
	x->wr_send_tso = wrx_send_tso;
	x->wr_set_ud_addr = wrx_set_ud_addr;
	x->wr_set_xrc_srqn = wrx_set_xrc_srqn;
	x->wr_set_inline_data = wrx_set_inline_data;
	x->wr_set_inline_data_list = wrx_set_inline_data_list;
	x->wr_set_sge = wrx_set_sge;
	x->wr_set_sge_list = wrx_set_sge_list;
	x->wr_start = wrx_start;
	x->wr_complete = wrx_complete;
	x->wr_abort = wrx_abort;
	x->wr_atomic_write = wrx_atomic_write;
}
