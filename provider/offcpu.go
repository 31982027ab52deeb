package provider

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Keeping the receive thread off the poster's CPU.
//
// A program that answers each arrival and then waits for the next by
// watching its memory (ib_write_lat: post a Write, spin on the buffer the
// peer's Write fills) never calls into goiwarp while it waits, so a thread
// the netpoller wakes places the arrival. Woken on the CPU the application
// spins on, that thread preempts the spinner, which must then be scheduled
// back to see the data: on 2 cores one way took 24-32 µs so, 4.6 µs with
// the receive thread on the other CPU (bench/wakecost, c-read-same against
// c-read-other), where it preempts only the peer's spinner, which waits
// for it.
//
// So after a wake-up that placed data for a QP whose application posted
// since the last such look, the receive thread checks its CPU and, if it
// is the poster's, takes that CPU out of its affinity. The thread is one
// of the Go runtime's; the mask it gets is the process's (read at start)
// less that one CPU, so a later look on another CPU mends it. Not when the
// application armed a CQ of the QP since: it sleeps on the completion
// channel, its CPU is free, and the receive thread that wakes it there
// wakes it sooner (qperf rc_lat, which waits for events, took 45-47 µs
// with its receive thread kept off, 36-41 without).

// procCPUs is the process's CPU affinity when the library started.
var procCPUs = func() (s unix.CPUSet) {
	if unix.SchedGetaffinity(0, &s) != nil {
		s.Zero()
	}
	return s
}()

// keepOffPoster runs on the RX goroutine after a wake-up that placed data;
// cpu and posts are the QP's (verbs.QP.Poster), arms rx.arms.
func (rx *rxState) keepOffPoster(cpu int, posts, arms uint32) {
	if posts == rx.posterPosts || cpu < 0 {
		return // no post since: nobody is known to wait for this QP's arrivals
	}
	rx.posterPosts = posts
	if arms != rx.posterArms {
		rx.posterArms = arms
		return // it waits for events, not spinning
	}
	var here uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&here)), 0, 0); errno != 0 || int(here) != cpu {
		return
	}
	if set, ok := offCPU(procCPUs, cpu); ok {
		_ = unix.SchedSetaffinity(0, &set)
	}
}

// offCPU is procs less cpu, if that leaves any.
func offCPU(procs unix.CPUSet, cpu int) (unix.CPUSet, bool) {
	procs.Clear(cpu)
	return procs, procs.Count() > 0
}
