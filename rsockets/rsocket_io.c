/* rsockets: buffers, credits, completions and the data calls.
 *
 * Flow control, as the peer expects it (docs/rsocket of rdma-core):
 *  - the receiver owns rbuf, split in two halves; it offers one half at a
 *    time by RDMA-writing an SGE into the sender's target SGL (two entries,
 *    used in turn) and offers the next half once the application has read
 *    half a buffer's worth;
 *  - the sender writes stream data into the offered half, in order, and
 *    tells the receiver with a DATA message carrying the length;
 *  - every message lands in one of rq_size posted receives; data messages
 *    are limited by credits: the receiver grants "consumed + rq_size" in an
 *    SGL message, the sender stops when its sequence number reaches it.
 *  - a few send WQEs are kept back for control messages (credits, shutdown),
 *    so they never wait behind data.
 * Every counter below is read and written under cq_lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "rsocket.h"

static uint64_t grs_now_usec(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

uint64_t grs_now_ms(void)
{
	return grs_now_usec() / 1000u;
}

/* ---- the silent peer ------------------------------------------------------ */

/* Milliseconds until the nudge is due (0: now), or -1: none to send.
 * Why: siw 6.1 (Linux) attaches an accepted socket to its QP only after
 * sending the MPA reply, and FPDUs that arrive in between stay unread until
 * more data comes -- even when siw has spoken already (its first credit
 * grant), so hearing from the peer proves nothing. A client that sends its
 * first message and waits for the answer would wait for ever; one more
 * message gets siw reading. So a connecting rsocket that waits (or is polled)
 * GRS_NUDGE_MS after it connected sends one KEEPALIVE control message: part
 * of the protocol, ignored by its receiver. */
int grs_nudge_in(struct grs *rs)
{
	uint64_t now;

	if (rs->passive || rs->nudged || rs->state != GRS_CONNECTED)
		return -1;
	now = grs_now_ms();
	return now >= rs->connected_ms + GRS_NUDGE_MS ? 0 : (int)(rs->connected_ms + GRS_NUDGE_MS - now);
}

/* Sends the nudge if it is due. cq_lock held. */
void grs_nudge(struct grs *rs)
{
	if (grs_nudge_in(rs) != 0 || rs->ctrl_used >= GRS_CTRL_SLOTS)
		return;
	rs->nudged = 1;
	(void)grs_send_ctrl(rs, GRS_CTRL_KEEPALIVE);
}

/* ---- the target SGL and iomap the peer writes into -------------------- */

static struct grs_sge grs_target(struct grs *rs, uint32_t i)
{
	struct grs_sge s;

	__atomic_thread_fence(__ATOMIC_ACQUIRE); /* the peer's RDMA Write landed before its message */
	grs_sge_decode(rs->targets + i * GRS_SGE_LEN, &s);
	return s;
}

static void grs_target_set(struct grs *rs, uint32_t i, const struct grs_sge *s)
{
	grs_sge_encode(rs->targets + i * GRS_SGE_LEN, s, 0);
}

static uint8_t *grs_iomap_entry(struct grs *rs, uint32_t i)
{
	return rs->targets + GRS_SGL_ENTRIES * GRS_SGE_LEN + i * GRS_IOMAP_LEN;
}

/* ---- endpoint ----------------------------------------------------------- */

static int grs_post_recv(struct grs *rs, uint32_t slot)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;

	sge.addr = (uintptr_t)rs->rbuf + rs->rbuf_size + slot * GRS_MSG_LEN;
	sge.length = GRS_MSG_LEN;
	sge.lkey = rs->rmr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = grs_wrid(GRS_WR_RECV, slot);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(rs->id->qp, &wr, &bad);
}

static uint16_t grs_clamp_q(uint32_t v, uint32_t max)
{
	if (max > GRS_QP_MAX)
		max = GRS_QP_MAX;
	if (v > max)
		v = max;
	if (v < GRS_QP_MIN)
		v = GRS_QP_MIN;
	return (uint16_t)v;
}

