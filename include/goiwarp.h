/*
 * goiwarp.h -- goiwarp's own extensions to the libibverbs API.
 *
 * Link with -lgoiwarp. Everything here is goiwarp's: a program that uses it
 * needs libgoiwarp (under rdma-core's libibverbs these symbols do not exist).
 * Every function returns 0 or a positive errno value (as the ibv_* calls
 * that return int do) and also sets errno to that value.
 *
 * 1. Socket to RDMA
 * -----------------
 * The question of the original iWARP CM discussion (see DESIGN.md): what if a
 * connection is set up by ordinary sockets and then handed to the QP? goiwarp
 * answers it concretely:
 *
 *  (a) How the socket is opened: it is an ordinary TCP socket of the host
 *      stack -- socket(AF_INET or AF_INET6, SOCK_STREAM, 0), then connect()
 *      on one side and listen()/accept() on the other, with whatever options,
 *      addresses, firewalls and administrative controls the host applies to
 *      any TCP connection. Nothing about it is goiwarp-specific; it need not
 *      even be created by the process that attaches it (SCM_RIGHTS works).
 *
 *  (b) How it is used before RDMA: in ordinary streaming mode, with read(),
 *      write(), send(), recv(), poll(), for as long as the application likes:
 *      its own protocol (a login, a version or capability negotiation, the
 *      exchange of buffer addresses and STags). goiwarp does not see it.
 *      One rule: when the switch happens, neither side may have read ahead
 *      into the other side's RDMA-mode bytes, and neither may leave
 *      streaming-mode bytes unread. Use exact-length reads (not buffered
 *      stdio or a read-ahead buffer). The simplest safe pattern: the
 *      responder writes the last streaming-mode message and then calls
 *      giw_qp_attach_socket(); the initiator reads exactly that message and
 *      then calls it. (The initiator's MPA request may arrive while the
 *      responder is still writing; that is fine as long as the responder does
 *      not read it as streaming data.)
 *
 *  (c) How it turns into RDMA: one call on each side,
 *      giw_qp_attach_socket(qp, fd, initiator, param, peer, timeout_ms),
 *      which runs the MPA exchange (RFC 5044 / RFC 6581) over the socket --
 *      the initiator writes the MPA request, the responder reads it and
 *      writes the MPA reply -- and moves the QP to RTS. From then on the
 *      stream carries iWARP (MPA FPDUs of DDP/RDMAP), the QP is used with the
 *      ordinary verbs (ibv_post_send, ibv_post_recv, ibv_poll_cq), and the
 *      peer may be any iWARP implementation (goiwarp, Linux siw, an RNIC)
 *      whose side was set up the same way. The MPA revision, CRC, markers
 *      and peer-to-peer policy are the ones of rdma_connect/rdma_accept
 *      (GOIWARP_MPA_* and GOIWARP_P2P, see giw_query_provider()).
 *
 * Ownership of the descriptor: on success the library owns the socket. The
 * call closes fd (the connection itself lives on inside the library, on a
 * descriptor of its own), so after it returns 0 the application must not
 * read, write or close fd -- the number may already belong to another file.
 * On failure fd is still the application's: open, with its file status flags
 * (O_NONBLOCK) as they were. If the MPA exchange had started (any error but
 * EINVAL, EBADF, ENOTSOCK, EPROTONOSUPPORT, ENOTCONN) part of an MPA frame may
 * have been written or consumed, so the stream is no longer usable for
 * streaming and should be closed.
 *
 * Ending the connection: giw_qp_disconnect() (graceful: work already posted
 * is sent, then TCP FIN), or ibv_modify_qp() to IBV_QPS_ERR, or
 * ibv_destroy_qp() (abortive). Either way both QPs end in IBV_QPS_ERR (see
 * ibv_query_qp) and their outstanding work requests complete with
 * IBV_WC_WR_FLUSH_ERR. A peer that closes, resets or sends a Terminate moves
 * our QP to IBV_QPS_ERR the same way. There is no CM event channel for an
 * attached socket: the QP state and the flush completions are the signal.
 *
 * 2. Query provider
 * -----------------
 * giw_query_provider() is the "query provider" verb of the discussion: what
 * the connection setup of this provider does and accepts.
 *
 * 3. Counters
 * -----------
 * giw_query_counters() reads the per-device counters of the calling process
 * (examples/c/giw_stat.c prints them).
 *
 * 4. Runtime
 * ----------
 * giw_query_runtime() reports what the library's Go runtime holds in the
 * calling process (goroutines, heap), which /proc does not show: with the
 * process's fds, threads and VmRSS it tells whether objects destroyed by the
 * application gave back everything they took (tests/stress/leaks.c).
 */
