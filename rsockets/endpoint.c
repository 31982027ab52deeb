/* rsockets: the endpoint of one rsocket -- its QP, CQ, buffers and
 * registrations, the connection data, credits, completions and the waiting
 * on them. Knows nothing of fds or connection set-up: the calls above it
 * (connect.c, data.c, poll.c, rsocket.c) hand it a struct grs.
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
#include <time.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rsocket.h"

static int grs_set_err(struct grs *rs, int e)
{
	(void)rs;
	errno = e;
	return -1;
}

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
static void grs_nudge(struct grs *rs)
{
	if (grs_nudge_in(rs) != 0 || rs->ctrl_used >= GRS_CTRL_SLOTS)
		return;
	rs->nudged = 1;
	(void)grs_send_ctrl(rs, GRS_CTRL_KEEPALIVE);
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

/* The mappings riomap registered (data.c). */
static void grs_free_iomaps(struct grs *rs)
{
	struct grs_iomr *m;

	while ((m = rs->iomaps)) {
		rs->iomaps = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
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
int grs_post_write_msg(struct grs *rs, struct ibv_sge *sgl, int nsge, int wflags, uint64_t raddr,
		       uint32_t rkey, uint64_t wr_write, uint32_t msg, uint64_t wr_msg)
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

/* The connection broke: FAILED with e, unless it had ended already. */
void grs_fail(struct grs *rs, int e)
{
	if (rs->state == GRS_CONNECTED) {
		rs->state = GRS_FAILED;
		rs->err = e;
	}
}

/* Offer receive space and credits when half of either is used up. */
void grs_update_credits(struct grs *rs)
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

int grs_have_data(struct grs *rs)
{
	return rs->rmsg_head != rs->rmsg_tail;
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
