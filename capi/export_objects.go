package main

/*
#include "capi.h"
*/
import "C"

import (
	"sync/atomic"
	"unsafe"

	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

// ---- PD / MR ---------------------------------------------------------------

//export goVerbsAllocPD
func goVerbsAllocPD(ctxh C.uintptr_t, outH *C.uintptr_t) C.int {
	c := handleValue[*verbs.Context](ctxh)
	if c == nil {
		return C.int(unix.EINVAL)
	}
	*outH = newHandle(c.AllocPD())
	return 0
}

//export goVerbsDeallocPD
func goVerbsDeallocPD(h C.uintptr_t) { deleteHandle(h) }

//export goVerbsRegMR
func goVerbsRegMR(pdh C.uintptr_t, addr C.uintptr_t, length, iova C.uint64_t, access C.int,
	outH *C.uintptr_t, outSTag *C.uint32_t) C.int {
	pd := handleValue[*verbs.PD](pdh)
	if pd == nil {
		return C.int(unix.EINVAL)
	}
	mr, err := pd.RegMR(uintptr(addr), uint64(length), uint64(iova), int(access))
	if err != nil {
		return errnoOf(err)
	}
	*outH = newHandle(mr)
	*outSTag = C.uint32_t(mr.STag)
	return 0
}

//export goVerbsReregMR
func goVerbsReregMR(mrh C.uintptr_t, flags C.int, pdh C.uintptr_t, addr C.uintptr_t,
	length, iova C.uint64_t, access C.int) C.int {
	mr := handleValue[*verbs.MR](mrh)
	if mr == nil {
		return C.int(unix.EINVAL)
	}
	return errnoOf(mr.Rereg(handleValue[*verbs.PD](pdh), uintptr(addr), uint64(length), uint64(iova),
		int(access), int(flags)))
}

//export goVerbsDeregMR
func goVerbsDeregMR(h C.uintptr_t) {
	if mr := handleValue[*verbs.MR](h); mr != nil {
		mr.Dereg()
	}
	deleteHandle(h)
}

// ---- completion channels and CQs -------------------------------------------

//export goVerbsCreateChannel
func goVerbsCreateChannel(outH *C.uintptr_t, outFD *C.int, fired *C.uint64_t) C.int {
	ch, err := verbs.NewCompChannel()
	if err != nil {
		return errnoOf(err)
	}
	ch.FireCount((*atomic.Uint64)(unsafe.Pointer(fired)))
	*outH = newHandle(ch)
	*outFD = C.int(ch.FD())
	return 0
}

//export goVerbsDestroyChannel
func goVerbsDestroyChannel(h C.uintptr_t) {
	if ch := handleValue[*verbs.CompChannel](h); ch != nil {
		ch.Close()
	}
	deleteHandle(h)
}

//export goVerbsChannelWaitFDs
func goVerbsChannelWaitFDs(h C.uintptr_t, fds *C.int32_t, n C.int, spinNs *C.int64_t) C.int {
	ch := handleValue[*verbs.CompChannel](h)
	if ch == nil || n <= 0 {
		return 0
	}
	got, spin := ch.WaitFDs(unsafe.Slice((*int32)(unsafe.Pointer(fds)), int(n)))
	*spinNs = C.int64_t(spin)
	return C.int(got)
}

//export goVerbsChannelWaitRead
func goVerbsChannelWaitRead(h C.uintptr_t, fd C.int32_t) C.int {
	if ch := handleValue[*verbs.CompChannel](h); ch != nil && ch.WaitRead(int32(fd)) {
		return 1
	}
	return 0
}

//export goVerbsCreateCQ
func goVerbsCreateCQ(ctxh C.uintptr_t, cqe C.int, chh C.uintptr_t, cookie C.uintptr_t,
	outH *C.uintptr_t, outRing **C.struct_giw_ring) C.int {
	c := handleValue[*verbs.Context](ctxh)
	if c == nil {
		return C.int(unix.EINVAL)
	}
	cq, err := c.CreateCQ(int(cqe), handleValue[*verbs.CompChannel](chh), uintptr(cookie))
	if err != nil {
		return errnoOf(err)
	}
	*outH = newHandle(cq)
	*outRing = ringPtr(cq.Ring)
	return 0
}

// goVerbsResizeCQ runs with the CQ's poll lock held by the caller.
//
//export goVerbsResizeCQ
func goVerbsResizeCQ(h C.uintptr_t, cqe C.int, outRing **C.struct_giw_ring) C.int {
	cq := handleValue[*verbs.CQ](h)
	if cq == nil {
		return C.int(unix.EINVAL)
	}
	if err := cq.Resize(int(cqe)); err != nil {
		return errnoOf(err)
	}
	*outRing = ringPtr(cq.Ring)
	return 0
}

//export goVerbsDestroyCQ
func goVerbsDestroyCQ(h C.uintptr_t) {
	if cq := handleValue[*verbs.CQ](h); cq != nil {
		cq.Destroy()
	}
	deleteHandle(h)
}

// ---- QPs ---------------------------------------------------------------------

//export goVerbsCreateQP
func goVerbsCreateQP(ctxh, pdh, scqh, rcqh, srqh C.uintptr_t, caps *C.struct_ibv_qp_cap, sigAll C.int,
	cookie C.uintptr_t, outH *C.uintptr_t, outQPN *C.uint32_t, outSQ, outRQ **C.struct_giw_ring) C.int {
	c := handleValue[*verbs.Context](ctxh)
	if c == nil {
		return C.int(unix.EINVAL)
	}
	qp, err := c.CreateQP(verbs.QPInit{
		PD:     handleValue[*verbs.PD](pdh),
		SendCQ: handleValue[*verbs.CQ](scqh),
		RecvCQ: handleValue[*verbs.CQ](rcqh),
		SRQ:    handleValue[*verbs.SRQ](srqh),
		Caps: verbs.QPCaps{MaxSendWR: uint32(caps.max_send_wr), MaxRecvWR: uint32(caps.max_recv_wr),
			MaxSendSGE: uint32(caps.max_send_sge), MaxRecvSGE: uint32(caps.max_recv_sge),
			MaxInline: uint32(caps.max_inline_data)},
		SigAll: sigAll != 0,
		Cookie: uintptr(cookie),
	})
	if err != nil {
		return errnoOf(err)
	}
	caps.max_send_wr = C.uint32_t(qp.Caps.MaxSendWR)
	caps.max_recv_wr = C.uint32_t(qp.Caps.MaxRecvWR)
	caps.max_send_sge = C.uint32_t(qp.Caps.MaxSendSGE)
	caps.max_recv_sge = C.uint32_t(qp.Caps.MaxRecvSGE)
	caps.max_inline_data = C.uint32_t(qp.Caps.MaxInline)
	*outH = newHandle(qp)
	*outQPN = C.uint32_t(qp.Num)
	*outSQ = ringPtr(qp.SQ)
	*outRQ = ringPtr(qp.RQ)
	return 0
}

//export goVerbsModifyQP
func goVerbsModifyQP(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask C.int) C.int {
	qp := handleValue[*verbs.QP](h)
	if qp == nil {
		return C.int(unix.EINVAL)
	}
	m := int(mask)
	if m&verbs.QPAttrCurState != 0 {
		// cur_qp_state must name the state the QP is in.
		if verbs.QPState(a.cur_qp_state) != qp.State() {
			return C.int(unix.EINVAL)
		}
		m &^= verbs.QPAttrCurState
	}
	if m&verbs.QPAttrState != 0 && uint32(a.qp_state) > uint32(verbs.QPSErr) {
		return C.int(unix.EINVAL)
	}
	attr := verbs.QPAttr{
		State:         verbs.QPState(a.qp_state),
		AccessFlags:   int(a.qp_access_flags),
		PortNum:       uint8(a.port_num),
		PKeyIndex:     uint16(a.pkey_index),
		ORD:           uint8(min(uint32(a.max_rd_atomic), 255)),
		IRD:           uint8(min(uint32(a.max_dest_rd_atomic), 255)),
		SQDrainNotify: a.en_sqd_async_notify != 0,
		Peer: verbs.Peer{
			Global:    a.ah_attr.is_global != 0,
			SGIDIndex: uint8(a.ah_attr.grh.sgid_index),
			DLID:      uint16(a.ah_attr.dlid),
			DestQPN:   uint32(a.dest_qp_num) & 0xffffff,
			RQPSN:     uint32(a.rq_psn) & 0xffffff,
			SQPSN:     uint32(a.sq_psn) & 0xffffff,
		},
		PathMTU:     uint8(a.path_mtu),
		Timeout:     uint8(a.timeout),
		RetryCnt:    uint8(a.retry_cnt),
		RNRRetry:    uint8(a.rnr_retry),
		MinRNRTimer: uint8(a.min_rnr_timer),
	}
	attr.Peer.DGID = *(*[16]byte)(unsafe.Pointer(&a.ah_attr.grh.dgid))
	return errnoOf(qp.Modify(attr, m))
}

//export goVerbsQueryQP
func goVerbsQueryQP(h C.uintptr_t, a *C.struct_ibv_qp_attr) C.int {
	qp := handleValue[*verbs.QP](h)
	if qp == nil {
		return C.int(unix.EINVAL)
	}
	at := qp.Attr()
	a.qp_state = uint32(at.State)
	a.cur_qp_state = uint32(at.State)
	a.qp_access_flags = C.uint(at.AccessFlags)
	a.port_num = C.uint8_t(max(at.PortNum, 1))
	a.pkey_index = C.uint16_t(at.PKeyIndex)
	a.max_rd_atomic = C.uint8_t(at.ORD)
	a.max_dest_rd_atomic = C.uint8_t(at.IRD)
	if at.SQDrainNotify {
		a.en_sqd_async_notify = 1
	}
	// What a program connecting without a CM set (zero otherwise).
	p := at.Peer
	a.dest_qp_num = C.uint32_t(p.DestQPN)
	a.rq_psn = C.uint32_t(p.RQPSN)
	a.sq_psn = C.uint32_t(p.SQPSN)
	a.ah_attr.dlid = C.uint16_t(p.DLID)
	a.ah_attr.port_num = 1
	if p.Global {
		a.ah_attr.is_global = 1
		a.ah_attr.grh.sgid_index = C.uint8_t(p.SGIDIndex)
		*(*[16]byte)(unsafe.Pointer(&a.ah_attr.grh.dgid)) = p.DGID
	}
	a.timeout = C.uint8_t(at.Timeout)
	a.retry_cnt = C.uint8_t(at.RetryCnt)
	a.rnr_retry = C.uint8_t(at.RNRRetry)
	a.min_rnr_timer = C.uint8_t(at.MinRNRTimer)
	return 0
}

//export goVerbsDestroyQP
func goVerbsDestroyQP(h C.uintptr_t) {
	if qp := handleValue[*verbs.QP](h); qp != nil {
		qp.Destroy()
		qp.FreeRings()
	}
	deleteHandle(h)
}

// goVerbsQPDoorbell: post_send found the engine idle and took the TX token.
//
//export goVerbsQPDoorbell
func goVerbsQPDoorbell(h C.uintptr_t) {
	if qp := handleValue[*verbs.QP](h); qp != nil {
		qp.Doorbell()
	}
}

// goVerbsCQProgress: poll_cq found the CQ empty while connected QPs complete
// into it; they make non-blocking progress on this thread. Nonzero when
// anything happened (the caller polls the ring again).
//
//export goVerbsCQProgress
func goVerbsCQProgress(h C.uintptr_t) C.int {
	if cq := handleValue[*verbs.CQ](h); cq != nil && cq.Progress() {
		return 1
	}
	return 0
}

// goVerbsCQArmed: req_notify_cq armed a CQ that connected QPs complete into.
//
//export goVerbsCQArmed
func goVerbsCQArmed(h C.uintptr_t) {
	if cq := handleValue[*verbs.CQ](h); cq != nil {
		cq.Armed()
	}
}

// goVerbsQPRecvDoorbell: post_recv published work on a QP in ERR, or while
// its receive path waited for a receive.
//
//export goVerbsQPRecvDoorbell
func goVerbsQPRecvDoorbell(h C.uintptr_t) {
	if qp := handleValue[*verbs.QP](h); qp != nil {
		qp.PostRecvDoorbell()
	}
}

// goVerbsSRQRecvDoorbell: post_srq_recv published work while a receive
// path of a QP using the SRQ waited for a receive.
//
//export goVerbsSRQRecvDoorbell
func goVerbsSRQRecvDoorbell(h C.uintptr_t) {
	if s := handleValue[*verbs.SRQ](h); s != nil {
		s.PostDoorbell()
	}
}

// ---- SRQs --------------------------------------------------------------------

//export goVerbsCreateSRQ
func goVerbsCreateSRQ(ctxh, pdh C.uintptr_t, a *C.struct_ibv_srq_attr, cookie C.uintptr_t,
	outH *C.uintptr_t, outRing **C.struct_giw_ring) C.int {
	c := handleValue[*verbs.Context](ctxh)
	if c == nil {
		return C.int(unix.EINVAL)
	}
	s, err := c.CreateSRQ(handleValue[*verbs.PD](pdh), uint32(a.max_wr), uint32(a.max_sge),
		uint32(a.srq_limit), uintptr(cookie))
	if err != nil {
		return errnoOf(err)
	}
	a.max_wr = C.uint32_t(s.Ring.Size())
	a.max_sge = C.uint32_t(s.MaxSGE)
	*outH = newHandle(s)
	*outRing = ringPtr(s.Ring)
	return 0
}

//export goVerbsModifySRQ
func goVerbsModifySRQ(h C.uintptr_t, a *C.struct_ibv_srq_attr, mask C.int) C.int {
	s := handleValue[*verbs.SRQ](h)
	if s == nil {
		return C.int(unix.EINVAL)
	}
	return errnoOf(s.Modify(uint32(a.max_wr), uint32(a.srq_limit), int(mask)))
}

//export goVerbsQuerySRQ
func goVerbsQuerySRQ(h C.uintptr_t, a *C.struct_ibv_srq_attr) C.int {
	s := handleValue[*verbs.SRQ](h)
	if s == nil {
		return C.int(unix.EINVAL)
	}
	a.max_wr = C.uint32_t(s.Ring.Size())
	a.max_sge = C.uint32_t(s.MaxSGE)
	a.srq_limit = C.uint32_t(s.Limit())
	return 0
}

//export goVerbsDestroySRQ
func goVerbsDestroySRQ(h C.uintptr_t) {
	if s := handleValue[*verbs.SRQ](h); s != nil {
		s.Destroy()
	}
	deleteHandle(h)
}