#ifndef GOIWARP_H
#define GOIWARP_H

#include <stdint.h>
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header's API; giw_query_provider() reports the library's. */
#define GIW_API_VERSION 1

/* Most private data an MPA frame carries (RFC 5044). What a connection may
 * send is less: giw_provider_attr.max_private_data. */
#define GIW_MPA_MAX_PRIVATE_DATA 512

/* What we send in the MPA exchange. */
struct giw_conn_param {
	const void *private_data; /* delivered to the peer; may be NULL */
	uint16_t private_data_len; /* <= giw_provider_attr.max_private_data */
	/* IRD: RDMA Read/Atomic requests of the peer we serve at once (as
	 * rdma_conn_param.responder_resources); 0 means 1. */
	uint8_t responder_resources;
	/* ORD: RDMA Read/Atomic requests we keep outstanding (as
	 * rdma_conn_param.initiator_depth); 0 means 1. */
	uint8_t initiator_depth;
	uint32_t reserved; /* 0 */
};

/* What the peer sent and what was negotiated (output). */
struct giw_peer_param {
	uint8_t private_data[GIW_MPA_MAX_PRIVATE_DATA]; /* the peer's, without the MPA v2 IRD/ORD header */
	uint16_t private_data_len;
	uint8_t responder_resources; /* negotiated IRD of our QP */
	uint8_t initiator_depth; /* negotiated ORD of our QP: min(ours, the peer's IRD) */
	uint32_t mpa_revision; /* revision settled on: 1 or 2 */
};

/*
 * giw_qp_attach_socket -- turn a connected TCP socket into the LLP stream of
 * qp and move qp to RTS.
 *
 *   qp          an RC QP of this library in IBV_QPS_INIT (or IBV_QPS_RTR),
 *               with no connection yet. Receives may be posted before the
 *               call (and should be, if the peer sends at once).
 *   fd          a connected SOCK_STREAM TCP socket (IPv4 or IPv6), blocking
 *               or not. See "Ownership of the descriptor" above.
 *   initiator   non-zero on exactly one side: it sends the MPA request; the
 *               other (0) reads the request and answers with the MPA reply.
 *               Which side connect()ed in TCP does not matter.
 *   param       our private data and IRD/ORD; NULL means none and 1/1.
 *   peer        if not NULL, receives the peer's private data and the
 *               negotiated values.
 *   timeout_ms  bound on the MPA exchange; <= 0 means the provider default
 *               (GOIWARP_MPA_TIMEOUT, 10 s).
 *
 * Synchronous: it returns once the QP is in RTS (0) or the attempt failed.
 * Errors:
 *   EINVAL       qp not a QP of this library / not in INIT or RTR / already
 *                connected, param->private_data_len too large, reserved != 0
 *   EBADF        fd is not an open descriptor
 *   ENOTSOCK, EPROTONOSUPPORT   fd is not a TCP socket
 *   ENOTCONN     the socket is not connected
 *   ECONNREFUSED the responder answered with an MPA reject
 *   ETIMEDOUT    no complete MPA frame within timeout_ms
 *   ECONNRESET   the peer closed or reset the stream during the exchange
 *   EPROTO       the peer's bytes are not a valid MPA frame (for example,
 *                streaming-mode data left unread), or the MPA policies do
 *                not match (GOIWARP_MPA_CRC=2 against a peer without CRC,
 *                no common peer-to-peer RTR type)
 */
int giw_qp_attach_socket(struct ibv_qp *qp, int fd, int initiator,
			 const struct giw_conn_param *param,
			 struct giw_peer_param *peer, int timeout_ms);

