package main

/*
#include "capi.h"
*/
import "C"

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

// Handles name Go objects to C: an index into a table whose lookup is two
// atomic loads. (runtime/cgo.Handle hashes into a concurrent map on every
// Value: a tenth of the Go time of a server polling an empty CQ went there.)
// Index 0 is never used: 0 is the C side's "none". Freed indices are reused.
type handleSlot struct{ v atomic.Pointer[any] }

var handles struct {
	mu    sync.Mutex
	slots atomic.Pointer[[]*handleSlot] // grows by copy; slots never move
	free  []uintptr
}

func newHandle(v any) C.uintptr_t {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	var h uintptr
	if n := len(handles.free); n > 0 {
		h = handles.free[n-1]
		handles.free = handles.free[:n-1]
	} else {
		old := handles.slots.Load()
		var cur []*handleSlot
		if old != nil {
			cur = *old
		} else {
			cur = []*handleSlot{nil} // index 0
		}
		h = uintptr(len(cur))
		grown := append(cur, &handleSlot{})
		handles.slots.Store(&grown)
	}
	(*handles.slots.Load())[h].v.Store(&v)
	return C.uintptr_t(h)
}

func deleteHandle(h C.uintptr_t) {
	if h == 0 {
		return
	}
	handles.mu.Lock()
	defer handles.mu.Unlock()
	if s := slotOf(h); s != nil && s.v.Swap(nil) != nil {
		handles.free = append(handles.free, uintptr(h))
	}
}

func slotOf(h C.uintptr_t) *handleSlot {
	p := handles.slots.Load()
	if p == nil || uintptr(h) >= uintptr(len(*p)) {
		return nil
	}
	return (*p)[h]
}

// handleValue returns the Go object behind a handle, the zero T for 0 or a
// handle that names nothing (deleted, or not one of ours).
func handleValue[T any](h C.uintptr_t) T {
	var zero T
	if h == 0 {
		return zero
	}
	s := slotOf(h)
	if s == nil {
		return zero
	}
	p := s.v.Load()
	if p == nil {
		return zero
	}
	v, _ := (*p).(T)
	return v
}

// Go objects behind the C structs, for the rest of capi (rdmacm glue).
func contextOf(c *C.struct_ibv_context) *verbs.Context {
	if c == nil {
		return nil
	}
	return handleValue[*verbs.Context](C.gcapi_context_handle(c))
}

func pdOf(p *C.struct_ibv_pd) *verbs.PD {
	if p == nil {
		return nil
	}
	return handleValue[*verbs.PD](C.gcapi_pd_handle(p))
}

func cqOf(p *C.struct_ibv_cq) *verbs.CQ {
	if p == nil {
		return nil
	}
	return handleValue[*verbs.CQ](C.gcapi_cq_handle(p))
}

func qpOf(p *C.struct_ibv_qp) *verbs.QP {
	if p == nil {
		return nil
	}
	return handleValue[*verbs.QP](C.gcapi_qp_handle(p))
}

func srqOf(p *C.struct_ibv_srq) *verbs.SRQ {
	if p == nil {
		return nil
	}
	return handleValue[*verbs.SRQ](C.gcapi_srq_handle(p))
}

// errnoOf maps a Go error to the errno value the C glue returns.
func errnoOf(err error) C.int {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return C.int(e)
	}
	return C.int(unix.EIO)
}

// setCString copies s, truncated and NUL-terminated, into a C char array.
func setCString(dst []C.char, s string) {
	n := min(len(s), len(dst)-1)
	for i := 0; i < n; i++ {
		dst[i] = C.char(s[i])
	}
	dst[n] = 0
}

func ringPtr(r *verbs.Ring) *C.struct_giw_ring {
	if r == nil {
		return nil
	}
	return (*C.struct_giw_ring)(r.Base())
}
