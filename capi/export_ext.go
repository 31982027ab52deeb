package main

// goiwarp's own extensions (include/goiwarp.h): socket-to-RDMA, query
// provider, counters, runtime. The C entry points are in giw_ext.c.

/*
#include <stdlib.h>
#include <goiwarp.h>
#include "capi.h"
*/
import "C"

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

// attached holds the endpoints of QPs attached by giw_qp_attach_socket, for
// giw_qp_disconnect; an entry goes when its connection ends.
var (
	attachedMu sync.Mutex
	attached   = map[*verbs.QP]*provider.Endpoint{}
)

// attachErrno maps a failed attempt to the errno giw_qp_attach_socket returns.
func attachErrno(ev provider.Event) C.int {
	if ev.Type == provider.Rejected {
		return C.int(unix.ECONNREFUSED)
	}
	err := ev.Err
	var ne net.Error
	var en unix.Errno
	switch {
	case err == nil:
		return C.int(unix.ECONNRESET)
	case errors.Is(err, provider.ErrPrivateDataTooLong):
		return C.int(unix.EINVAL)
	case errors.As(err, &ne) && ne.Timeout():
		return C.int(unix.ETIMEDOUT)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return C.int(unix.ECONNRESET)
	case errors.As(err, &en):
		return C.int(en)
	}
	return C.int(unix.EPROTO)
}

// goGiwCheckAttachable: EINVAL unless the QP is in INIT or RTR without a
// connection.
//
//export goGiwCheckAttachable
func goGiwCheckAttachable(qph C.uintptr_t) C.int {
	qp := handleValue[*verbs.QP](qph)
	if qp == nil {
		return C.int(unix.EINVAL)
	}
	if s := qp.State(); s != verbs.QPSInit && s != verbs.QPSRTR {
		return C.int(unix.EINVAL)
	}
	attachedMu.Lock()
	_, busy := attached[qp]
	attachedMu.Unlock()
	if busy {
		return C.int(unix.EINVAL)
	}
	return 0
}

//export goGiwAttachSocket
func goGiwAttachSocket(qph C.uintptr_t, fd C.int, initiator C.int, pd unsafe.Pointer, pdLen C.int,
	ird, ord C.int, timeoutMs C.int, peer *C.struct_giw_peer_param) C.int {
	qp := handleValue[*verbs.QP](qph)
	if goGiwCheckAttachable(qph) != 0 {
		return C.int(unix.EINVAL)
	}
	p := provider.ConnParams{IRD: uint8(max(ird, 1)), ORD: uint8(max(ord, 1))}
	if pdLen > 0 {
		p.PrivateData = C.GoBytes(pd, pdLen)
	}
	if len(p.PrivateData) > provider.Query().MaxPrivateData {
		return C.int(unix.EINVAL)
	}

	// A descriptor of our own: the caller's fd stays theirs until success.
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return errnoOf(err)
	}
	f := os.NewFile(uintptr(nfd), "giw-attached-socket")
	nc, err := net.FileConn(f) // dups again; f is closed below
	f.Close()
	if err != nil {
		return C.int(unix.ENOTSOCK)
	}
	c, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return C.int(unix.EPROTONOSUPPORT)
	}

	var timeout time.Duration
	if timeoutMs > 0 {
		timeout = time.Duration(timeoutMs) * time.Millisecond
	}
	first := make(chan provider.Event, 1)
	var once sync.Once
	var ep *provider.Endpoint
	var epMu sync.Mutex
	cb := func(ev provider.Event) {
		delivered := false
		once.Do(func() { first <- ev; delivered = true })
		if !delivered && ev.Type == provider.Disconnected {
			epMu.Lock()
			e := ep
			epMu.Unlock()
			attachedMu.Lock()
			if e != nil && attached[qp] == e {
				delete(attached, qp)
			}
			attachedMu.Unlock()
		}
	}
	epMu.Lock()
	ep, err = provider.AttachSocket(qp, c, initiator != 0, p, timeout, cb)
	e := ep
	epMu.Unlock()
	if err != nil {
		c.Close()
		return attachErrno(provider.Event{Type: provider.ConnectError, Err: err})
	}
	attachedMu.Lock()
	attached[qp] = e
	attachedMu.Unlock()

	// The MPA exchange is bounded by the timeout; P2P's RTR follows it at once.
	bound := timeout
	if bound <= 0 {
		bound = provider.Query().ExchangeTimeout
	}
	var ev provider.Event
	select {
	case ev = <-first:
	case <-time.After(bound + 2*time.Second):
		ev = provider.Event{Type: provider.Unreachable, Err: unix.ETIMEDOUT}
		e.Close(false)
	}
	if ev.Type != provider.Established {
		attachedMu.Lock()
		if attached[qp] == e {
			delete(attached, qp)
		}
		attachedMu.Unlock()
		return attachErrno(ev)
	}
	if peer != nil {
		n := min(len(ev.Params.PrivateData), int(C.GIW_MPA_MAX_PRIVATE_DATA))
		dst := unsafe.Slice((*byte)(unsafe.Pointer(&peer.private_data[0])), C.GIW_MPA_MAX_PRIVATE_DATA)
		copy(dst, ev.Params.PrivateData[:n])
		peer.private_data_len = C.uint16_t(n)
		peer.responder_resources = C.uint8_t(ev.Params.IRD)
		peer.initiator_depth = C.uint8_t(ev.Params.ORD)
		peer.mpa_revision = C.uint32_t(e.MPARevision())
	}
	provider.Infof("qp %d: socket attached (%s), RTS", qp.Num, map[bool]string{true: "initiator", false: "responder"}[initiator != 0])
	return 0
}