int grs_create_ep(struct grs *rs)
{
	struct ibv_qp_init_attr qa;
	struct ibv_device_attr da;
	struct ibv_pd *pd;
	size_t tlen;
	uint32_t i;
	int e;

	if (ibv_query_device(rs->id->verbs, &da))
		da.max_qp_wr = GRS_QP_MAX;
	rs->sq_size = grs_clamp_q(rs->sq_size, (uint32_t)da.max_qp_wr);
	rs->rq_size = grs_clamp_q(rs->rq_size, (uint32_t)da.max_qp_wr);
	if (rs->sbuf_size < 2 * GRS_SNDLOWAT)
		rs->sbuf_size = 2 * GRS_SNDLOWAT;
	if (rs->rbuf_size < 2 * GRS_SNDLOWAT)
		rs->rbuf_size = 2 * GRS_SNDLOWAT;
	rs->rbuf_size &= ~1u; /* two equal halves */

	rs->cch = ibv_create_comp_channel(rs->id->verbs);
	if (!rs->cch)
		return -1;
	if ((rs->fd_flags & O_NONBLOCK) && fcntl(rs->cch->fd, F_SETFL, O_NONBLOCK))
		return -1;
	rs->cq = ibv_create_cq(rs->id->verbs, rs->sq_size + rs->rq_size, rs, rs->cch, 0);
	if (!rs->cq)
		return -1;

	memset(&qa, 0, sizeof(qa));
	qa.qp_context = rs;
	qa.send_cq = rs->cq;
	qa.recv_cq = rs->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = rs->sq_size;
	qa.cap.max_recv_wr = rs->rq_size;
	qa.cap.max_send_sge = 2;
	qa.cap.max_recv_sge = 1;
	/* Control messages and iomap entries always go inline: ask for room
	 * for them whatever RDMA_INLINE says about stream data. */
	qa.cap.max_inline_data = rs->sq_inline > GRS_IOMAP_LEN ? rs->sq_inline : GRS_IOMAP_LEN;
	if (qa.cap.max_inline_data > 128)
		qa.cap.max_inline_data = 128;
	if (rdma_create_qp(rs->id, NULL, &qa))
		return -1;
	if (qa.cap.max_inline_data < GRS_IOMAP_LEN) {
		errno = EOPNOTSUPP;
		return -1;
	}
	if (rs->sq_inline > qa.cap.max_inline_data)
		rs->sq_inline = (uint16_t)qa.cap.max_inline_data;
	pd = rs->id->pd ? rs->id->pd : rs->id->qp->pd;

	rs->sbuf = calloc(1, rs->sbuf_size);
	rs->rbuf = calloc(1, rs->rbuf_size + (size_t)rs->rq_size * GRS_MSG_LEN);
	tlen = GRS_SGL_ENTRIES * GRS_SGE_LEN + (size_t)rs->iomap_size * GRS_IOMAP_LEN;
	rs->targets = calloc(1, tlen);
	rs->rmsg = calloc(rs->rq_size + 1u, sizeof(*rs->rmsg));
	if (!rs->sbuf || !rs->rbuf || !rs->targets || !rs->rmsg) {
		errno = ENOMEM;
		return -1;
	}
	rs->smr = ibv_reg_mr(pd, rs->sbuf, rs->sbuf_size, IBV_ACCESS_LOCAL_WRITE);
	rs->rmr = ibv_reg_mr(pd, rs->rbuf, rs->rbuf_size + (size_t)rs->rq_size * GRS_MSG_LEN,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rs->tmr = ibv_reg_mr(pd, rs->targets, tlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!rs->smr || !rs->rmr || !rs->tmr)
		return -1;

	rs->sbuf_free = rs->sbuf_size;
	rs->sqe_free = rs->sq_size - GRS_CTRL_SLOTS;
	rs->rbuf_next = rs->rbuf_size / 2; /* the first half goes in the connection data */
	rs->rbuf_avail = rs->rbuf_size / 2;
	rs->rseq_given = rs->rq_size / 2;
	for (i = 0; i < rs->rq_size; i++) {
		e = grs_post_recv(rs, i);
		if (e) {
			errno = e;
			return -1;
		}
	}
	return 0;
}

void grs_free_ep(struct grs *rs)
{
	grs_free_iomaps(rs);
	if (rs->id && rs->id->qp)
		rdma_destroy_qp(rs->id);
	if (rs->cq) {
		if (rs->unacked)
			ibv_ack_cq_events(rs->cq, rs->unacked);
		ibv_destroy_cq(rs->cq);
	}
	if (rs->cch)
		ibv_destroy_comp_channel(rs->cch);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->tmr)
		ibv_dereg_mr(rs->tmr);
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->targets);
	free(rs->rmsg);
	free(rs->remote_slots);
}

/* ---- connection data ---------------------------------------------------- */

void grs_conn_fill(struct grs *rs, struct grs_conn *c)
{
	memset(c, 0, sizeof(*c));
	c->version = GRS_CONN_VERSION;
	c->flags = GRS_FLAG_IOMAP | (grs_host_is_be() ? GRS_FLAG_NET : 0);
	c->credits = rs->rq_size;
	c->iomap_scale = grs_value_to_scale(rs->iomap_size);
	c->target.addr = (uintptr_t)rs->targets;
	c->target.key = rs->tmr->rkey;
	c->target.length = GRS_SGL_ENTRIES;
	c->data_buf.addr = (uintptr_t)rs->rbuf;
	c->data_buf.key = rs->rmr->rkey;
	c->data_buf.length = rs->rbuf_size / 2;
}

void grs_conn_save(struct grs *rs, const struct grs_conn *c)
{
	rs->remote_sgl = c->target;
	rs->remote_sge = 1 % c->target.length; /* entry 0 is the data_buf below */
	rs->swap = !!(c->flags & GRS_FLAG_NET) != grs_host_is_be();
	if (c->flags & GRS_FLAG_IOMAP) {
		rs->remote_iomap.addr = c->target.addr + (uint64_t)GRS_SGE_LEN * c->target.length;
		rs->remote_iomap.key = c->target.key;
		rs->remote_iomap.length = grs_scale_to_value(c->iomap_scale);
	}
	grs_target_set(rs, 0, &c->data_buf);
	rs->sseq_limit = c->credits;
}

