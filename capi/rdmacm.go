package main

/*
#include <stdlib.h>
#include <netinet/in.h>
#include "rdmacm.h"
*/
import "C"

import (
	"encoding/binary"
	"net"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/rdmacm"
	"github.com/goiwarp/goiwarp/verbs"
)

// The librdmacm glue: every goCM* export converts its arguments, calls the
// rdmacm package and returns an errno value (0 = success, errnoOf); rdmacm.c
// sets errno.

func cmChannel(h C.uintptr_t) *rdmacm.Channel { return handleValue[*rdmacm.Channel](h) }
func cmID(h C.uintptr_t) *rdmacm.ID           { return handleValue[*rdmacm.ID](h) }

// cmAddrFrom reads a struct sockaddr (AF_INET or AF_INET6); nil otherwise.
func cmAddrFrom(sa *C.struct_sockaddr) *net.TCPAddr {
	if sa == nil {
		return nil
	}
	switch sa.sa_family {
	case C.AF_INET:
		b := unsafe.Slice((*byte)(unsafe.Pointer(sa)), C.sizeof_struct_sockaddr_in)
		ip := make(net.IP, 4)
		copy(ip, b[4:8])
		return &net.TCPAddr{IP: ip, Port: int(binary.BigEndian.Uint16(b[2:4]))}
	case C.AF_INET6:
		b := unsafe.Slice((*byte)(unsafe.Pointer(sa)), C.sizeof_struct_sockaddr_in6)
		ip := make(net.IP, 16)
		copy(ip, b[8:24])
		a := &net.TCPAddr{IP: ip, Port: int(binary.BigEndian.Uint16(b[2:4]))}
		if scope := binary.NativeEndian.Uint32(b[24:28]); scope != 0 {
			if ifc, err := net.InterfaceByIndex(int(scope)); err == nil {
				a.Zone = ifc.Name
			}
		}
		return a
	}
	return nil
}

// cmAddrTo writes a into a struct sockaddr_storage (zeroed when a is nil).
func cmAddrTo(ss *C.struct_sockaddr_storage, a *net.TCPAddr) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(ss)), C.sizeof_struct_sockaddr_storage)
	clear(b)
	if a == nil {
		return
	}
	if len(a.IP) == net.IPv4len || a.IP == nil {
		binary.NativeEndian.PutUint16(b[0:2], C.AF_INET)
		binary.BigEndian.PutUint16(b[2:4], uint16(a.Port))
		copy(b[4:8], a.IP.To4())
		return
	}
	binary.NativeEndian.PutUint16(b[0:2], C.AF_INET6)
	binary.BigEndian.PutUint16(b[2:4], uint16(a.Port))
	copy(b[8:24], a.IP.To16())
	if a.Zone != "" {
		if ifc, err := net.InterfaceByName(a.Zone); err == nil {
			binary.NativeEndian.PutUint32(b[24:28], uint32(ifc.Index))
		}
	}
}

func cmFillAddrs(out *C.struct_gcm_addrs, src, dst *net.TCPAddr, dev string) {
	if out == nil {
		return
	}
	cmAddrTo(&out.src, src)
	cmAddrTo(&out.dst, dst)
	setCString(out.dev[:], dev)
}

func cmBytes(p unsafe.Pointer, n C.int) []byte {
	if p == nil || n <= 0 {
		return nil
	}
	return C.GoBytes(p, n)
}

// cmConnParams is the private data and IRD/ORD of rdma_connect and rdma_accept.
func cmConnParams(pd unsafe.Pointer, pdLen, ird, ord C.int) provider.ConnParams {
	return provider.ConnParams{PrivateData: cmBytes(pd, pdLen), IRD: uint8(ird), ORD: uint8(ord)}
}

//export goCMCreateChannel
func goCMCreateChannel(fd *C.int, h *C.uintptr_t) C.int {
	ch, err := rdmacm.NewChannel()
	if err != nil {
		return errnoOf(err)
	}
	*fd = C.int(ch.FD())
	*h = newHandle(ch)
	return 0
}

