/* rsockets' private header: goiwarp's rsockets (<rdma/rsocket.h>), a
 * library on top of the public API (rsocket.c says where it is linked).
 *
 * Why C: an rsocket is a small state machine driven entirely through verbs
 * calls (post, poll, req_notify, get_cq_event) that are already C in capi,
 * inline over our rings. Written in Go, every rsend/rrecv would cross into
 * Go and back out to post and poll -- two crossings per call for no logic
 * Go does better. Written in C over our own exported rdma_ and ibv_ calls
 * (linked into the core, which is linked -Bsymbolic, so these calls stay
 * inside goiwarp), it adds no cgo export and no Go state; the Go CM and
 * engine see an ordinary RC connection. librdmacm's own rsockets cannot run
 * on goiwarp's ids: they read librdmacm's private struct behind rdma_cm_id.
 *
 * Files: rsocket.c lists them; rsocket_wire.h is the wire encoding (pure).
 *
 * Only SOCK_STREAM: librdmacm's datagram rsockets ride UD QPs, which iWARP
 * does not have; rsocket(SOCK_DGRAM) fails with EOPNOTSUPP.
 */
#ifndef GRS_H
#define GRS_H

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rsocket_wire.h"

/* librdmacm's queue defaults, so both ends size their queues alike. */
#define GRS_DEF_SQSIZE 384
#define GRS_DEF_RQSIZE 384
#define GRS_DEF_INLINE 64
/* Buffers larger than librdmacm's 128 KiB: what one stream has in flight is
 * half the receive buffer (the peer holds at most our two halves), and a TCP
 * program's kernel socket autotunes to megabytes. iperf3 over loopback, one
 * stream, default options: 5 Gbit/s at 128 KiB, 11 at 1 MiB, 14-16 at 2 MiB
 * and no more at 4 MiB (bench/rsockets.py). The memory is touched only as the
 * stream goes round it; SO_RCVBUF/SO_SNDBUF still set it. */
#define GRS_DEF_RMEM (1u << 21)
#define GRS_DEF_WMEM (1u << 21)
#define GRS_QP_MIN 16
#define GRS_QP_MAX 0xfffe
#define GRS_SNDLOWAT 2048       /* send only when this much send buffer is free */
/* The largest RDMA Write of stream data: a quarter of a default buffer half,
 * so the receiver gets the stream in pieces it can copy out while the rest
 * arrives. librdmacm's 64 KiB made a bulk stream four times the messages and
 * completions: iperf3, one stream over loopback, 15 against 16-19 Gbit/s. */
#define GRS_MAX_XFER (256u << 10)
#define GRS_FIRST_XFER 2048     /* first write of a large send: start the pipe early */
#define GRS_MSS 2048            /* what TCP_MAXSEG and TCP_INFO report */
#define GRS_CTRL_SLOTS 4        /* send WQEs kept back for control messages */
#define GRS_SGL_ENTRIES 2       /* entries of our target SGL */
/* A blocking call polls this long before it sleeps on the CQ: longer than a
 * loopback round trip, so a ping-pong answer is found by polling, not by
 * waking twice (the engine's receive thread, then ours). librdmacm's 10 us
 * missed most answers: sockperf ping-pong 24-28 us against TCP's 15-19, at
 * 50 us 12-16 (bench/rsockets.py). */
#define GRS_SPIN_USEC 50
#define GRS_RESOLVE_MS 2000
#define GRS_NUDGE_MS 200
#define GRS_LINGER_MS 1000

enum grs_state {
	GRS_IDLE,          /* created */
	GRS_BOUND,         /* rbind done */
	GRS_LISTENING,     /* rlisten done */
	GRS_OPENING,       /* connecting or accepting: see phase */
	GRS_CONNECTED,     /* see readable/writable */
	GRS_CONNECT_ERROR, /* connect failed: err */
	GRS_CLOSED,        /* orderly end: both directions done */
	GRS_FAILED,        /* the connection broke: err */
};