/* ---- posting ------------------------------------------------------------- */

/* An RDMA Write of sgl (or nothing) followed by the 4-byte message Send:
 * librdmacm's message encoding on iWARP. */
static int grs_post_write_msg(struct grs *rs, struct ibv_sge *sgl, int nsge, int wflags,
			      uint64_t raddr, uint32_t rkey, uint64_t wr_write, uint32_t msg,
			      uint64_t wr_msg)
{
	struct ibv_send_wr w[2], *bad;
	struct ibv_sge msge;
	uint32_t m = rs->swap ? grs_bswap32(msg) : msg;
	int i = 0;

	memset(w, 0, sizeof(w));
	if (sgl) {
		w[0].wr_id = wr_write;
		w[0].sg_list = sgl;
		w[0].num_sge = nsge;
		w[0].opcode = IBV_WR_RDMA_WRITE;
		w[0].send_flags = wflags;
		w[0].wr.rdma.remote_addr = raddr;
		w[0].wr.rdma.rkey = rkey;
		w[0].next = &w[1];
		i = 1;
	}
	msge.addr = (uintptr_t)&m;
	msge.length = sizeof(m);
	msge.lkey = 0;
	w[i].wr_id = wr_msg;
	w[i].sg_list = &msge;
	w[i].num_sge = 1;
	w[i].opcode = IBV_WR_SEND;
	w[i].send_flags = IBV_SEND_INLINE;
	return ibv_post_send(rs->id->qp, &w[0], &bad);
}

static void grs_fail(struct grs *rs, int e)
{
	if (rs->state == GRS_CONNECTED) {
		rs->state = GRS_FAILED;
		rs->err = e;
	}
}

/* Offer receive space and credits when half of either is used up. */
static void grs_update_credits(struct grs *rs)
{
	struct ibv_sge sg;
	struct grs_sge s;
	uint8_t buf[GRS_SGE_LEN];
	uint32_t half = rs->rbuf_size / 2, msg;
	int e;

	if (!grs_is_connected(rs) || !grs_may_speak(rs) || rs->ctrl_used + 2 > GRS_CTRL_SLOTS)
		return;
	if (rs->rbuf_avail < half && (int16_t)(rs->rseq - rs->rseq_given) < 0)
		return;
	rs->rseq_given = rs->rseq + rs->rq_size / 2;
	msg = grs_msg(GRS_OP_SGL, (uint16_t)(rs->rseq + rs->rq_size));
	if (rs->rbuf_avail >= half) {
		s.addr = (uintptr_t)rs->rbuf + rs->rbuf_next;
		s.key = rs->rmr->rkey;
		s.length = half;
		grs_sge_encode(buf, &s, rs->swap);
		sg.addr = (uintptr_t)buf;
		sg.length = sizeof(buf);
		sg.lkey = 0;
		e = grs_post_write_msg(rs, &sg, 1, IBV_SEND_INLINE,
				       rs->remote_sgl.addr + (uint64_t)rs->remote_sge * GRS_SGE_LEN,
				       rs->remote_sgl.key, grs_wrid(GRS_WR_CTRL, 0), msg,
				       grs_wrid(GRS_WR_CTRL, msg));
		if (e) {
			grs_fail(rs, e);
			return;
		}
		rs->ctrl_used += 2;
		rs->rbuf_avail -= half;
		rs->rbuf_next = (rs->rbuf_next + half) % rs->rbuf_size;
		rs->remote_sge = (rs->remote_sge + 1) % rs->remote_sgl.length;
	} else {
		e = grs_post_write_msg(rs, NULL, 0, 0, 0, 0, 0, msg, grs_wrid(GRS_WR_CTRL, msg));
		if (e) {
			grs_fail(rs, e);
			return;
		}
		rs->ctrl_used++;
	}
}

int grs_send_ctrl(struct grs *rs, uint32_t ctrl)
{
	uint32_t msg = grs_msg(GRS_OP_CTRL, ctrl);
	int e;

	e = grs_post_write_msg(rs, NULL, 0, 0, 0, 0, 0, msg, grs_wrid(GRS_WR_CTRL, msg));
	if (e)
		return grs_set_err(rs, e);
	rs->ctrl_used++;
	return 0;
}

/* ---- completions ----------------------------------------------------------- */

static void grs_recv_msg(struct grs *rs, uint32_t msg)
{
	switch (grs_msg_op(msg)) {
	case GRS_OP_DATA:
		/* a write never spans more than the half we offered: a longer
		 * one would make rrecv read past rbuf */
		if (grs_msg_arg(msg) > rs->rbuf_size / 2) {
			grs_fail(rs, EPROTO);
			break;
		}
		rs->rmsg[rs->rmsg_tail].op = GRS_OP_DATA;
		rs->rmsg[rs->rmsg_tail].len = grs_msg_arg(msg);
		rs->rmsg_tail = (rs->rmsg_tail + 1) % (rs->rq_size + 1u);
		break;
	case GRS_OP_SGL:
		rs->sseq_limit = (uint16_t)grs_msg_arg(msg);
		break;
	case GRS_OP_CTRL:
		if (grs_msg_arg(msg) == GRS_CTRL_DISCONNECT) {
			rs->state = GRS_CLOSED;
		} else if (grs_msg_arg(msg) == GRS_CTRL_SHUTDOWN) {
			if (rs->writable)
				rs->readable = 0;
			else
				rs->state = GRS_CLOSED;
		}
		break;
	default: /* IOMAP_SGL: the entry is read when used; others: unknown, ignored */
		break;
	}
}

