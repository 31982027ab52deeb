package provider

import (
	"sync/atomic"
	"time"
)

// Spinning of the receive path (GOIWARP_RX_SPIN, off by default).
//
// A program that waits outside goiwarp -- a server asleep in its own socket
// while its peer issues RDMA Reads, a target of Writes watching its memory
// -- leaves every arrival to the event loop (to the RX goroutine of a
// same-host ring), and waking it costs a thread wake-up and a reschedule.
// With a window set, one connection per process that consumed such data
// goes on reading its socket or same-host ring, on a goroutine of its own,
// without blocking until the window passes with nothing new, or until a
// poller of the application takes the token (its threads are there to
// receive). That pays only where a core is free for it: beside application
// threads that hold every core it keeps the very thread that would answer
// off its CPU, which is why it is an opt-in for machines with cores to
// spare rather than a rule the engine guesses at.

// spinSlot is held by the one connection of the process that spins.
var spinSlot atomic.Bool

// spinAllowed is the receive path's cheap check, after it consumed data,
// whether to spin.
func spinAllowed(window time.Duration) bool {
	return window > 0 && !spinSlot.Load()
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
	// A socket is muted while it spins: what arrives wakes no event loop
	// (a third thread on cores the spinner and the peer hold); unmuting
	// at the end reports what is left to the loop. (A same-host ring
	// costs nothing to look at and wakes nobody.) The pump is the
	// pollers' (rx.ctl), which mutes a socket that is not.
	unmute := false // the spinner muted the socket
	if tcp {
		rx.tok.Lock()
		if !rx.muted.Load() && !rx.ended {
			_ = e.rc.Control(rx.mute)
			unmute = true
		}
		rx.tok.Unlock()
	}
	defer func() {
		spinSlot.Store(false)
		if unmute {
			rx.tok.Lock()
			if rx.muted.Load() && !rx.ended {
				_ = e.rc.Control(rx.loud)
			}
			rx.tok.Unlock()
		}
	}()
	window := rx.spinWindow
	last := time.Now()
	for time.Since(last) <= window {
		if !rx.tok.TryLock() {
			return // a poller reads the socket
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
			last = time.Now()
		}
		if over || e.dead.Load() {
			return
		}
	}
}