//export goCMDestroyChannel
func goCMDestroyChannel(h C.uintptr_t) {
	if ch := cmChannel(h); ch != nil {
		ch.Close()
	}
	deleteHandle(h)
}

// goCMPop takes the next event of the channel into info; 0 when none.
//
//export goCMPop
func goCMPop(h C.uintptr_t, info *C.struct_gcm_evinfo) C.int {
	ch := cmChannel(h)
	if ch == nil {
		return 0
	}
	e := ch.Pop()
	if e == nil {
		return 0
	}
	if e.ID.Cookie == nil {
		// A connection request: its id is born in C now, as librdmacm
		// creates it when the application reads the event.
		e.ID.Handle = uintptr(newHandle(e.ID))
		e.ID.Cookie = unsafe.Pointer(C.gcm_new_child(
			(*C.struct_rdma_cm_id)(e.Listen.Cookie), C.uintptr_t(e.ID.Handle)))
	}
	info.event = C.int(e.Type)
	info.status = C.int(e.Status)
	info.id = (*C.struct_rdma_cm_id)(e.ID.Cookie)
	if e.Listen != nil {
		info.listen_id = (*C.struct_rdma_cm_id)(e.Listen.Cookie)
	}
	info.owner = C.uintptr_t(e.Owner().Handle)
	info.responder_resources = C.uint8_t(e.ResponderResources)
	info.initiator_depth = C.uint8_t(e.InitiatorDepth)
	n := copy(unsafe.Slice((*byte)(unsafe.Pointer(&info.pdata[0])), len(info.pdata)), e.PrivateData)
	info.pdata_len = C.uint8_t(n)
	cmFillAddrs(&info.addrs, e.Src, e.Dst, e.Dev)
	return 1
}

//export goCMAck
func goCMAck(owner C.uintptr_t) {
	if id := cmID(owner); id != nil {
		id.Ack()
	}
}

//export goCMCreateID
func goCMCreateID(chh C.uintptr_t, ps C.int, cookie unsafe.Pointer, h *C.uintptr_t) C.int {
	ch := cmChannel(chh)
	if ch == nil {
		return C.EINVAL
	}
	id, err := rdmacm.NewID(ch, int(ps), nil)
	if err != nil {
		return errnoOf(err)
	}
	id.Cookie = cookie
	id.Handle = uintptr(newHandle(id))
	*h = C.uintptr_t(id.Handle)
	return 0
}

// goCMCloseID is the first half of rdma_destroy_id, goCMFreeID the second:
// it waits for the acks and frees the handle.
//
//export goCMCloseID
func goCMCloseID(h C.uintptr_t, hasQP C.int) {
	if id := cmID(h); id != nil {
		id.Close(hasQP != 0)
	}
}

//export goCMFreeID
func goCMFreeID(h C.uintptr_t) {
	if id := cmID(h); id != nil {
		id.WaitAcks()
	}
	deleteHandle(h)
}

//export goCMMigrate
func goCMMigrate(h, chh C.uintptr_t) C.int {
	id, ch := cmID(h), cmChannel(chh)
	if id == nil || ch == nil {
		return C.EINVAL
	}
	id.Migrate(ch)
	return 0
}

//export goCMQuery
func goCMQuery(h C.uintptr_t, out *C.struct_gcm_addrs) {
	if id := cmID(h); id != nil {
		src, dst, dev := id.Addrs()
		cmFillAddrs(out, src, dst, dev)
	}
}

//export goCMBind
func goCMBind(h C.uintptr_t, sa *C.struct_sockaddr, out *C.struct_gcm_addrs) C.int {
	id, a := cmID(h), cmAddrFrom(sa)
	if id == nil || a == nil {
		return C.EINVAL
	}
	if err := id.Bind(a); err != nil {
		return errnoOf(err)
	}
	goCMQuery(h, out)
	return 0
}