static void grs_send_done(struct grs *rs, const struct ibv_wc *wc)
{
	uint32_t len = grs_wrid_len(wc->wr_id);

	switch (grs_wrid_kind(wc->wr_id)) {
	case GRS_WR_DATA:
	case GRS_WR_DIRECT:
		rs->sqe_free++;
		rs->sbuf_free += len;
		break;
	case GRS_WR_MSG:
	case GRS_WR_IOMAP:
		rs->sqe_free++;
		break;
	case GRS_WR_CTRL:
		rs->ctrl_used--;
		if (len == grs_msg(GRS_OP_CTRL, GRS_CTRL_DISCONNECT) && wc->status == IBV_WC_SUCCESS &&
		    rs->state == GRS_CONNECTED)
			rs->state = GRS_CLOSED;
		break;
	default:
		break;
	}
	if (wc->status != IBV_WC_SUCCESS)
		grs_fail(rs, EIO);
}

/* Drains the CQ. 0, or -1 with errno when a receive cannot be reposted. */
static int grs_poll_cq(struct grs *rs)
{
	struct ibv_wc wc[16];
	int n, i, e;

	while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
		for (i = 0; i < n; i++) {
			uint32_t slot, msg;

			if (grs_wrid_kind(wc[i].wr_id) != GRS_WR_RECV) {
				grs_send_done(rs, &wc[i]);
				continue;
			}
			if (wc[i].status != IBV_WC_SUCCESS) {
				/* flushed: the connection is gone without a DISCONNECT */
				grs_fail(rs, ECONNRESET);
				continue;
			}
			slot = grs_wrid_len(wc[i].wr_id);
			if (slot >= rs->rq_size)
				continue;
			rs->peer_spoke = 1;
			memcpy(&msg, rs->rbuf + rs->rbuf_size + slot * GRS_MSG_LEN, sizeof(msg));
			if (rs->swap)
				msg = grs_bswap32(msg);
			if (rs->state == GRS_CONNECTED) {
				e = grs_post_recv(rs, slot);
				if (e) {
					grs_fail(rs, e);
					errno = e;
					return -1;
				}
			}
			grs_recv_msg(rs, msg);
		}
	}
	if (n < 0) {
		grs_fail(rs, EIO);
		errno = EIO;
		return -1;
	}
	return 0;
}

/* Waits for the CQ's event on the completion channel (after arming). */
int grs_cq_event(struct grs *rs)
{
	struct ibv_cq *cq;
	void *ctx;

	if (!rs->cq_armed)
		return 0;
	if (ibv_get_cq_event(rs->cch, &cq, &ctx)) {
		if (errno != EAGAIN && errno != EINTR)
			grs_fail(rs, errno);
		return -1;
	}
	if (++rs->unacked >= 64u) {
		ibv_ack_cq_events(rs->cq, rs->unacked);
		rs->unacked = 0;
	}
	rs->cq_armed = 0;
	return 0;
}

/* Processes completions until done(rs); sleeps on the completion channel
 * unless nonblock (then EWOULDBLOCK). */
int grs_process(struct grs *rs, int nonblock, int (*done)(struct grs *))
{
	int ret, nudge;

	if (!rs->cq) {
		errno = ENOTCONN;
		return -1;
	}
	pthread_mutex_lock(&rs->cq_lock);
	for (;;) {
		grs_update_credits(rs);
		grs_nudge(rs);
		ret = grs_poll_cq(rs);
		if (done(rs)) {
			ret = 0;
			break;
		}
		if (ret)
			break;
		if (nonblock) {
			errno = EWOULDBLOCK;
			ret = -1;
			break;
		}
		if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->cq_armed = 1;
			continue; /* what completed before the arm is polled now */
		}
		grs_update_credits(rs);
		nudge = grs_nudge_in(rs);
		pthread_mutex_lock(&rs->cq_wait);
		pthread_mutex_unlock(&rs->cq_lock);
		if (nudge > 0) { /* sleep no longer than until the nudge is due */
			struct pollfd p = { .fd = rs->cch->fd, .events = POLLIN };

			if (poll(&p, 1, nudge) == 0) {
				pthread_mutex_unlock(&rs->cq_wait);
				pthread_mutex_lock(&rs->cq_lock);
				continue;
			}
		}
		ret = grs_cq_event(rs);
		pthread_mutex_unlock(&rs->cq_wait);
		pthread_mutex_lock(&rs->cq_lock);
		if (ret && errno != EAGAIN && errno != EINTR)
			break;
		ret = 0;
	}
	grs_update_credits(rs);
	pthread_mutex_unlock(&rs->cq_lock);
	return ret;
}

/* Polls a little before sleeping: a short gap between messages is cheaper
 * to spin over than a wakeup. */