enum grs_phase { GRS_RESOLVE_ADDR, GRS_RESOLVE_ROUTE, GRS_CONNECTING, GRS_ACCEPTING };

/* Send work request ids: what a completion gives back. */
enum grs_wr_kind {
	GRS_WR_DATA = 1, /* stream data write: len bytes of send buffer */
	GRS_WR_MSG,      /* the message Send following a write */
	GRS_WR_CTRL,     /* a control message or SGL write: one control slot */
	GRS_WR_IOMAP,    /* iomap entry write: 24 bytes of send buffer */
	GRS_WR_DIRECT,   /* riowrite data: len bytes of send buffer */
	GRS_WR_RECV,     /* receive: len is the message slot */
};
static inline uint64_t grs_wrid(enum grs_wr_kind k, uint32_t len)
{
	return (uint64_t)k << 32 | len;
}
static inline enum grs_wr_kind grs_wrid_kind(uint64_t id) { return (enum grs_wr_kind)(id >> 32); }
static inline uint32_t grs_wrid_len(uint64_t id) { return (uint32_t)id; }

struct grs_rmsg {
	uint32_t op;
	uint32_t len; /* bytes left of this data message */
};

struct grs_iomr {
	struct grs_iomr *next;
	struct ibv_mr *mr;
	uint64_t offset;
	int index;   /* slot in the peer's iomap; -1: local only */
	int pending; /* still to be written to the peer */
};

struct grs {
	int fd; /* the event channel's fd: the rsocket's number */
	int type;
	int domain;
	pthread_mutex_t slock;    /* senders */
	pthread_mutex_t rlock;    /* receivers */
	pthread_mutex_t cq_lock;  /* CQ polling and all counters below */
	pthread_mutex_t cq_wait;  /* the one thread asleep on the channel */
	pthread_mutex_t map_lock; /* iomap lists */

	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;

	enum grs_state state;
	enum grs_phase phase;
	int readable, writable;
	int err;      /* SO_ERROR */
	int fd_flags; /* rfcntl F_SETFL */
	int swap;     /* peer's byte order differs */
	int cq_armed;
	unsigned unacked;
	/* Accepted side: nothing goes out before the initiator's first message.
	 * RFC 5044 has an MPA responder wait for the initiator's first FPDU, and
	 * siw 6.1 as initiator fails the connection (-EINVAL) when an FPDU comes
	 * hard on the MPA reply. librdmacm's initiator always speaks first (its
	 * first credit grant), so this never waits for long. */
	int passive, peer_spoke;
	/* Connecting side: one KEEPALIVE message GRS_NUDGE_MS after we
	 * connected, when the application waits (see grs_nudge_in). */
	uint64_t connected_ms;
	int nudged;

	uint64_t so_opts, tcp_opts, ipv6_opts; /* booleans set by rsetsockopt, by optname */

	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
	uint32_t iomap_size; /* entries of our target iomap */

	/* sending */
	uint8_t *sbuf;
	struct ibv_mr *smr;
	uint32_t sbuf_head; /* next free byte of the ring */
	uint32_t sbuf_free; /* bytes not in flight */
	int sqe_free;       /* data WQEs free (ctrl slots apart) */
	unsigned ctrl_used; /* control slots in flight */
	uint16_t sseq;      /* data messages sent */
	uint16_t sseq_limit;/* peer's credit limit */
	struct grs_sge remote_sgl;   /* peer's target SGL */
	struct grs_sge remote_iomap; /* peer's iomap (length: entries) */
	uint32_t remote_sge;         /* next peer SGL entry we update */
	uint8_t *targets;            /* our target SGL then iomap, peer-written */
	struct ibv_mr *tmr;
	uint32_t target_sge;         /* entry we write into next */

	/* receiving */
	uint8_t *rbuf; /* rbuf_size data bytes, then rq_size message slots */
	struct ibv_mr *rmr;
	uint32_t rbuf_off;   /* next byte to read */
	uint32_t rbuf_avail; /* bytes read but not yet offered to the peer */
	uint32_t rbuf_next;  /* offset of the half to offer next */
	uint32_t msg_slot;   /* next message slot to post */
	uint16_t rseq;       /* data messages consumed */
	uint16_t rseq_given; /* credit limit we last granted, minus half a queue */
	struct grs_rmsg *rmsg;
	uint32_t rmsg_head, rmsg_tail;

