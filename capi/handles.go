package main

/*
#include "capi.h"
*/
import "C"

import (
	"errors"
	"runtime/cgo"

	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

func newHandle(v any) C.uintptr_t {
	return C.uintptr_t(cgo.NewHandle(v))
}

func deleteHandle(h C.uintptr_t) {
	if h != 0 {
		cgo.Handle(h).Delete()
	}
}

// handleValue returns the Go object behind a handle, the zero T for 0.
func handleValue[T any](h C.uintptr_t) T {
	var zero T
	if h == 0 {
		return zero
	}
	v, _ := cgo.Handle(h).Value().(T)
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