//export goCMResolveAddr
func goCMResolveAddr(h C.uintptr_t, src, dst *C.struct_sockaddr, timeoutMS C.int) C.int {
	id, d := cmID(h), cmAddrFrom(dst)
	if id == nil || d == nil {
		return C.EINVAL
	}
	s := cmAddrFrom(src)
	if src != nil && s == nil {
		return C.EINVAL
	}
	return errnoOf(id.ResolveAddr(s, d, time.Duration(timeoutMS)*time.Millisecond))
}

//export goCMResolveRoute
func goCMResolveRoute(h C.uintptr_t, timeoutMS C.int) C.int {
	id := cmID(h)
	if id == nil {
		return C.EINVAL
	}
	return errnoOf(id.ResolveRoute(time.Duration(timeoutMS) * time.Millisecond))
}

//export goCMListen
func goCMListen(h C.uintptr_t, backlog C.int, out *C.struct_gcm_addrs) C.int {
	id := cmID(h)
	if id == nil {
		return C.EINVAL
	}
	if err := id.Listen(int(backlog)); err != nil {
		return errnoOf(err)
	}
	goCMQuery(h, out)
	return 0
}

// goCMConnect connects the id's QP, or without one (qp NULL) the
// application's own QP numbered qpn.
//
//export goCMConnect
func goCMConnect(h C.uintptr_t, qp *C.struct_ibv_qp, qpn C.uint32_t, pd unsafe.Pointer, pdLen C.int, ird, ord C.int) C.int {
	id := cmID(h)
	if id == nil {
		return C.EINVAL
	}
	p := cmConnParams(pd, pdLen, ird, ord)
	if qp == nil {
		return errnoOf(id.ConnectQPNum(uint32(qpn), p))
	}
	return errnoOf(id.Connect(qpOf(qp), p))
}

// goCMAccept is goCMConnect's passive twin.
//
//export goCMAccept
func goCMAccept(h C.uintptr_t, qp *C.struct_ibv_qp, qpn C.uint32_t, pd unsafe.Pointer, pdLen C.int, ird, ord C.int) C.int {
	id := cmID(h)
	if id == nil {
		return C.EINVAL
	}
	p := cmConnParams(pd, pdLen, ird, ord)
	if qp == nil {
		return errnoOf(id.AcceptQPNum(uint32(qpn), p))
	}
	return errnoOf(id.Accept(qpOf(qp), p))
}

//export goCMEstablish
func goCMEstablish(h C.uintptr_t) C.int {
	id := cmID(h)
	if id == nil {
		return C.EINVAL
	}
	return errnoOf(id.Establish())
}

// goCMInitQPAttr is rdma_init_qp_attr's answer for QP state state.
//
//export goCMInitQPAttr
func goCMInitQPAttr(h C.uintptr_t, state C.int, access, port, mask *C.int) C.int {
	id := cmID(h)
	if id == nil || state < 0 {
		return C.EINVAL
	}
	a, m, err := id.InitQPAttr(verbs.QPState(state))
	if err != nil {
		return errnoOf(err)
	}
	*access, *port, *mask = C.int(a.AccessFlags), C.int(a.PortNum), C.int(m)
	return 0
}

//export goCMReject
func goCMReject(h C.uintptr_t, pd unsafe.Pointer, pdLen C.int) C.int {
	id := cmID(h)
	if id == nil {
		return C.EINVAL
	}
	return errnoOf(id.Reject(cmBytes(pd, pdLen)))
}

// goCMDisconnect sets *pending when the id's closing event is still to come.
//
//export goCMDisconnect
func goCMDisconnect(h C.uintptr_t, pending *C.int) C.int {
	id := cmID(h)
	if id == nil {
		return C.EINVAL
	}
	p, err := id.Disconnect()
	if p {
		*pending = 1
	}
	return errnoOf(err)
}

//export goCMSetOption
func goCMSetOption(h C.uintptr_t, level, name C.int, val unsafe.Pointer, n C.size_t) C.int {
	id := cmID(h)
	if id == nil {
		return C.EINVAL
	}
	if n > 1<<16 {
		return C.EINVAL
	}
	return errnoOf(id.SetOption(int(level), int(name), cmBytes(val, C.int(n))))
}
