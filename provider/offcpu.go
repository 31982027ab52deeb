package provider

import (
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Keeping the receive thread off the poster's CPU.
//
// A program that answers each arrival and then waits for the next by
// watching its memory (ib_write_lat: post a Write, spin on the buffer the
// peer's Write fills) never calls into goiwarp while it waits, so a thread
// the event loop wakes places the arrival. Woken on the CPU the application
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
//
// A thread so pinned is one of the runtime's, which later runs any
// goroutine, and the scheduler can no longer move it to the CPU its own
// process's spinner shares fairly. Where the CPU it is left is another
// process's spinner's, in a scheduling group of its own (a server started
// in a session of its own, sched_autogroup), it gets that CPU a few
// milliseconds in tens: ib_read_bw's requester had a pinned thread
// holding its RX token, ready but not running, while its poller found
// the token taken and 8 MB waited in the socket -- stalls of 0.1 to 8 s
// (measured with bench/stallwatch.py); ib_write_bw -b's, placing Writes between posts, too.
// So only a ping-pong -- wake-ups in a row that completed nothing, each a
// few posts after the last -- pins a thread; any other wake-up releases
// every thread pinned so far. And only where the user opted in
// (GOIWARP_PIN_RX=1): it is the host process's affinity, which a taskset,
// a cpuset or an MPI binding owns.

// keepOffPoster runs on the event loop after a wake-up that placed data;
// cpu and posts are the QP's (verbs.QP.Poster), arms rx.arms, completed
// says the wake-up completed work. Only with GOIWARP_PIN_RX=1: it changes
// the affinity of a thread of the host process.
func (rx *rxState) keepOffPoster(cpu int, posts, arms uint32, completed bool) {
	posted := posts - rx.posterPosts
	if posted == 0 && !completed || cpu < 0 {
		return // nobody is known to wait for this QP's arrivals
	}
	// A ping-pong's wake-up completes nothing (the application takes no
	// CQE for it), comes a few posts after the last, and finds no CQ armed
	// since (an application that waits for events sleeps, its CPU free).
	pingPong := !completed && posted <= pinPostsMax && arms == rx.posterArms
	rx.posterPosts, rx.posterArms = posts, arms
	if !pingPong {
		rx.pingPongs = 0
		releasePinned()
		return
	}
	if rx.pingPongs < pinAfter {
		rx.pingPongs++
		return
	}
	if currentCPU() != cpu {
		return
	}
	tid := unix.Gettid()
	var own unix.CPUSet
	if isPinned(tid) || unix.SchedGetaffinity(0, &own) != nil {
		return
	}
	if set, ok := offCPU(own, cpu); ok && unix.SchedSetaffinity(0, &set) == nil {
		notePinned(tid, own)
	}
}

// currentCPU is the CPU the calling thread runs on, or -1 (a variable for
// tests).
var currentCPU = func() int {
	var here uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&here)), 0, 0); errno != 0 {
		return -1
	}
	return int(here)
}

// pinned lists the threads keepOffPoster took off a CPU, each with the
// affinity it had before (the application's: a taskset or cpuset change
// since the library started is kept); pinnedAny says the list is not empty
// (the check on every other wake-up).
var (
	pinned struct {
		sync.Mutex
		threads []pinnedThread
	}
	pinnedAny atomic.Bool
)

type pinnedThread struct {
	tid  int
	mask unix.CPUSet
}

func isPinned(tid int) bool {
	if !pinnedAny.Load() {
		return false
	}
	pinned.Lock()
	defer pinned.Unlock()
	return slices.ContainsFunc(pinned.threads, func(p pinnedThread) bool { return p.tid == tid })
}

func notePinned(tid int, mask unix.CPUSet) {
	pinned.Lock()
	pinned.threads = append(pinned.threads, pinnedThread{tid, mask})
	pinnedAny.Store(true)
	pinned.Unlock()
}

// releasePinned gives every pinned thread its affinity back. A thread that
// has exited is skipped: the signal-0 probe finds only this process's
// threads, so a TID reused elsewhere is left alone.
func releasePinned() {
	if !pinnedAny.Load() {
		return
	}
	pinned.Lock()
	for _, p := range pinned.threads {
		if unix.Tgkill(unix.Getpid(), p.tid, 0) == nil {
			_ = unix.SchedSetaffinity(p.tid, &p.mask)
		}
	}
	pinned.threads = pinned.threads[:0]
	pinnedAny.Store(false)
	pinned.Unlock()
}

// offCPU is procs less cpu, if that leaves any.
func offCPU(procs unix.CPUSet, cpu int) (unix.CPUSet, bool) {
	procs.Clear(cpu)
	return procs, procs.Count() > 0
}

// pinPostsMax: more posts than this between two of the event loop's
// reads are a stream, not a ping-pong (which posts one message for each it
// waits for: ib_write_lat). pinAfter: so many such reads in a row make a
// ping-pong (ib_send_bw's sender sees a pair of the receiver's occasional
// messages close together now and then).
const (
	pinPostsMax = 4
	pinAfter    = 16
)
