package provider

import (
	"sync/atomic"
	"time"
)

// Guarded spinning of the receive path.
//
// A program that waits outside goiwarp -- perftest's server asleep in its
// own socket while its peer issues RDMA Reads, a target of Writes watching
// its memory -- leaves every arrival to the RX goroutine, and waking it
// through the netpoller costs a thread wake-up and a reschedule on the
// receiving side: 20-30 µs per message on a 2-vCPU VM, where a thread that
// is already running reads the same bytes in about one. So after it has
// consumed data, one RX goroutine per process goes on reading its socket
// without blocking -- or its same-host ring, where the wake-up is an
// eventfd's -- until Policy.RxSpin passes with nothing new.
//
// Spinning pays only where a CPU is free. Beside application threads that
// hold every CPU (both sides of ib_write_lat on two cores) the spinner
// keeps a thread off its CPU -- the very thread that would answer -- so
// nothing arrives while it spins. And where the application polls a CQ of
// the QP, its poller receives. Either outcome (a spin that found nothing, a
// poller at the socket) stops spinning for spinBackoff, doubled at each
// such outcome in a row up to spinBackoffMax, so the cost to such a program
// stays a window now and then. A spinner the kernel deschedules stops too,
// backing off only if it had found nothing -- unless it found data and no
// poller came since it began (TCP): then it is the only receiver the
// application has (ib_write_bw's server without -R waits in its own
// socket), what came meanwhile is read at once, and its window starts
// again. Stopping there handed a stream of 64 KiB Writes back to the
// netpoller about 150 times a second, each a thread wake-up on two busy
// cores.

// spinSlot is held by the one RX goroutine of the process that spins.
var spinSlot atomic.Bool

// spinRefusedUntil (UnixNano) is when spinning may be tried again;
// spinFails counts fruitless spins in a row (the backoff's exponent).
// Both belong to the slot's holder, atomics for spinAllowed's reads.
var (
	spinRefusedUntil atomic.Int64
	spinFails        atomic.Uint32
)

const (
	// spinPreempted is a gap between two of the spinner's reads that means
	// the kernel gave its CPU to another task.
	spinPreempted = 200 * time.Microsecond
	spinBackoff   = 20 * time.Millisecond
	// spinBackoffMax: 20 ms << 6.
	spinBackoffMax = 6
)

// spinAllowed is the RX goroutine's cheap check, after it consumed data,
// whether to leave the netpoller and spin.
func spinAllowed(window time.Duration) bool {
	return window > 0 && !spinSlot.Load() && time.Now().UnixNano() >= spinRefusedUntil.Load()
}

// spinFailed backs spinning off after a fruitless spin.
func spinFailed(now time.Time) {
	n := min(spinFails.Load(), spinBackoffMax)
	spinFails.Store(n + 1)
	spinRefusedUntil.Store(now.Add(spinBackoff << n).UnixNano())
}

// spinSurvives says whether a spin the kernel descheduled goes on: it found
// data, and no poller came since it began (pollers' visits, rx.polls, at
// its start and now), on a TCP socket.
func spinSurvives(found, tcp bool, pollsAtStart, pollsNow uint64) bool {
	return found && tcp && pollsNow == pollsAtStart
}

// spin reads the socket (or the same-host ring) without blocking until
// rx.spinWindow has passed since it last found data, a poller takes the
// token, or the stream ends or stops for a receive buffer.
func (rx *rxState) spin() {
	if !spinSlot.CompareAndSwap(false, true) {
		return
	}
	e := rx.e
	tcp := e.shm == nil
	// A socket is muted while it spins: what arrives wakes no netpoller
	// thread (a third thread on cores the spinner and the peer hold);
	// lowering the mark at the end signals what is left to the netpoller.
	// (A same-host ring costs nothing to look at and wakes nobody.) The
	// pump is the pollers' (rx.ctl), which mutes a socket that is not.
	lower := false // the spinner raised the mark
	if tcp {
		rx.tok.Lock()
		if !rx.muted.Load() {
			_ = e.rc.Control(rx.mute)
			lower = true
		}
		rx.tok.Unlock()
	}
	defer func() {
		spinSlot.Store(false)
		if lower {
			rx.tok.Lock()
			if rx.muted.Load() && !rx.ended {
				_ = e.rc.Control(rx.loud)
			}
			rx.tok.Unlock()
		}
	}()
	window := rx.spinWindow
	now := time.Now()
	last, prev := now, now
	found := false
	polls := rx.polls.Load()
	for {
		now = time.Now()
		descheduled := now.Sub(prev) > spinPreempted
		if descheduled && spinSurvives(found, tcp, polls, rx.polls.Load()) {
			descheduled, last = false, now
		}
		if descheduled || now.Sub(last) > window {
			// Descheduled, or nothing more came: a spin that found data
			// paid, one that found none held a CPU for nothing.
			if found {
				spinFails.Store(0)
			} else {
				spinFailed(now)
			}
			return
		}
		prev = now
		if !rx.tok.TryLock() {
			// A poller reads the socket: the application's threads are
			// there to receive, spinning only takes their CPU.
			spinFailed(now)
			return
		}
		var got bool
		switch {
		case e.gone.Load(): // a hard Close: touch the ring no more
		case tcp:
			rx.prog = false
			_ = e.rc.Control(rx.ctl)
			got = rx.prog
		default:
			got = rx.pump(0)
		}
		over := rx.ended || rx.rnrWait || e.gone.Load()
		rx.tok.Unlock()
		if got {
			rx.idlePolls.Store(0)
			last, found = now, true
		}
		if over || e.dead.Load() {
			return
		}
	}
}