int grs_wait(struct grs *rs, int nonblock, int (*done)(struct grs *))
{
	uint64_t start = 0;

	for (;;) {
		if (!grs_process(rs, 1, done))
			return 0;
		if (nonblock || errno != EWOULDBLOCK)
			return -1;
		if (!start)
			start = grs_now_usec();
		else if (grs_now_usec() - start > GRS_SPIN_USEC)
			break;
	}
	return grs_process(rs, 0, done);
}

/* ---- conditions ----------------------------------------------------------- */

int grs_can_send(struct grs *rs)
{
	return rs->state == GRS_CONNECTED && rs->writable && grs_may_speak(rs) && rs->sqe_free >= 2 &&
	       rs->sbuf_free >= GRS_SNDLOWAT && rs->sseq != rs->sseq_limit &&
	       grs_target(rs, rs->target_sge).length != 0;
}

static int grs_can_send_or_end(struct grs *rs)
{
	return grs_can_send(rs) || !(rs->state == GRS_CONNECTED && rs->writable);
}

/* The size of the next transfer of a send with left bytes to go: it starts
 * at GRS_FIRST_XFER and doubles up to GRS_MAX_XFER (*olen), so a short send
 * goes out at once and a long one in large pieces. */
static uint32_t grs_next_xfer(uint32_t *olen, size_t left)
{
	uint32_t xfer = *olen;

	if (left <= xfer)
		return (uint32_t)left;
	if (*olen < GRS_MAX_XFER)
		*olen <<= 1;
	return xfer;
}

/* Takes cq_lock once rs may send, waiting for credits and room unless the
 * call is non-blocking: 0 with the lock held, or non-zero with errno set
 * (the connection's own error once it failed). */
static int grs_lock_sendable(struct grs *rs, int flags)
{
	int ret;

	pthread_mutex_lock(&rs->cq_lock);
	if (grs_can_send(rs))
		return 0;
	pthread_mutex_unlock(&rs->cq_lock);
	ret = grs_wait(rs, grs_nonblock(rs, flags), grs_can_send_or_end);
	if (ret)
		return ret;
	pthread_mutex_lock(&rs->cq_lock);
	if (grs_can_send(rs))
		return 0;
	pthread_mutex_unlock(&rs->cq_lock);
	errno = rs->state == GRS_FAILED && rs->err ? rs->err : ECONNRESET;
	return -1;
}

int grs_have_data(struct grs *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
}

static int grs_have_data_or_end(struct grs *rs)
{
	return grs_have_data(rs) || !(rs->state == GRS_CONNECTED && rs->readable);
}

int grs_all_sent(struct grs *rs)
{
	return (rs->ctrl_used == 0 && rs->sqe_free == rs->sq_size - GRS_CTRL_SLOTS) ||
	       rs->state != GRS_CONNECTED;
}

int grs_cq_is_armed(struct grs *rs) { return rs->cq_armed; }
int grs_any(struct grs *rs)
{
	(void)rs;
	return 1;
}

/* ---- receiving --------------------------------------------------------------- */

/* Copies up to len queued bytes into buf; consumes them unless peek. */
static size_t grs_copy_out(struct grs *rs, uint8_t *buf, size_t len, int peek)
{
	uint32_t head = rs->rmsg_head, off = rs->rbuf_off, consumed = 0;
	size_t done = 0;

	while (done < len && head != rs->rmsg_tail) {
		uint32_t n = rs->rmsg[head].len, first;
		int whole = 1;

		if (n > len - done) {
			n = (uint32_t)(len - done);
			whole = 0;
		}
		first = rs->rbuf_size - off;
		if (n <= first) {
			memcpy(buf + done, rs->rbuf + off, n);
		} else {
			memcpy(buf + done, rs->rbuf + off, first);
			memcpy(buf + done + first, rs->rbuf, n - first);
		}
		off = (off + n) % rs->rbuf_size;
		done += n;
		if (peek) {
			if (whole)
				head = (head + 1) % (rs->rq_size + 1u);
			continue;
		}
		consumed += n;
		if (whole) {
			rs->rseq++;
			head = (head + 1) % (rs->rq_size + 1u);
		} else {
			rs->rmsg[head].len -= n;
		}
	}
	if (!peek) {
		rs->rmsg_head = head;
		rs->rbuf_off = off;
		rs->rbuf_avail += consumed;
	}
	return done;
}