	/* iomap */
	struct grs_iomr *iomaps; /* ours, registered */
	struct grs_iomr **remote_slots; /* remote_iomap.length slots: the mapping using each */
};

static inline int grs_is_connected(const struct grs *rs) { return rs->state == GRS_CONNECTED; }

/* May we transmit yet (see passive above)? */
static inline int grs_may_speak(const struct grs *rs) { return !rs->passive || rs->peer_spoke; }

/* Entry i of our target SGL, which the peer writes (RDMA Write) and we
 * consume as we send (data.c) or set up (endpoint.c). */
static inline struct grs_sge grs_target(struct grs *rs, uint32_t i)
{
	struct grs_sge s;

	__atomic_thread_fence(__ATOMIC_ACQUIRE); /* the peer's RDMA Write landed before its message */
	grs_sge_decode(rs->targets + i * GRS_SGE_LEN, &s);
	return s;
}

static inline void grs_target_set(struct grs *rs, uint32_t i, const struct grs_sge *s)
{
	grs_sge_encode(rs->targets + i * GRS_SGE_LEN, s, 0);
}

/* ---- who defines what ------------------------------------------------------
 * Each file calls only files listed below it (build/c-calls.py checks that
 * no two call each other); the calls themselves (rsocket.c, data.c, poll.c)
 * are public API, declared in <rdma/rsocket.h>. */

/* connect.c: connection set-up and names. */
struct grs_event {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id;
	uint8_t initiator_depth, responder_resources;
	uint8_t pdata[GRS_CONN_LEN];
	size_t pdata_len;
};
/* Reads (and acks) the next event of the channel: 0, or -1 with errno. */
int grs_next_event(struct rdma_event_channel *ch, struct grs_event *out);
/* One step further towards CONNECTED: 0, or -1 with errno (EINPROGRESS
 * while the next event is not there yet on a non-blocking rsocket). */
int grs_do_connect(struct grs *rs);

/* table.c: rsocket number -> struct grs. */
int grs_insert(struct grs *rs);
void grs_remove(struct grs *rs);
struct grs *grs_get(int fd); /* NULL with errno EBADF if fd is none */

/* endpoint.c: one rsocket's QP, CQ, buffers, credits and completions. */
int grs_create_ep(struct grs *rs);
void grs_free_ep(struct grs *rs);
void grs_conn_fill(struct grs *rs, struct grs_conn *c);
void grs_conn_save(struct grs *rs, const struct grs_conn *c);
int grs_post_write_msg(struct grs *rs, struct ibv_sge *sgl, int nsge, int wflags, uint64_t raddr,
		       uint32_t rkey, uint64_t wr_write, uint32_t msg, uint64_t wr_msg);
void grs_fail(struct grs *rs, int e);
void grs_update_credits(struct grs *rs);
int grs_send_ctrl(struct grs *rs, uint32_t ctrl);
int grs_process(struct grs *rs, int nonblock, int (*done)(struct grs *));
int grs_wait(struct grs *rs, int nonblock, int (*done)(struct grs *));
int grs_cq_event(struct grs *rs);
int grs_nudge_in(struct grs *rs);
uint64_t grs_now_ms(void);
/* conditions for grs_process and grs_wait; cq_lock held */
int grs_can_send(struct grs *rs);
int grs_have_data(struct grs *rs);
int grs_all_sent(struct grs *rs);
int grs_cq_is_armed(struct grs *rs);
int grs_any(struct grs *rs);

/* The channel of an rsocket still connecting blocks or not. */
static inline void grs_set_channel_block(struct grs *rs, int nonblock)
{
	(void)fcntl(rs->ch->fd, F_SETFL, nonblock ? O_NONBLOCK : 0);
}

#endif
