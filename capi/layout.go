package main

// The C view of the shared ring layout, of the libibverbs enum values and of
// the CM event names the Go side mirrors, for layout_test.go (tests cannot use
// cgo themselves).

/*
#include <stddef.h>
#include <rdma/rdma_cma.h>
#include "capi.h"

static size_t giw_sqe_payload_off(void) { return offsetof(struct giw_sqe, sge); }
static size_t giw_sqe_inline_off(void) { return offsetof(struct giw_sqe, inline_data); }
*/
import "C"

import "unsafe"

// fieldLayout is the offset and size of one field.
type fieldLayout struct{ Off, Size uintptr }

// cRingLayout maps "struct.field" (Go mirror names) and "struct" (the size) to
// what the C compiler laid out for capi/giw_ring.h.
func cRingLayout() map[string]fieldLayout {
	var sge C.struct_giw_sge
	var sqe C.struct_giw_sqe
	var rqe C.struct_giw_rqe
	var cqe C.struct_giw_cqe
	var r C.struct_giw_ring
	return map[string]fieldLayout{
		"SGE":        {0, unsafe.Sizeof(sge)},
		"SGE.Addr":   {unsafe.Offsetof(sge.addr), unsafe.Sizeof(sge.addr)},
		"SGE.Length": {unsafe.Offsetof(sge.length), unsafe.Sizeof(sge.length)},
		"SGE.LKey":   {unsafe.Offsetof(sge.lkey), unsafe.Sizeof(sge.lkey)},

		"SQE":            {0, unsafe.Sizeof(sqe)},
		"SQE.WRID":       {unsafe.Offsetof(sqe.wr_id), unsafe.Sizeof(sqe.wr_id)},
		"SQE.Opcode":     {unsafe.Offsetof(sqe.opcode), unsafe.Sizeof(sqe.opcode)},
		"SQE.Flags":      {unsafe.Offsetof(sqe.flags), unsafe.Sizeof(sqe.flags)},
		"SQE.NumSGE":     {unsafe.Offsetof(sqe.num_sge), unsafe.Sizeof(sqe.num_sge)},
		"SQE.ImmInv":     {unsafe.Offsetof(sqe.imm_inv), unsafe.Sizeof(sqe.imm_inv)},
		"SQE.RemoteAddr": {unsafe.Offsetof(sqe.remote_addr), unsafe.Sizeof(sqe.remote_addr)},
		"SQE.RKey":       {unsafe.Offsetof(sqe.rkey), unsafe.Sizeof(sqe.rkey)},
		"SQE.InlineLen":  {unsafe.Offsetof(sqe.inline_len), unsafe.Sizeof(sqe.inline_len)},
		"SQE.CompareAdd": {unsafe.Offsetof(sqe.compare_add), unsafe.Sizeof(sqe.compare_add)},
		"SQE.Swap":       {unsafe.Offsetof(sqe.swap), unsafe.Sizeof(sqe.swap)},
		"SQE.SGE":        {uintptr(C.giw_sqe_payload_off()), C.GIW_MAX_SGE * unsafe.Sizeof(sge)},
		"SQE.inline":     {uintptr(C.giw_sqe_inline_off()), C.GIW_MAX_INLINE},

		"RQE":        {0, unsafe.Sizeof(rqe)},
		"RQE.WRID":   {unsafe.Offsetof(rqe.wr_id), unsafe.Sizeof(rqe.wr_id)},
		"RQE.NumSGE": {unsafe.Offsetof(rqe.num_sge), unsafe.Sizeof(rqe.num_sge)},
		"RQE.SGE":    {unsafe.Offsetof(rqe.sge), unsafe.Sizeof(rqe.sge)},

		"CQE":           {0, unsafe.Sizeof(cqe)},
		"CQE.WRID":      {unsafe.Offsetof(cqe.wr_id), unsafe.Sizeof(cqe.wr_id)},
		"CQE.Status":    {unsafe.Offsetof(cqe.status), unsafe.Sizeof(cqe.status)},
		"CQE.Opcode":    {unsafe.Offsetof(cqe.opcode), unsafe.Sizeof(cqe.opcode)},
		"CQE.VendorErr": {unsafe.Offsetof(cqe.vendor_err), unsafe.Sizeof(cqe.vendor_err)},
		"CQE.ByteLen":   {unsafe.Offsetof(cqe.byte_len), unsafe.Sizeof(cqe.byte_len)},
		"CQE.ImmInv":    {unsafe.Offsetof(cqe.imm_inv), unsafe.Sizeof(cqe.imm_inv)},
		"CQE.QPNum":     {unsafe.Offsetof(cqe.qp_num), unsafe.Sizeof(cqe.qp_num)},
		"CQE.WCFlags":   {unsafe.Offsetof(cqe.wc_flags), unsafe.Sizeof(cqe.wc_flags)},

		"ringHdr":            {0, unsafe.Sizeof(r)},
		"ringHdr.Prod":       {unsafe.Offsetof(r.prod), unsafe.Sizeof(r.prod)},
		"ringHdr.Cons":       {unsafe.Offsetof(r.cons), unsafe.Sizeof(r.cons)},
		"ringHdr.Size":       {unsafe.Offsetof(r.size), unsafe.Sizeof(r.size)},
		"ringHdr.EntrySize":  {unsafe.Offsetof(r.entry_size), unsafe.Sizeof(r.entry_size)},
		"ringHdr.Doorbell":   {unsafe.Offsetof(r.doorbell), unsafe.Sizeof(r.doorbell)},
		"ringHdr.Notify":     {unsafe.Offsetof(r.notify), unsafe.Sizeof(r.notify)},
		"ringHdr.State":      {unsafe.Offsetof(r.state), unsafe.Sizeof(r.state)},
		"ringHdr.Overflow":   {unsafe.Offsetof(r.overflow), unsafe.Sizeof(r.overflow)},
		"ringHdr.Active":     {unsafe.Offsetof(r.active), unsafe.Sizeof(r.active)},
		"ringHdr.RNRWait":    {unsafe.Offsetof(r.rnr_wait), unsafe.Sizeof(r.rnr_wait)},
		"ringHdr.PostCPU":    {unsafe.Offsetof(r.post_cpu), unsafe.Sizeof(r.post_cpu)},
		"ringHdr.EarlyPosts": {unsafe.Offsetof(r.early_posts), unsafe.Sizeof(r.early_posts)},
	}
}

