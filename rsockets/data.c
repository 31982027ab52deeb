/* rsockets: the data calls -- rrecv, rsend and their variants, riomap,
 * riounmap and riowrite -- over the endpoint (endpoint.c). A call on an
 * rsocket still connecting takes the next connection step first
 * (connect.c). Flow control: endpoint.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#include "rsocket.h"

static int grs_nonblock(struct grs *rs, int flags)
{
	return (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

/* ---- conditions ----------------------------------------------------------- */

static int grs_can_send_or_end(struct grs *rs)
{
	return grs_can_send(rs) || !(rs->state == GRS_CONNECTED && rs->writable);
}

/* The size of the next transfer of a send with left bytes to go: it starts
 * at GRS_FIRST_XFER and doubles up to GRS_MAX_XFER (*olen), so a short send
 * goes out at once and a long one in large pieces. A send that finds earlier
 * data still in flight starts at GRS_MAX_XFER (grs_sendv): the pipe is
 * running, and small pieces would only add messages and completions. */
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

static int grs_have_data_or_end(struct grs *rs)
{
	return grs_have_data(rs) || !(rs->state == GRS_CONNECTED && rs->readable);
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
		if (left == len && rs->sbuf_free < rs->sbuf_size)
			olen = GRS_MAX_XFER;
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

/* Entry i of our iomap, which the peer writes. */
static uint8_t *grs_iomap_entry(struct grs *rs, uint32_t i)
{
	return rs->targets + GRS_SGL_ENTRIES * GRS_SGE_LEN + i * GRS_IOMAP_LEN;
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
