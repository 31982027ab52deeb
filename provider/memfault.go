package provider

import (
	"unsafe"

	"github.com/goiwarp/goiwarp/provider/wire"
	"golang.org/x/sys/unix"
)

// Application memory is registered, not pinned: an application that unmaps
// or protects a registered buffer (its bug) makes the engine's next load or
// store there fault. A fault on memory the engine reads or writes through a
// span must end that QP (error completion, Terminate, async event), never
// the process. runtime/debug.SetPanicOnFault turns such a fault into a
// recoverable panic, but only for the goroutine that set it, and engine code
// runs on its own goroutines and on application threads (cgo callbacks:
// post_send's doorbell, poll_cq's progress). So the setting is made, and the
// panic recovered, at the two entry points every one of them goes through:
//
//   - rxState.guardedStep (receive machine: placement, atomics, Read
//     Requests): the stream ends where it stopped, the affected receive or
//     Read/Atomic completes with IBV_WC_LOC_PROT_ERR, the peer gets a
//     Terminate (RDMAP local catastrophic error), the QP goes to ERR with
//     IBV_EVENT_QP_FATAL (pump does the teardown as for a protocol error);
//   - txState.runOnce (transmitter: framing, CRC over the payload): the
//     message being framed completes with IBV_WC_LOC_PROT_ERR, the batch
//     (which may hold part of an FPDU) is dropped, the QP goes to ERR with
//     IBV_EVENT_QP_FATAL and the stream ends with FIN (a Terminate cannot
//     follow a partial FPDU).
//
// Those are the backstop. Before data is framed or placed, probe checks the
// pages of a local SGE (post_send) and of a Read Request's source, and
// atomics run under memSafe, so the usual case fails one work request
// cleanly, before any of its bytes are on the wire. Kernel calls on the
// memory (readv/sendmsg) return EFAULT instead of faulting; both sides map it
// to the same outcome.
//
// Not covered here: inline data is copied from the application's pointer by
// ibv_post_send itself (C, in the caller's thread), as rdma-core's providers
// do; a bad pointer faults in the application's own call. Checking it
// without a signal handler takes a syscall (process_vm_readv: ~1.8 µs per
// post, against ~1 ns for the copy). And the fault reaches Go only through
// the runtime's SIGSEGV/SIGBUS handler: an application that installs its own
// for those signals after the library loaded takes such faults itself.

// errMemFault: registered memory that the application unmapped or
// protected. There is no RFC 5040 code for it; like an internal error of
// siw, it is an RDMAP local catastrophic error.
var errMemFault = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrLocalCatastrophic,
	Code: wire.RDMAPCodeLocalCatastrophic, Reason: "registered memory not accessible (unmapped or protected by the application)"}

var pageSize = unix.Getpagesize()

// isMemFault reports whether a recovered value is a fault on a bad address
// (SetPanicOnFault's panic carries it); nil dereferences and other panics
// are bugs and are raised again.
func isMemFault(r any) bool {
	_, ok := r.(interface{ Addr() uintptr })
	return ok
}

// memSafe runs f and reports false if it faulted on application memory.
// It runs under an entry point's guard (guardedStep, runOnce), which made
// faults of the goroutine panics: setting that here again would double
// the cost of a probe on the post_send path.
func memSafe(f func()) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if !isMemFault(r) {
				panic(r)
			}
			ok = false
		}
	}()
	f()
	return true
}

// probe reads one byte of every page of b: false if any is unmapped or
// unreadable. One load per 4 KiB of memory that is about to be read anyway.
func probe(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	var sum byte
	return memSafe(func() {
		first := pageSize - int(uintptr(unsafe.Pointer(&b[0]))%uintptr(pageSize))
		sum = b[0]
		for i := first; i < len(b); i += pageSize {
			sum += b[i]
		}
	})
}