static ssize_t grs_recv(struct grs *rs, uint8_t *buf, size_t len, int flags)
{
	size_t done = 0;
	int ret = 0;

	if (rs->state == GRS_OPENING && grs_do_connect(rs)) {
		if (errno == EINPROGRESS)
			errno = EAGAIN;
		return -1;
	}
	if (!rs->cq) {
		errno = ENOTCONN;
		return -1;
	}
	if (!len)
		return 0; /* as recv(2): nothing asked, nothing waited for */
	pthread_mutex_lock(&rs->rlock);
	do {
		pthread_mutex_lock(&rs->cq_lock);
		int have = grs_have_data(rs);
		pthread_mutex_unlock(&rs->cq_lock);
		if (!have) {
			ret = grs_wait(rs, grs_nonblock(rs, flags), grs_have_data_or_end);
			if (ret)
				break;
		}
		pthread_mutex_lock(&rs->cq_lock);
		done += grs_copy_out(rs, buf + done, len - done, flags & MSG_PEEK);
		if (!(flags & MSG_PEEK))
			grs_update_credits(rs);
		have = grs_have_data_or_end(rs) && !grs_have_data(rs);
		pthread_mutex_unlock(&rs->cq_lock);
		if (have || (flags & MSG_PEEK))
			break; /* end of stream, or a peek (never waits for more) */
	} while (done < len && (flags & MSG_WAITALL));
	pthread_mutex_unlock(&rs->rlock);
	if (done)
		return (ssize_t)done;
	if (ret)
		return -1;
	if (rs->state == GRS_FAILED) { /* broken, not ended: as TCP after a reset */
		errno = rs->err ? rs->err : ECONNRESET;
		return -1;
	}
	return 0;
}

/* ---- sending ---------------------------------------------------------------------- */

/* Stages len bytes for one write; fills sgl (1 or 2 entries: the ring wraps). */
static int grs_stage(struct grs *rs, const struct iovec **iov, size_t *iov_off, uint32_t len,
		     struct ibv_sge *sgl, int *flags)
{
	uint32_t first, n = 0;

	if (len <= rs->sq_inline && (*iov)->iov_len - *iov_off >= len) {
		/* inline straight from the caller's buffer: copied at post time */
		sgl[0].addr = (uintptr_t)(*iov)->iov_base + *iov_off;
		sgl[0].length = len;
		sgl[0].lkey = 0;
		*iov_off += len;
		if (*iov_off == (*iov)->iov_len) {
			(*iov)++;
			*iov_off = 0;
		}
		*flags = IBV_SEND_INLINE;
		return 1;
	}
	*flags = len <= rs->sq_inline ? IBV_SEND_INLINE : 0;
	first = rs->sbuf_size - rs->sbuf_head;
	while (n < len) {
		uint32_t pos = (rs->sbuf_head + n) % rs->sbuf_size;
		size_t avail = (*iov)->iov_len - *iov_off, c = len - n;

		if (c > avail)
			c = avail;
		if (c > rs->sbuf_size - pos)
			c = rs->sbuf_size - pos;
		memcpy(rs->sbuf + pos, (const uint8_t *)(*iov)->iov_base + *iov_off, c);
		n += (uint32_t)c;
		*iov_off += c;
		if (*iov_off == (*iov)->iov_len) {
			(*iov)++;
			*iov_off = 0;
		}
	}
	sgl[0].addr = (uintptr_t)rs->sbuf + rs->sbuf_head;
	sgl[0].lkey = rs->smr->lkey;
	rs->sbuf_head = (rs->sbuf_head + len) % rs->sbuf_size;
	if (len <= first) {
		sgl[0].length = len;
		return 1;
	}
	sgl[0].length = first;
	sgl[1].addr = (uintptr_t)rs->sbuf;
	sgl[1].length = len - first;
	sgl[1].lkey = rs->smr->lkey;
	return 2;
}

static int grs_send_iomaps(struct grs *rs, int flags);