// cConstants are the C values of the constants verbs mirrors.
func cConstants() map[string]int64 {
	return map[string]int64{
		"MaxSGE": C.GIW_MAX_SGE, "MaxInline": C.GIW_MAX_INLINE, "ringHdrSize": C.GIW_RING_HDR_SIZE,

		"WRRDMAWrite": C.IBV_WR_RDMA_WRITE, "WRRDMAWriteWithImm": C.IBV_WR_RDMA_WRITE_WITH_IMM,
		"WRSend": C.IBV_WR_SEND, "WRSendWithImm": C.IBV_WR_SEND_WITH_IMM,
		"WRRDMARead": C.IBV_WR_RDMA_READ, "WRAtomicCmpSwp": C.IBV_WR_ATOMIC_CMP_AND_SWP,
		"WRAtomicFetchAdd": C.IBV_WR_ATOMIC_FETCH_AND_ADD, "WRLocalInv": C.IBV_WR_LOCAL_INV,
		"WRBindMW": C.IBV_WR_BIND_MW, "WRSendWithInv": C.IBV_WR_SEND_WITH_INV,

		"SendFence": C.IBV_SEND_FENCE, "SendSignaled": C.IBV_SEND_SIGNALED,
		"SendSolicited": C.IBV_SEND_SOLICITED, "SendInline": C.IBV_SEND_INLINE,

		"WCSuccess": C.IBV_WC_SUCCESS, "WCLocLenErr": C.IBV_WC_LOC_LEN_ERR,
		"WCLocProtErr": C.IBV_WC_LOC_PROT_ERR, "WCWRFlushErr": C.IBV_WC_WR_FLUSH_ERR,
		"WCLocAccessErr": C.IBV_WC_LOC_ACCESS_ERR, "WCRemInvReqErr": C.IBV_WC_REM_INV_REQ_ERR,
		"WCRemAccessErr": C.IBV_WC_REM_ACCESS_ERR, "WCRemOpErr": C.IBV_WC_REM_OP_ERR,
		"WCFatalErr": C.IBV_WC_FATAL_ERR, "WCGeneralErr": C.IBV_WC_GENERAL_ERR,
		"WCTMRndvIncomplete": C.IBV_WC_TM_RNDV_INCOMPLETE,

		"WCOpSend": C.IBV_WC_SEND, "WCOpRDMAWrite": C.IBV_WC_RDMA_WRITE,
		"WCOpRDMARead": C.IBV_WC_RDMA_READ, "WCOpCompSwap": C.IBV_WC_COMP_SWAP,
		"WCOpFetchAdd": C.IBV_WC_FETCH_ADD, "WCOpBindMW": C.IBV_WC_BIND_MW,
		"WCOpLocalInv": C.IBV_WC_LOCAL_INV, "WCOpRecv": C.IBV_WC_RECV,
		"WCOpRecvRDMAWImm": C.IBV_WC_RECV_RDMA_WITH_IMM,
		"WCWithImm":        C.IBV_WC_WITH_IMM, "WCWithInv": C.IBV_WC_WITH_INV,

		"AccessLocalWrite": C.IBV_ACCESS_LOCAL_WRITE, "AccessRemoteWrite": C.IBV_ACCESS_REMOTE_WRITE,
		"AccessRemoteRead": C.IBV_ACCESS_REMOTE_READ, "AccessRemoteAtomic": C.IBV_ACCESS_REMOTE_ATOMIC,
		"AccessMWBind": C.IBV_ACCESS_MW_BIND, "AccessZeroBased": C.IBV_ACCESS_ZERO_BASED,
		"AccessOnDemand": C.IBV_ACCESS_ON_DEMAND, "AccessHugetlb": C.IBV_ACCESS_HUGETLB,
		"AccessRelaxedOrder": C.IBV_ACCESS_RELAXED_ORDERING,

		"QPSReset": C.IBV_QPS_RESET, "QPSInit": C.IBV_QPS_INIT, "QPSRTR": C.IBV_QPS_RTR,
		"QPSRTS": C.IBV_QPS_RTS, "QPSSQD": C.IBV_QPS_SQD, "QPSSQE": C.IBV_QPS_SQE, "QPSErr": C.IBV_QPS_ERR,

		"QPAttrState": C.IBV_QP_STATE, "QPAttrCurState": C.IBV_QP_CUR_STATE,
		"QPAttrAccessFlags": C.IBV_QP_ACCESS_FLAGS, "QPAttrPKeyIndex": C.IBV_QP_PKEY_INDEX,
		"QPAttrPort": C.IBV_QP_PORT, "QPAttrMaxQPRdAtomic": C.IBV_QP_MAX_QP_RD_ATOMIC,
		"QPAttrMaxDestRdAtom": C.IBV_QP_MAX_DEST_RD_ATOMIC, "QPAttrCap": C.IBV_QP_CAP,
		"QPAttrAV": C.IBV_QP_AV, "QPAttrPathMTU": C.IBV_QP_PATH_MTU, "QPAttrTimeout": C.IBV_QP_TIMEOUT,
		"QPAttrRetryCnt": C.IBV_QP_RETRY_CNT, "QPAttrRNRRetry": C.IBV_QP_RNR_RETRY,
		"QPAttrRQPSN": C.IBV_QP_RQ_PSN, "QPAttrMinRNRTimer": C.IBV_QP_MIN_RNR_TIMER,
		"QPAttrSQPSN": C.IBV_QP_SQ_PSN, "QPAttrDestQPN": C.IBV_QP_DEST_QPN,
		"MaxGIDs": C.GCAPI_MAX_GIDS,

		"SRQAttrMaxWR": C.IBV_SRQ_MAX_WR, "SRQAttrLimit": C.IBV_SRQ_LIMIT,

		"EventCQErr": C.IBV_EVENT_CQ_ERR, "EventQPFatal": C.IBV_EVENT_QP_FATAL,
		"EventQPReqErr": C.IBV_EVENT_QP_REQ_ERR, "EventQPAccessErr": C.IBV_EVENT_QP_ACCESS_ERR,
		"EventCommEst": C.IBV_EVENT_COMM_EST, "EventSQDrained": C.IBV_EVENT_SQ_DRAINED,
		"EventDeviceFatal": C.IBV_EVENT_DEVICE_FATAL, "EventPortActive": C.IBV_EVENT_PORT_ACTIVE,
		"EventSRQErr": C.IBV_EVENT_SRQ_ERR, "EventSRQLimitReached": C.IBV_EVENT_SRQ_LIMIT_REACHED,
		"EventQPLastWQE": C.IBV_EVENT_QP_LAST_WQE_REACHED, "EventWQFatal": C.IBV_EVENT_WQ_FATAL,

		"notifyNone": C.GIW_NOTIFY_NONE, "notifySolicited": C.GIW_NOTIFY_SOLICITED,
		"notifyNext": C.GIW_NOTIFY_NEXT,
	}
}

// cEventName is rdma_event_str(t). The names are kept twice on purpose:
// rdma_event_str returns static C strings without entering Go, and
// rdmacm.EventType.String serves Go's logs; the test keeps them equal.
func cEventName(t int) string {
	return C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(t)))
}
