/* Queue memory shared by the C driver (capi) and the Go engine (verbs).
 *
 * Every ring lives in mmap'd memory outside the Go heap. A ring is a header
 * followed by a power-of-two array of fixed-size entries. The producer owns
 * `prod`, the consumer owns `cons`; each publishes with a release store and
 * reads the other's index with an acquire load. verbs/abi.go mirrors this
 * layout and verbs/abi_test.go checks the mirror against the sizes below.
 */
#ifndef GIW_RING_H
#define GIW_RING_H

#include <stdint.h>

#define GIW_MAX_SGE 8
#define GIW_MAX_INLINE 128

struct giw_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* Send queue entry. opcode is an enum ibv_wr_opcode, flags enum ibv_send_flags. */
struct giw_sqe {
	uint64_t wr_id;
	uint8_t opcode;
	uint8_t flags;
	uint8_t num_sge;
	uint8_t rsvd;
	uint32_t imm_inv; /* immediate data (network order) or STag to invalidate */
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t inline_len;
	uint64_t compare_add;
	uint64_t swap;
	union {
		struct giw_sge sge[GIW_MAX_SGE];
		uint8_t inline_data[GIW_MAX_INLINE];
	};
};

/* Receive queue entry (QP receive queue and SRQ). */
struct giw_rqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t rsvd;
	struct giw_sge sge[GIW_MAX_SGE];
};

/* Completion queue entry; fields carry enum ibv_wc_status/ibv_wc_opcode/ibv_wc_flags values. */
struct giw_cqe {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_inv; /* immediate data (network order) or invalidated STag */
	uint32_t qp_num;
	uint32_t wc_flags;
	uint32_t rsvd;
};

/* Values of giw_ring.notify (CQ rings). */
enum {
	GIW_NOTIFY_NONE = 0,
	GIW_NOTIFY_SOLICITED = 1,
	GIW_NOTIFY_NEXT = 2,
};

/* Values of giw_ring.state for send/receive rings: mirrors enum ibv_qp_state. */

struct giw_ring {
	uint32_t prod;
	uint8_t pad0[60];
	uint32_t cons;
	uint8_t pad1[60];
	uint32_t size;	/* number of entries, a power of two */
	uint32_t entry_size;
	/* Send rings: 1 while the engine is idle and wants a doorbell; whoever swaps
	 * it to 0 owns transmission until it stores 1 again. */
	uint32_t doorbell;
	/* CQ rings: GIW_NOTIFY_* armed by req_notify_cq, cleared by the engine. */
	uint32_t notify;
	/* QP state (enum ibv_qp_state) as the engine sees it. */
	uint32_t state;
	/* CQ rings: set once the ring overflowed. */
	uint32_t overflow;
	/* CQ rings: number of connected QPs completing into this CQ; while it is
	 * nonzero poll_cq calls the engine's progress hook when it finds the CQ empty. */
	uint32_t active;
	/* RQ/SRQ rings: nonzero while a receive path of the engine waits for a
	 * receive to be posted (an untagged message arrived and none was there);
	 * post_recv/post_srq_recv, after publishing prod, swap it to 0 and, if
	 * it was set, call the engine's receive doorbell. */
	uint32_t rnr_wait;
	/* Send rings: 1 + the CPU (sched_getcpu) the last post ran on, 0 if
	 * unknown. A program that waits for its answer spinning there leaves
	 * the arrival to an engine thread, which should not land on that CPU. */
	uint32_t post_cpu;
	/* Send rings: nonzero while a QP connected without a CM waits in RTR
	 * for its stream. Such a QP moves itself to RTS when the stream comes
	 * up, and programs post before that (perftest's send_bw server returns
	 * credits from a QP it never moves to RTS): posts are taken and wait
	 * in the ring. */
	uint32_t early_posts;
	uint8_t pad2[24];
	/* entries follow at offset 192 */
};

#define GIW_RING_HDR_SIZE 192
#define GIW_RING_ENTRY(r, i) ((void *)((uint8_t *)(r) + GIW_RING_HDR_SIZE + \
	(size_t)((i) & ((r)->size - 1)) * (r)->entry_size))

_Static_assert(sizeof(struct giw_ring) == GIW_RING_HDR_SIZE, "ring header size");
_Static_assert(sizeof(struct giw_sqe) == 176, "sqe size");
_Static_assert(sizeof(struct giw_rqe) == 144, "rqe size");
_Static_assert(sizeof(struct giw_cqe) == 40, "cqe size");

#endif