static ssize_t grs_sendv(struct grs *rs, const struct iovec *iov, int iovcnt, int flags)
{
	size_t len = 0, left, iov_off = 0;
	uint32_t olen = GRS_FIRST_XFER;
	int i, ret = 0;

	for (i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	while (iovcnt && iov->iov_len == 0) {
		iov++;
		iovcnt--;
	}
	if (rs->state == GRS_OPENING && grs_do_connect(rs)) {
		if (errno == EINPROGRESS)
			errno = EAGAIN;
		return -1;
	}
	if (rs->state != GRS_CONNECTED && rs->state != GRS_CLOSED && rs->state != GRS_FAILED) {
		errno = ENOTCONN;
		return -1;
	}
	left = len;
	pthread_mutex_lock(&rs->slock);
	if (rs->iomaps && grs_send_iomaps(rs, flags)) {
		ret = -1;
		goto out;
	}
	while (left) {
		struct ibv_sge sgl[2];
		struct grs_sge t;
		uint64_t raddr;
		uint32_t xfer;
		int n, wflags, e;

		ret = grs_lock_sendable(rs, flags);
		if (ret)
			break;
		xfer = grs_next_xfer(&olen, left);
		t = grs_target(rs, rs->target_sge);
		if (xfer > rs->sbuf_free)
			xfer = rs->sbuf_free;
		if (xfer > t.length)
			xfer = t.length;
		n = grs_stage(rs, &iov, &iov_off, xfer, sgl, &wflags);
		/* Consume the entry before posting: once the data is out, the
		 * peer may read it all and offer the entry anew, and a store of
		 * ours after that would erase the offer. */
		raddr = t.addr;
		t.addr += xfer;
		t.length -= xfer;
		grs_target_set(rs, rs->target_sge, &t);
		if (t.length == 0)
			rs->target_sge = (rs->target_sge + 1) % GRS_SGL_ENTRIES;
		rs->sseq++;
		rs->sqe_free -= 2;
		rs->sbuf_free -= xfer;
		e = grs_post_write_msg(rs, sgl, n, wflags, raddr, t.key, grs_wrid(GRS_WR_DATA, xfer),
				       grs_msg(GRS_OP_DATA, xfer), grs_wrid(GRS_WR_MSG, 0));
		if (e) {
			grs_fail(rs, e);
			pthread_mutex_unlock(&rs->cq_lock);
			errno = e;
			ret = -1;
			break;
		}
		pthread_mutex_unlock(&rs->cq_lock);
		left -= xfer;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	if (left < len)
		return (ssize_t)(len - left);
	return ret ? -1 : 0;
}

/* ---- iomap: the peer writes straight into application memory ---------------- */

/* Writes our pending iomap entries into the peer's iomap. slock held. */
static int grs_send_iomaps(struct grs *rs, int flags)
{
	struct grs_iomr *m;
	int ret = 0;

	pthread_mutex_lock(&rs->map_lock);
	for (m = rs->iomaps; m && !ret; m = m->next) {
		struct grs_sge s;
		struct ibv_sge sg;
		uint8_t buf[GRS_IOMAP_LEN];
		int e;

		if (!m->pending)
			continue;
		ret = grs_lock_sendable(rs, flags);
		if (ret)
			break;
		s.addr = (uintptr_t)m->mr->addr;
		s.key = m->mr->rkey;
		s.length = (uint32_t)m->mr->length;
		grs_iomap_encode(buf, m->offset, &s, rs->swap);
		sg.addr = (uintptr_t)buf;
		sg.length = sizeof(buf);
		sg.lkey = 0;
		e = grs_post_write_msg(rs, &sg, 1, IBV_SEND_INLINE,
				       rs->remote_iomap.addr + (uint64_t)m->index * GRS_IOMAP_LEN,
				       rs->remote_iomap.key, grs_wrid(GRS_WR_IOMAP, 0),
				       grs_msg(GRS_OP_IOMAP_SGL, (uint32_t)m->index),
				       grs_wrid(GRS_WR_MSG, 0));
		if (e) {
			grs_fail(rs, e);
			errno = e;
			ret = -1;
		} else {
			/* counted against credits, as librdmacm counts it */
			rs->sseq++;
			rs->sqe_free -= 2;
			m->pending = 0;
		}
		pthread_mutex_unlock(&rs->cq_lock);
	}
	pthread_mutex_unlock(&rs->map_lock);
	return ret;
}

void grs_free_iomaps(struct grs *rs)
{
	struct grs_iomr *m;

	while ((m = rs->iomaps)) {
		rs->iomaps = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
}

off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct grs *rs = grs_get(socket);
	struct grs_iomr *m;
	int access = IBV_ACCESS_LOCAL_WRITE, index = -1;
	uint32_t i;

	(void)flags;
	if (!rs)
		return -1;
	if (!rs->id || !rs->id->qp || (prot & ~PROT_WRITE) || !buf || !len) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&rs->map_lock);
	if (prot & PROT_WRITE) {
		if (!rs->remote_slots && rs->remote_iomap.length)
			rs->remote_slots = calloc(rs->remote_iomap.length, sizeof(*rs->remote_slots));
		for (i = 0; rs->remote_slots && i < rs->remote_iomap.length; i++)
			if (!rs->remote_slots[i]) {
				index = (int)i;
				break;
			}
		if (index < 0) {
			pthread_mutex_unlock(&rs->map_lock);
			errno = ENOMEM; /* the peer's iomap is full (or it has none) */
			return -1;
		}
		access |= IBV_ACCESS_REMOTE_WRITE;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		pthread_mutex_unlock(&rs->map_lock);
		errno = ENOMEM;
		return -1;
	}
	m->mr = ibv_reg_mr(rs->id->qp->pd, buf, len, access);
	if (!m->mr) {
		pthread_mutex_unlock(&rs->map_lock);
		free(m);
		return -1;
	}
	if (offset == -1)
		offset = (off_t)(uintptr_t)buf;
	m->offset = (uint64_t)offset;
	m->index = index;
	m->pending = index >= 0;
	if (index >= 0)
		rs->remote_slots[index] = m;
	m->next = rs->iomaps;
	rs->iomaps = m;
	pthread_mutex_unlock(&rs->map_lock);
	return offset;
}

int riounmap(int socket, void *buf, size_t len)
{
	struct grs *rs = grs_get(socket);
	struct grs_iomr **p, *m;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->map_lock);
	for (p = &rs->iomaps; (m = *p); p = &m->next)
		if (m->mr->addr == buf && m->mr->length == len)
			break;
	if (!m) {
		pthread_mutex_unlock(&rs->map_lock);
		errno = EINVAL;
		return -1;
	}
	*p = m->next;
	if (m->index >= 0)
		rs->remote_slots[m->index] = NULL;
	pthread_mutex_unlock(&rs->map_lock);
	ibv_dereg_mr(m->mr);
	free(m);
	return 0;
}

/* The peer's mapping holding offset, from the iomap it wrote into ours. */
static int grs_find_iomap(struct grs *rs, uint64_t offset, uint64_t *base, struct grs_sge *s)
{
	uint32_t i;

	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	for (i = 0; i < rs->iomap_size; i++) {
		grs_iomap_decode(grs_iomap_entry(rs, i), base, s);
		if (s->length && offset >= *base && offset - *base < s->length)
			return 1;
	}
	return 0;
}