//export goGiwDisconnect
func goGiwDisconnect(qph C.uintptr_t) C.int {
	qp := handleValue[*verbs.QP](qph)
	if qp == nil {
		return C.int(unix.EINVAL)
	}
	attachedMu.Lock()
	e := attached[qp]
	attachedMu.Unlock()
	if e == nil {
		if qp.State() == verbs.QPSErr {
			return 0 // attached once, already ended
		}
		return C.int(unix.ENOTCONN)
	}
	e.Disconnect()
	return 0
}

//export goGiwQueryProvider
func goGiwQueryProvider(a *C.struct_giw_provider_attr) {
	q := provider.Query()
	*a = C.struct_giw_provider_attr{}
	setCString(a.name[:], q.Name)
	a.api_version = C.GIW_API_VERSION
	a.mpa_revision = C.uint32_t(q.MPARevision)
	a.crc = b2u(q.CRC)
	a.markers = b2u(q.Markers)
	a.peer_to_peer = b2u(q.PeerToPeer)
	a.max_private_data = C.uint32_t(q.MaxPrivateData)
	a.exchange_timeout_ms = C.uint32_t(q.ExchangeTimeout / time.Millisecond)
	a.cm_verbs = 1
	a.socket_attach = 1
}

func b2u(b bool) C.uint32_t {
	if b {
		return 1
	}
	return 0
}

//export goGiwQueryCounters
func goGiwQueryCounters(ctxh C.uintptr_t, out *C.struct_giw_counters) C.int {
	ctx := handleValue[*verbs.Context](ctxh)
	if ctx == nil || ctx.Dev == nil {
		return C.int(unix.EINVAL)
	}
	s := provider.DeviceCounters(ctx.Dev.Name).Snapshot(ctx.Dev.Name)
	*out = C.struct_giw_counters{}
	setCString(out.device[:], s.Device)
	out.tx_fpdus = C.uint64_t(s.TxFPDUs)
	out.tx_bytes = C.uint64_t(s.TxBytes)
	out.rx_fpdus = C.uint64_t(s.RxFPDUs)
	out.rx_bytes = C.uint64_t(s.RxBytes)
	out.terminates_sent = C.uint64_t(s.TerminatesSent)
	out.terminates_received = C.uint64_t(s.TerminatesRecv)
	out.retransmits = C.uint64_t(s.Retransmits)
	out.connections = C.uint64_t(s.Connections)
	out.active_connections = C.uint64_t(s.ActiveConnections)
	return 0
}

// runtimeSamples are the runtime/metrics giw_query_runtime reads (no
// stop-the-world, unlike runtime.ReadMemStats).
var runtimeSamples = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/total:bytes"}

//export goGiwQueryRuntime
func goGiwQueryRuntime(out *C.struct_giw_runtime) {
	s := make([]metrics.Sample, len(runtimeSamples))
	for i, n := range runtimeSamples {
		s[i].Name = n
	}
	metrics.Read(s)
	*out = C.struct_giw_runtime{}
	out.goroutines = C.uint64_t(runtime.NumGoroutine())
	out.heap_live_bytes = C.uint64_t(s[0].Value.Uint64())
	out.mapped_bytes = C.uint64_t(s[1].Value.Uint64())
}
