package provider

import (
	"sync/atomic"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
)

// Holding a ping-pong's Write completion until the answer arrives.
//
// ib_write_lat posts a signaled Write, polls for its completion, then
// watches its memory for the peer's Write. The completion is ready as soon
// as the Write is on the socket, so the application leaves goiwarp at once
// and the peer's Write, arriving while it watches memory, waits for a
// thread the netpoller wakes (offcpu.go). A hardware RC QP completes a
// Write when the responder's acknowledgement is back, a round trip later;
// holding the completion as long keeps the application's poller reading
// the socket when the answer comes, so the answer is placed on the polling
// thread and the application finds it in memory at once.
//
// Only where that pattern shows: a signaled Write, the only work in the
// send queue, no CQ of the QP armed for events, on TCP, after holdAfter
// Writes in a row each posted after something arrived since the previous
// one. The completion is released at the next arrival, the QP's next
// completion, an arm, the connection's end, or after holdMax. holdMax
// passing sends the application back to its memory, so the socket the
// pollers muted (rx.go) is made loud, else the answer waits for the mute's
// watch (1-2 ms); twice in a row, it ends the streak.
const holdAfter = 8

var holdMax = 100 * time.Microsecond // a variable for tests

type sendHold struct {
	// The TX token holder's: arrivals when the last Write was started.
	lastArr uint64
	streak  atomic.Uint32 // reset too by a poller whose hold timed out
	// Under Endpoint.compMu (on is also read without it).
	on       atomic.Bool
	idx, n   uint32
	arr      uint64 // arrivals before the held Write went out
	until    int64  // UnixNano
	timedOut bool   // the last hold ended by holdMax
}

// arrivals counts inbound messages placed to their end.
func (e *Endpoint) arrivals() uint64 {
	if rx := e.rx.Load(); rx != nil {
		return rx.arrivals.Load()
	}
	return 0
}

// noteWrite is the TX token holder's, as it starts a Write that may be
// held (entry idx): the streak grows when something arrived since the last
// such Write and the Write is the only work posted.
func (e *Endpoint) noteWrite(idx uint32) {
	h := &e.hold
	a := e.arrivals()
	if a != h.lastArr && e.qp.SoleSend(idx) {
		h.streak.Add(1)
	} else {
		h.streak.Store(0)
	}
	h.lastArr = a
}

// holdSend keeps back the success completion of m if the pattern holds;
// the TX token holder's, instead of completeSend.
func (e *Endpoint) holdSend(m *txMsg) bool {
	h := &e.hold
	if !m.mayHold || h.streak.Load() < holdAfter || !e.qp.SoleSend(m.idx) || e.qp.EventsArmed() {
		return false
	}
	e.compMu.Lock()
	defer e.compMu.Unlock()
	if e.dead.Load() || h.on.Load() {
		return false
	}
	h.idx, h.n, h.arr = m.idx, m.byteLen, h.lastArr
	h.until = time.Now().Add(holdMax).UnixNano()
	h.on.Store(true)
	return true
}

// releaseHeldLocked posts the held completion (compMu held). The Write is
// on the socket, so it succeeded even where the QP is about to fail.
func (e *Endpoint) releaseHeldLocked() {
	h := &e.hold
	if !h.on.Load() {
		return
	}
	h.on.Store(false)
	if !e.dead.Load() {
		e.qp.CompleteSend(h.idx, verbs.WCSuccess, h.n)
	}
}

// releaseHeld posts the held completion, if any.
func (e *Endpoint) releaseHeld() {
	if e.hold.on.Load() {
		e.compMu.Lock()
		e.releaseHeldLocked()
		e.compMu.Unlock()
	}
}

// settleHold is a poller's: it releases the held completion once something
// arrived or holdMax passed, and reports whether it did.
func (e *Endpoint) settleHold() bool {
	h := &e.hold
	if !h.on.Load() {
		return false
	}
	e.compMu.Lock()
	defer e.compMu.Unlock()
	if !h.on.Load() {
		return false
	}
	timedOut := e.arrivals() == h.arr
	if timedOut && time.Now().UnixNano() < h.until {
		return false
	}
	if timedOut && h.timedOut {
		h.streak.Store(0)
	}
	h.timedOut = timedOut
	// Loud before the completion is seen. TryLock: the token holder takes
	// compMu to complete (and a token taken means a reader is at the
	// socket anyway).
	if rx := e.rx.Load(); timedOut && rx != nil && rx.muted.Load() && rx.tok.TryLock() {
		rx.louden()
		rx.tok.Unlock()
	}
	e.releaseHeldLocked()
	return true
}