size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	struct grs *rs = grs_get(socket);
	struct iovec one = { (void *)buf, count };
	const struct iovec *iov = &one;
	size_t left = count, iov_off = 0;
	uint32_t olen = GRS_FIRST_XFER;
	uint64_t off = (uint64_t)offset, base = 0;
	struct grs_sge s = { 0 };
	int ret = 0, have = 0;

	if (!rs)
		return (size_t)-1;
	if (rs->state != GRS_CONNECTED) {
		errno = rs->state == GRS_OPENING ? EAGAIN : ENOTCONN;
		return (size_t)-1;
	}
	pthread_mutex_lock(&rs->slock);
	if (rs->iomaps && grs_send_iomaps(rs, flags)) {
		ret = -1;
		goto out;
	}
	while (left) {
		struct ibv_sge sgl[2];
		uint32_t xfer;
		int n, wflags, e;

		if (!have || off >= base + s.length) {
			have = grs_find_iomap(rs, off, &base, &s);
			if (!have) {
				errno = EINVAL; /* nothing mapped there (yet) */
				ret = -1;
				break;
			}
		}
		ret = grs_lock_sendable(rs, flags);
		if (ret)
			break;
		xfer = grs_next_xfer(&olen, left);
		if (xfer > rs->sbuf_free)
			xfer = rs->sbuf_free;
		if (xfer > base + s.length - off)
			xfer = (uint32_t)(base + s.length - off);
		n = grs_stage(rs, &iov, &iov_off, xfer, sgl, &wflags);
		{
			struct ibv_send_wr w, *bad;

			memset(&w, 0, sizeof(w));
			w.wr_id = grs_wrid(GRS_WR_DIRECT, xfer);
			w.sg_list = sgl;
			w.num_sge = n;
			w.opcode = IBV_WR_RDMA_WRITE;
			w.send_flags = wflags;
			w.wr.rdma.remote_addr = s.addr + (off - base);
			w.wr.rdma.rkey = s.key;
			e = ibv_post_send(rs->id->qp, &w, &bad);
		}
		if (e) {
			grs_fail(rs, e);
			pthread_mutex_unlock(&rs->cq_lock);
			errno = e;
			ret = -1;
			break;
		}
		rs->sqe_free--;
		rs->sbuf_free -= xfer;
		pthread_mutex_unlock(&rs->cq_lock);
		left -= xfer;
		off += xfer;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	if (left < count)
		return count - left;
	return ret ? (size_t)-1 : 0;
}

/* ---- the data calls ---------------------------------------------------------------- */

ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	struct grs *rs = grs_get(socket);

	if (!rs)
		return -1;
	return grs_recv(rs, buf, len, flags);
}

ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr,
		  socklen_t *addrlen)
{
	ssize_t n = rrecv(socket, buf, len, flags);

	if (n > 0 && src_addr && addrlen)
		rgetpeername(socket, src_addr, addrlen);
	return n;
}

/* Fills the vectors in order; as a TCP socket does, returns what was there. */
static ssize_t grs_recvv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0, n;
	int i;

	for (i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		n = rrecv(socket, iov[i].iov_base, iov[i].iov_len,
			  total ? (flags | MSG_DONTWAIT) & ~MSG_WAITALL : flags);
		if (n < 0)
			return total ? total : -1;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	if (!msg) {
		errno = EINVAL;
		return -1;
	}
	if (msg->msg_control && msg->msg_controllen) {
		errno = EOPNOTSUPP;
		return -1;
	}
	msg->msg_flags = 0;
	return grs_recvv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rread(int socket, void *buf, size_t count) { return rrecv(socket, buf, count, 0); }

ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	return grs_recvv(socket, iov, iovcnt, 0);
}

ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	struct grs *rs = grs_get(socket);
	struct iovec one = { (void *)buf, len };

	if (!rs)
		return -1;
	return grs_sendv(rs, &one, 1, flags);
}

/* A stream socket has one peer: as Linux TCP does, the address is ignored
 * (sockperf passes it on every call); an unconnected socket fails in rsend. */
ssize_t rsendto(int socket, const void *buf, size_t len, int flags, const struct sockaddr *dest_addr,
		socklen_t addrlen)
{
	(void)dest_addr;
	(void)addrlen;
	return rsend(socket, buf, len, flags);
}

ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	struct grs *rs = grs_get(socket);

	if (!rs)
		return -1;
	if (!msg || msg->msg_iovlen > 1024) {
		errno = EINVAL;
		return -1;
	}
	if (msg->msg_control && msg->msg_controllen) {
		errno = EOPNOTSUPP;
		return -1;
	}
	return grs_sendv(rs, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rwrite(int socket, const void *buf, size_t count) { return rsend(socket, buf, count, 0); }

ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	struct grs *rs = grs_get(socket);

	if (!rs)
		return -1;
	if (iovcnt < 0 || iovcnt > 1024) {
		errno = EINVAL;
		return -1;
	}
	return grs_sendv(rs, iov, iovcnt, 0);
}