/*
 * giw_qp_disconnect -- end the connection of a QP attached by
 * giw_qp_attach_socket, gracefully: work requests already posted are sent,
 * then the stream is closed (TCP FIN). Returns at once; the QP moves to
 * IBV_QPS_ERR when the stream has ended (both sides), outstanding work
 * requests complete with IBV_WC_WR_FLUSH_ERR. A peer that never closes its
 * side is given 5 s. Idempotent: 0 when the connection already ended.
 * EINVAL if qp is not a QP of this library, ENOTCONN if it was never attached
 * by giw_qp_attach_socket (use rdma_disconnect for CM connections).
 */
int giw_qp_disconnect(struct ibv_qp *qp);

/* Connection set-up of the provider (from the environment of the process:
 * GOIWARP_MPA_REV, GOIWARP_MPA_CRC, GOIWARP_MPA_MARKERS, GOIWARP_P2P,
 * GOIWARP_MPA_PDMAX, GOIWARP_MPA_TIMEOUT at the time of the call). */
struct giw_provider_attr {
	char name[32]; /* "goiwarp" */
	uint32_t api_version; /* GIW_API_VERSION of the library */
	uint32_t mpa_revision; /* MPA revision we send: 1 or 2 (RFC 6581) */
	uint32_t crc; /* 1: we ask for MPA CRC; 0: we do not ask, but use it when the peer does */
	uint32_t markers; /* 1: we ask the peer for MPA markers */
	uint32_t peer_to_peer; /* 1: RFC 6581 peer-to-peer mode with an RTR message */
	uint32_t max_private_data; /* private data bytes a connection may send */
	uint32_t exchange_timeout_ms; /* default bound on the MPA exchange */
	uint32_t cm_verbs; /* 1: the provider's own CM verbs (rdma_cm) are available */
	uint32_t socket_attach; /* 1: giw_qp_attach_socket is available */
	uint32_t reserved[7];
};

/* giw_query_provider -- fill *attr. ctx is any open context of this library
 * (the answer is the same for all of them). EINVAL for NULL arguments. */
int giw_query_provider(struct ibv_context *ctx, struct giw_provider_attr *attr);

/* Per-device counters of the calling process, since it started. Fields are
 * only ever appended (at the expense of reserved); all count upwards except
 * active_connections. */
struct giw_counters {
	char device[64]; /* giw_<ifname> */
	uint64_t tx_fpdus; /* MPA FPDUs sent */
	uint64_t tx_bytes; /* bytes written to the TCP streams (FPDUs with MPA framing, markers, CRC) */
	uint64_t rx_fpdus; /* FPDUs received and accepted (CRC checked) */
	uint64_t rx_bytes; /* bytes of those FPDUs on the wire */
	uint64_t terminates_sent; /* RDMAP Terminate messages sent */
	uint64_t terminates_received; /* RDMAP Terminate messages received */
	/* TCP retransmissions (the kernel's TCP_INFO tcpi_total_retrans) of the
	 * device's connections: sampled for live ones at each query; a closed
	 * connection keeps the value of its last sample. */
	uint64_t retransmits;
	uint64_t connections; /* connections that reached RTS */
	uint64_t active_connections; /* of those, still up */
	uint64_t reserved[7];
};

/* giw_query_counters -- the counters of ctx's device. EINVAL for NULL
 * arguments or a context not of this library. */
int giw_query_counters(struct ibv_context *ctx, struct giw_counters *counters);

/* The library's Go runtime in the calling process, at the moment of the call.
 * Fields are only ever appended (at the expense of reserved). */
struct giw_runtime {
	uint64_t goroutines; /* live goroutines (engine, CM, event delivery, idle runtime ones) */
	uint64_t heap_live_bytes; /* heap bytes in objects, reachable or not yet swept */
	uint64_t mapped_bytes; /* all memory the runtime has mapped (heap, stacks, metadata) */
	uint64_t reserved[5];
};

/* giw_query_runtime -- fill *rt. Needs no context (the first call starts the
 * library like any other). EINVAL for NULL. */
int giw_query_runtime(struct giw_runtime *rt);

#ifdef __cplusplus
}
#endif

#endif /* GOIWARP_H */
