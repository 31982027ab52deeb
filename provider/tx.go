package provider

import (
	"encoding/binary"
	"errors"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

// Transmit side. Whoever holds the TX token (verbs.QP.TakeTx) runs
// txState.run: internal messages (Read Responses, Atomic Responses,
// Terminate) first, then the send queue; FPDUs are batched into one sendmsg
// of header/trailer bytes and slices of registered memory. A run that finds
// the socket full hands the token to the TX goroutine, which waits for
// writability; application threads never block.

type msgKind uint8

const (
	kindSQ msgKind = iota
	kindReadResp
	kindAtomicResp
	kindTerm
)

type txMsg struct {
	h        wire.Header // template: per-segment MO/TO/Last are set while framing
	baseTO   uint64
	data     [][]byte
	spans    []verbs.Span
	total    int
	off      int // payload bytes framed
	seg      int // payload per FPDU once the message needs several
	si, so   int // cursor in data
	kind     msgKind
	idx      uint32 // SQ entry (kindSQ)
	complete bool   // complete the SQ entry once on the socket
	irdFreed bool   // a response whose IRD slot was given back (once framed)
	byteLen  uint32
	next     *txMsg // sent right after this one (Immediate Data after a Write)

	// Backing of data and spans for a work request's SGEs: a message from
	// the send queue needs no allocation of its own (txState.newSQMsg).
	dataArr [verbs.MaxSGE][]byte
	spanArr [verbs.MaxSGE]verbs.Span
}

func (m *txMsg) release() {
	for _, s := range m.spans {
		s.Release()
	}
	m.spans = nil
}

// ordEntry is an outstanding Read or Atomic request (ORD).
type ordEntry struct {
	idx      uint32
	atomic   bool
	rtr      bool // our zero-length RTR Read: no SQ entry
	reqID    uint32
	sinkSTag uint32
	sinkTO   uint64
	length   uint32
	placed   uint32
	span     verbs.Span
}

type stallKind uint8

const (
	stallNone stallKind = iota
	stallORD
	stallFence
	stallNotReady
)

const (
	batchArena = 32 << 10
	batchIOV   = 1024
	batchBytes = 1 << 20
	// batchCopies: with CRC on, the payload of a batch is copied (see
	// frameSegment); a batch ends when less than a largest FPDU is left.
	batchCopies = 256 << 10
)

type txAct struct {
	end int64
	m   *txMsg
}

type txState struct {
	e *Endpoint

	mu       sync.Mutex // guards the fields up to ord, and irdInUse
	parked   bool
	stall    stallKind
	ready    bool
	closing  bool
	internal []*txMsg
	term     *txMsg
	ord      []*ordEntry
	irdInUse int
	ordOut   atomic.Int32 // len(ord), for pollers

	// blocked: the token holder found the socket full and left the token
	// here; whoever swaps it to false (the TX goroutine once there is room,
	// or a poller) transmits.
	blocked atomic.Bool

	// tokSync mirrors the hand-over of the TX token, whose doorbell lives
	// in mmap'd memory the race detector does not see, in Go memory.
	tokSync atomic.Uint32

	// lastKick: when the last doorbell (Kick) returned, in ns since epoch;
	// lastLooked: the QP's Looked when it rang (the TX token's, as Kick is).
	lastKick   atomic.Int64
	lastLooked uint64

	// Token holder only.
	mssAt   time.Time // when maxULPDU last asked the socket
	cur     *txMsg
	msn     [5]uint32
	reqID   uint32
	rtrRead bool
	finSent bool
	giveUp  bool        // the socket stayed full past its deadline: fail the batch
	fr      wire.Stream // the outbound MPA stream: markers and CRC

	// wgate is held around each write of the batch and the retiring of
	// the messages it finished; failing takes it before it flushes the
	// QP, so an SQ entry whose bytes all went to the socket is completed
	// (successfully) before any flush can see it.
	wgate sync.Mutex

	// The batch being written, in memory held only while transmitting
	// (holdBatch, releaseBatch).
	bufs    *batchBufs
	arena   []byte
	apos    int
	copies  []byte // with CRC on, the payload copied where the CRC is taken
	cpos    int
	iov     [][]byte
	wi, wo  int // write cursor: iov index and offset
	queued  int64
	written int64
	acts    []txAct
	iovecs  []unix.Iovec
	msg     unix.Msghdr      // sendmsg's header over iovecs
	wfn     func(fd uintptr) // writeFD, bound once
	rfn     func()           // copyRing, bound once
	rn      int              // bytes copyRing wrote
	wBlock  bool
	wErr    error

	free []*txMsg // finished send-queue messages, for newSQMsg (token-owned)
	// Finished Read and Atomic Responses, for newResponse: the receive side
	// makes them, the transmitter finishes them (under mu).
	respFree []*txMsg
	ordFree  []*ordEntry // completed ORD entries, for buildSQ (under mu)
}

// batchBufs is a transmitter's batch memory (arena, iov, iovecs: ~72 KiB,
// and with CRC on batchCopies for the payload).
// It is taken from the process's free list when a transmitter starts framing
// and given back when it has written everything: an idle connection holds
// none. (Not a sync.Pool: that one drops entries at random under the race
// detector and at every second GC, and then the data path allocates.)
type batchBufs struct {
	arena  []byte
	copies []byte
	iov    [][]byte
	iovecs []unix.Iovec
}

// maxFreeBatches bounds what the free list keeps after a burst of many
// connections transmitting at once.
const maxFreeBatches = 64

var freeBatches struct {
	sync.Mutex
	l []*batchBufs
}

func (t *txState) holdBatch() {
	if t.bufs != nil {
		return
	}
	freeBatches.Lock()
	b := takeFree(&freeBatches.l)
	freeBatches.Unlock()
	if b == nil {
		b = &batchBufs{arena: make([]byte, batchArena), iov: make([][]byte, 0, batchIOV),
			iovecs: make([]unix.Iovec, 0, batchIOV)}
	}
	if t.fr.CRC && b.copies == nil {
		b.copies = make([]byte, batchCopies)
	}
	t.bufs, t.arena, t.iov, t.iovecs, t.copies = b, b.arena, b.iov[:0], b.iovecs[:0], b.copies
}

// releaseBatch gives the batch memory back once everything framed is written.
func (t *txState) releaseBatch() {
	b := t.bufs
	if b == nil || t.queued != t.written || len(t.acts) > 0 || t.cur != nil {
		return
	}
	// What the slices still point at is the arena or registered memory
	// (not the Go heap): nothing stale is kept alive.
	b.iov, b.iovecs = t.iov[:0], t.iovecs[:0]
	t.bufs, t.arena, t.iov, t.iovecs, t.copies = nil, nil, nil, nil, nil
	t.resetBatch()
	freeBatches.Lock()
	if len(freeBatches.l) < maxFreeBatches {
		freeBatches.l = append(freeBatches.l, b)
	}
	freeBatches.Unlock()
}

// newResponse returns a Read or Atomic Response message with header h
// (the receive side's, under mu: the transmitter gives finished ones back).
func (t *txState) newResponse(kind msgKind, h wire.Header) *txMsg {
	t.mu.Lock()
	m := takeFree(&t.respFree)
	t.mu.Unlock()
	if m == nil {
		m = new(txMsg)
	} else {
		*m = txMsg{}
	}
	m.kind, m.h = kind, h
	m.data, m.spans = m.dataArr[:0], m.spanArr[:0]
	return m
}

// newORD returns a cleared ORD entry, a completed one again when there is one.
func (t *txState) newORD() *ordEntry {
	t.mu.Lock()
	o := takeFree(&t.ordFree)
	t.mu.Unlock()
	if o == nil {
		return new(ordEntry)
	}
	*o = ordEntry{}
	return o
}

// takeFree pops the newest entry of a free list, nil when it is empty.
func takeFree[T any](l *[]*T) *T {
	n := len(*l)
	if n == 0 {
		return nil
	}
	v := (*l)[n-1]
	(*l)[n-1] = nil
	*l = (*l)[:n-1]
	return v
}

// putORD gives back an entry popORD returned, once the receive side is done
// with it.
func (t *txState) putORD(o *ordEntry) {
	t.mu.Lock()
	t.ordFree = append(t.ordFree, o)
	t.mu.Unlock()
}

// newSQMsg returns a message for SQ entry idx: a finished one again when
// there is one, so that the send path allocates nothing per work request.
func (t *txState) newSQMsg(idx uint32) *txMsg {
	m := takeFree(&t.free)
	if m == nil {
		m = new(txMsg)
	} else {
		*m = txMsg{}
	}
	m.kind, m.idx, m.complete = kindSQ, idx, true
	m.data, m.spans = m.dataArr[:0], m.spanArr[:0]
	return m
}

func (t *txState) init(e *Endpoint) {
	t.e = e
	t.msn = [5]uint32{1, 1, 1, 1, 1}
	t.fr = wire.NewStream(e.neg.crc, e.neg.mkTx, 0)
	t.wfn = t.writeFD
	t.rfn = t.copyRing
}

func (t *txState) ordMax() int {
	n := int(t.e.neg.ord)
	if c := int(t.e.ordCap.Load()); c > 0 {
		// A CM-less QP's program sets its ORD at RTS, after the exchange.
		n = min(n, c)
	}
	return max(n, 1)
}

// burstGap: a doorbell that rings within this time of the end of the
// previous one, with no poll of the QP's CQs between them, belongs to a burst
// of posts (perftest's bandwidth loop posts the next work request as soon as
// the last returns). It hands the token over instead of transmitting on the
// posting thread: the posts that follow ring no doorbell at all, and whoever
// takes the token (the TX goroutine, or the poller the application runs
// next) sends them together in one sendmsg. A post after a pause (a latency
// test posts once per round trip) still transmits at once, and so does one
// after the application polled: a ping-pong polls for the answer before it
// posts again, however fast the round trip (same-host ib_send_lat's 2 µs ones
// were taken for a burst, and each woke the TX goroutine onto a core the
// spinning threads held: 5 % of the round trips, 8-9 µs each).
var burstGap = 2 * time.Microsecond

// epoch: the zero of lastKick.
var epoch = time.Now()

// Kick is verbs.Transport.Kick: the caller holds the TX token.
func (e *Endpoint) Kick() {
	t := &e.tx
	t.tokSync.Load()
	looked := e.qp.Looked()
	burst := time.Since(epoch)-time.Duration(t.lastKick.Load()) < burstGap && looked == t.lastLooked
	e.life.RLock()
	// Not once dead: a token holder may have stopped the TX goroutine (the
	// transmitter that sees dead flushes and stops it), and nobody would
	// take the token.
	if burst && !e.dead.Load() {
		t.handOff()
	} else {
		t.run()
	}
	e.life.RUnlock()
	t.lastLooked = looked
	t.lastKick.Store(int64(time.Since(epoch)))
}

func (e *Endpoint) txLoop() {
	defer close(e.txDone)
	t := &e.tx
	for {
		select {
		case <-e.txHand:
			e.life.RLock()
			if e.shm != nil {
				t.resumeRing()
				e.life.RUnlock()
				continue
			}
			t.resumeSock(e.s)
			e.life.RUnlock()
		case <-e.quit:
			return
		}
	}
}

// resumeSock is the TX goroutine's turn on a TCP connection: transmit the
// batch handed over; a socket still full leaves it blocked again (run). A
// poller (Endpoint.Progress) may take a blocked transmitter over first.
func (t *txState) resumeSock(s *sock) {
	if !t.blocked.CompareAndSwap(true, false) {
		return
	}
	t.tokSync.Load()
	// Fail's bound: a peer that does not read gets no more.
	t.giveUp = t.giveUp || s.wexpired.Load()
	t.run()
}

// onWritable is the event loop's: room on a socket whose transmitter
// found it full goes back to the TX goroutine.
func (t *txState) onWritable() {
	if t.blocked.Load() {
		t.e.wakeTxGoroutine()
	}
}

// resumeRing is the TX goroutine's turn on a same-host connection: write
// the blocked batch as the peer makes room in its ring.
func (t *txState) resumeRing() {
	for t.blocked.CompareAndSwap(true, false) {
		t.tokSync.Load()
		if !t.runOnce() {
			return
		}
		t.blocked.Store(true)
		if !t.e.shm.waitRoom(t.e) {
			if t.blocked.CompareAndSwap(true, false) {
				t.tokSync.Load()
				t.giveUp = true
				t.run()
			}
			return
		}
	}
}

// wake makes the engine transmit: resumes a parked token or takes a free one.
// The caller must not hold the life lock (a transmitter never calls it:
// see failEv), because a second RLock deadlocks against a waiting writer
// (hard Close).
func (t *txState) wake() {
	e := t.e
	// gone is checked under the life lock: a hard Close sets it before it
	// takes the lock exclusively, so a transmitter that gets the lock after
	// Close waited for the others sees it and touches no ring.
	e.life.RLock()
	defer e.life.RUnlock()
	if e.gone.Load() {
		return
	}
	t.mu.Lock()
	resume := t.parked
	t.parked = false
	t.mu.Unlock()
	if resume || e.qp.TakeTx() {
		t.tokSync.Load()
		t.run()
	}
}

func (t *txState) setReady() {
	t.mu.Lock()
	t.ready = true
	t.mu.Unlock()
	t.wake()
}

func (t *txState) setClosing() {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
	t.wake()
}

// popFront drops q[0] and keeps q's capacity for the appends that follow
// (q[1:] would shrink it until append reallocates); queues here are short.
func popFront[T any](q []*T) []*T {
	n := copy(q, q[1:])
	q[n] = nil
	return q[:n]
}

// addInternal queues a response message; the receive path wakes the
// transmitter for it (rxReader.settle).
func (t *txState) addInternal(m *txMsg) {
	t.mu.Lock()
	t.internal = append(t.internal, m)
	t.mu.Unlock()
}

func (t *txState) queueTerminate(ti *termInfo) {
	if ti == nil {
		return
	}
	var body [wire.MaxTerminateLen]byte
	ti.ctrl.M, ti.ctrl.D = true, len(ti.hdr) >= 2
	ti.ctrl.R = ti.ctrl.D
	n, err := wire.EncodeTerminate(body[:], ti.ctrl, ti.segLen, ti.hdr)
	if err != nil {
		ti.ctrl.D, ti.ctrl.R = false, false
		n, _ = wire.EncodeTerminate(body[:], ti.ctrl, ti.segLen, nil)
	}
	m := &txMsg{kind: kindTerm, h: wire.Header{Opcode: wire.OpTerminate, Last: true, Term: ti.ctrl}}
	// The control word is in the header; the copied headers are the payload.
	m.data = [][]byte{append([]byte(nil), body[wire.TermControlLen:n]...)}
	m.total = n - wire.TermControlLen
	t.mu.Lock()
	t.term = m
	t.mu.Unlock()
}

type pumpResult uint8

const (
	pumpIdle pumpResult = iota
	pumpWouldBlock
)

// run transmits until there is nothing to do, the queue stalls (ORD, fence,
// responder before RTR: the token is parked) or the socket is full (the
// token is left "blocked" for the TX goroutine, which waits for room, or a
// poller to take). It never waits itself.
func (t *txState) run() {
	var seq uint32
	if s := t.e.s; s != nil {
		seq = s.wseq.Load()
	}
	if t.runOnce() {
		t.blockFull(seq)
	}
}

// blockFull leaves the token blocked on a full socket (or ring) for the TX
// goroutine, or for a poller to take first (progress). On a socket the TX
// goroutine is woken by the writability edge that makes room (onWritable),
// or at once if one came since seq, read before the write; until then a
// burst's hand-off wakes nobody (handOff), as waking the TX goroutine for a
// socket that is still full would only have it find EAGAIN again.
func (t *txState) blockFull(seq uint32) {
	s := t.e.s
	if s != nil {
		s.awaitEdge.Store(true) // before blocked: the loop clears it first
	}
	t.tokSync.Add(1)
	t.blocked.Store(true)
	if s != nil {
		if s.wseq.Load() == seq {
			return
		}
		s.awaitEdge.Store(false)
	}
	t.e.wakeTxGoroutine()
}

// releaseToken gives back a token left blocked (handed over) or parked
// when a hard Close stopped the transmitters: nobody would take it, the
// doorbell would stay taken, and work posted to the QP in ERR would never
// ring to be flushed.
func (t *txState) releaseToken() {
	t.mu.Lock()
	parked := t.parked
	t.parked = false
	t.mu.Unlock()
	if t.blocked.CompareAndSwap(true, false) || parked {
		t.tokSync.Load()
		t.e.qp.DropTx()
	}
}

// handOff leaves the token "blocked" for the TX goroutine, which transmits
// once the socket has room, or for a poller to take first (progress).
func (t *txState) handOff() {
	t.tokSync.Add(1)
	t.blocked.Store(true)
	if s := t.e.s; s != nil && s.awaitEdge.Load() {
		return // see blockFull
	}
	t.e.wakeTxGoroutine()
}

// wakeTxGoroutine tells the TX goroutine to look at the token (txLoop); a
// wake-up already pending covers this one.
func (e *Endpoint) wakeTxGoroutine() {
	select {
	case e.txHand <- struct{}{}:
	default:
	}
}

// runOnce is run up to a full socket, which it reports; the caller still
// holds the token then. Every transmitter goes through it, so it is where a
// fault on application memory is recovered (see memfault.go).
func (t *txState) runOnce() (full bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if !isMemFault(r) {
				panic(r)
			}
			// Framing stopped in the middle of t.cur.
			t.memFault(t.cur)
			full = t.runOnce()
		}
	}()
	for {
		if t.pump() == pumpWouldBlock {
			return true
		}
		if !t.idle() {
			return false
		}
	}
}

// progress is the poller's part of the transmitter: resume a transmitter
// that found the socket full. It reports whether it ran.
func (t *txState) progress() bool {
	if !t.blocked.Load() || !t.blocked.CompareAndSwap(true, false) {
		return false
	}
	t.tokSync.Load()
	t.run()
	return true
}

func (t *txState) pump() pumpResult {
	for {
		if t.queued > t.written {
			wb, err := t.write()
			if err == unix.EFAULT {
				// sendmsg met memory unmapped since it was probed.
				t.memFault(t.writing())
			} else if err != nil {
				// Already dead: this may run inside fail itself (fail wakes
				// the transmitter to send the Terminate), whose Once must not
				// be re-entered.
				if !t.e.failed() {
					t.e.failTx(nil, err, -1)
				}
				t.dropBatch()
			} else if wb {
				return pumpWouldBlock
			}
			continue
		}
		t.resetBatch()
		if t.e.dead.Load() {
			if !t.fillDead() {
				return pumpIdle
			}
			continue
		}
		if !t.fill() {
			return pumpIdle
		}
	}
}

// writing returns the message whose bytes are at the write cursor.
func (t *txState) writing() *txMsg {
	for _, a := range t.acts {
		if a.end > t.written {
			return a.m
		}
	}
	return t.cur
}

// memFault takes the QP down after a fault on application memory while m
// was framed or written: m's work request completes with a local
// protection error (a response has none), the batch is dropped and the
// stream ends with FIN, since part of an FPDU may be framed or sent.
func (t *txState) memFault(m *txMsg) {
	if m != nil && m.kind == kindSQ {
		t.e.completeSend(m.idx, verbs.WCLocProtErr, 0)
	}
	if !t.e.failed() {
		t.e.failTx(nil, errMemFault, verbs.EventQPFatal)
	}
	t.dropBatch()
}

// idle decides what a transmitter does when pump found nothing to send: park
// on a stall, go on, or give the token back. It reports whether to go on.
func (t *txState) idle() bool {
	e := t.e
	t.mu.Lock()
	if t.stall != stallNone && !e.dead.Load() {
		if t.stalledLocked() {
			t.parked = true
			t.mu.Unlock()
			return false
		}
		t.stall = stallNone
		t.mu.Unlock()
		return true
	}
	t.stall = stallNone
	if len(t.internal) > 0 || t.term != nil {
		t.mu.Unlock()
		return true
	}
	closing := t.closing
	// Read under mu, after the Terminate check: fail queues its Terminate
	// before it sets dead, so dead seen here means none is pending.
	dead := e.dead.Load()
	t.mu.Unlock()
	if (closing || dead) && !t.finSent {
		t.finSent = true
		e.closeWrite()
	}
	t.releaseBatch()
	if dead {
		t.tokSync.Add(1)
		if e.qp.State() == verbs.QPSErr {
			e.qp.Flush()
			if e.qp.ReleaseTx() {
				return true // posted meanwhile: flush that too
			}
		} else {
			// Being destroyed or reset: whoever does it owns the queues.
			// Work left in the SQ is never started, so give the token back
			// without looking at it (ReleaseTx would take it again for
			// ever, and hold off the hard Close waiting for transmitters).
			e.qp.DropTx()
		}
		e.stopTxLoop()
		return false
	}
	t.tokSync.Add(1)
	if e.qp.ReleaseTx() {
		return true
	}
	t.mu.Lock()
	more := len(t.internal) > 0 || t.term != nil
	t.mu.Unlock()
	return more && e.qp.TakeTx()
}

// ordHead returns the oldest outstanding Read or Atomic, or nil.
func (t *txState) ordHead() *ordEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ord) == 0 {
		return nil
	}
	return t.ord[0]
}

// popORD removes the oldest outstanding Read or Atomic and returns it, or nil.
func (t *txState) popORD() *ordEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ord) == 0 {
		return nil
	}
	o := t.ord[0]
	t.ord = popFront(t.ord)
	t.ordOut.Store(int32(len(t.ord)))
	return o
}

func (t *txState) stalledLocked() bool {
	switch t.stall {
	case stallORD:
		return len(t.ord) >= t.ordMax()
	case stallFence:
		return len(t.ord) > 0
	case stallNotReady:
		return !t.ready
	}
	return false
}

// fillDead drops all work and frames the Terminate, if one is due.
func (t *txState) fillDead() bool {
	t.mu.Lock()
	term := t.term
	t.term = nil
	internal := t.internal
	t.internal = nil
	t.mu.Unlock()
	for _, m := range internal {
		t.finishDropped(m)
	}
	if t.cur != nil {
		t.finishDropped(t.cur)
		t.cur = nil
	}
	if term == nil || t.finSent {
		return false
	}
	t.frameMsg(term)
	return true
}

func (t *txState) finishDropped(m *txMsg) {
	for ; m != nil; m = m.next {
		m.release()
		t.freeIRD(m)
	}
}

// freeIRD gives back the IRD slot of a Read or Atomic Response. It runs as
// soon as the response's last FPDU is framed into the batch, before it is
// written: the requester counts the request done when the last byte
// arrives and may send the next one at once, which must not find the slot
// still taken.
func (t *txState) freeIRD(m *txMsg) {
	if m.irdFreed || m.kind != kindReadResp && m.kind != kindAtomicResp {
		return
	}
	m.irdFreed = true
	t.putIRD()
}

// takeIRD takes an IRD slot for an incoming Read or Atomic Request; false
// when all are in use.
func (t *txState) takeIRD() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.irdInUse >= max(int(t.e.neg.ird), 1) {
		return false
	}
	t.irdInUse++
	return true
}

// putIRD gives back a slot taken by takeIRD.
func (t *txState) putIRD() {
	t.mu.Lock()
	t.irdInUse--
	t.mu.Unlock()
}

// dropAll releases everything the transmitter holds (hard close, after the
// transmitters stopped).
func (t *txState) dropAll() {
	t.dropBatch()
	t.fillDead()
	t.mu.Lock()
	t.term = nil
	t.mu.Unlock()
}

func (t *txState) dropBatch() {
	for _, a := range t.acts {
		t.finishDropped(a.m)
	}
	t.acts = t.acts[:0]
	t.resetBatch()
}

func (t *txState) resetBatch() {
	t.iov = t.iov[:0]
	t.apos, t.cpos = 0, 0
	t.wi, t.wo = 0, 0
	t.queued, t.written = 0, 0
}

func (t *txState) batchFull() bool {
	return t.apos > batchArena-1024 || len(t.iov) > batchIOV-320 || t.queued >= batchBytes ||
		(t.fr.CRC && t.cpos > batchCopies-wire.MaxULPDULen)
}

// fill frames FPDUs into the batch; false when there was nothing to send.
func (t *txState) fill() bool {
	added := false
	for !t.batchFull() {
		if t.cur == nil {
			t.cur = t.nextMsg()
			if t.cur == nil {
				break
			}
		}
		m := t.cur
		t.frameSegment(m)
		added = true
		if m.off >= m.total {
			t.freeIRD(m)
			t.acts = append(t.acts, txAct{end: t.queued, m: m})
			t.cur = m.next
			m.next = nil
			if t.cur == nil && m.kind == kindTerm {
				break
			}
		}
	}
	return added
}

// frameMsg frames a whole message (the Terminate).
func (t *txState) frameMsg(m *txMsg) {
	for {
		t.frameSegment(m)
		if m.off >= m.total {
			t.acts = append(t.acts, txAct{end: t.queued, m: m})
			return
		}
	}
}

func (t *txState) nextMsg() *txMsg {
	if t.finSent && t.e.failStarted.Load() {
		// The Terminate went out ahead of the QP's move to ERR (see
		// failTerm), or Disconnect's FIN did: nothing more is framed;
		// responses are dropped, work requests flushed. A Terminate
		// queued after the FIN cannot be sent either (left queued, idle
		// would send the transmitter round again for ever).
		t.mu.Lock()
		internal := t.internal
		t.internal, t.term = nil, nil
		t.mu.Unlock()
		for _, m := range internal {
			t.finishDropped(m)
		}
		return nil
	}
	t.mu.Lock()
	if t.term != nil {
		m := t.term
		t.term = nil
		t.mu.Unlock()
		return m
	}
	if len(t.internal) > 0 {
		m := t.internal[0]
		t.internal = popFront(t.internal)
		t.mu.Unlock()
		return m
	}
	if !t.ready {
		t.stall = stallNotReady
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()
	for {
		sqe, idx, ok := t.e.qp.NextSend()
		if !ok {
			return nil
		}
		m, stall := t.buildSQ(sqe, idx)
		if stall != stallNone {
			t.e.qp.UnstartSend(idx)
			t.mu.Lock()
			t.stall = stall
			t.mu.Unlock()
			return nil
		}
		if m != nil {
			return m
		}
		if t.e.dead.Load() {
			return nil
		}
	}
}

var errLocalProt = errors.New("goiwarp: local protection error (bad lkey)")

// gather pins the local SGEs of a work request and probes their pages.
func (t *txState) gather(m *txMsg, sges []verbs.SGE, write bool) error {
	for _, s := range sges {
		sp, err := verbs.LocalAccess(t.e.pd, s, write)
		if err != nil {
			m.release()
			return errLocalProt
		}
		m.spans = append(m.spans, sp)
		if !probe(sp.Buf) {
			m.release()
			return errMemFault
		}
		if len(sp.Buf) > 0 {
			m.data = append(m.data, sp.Buf)
		}
		m.total += len(sp.Buf)
	}
	return nil
}

// payload sets the data of a Send or Write: its inline data or its SGEs.
func (t *txState) payload(m *txMsg, sqe *verbs.SQE) error {
	if sqe.Flags&verbs.SendInline != 0 {
		d := sqe.InlineData()
		m.data = append(m.data, d)
		m.total = len(d)
		return nil
	}
	return t.gather(m, sqe.SGEs(), false)
}

// localError completes a work request that cannot start and takes the QP down.
func (t *txState) localError(idx uint32, status uint32, err error) {
	t.e.completeSend(idx, status, 0)
	t.e.failTx(nil, err, verbs.EventQPFatal)
}

// buildSQ turns an SQ entry into a message, or completes it at once.
func (t *txState) buildSQ(sqe *verbs.SQE, idx uint32) (*txMsg, stallKind) {
	op := sqe.Opcode
	t.mu.Lock()
	nord := len(t.ord)
	t.mu.Unlock()
	if sqe.Flags&verbs.SendFence != 0 && nord > 0 {
		return nil, stallFence
	}
	m := t.newSQMsg(idx)
	switch op {
	case verbs.WRSend, verbs.WRSendWithInv:
		m.h.Opcode = wire.OpSend
		if op == verbs.WRSendWithInv {
			m.h.Opcode = wire.OpSendInv
			m.h.InvalidateSTag = sqe.ImmInv
		}
		if sqe.Flags&verbs.SendSolicited != 0 {
			m.h.Opcode += wire.OpSendSE - wire.OpSend
		}
		if err := t.payload(m, sqe); err != nil {
			t.localError(idx, verbs.WCLocProtErr, err)
			return nil, stallNone
		}
		m.h.MSN = t.msn[wire.QNSend]
		t.msn[wire.QNSend]++
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		m.h.Opcode = wire.OpWrite
		m.h.STag = sqe.RKey
		m.baseTO = sqe.RemoteAddr
		if err := t.payload(m, sqe); err != nil {
			t.localError(idx, verbs.WCLocProtErr, err)
			return nil, stallNone
		}
		if op == verbs.WRRDMAWrite && m.total <= directMax && t.mayPlace(nord) && !t.e.qp.MoreSends() &&
			t.placeDirect(m, sqe) {
			return nil, stallNone
		}
		if op == verbs.WRRDMAWriteWithImm {
			imm := t.newSQMsg(idx)
			imm.h.Opcode = wire.OpImmediate
			if sqe.Flags&verbs.SendSolicited != 0 {
				imm.h.Opcode = wire.OpImmediateSE
			}
			var b [8]byte
			binary.NativeEndian.PutUint32(b[:4], sqe.ImmInv) // network order as given
			imm.h.Immediate = binary.BigEndian.Uint64(b[:])
			imm.h.MSN = t.msn[wire.QNSend]
			t.msn[wire.QNSend]++
			imm.byteLen = uint32(m.total)
			m.complete = false
			m.next = imm
		}
	case verbs.WRRDMARead, verbs.WRAtomicFetchAdd, verbs.WRAtomicCmpSwp:
		if nord >= t.ordMax() {
			return nil, stallORD
		}
		sges := sqe.SGEs()
		atomic := op != verbs.WRRDMARead
		if len(sges) > 1 || atomic && (len(sges) != 1 || sges[0].Length < 8) {
			t.localError(idx, verbs.WCLocLenErr, errors.New("goiwarp: bad SGE list for Read/Atomic"))
			return nil, stallNone
		}
		oe := t.newORD()
		oe.idx, oe.atomic = idx, atomic
		if len(sges) == 1 {
			s := sges[0]
			if atomic {
				s.Length = 8
			}
			sp, err := verbs.LocalAccess(t.e.pd, s, true)
			if err != nil {
				t.localError(idx, verbs.WCLocProtErr, errLocalProt)
				return nil, stallNone
			}
			oe.span, oe.sinkSTag, oe.sinkTO, oe.length = sp, s.LKey, s.Addr, s.Length
		}
		m.complete = false
		if atomic {
			t.reqID++
			oe.reqID = t.reqID
			m.h = wire.Header{Opcode: wire.OpAtomicRequest, Last: true, MSN: t.msn[wire.QNAtomicRequest],
				AtomicReqID: oe.reqID, RemoteSTag: sqe.RKey, RemoteTO: sqe.RemoteAddr,
				AddSwap: sqe.CompareAdd, AddSwapMask: ^uint64(0)}
			if op == verbs.WRAtomicCmpSwp {
				m.h.AtomicOp = wire.AtomicCmpSwap
				m.h.AddSwap, m.h.Compare, m.h.CompareMask = sqe.Swap, sqe.CompareAdd, ^uint64(0)
			}
			t.msn[wire.QNAtomicRequest]++
		} else {
			m.h = wire.Header{Opcode: wire.OpReadRequest, Last: true, MSN: t.msn[wire.QNReadRequest],
				SinkSTag: oe.sinkSTag, SinkTO: oe.sinkTO, ReadSize: oe.length, SrcSTag: sqe.RKey, SrcTO: sqe.RemoteAddr}
			t.msn[wire.QNReadRequest]++
		}
		t.mu.Lock()
		t.ord = append(t.ord, oe)
		t.ordOut.Store(int32(len(t.ord)))
		t.mu.Unlock()
	case verbs.WRLocalInv:
		status := uint32(verbs.WCSuccess)
		if err := verbs.InvalidateSTag(t.e.pd, sqe.ImmInv); err != nil {
			status = verbs.WCMWBindErr
		}
		t.e.completeSend(idx, status, 0)
		return nil, stallNone
	default:
		t.localError(idx, verbs.WCLocQPOpErr, errors.New("goiwarp: unsupported work request opcode"))
		return nil, stallNone
	}
	m.byteLen = uint32(m.total) // the Immediate Data message set its own
	return m, stallNone
}

// directMax: the largest Write placed directly, and only when no work
// request follows it. A lone small Write is the case the rings serve badly
// (the peer's receiver sleeps until woken, ~20 µs, where the Write's
// target polls its memory); in a stream, and for large Writes, the rings
// move more (bench/README.md: the copy into the ring and the copy out of it
// run on two cores, where process_vm_writev pins pages on one).
const directMax = 16 << 10

// mayPlace: a Write may be done by direct placement on a same-host
// connection (shmdirect.go) as far as this side goes: every earlier
// message is out of the batch and no Read or Atomic is outstanding.
func (t *txState) mayPlace(nord int) bool {
	return t.e.shm != nil && nord == 0 && t.queued == t.written && len(t.acts) == 0
}

// placeDirect does the Write m by direct placement into the peer's memory
// (shmdirect.go) and completes its work request, or reports that it could
// not. Under wgate, as a write of the batch and the retiring of what it
// finished: a failure starting meanwhile cannot flush a Write already in the
// peer's memory, and an answer the peer sends once it sees the data is
// completed after this Write (endpoint.go, completeCaused).
func (t *txState) placeDirect(m *txMsg, sqe *verbs.SQE) bool {
	t.wgate.Lock()
	defer t.wgate.Unlock()
	if !t.e.shm.writeDirect(sqe.RKey, sqe.RemoteAddr, m.data, m.total) {
		return false
	}
	if testAfterWrite != nil {
		testAfterWrite(t.e)
	}
	m.release()
	t.free = append(t.free, m)
	t.e.completeSend(m.idx, verbs.WCSuccess, uint32(m.total))
	return true
}

// mssRecheck bounds how often a transmitter asks the socket for its MSS
// again (maxULPDU).
const mssRecheck = 100 * time.Millisecond

// maxULPDU is the largest ULPDU to frame now. A connection's MSS grows after
// its handshake (loopback's starts at 32741, half the peer's first window,
// and reaches 65483 once data flows), and FPDUs follow it as siw's do: FPDUs
// of half the size cost a bulk transfer twice the sendmsg and readv calls.
// Asked for a message that needs several FPDUs, at most every mssRecheck.
func (t *txState) maxULPDU() int {
	e := t.e
	if e.shm == nil && time.Since(t.mssAt) >= mssRecheck {
		t.mssAt = time.Now()
		e.mulpdu = mulpduFor(e.rc, t.fr.Markers)
	}
	return e.mulpdu
}

// frameSegment appends the next FPDU of m to the batch, piece by piece
// through the stream's codec (the payload is not gathered into one buffer).
// Without CRC the payload goes from registered memory, one iovec per piece;
// with CRC it is copied first and the CRC taken over the copy: sendmsg reads
// the batch later, and the application (or a peer's Write into a region we
// answer a Read from) may change the source meanwhile, which would make the
// CRC false for the bytes sent.
func (t *txState) frameSegment(m *txMsg) {
	t.holdBatch()
	h := &m.h
	info := h.Opcode.Info()
	// A message longer than one FPDU is cut into equal FPDUs, not into full
	// ones and a small rest (64 KiB over loopback's MSS would otherwise be
	// ~64 KiB plus 73 bytes: twice the per-FPDU work for the same bytes).
	chunk := m.total - m.off
	if maxc := t.e.mulpdu - info.HeaderLen; chunk > maxc {
		if m.seg == 0 {
			maxc = t.maxULPDU() - info.HeaderLen
			n := (m.total + maxc - 1) / maxc
			m.seg = (m.total + n - 1) / n
		}
		chunk = m.seg
	}
	if info.Tagged {
		h.TO = m.baseTO + uint64(m.off)
	} else if info.Payload && h.Opcode != wire.OpTerminate {
		h.MO = uint32(m.off)
	}
	h.Last = m.off+chunk >= m.total
	hb := t.arena[t.apos:]
	hl, _ := wire.EncodeHeader(hb[2:], h)
	ulpdu := hl + chunk
	wire.PutULPDULen(hb, ulpdu)
	t.apos += 2 + hl
	t.fr.Begin()
	t.piece(hb[:2+hl])
	// payload slices
	left := chunk
	for left > 0 {
		d := m.data[m.si][m.so:]
		k := min(len(d), left)
		if t.fr.CRC {
			c := t.copies[t.cpos : t.cpos+k]
			copy(c, d[:k])
			t.cpos += k
			t.piece(c)
		} else {
			t.piece(d[:k])
		}
		left -= k
		m.so += k
		if m.so == len(m.data[m.si]) {
			m.si++
			m.so = 0
		}
	}
	m.off += chunk
	pad := wire.PadLen(ulpdu)
	tr := t.arena[t.apos : t.apos+pad+4+4]
	clear(tr[:pad])
	if pad > 0 {
		t.piece(tr[:pad])
		t.apos += pad
	}
	if t.fr.MarkerDue() {
		t.marker()
	}
	crcb := t.arena[t.apos : t.apos+wire.MPACRCSize]
	t.fr.PutTrailer(crcb)
	t.apos += wire.MPACRCSize
	t.iov = append(t.iov, crcb)
	t.queued += wire.MPACRCSize
	t.e.ctr.AddTx(1, 0)
}

// piece adds octets of the current FPDU (before its CRC field) to the
// batch, with the markers due among them.
func (t *txState) piece(b []byte) {
	for len(b) > 0 {
		if t.fr.MarkerDue() {
			t.marker()
			continue
		}
		k := t.fr.Room(len(b))
		t.fr.Sum(b[:k])
		t.iov = append(t.iov, b[:k])
		t.queued += int64(k)
		b = b[k:]
	}
}

func (t *txState) marker() {
	mb := t.arena[t.apos : t.apos+wire.MarkerLen]
	t.fr.PutMarker(mb)
	t.apos += wire.MarkerLen
	t.iov = append(t.iov, mb)
	t.queued += wire.MarkerLen
}

// frameOne frames a single FPDU given as octets (length, header, pad) and
// returns it with its markers and CRC field, for the RTR sent before RTS.
func (t *txState) frameOne(fpdu []byte) []byte {
	t.holdBatch()
	t.resetBatch()
	t.fr.Begin()
	t.piece(fpdu)
	if t.fr.MarkerDue() {
		t.marker()
	}
	var out []byte
	for _, b := range t.iov {
		out = append(out, b...)
	}
	var c [wire.MPACRCSize]byte
	t.fr.PutTrailer(c[:])
	t.resetBatch()
	return append(out, c[:]...)
}

// write writes the batch without blocking; wouldBlock when the socket is
// full. It uses the socket under a reference (Control), so that a close
// waits for it.
func (t *txState) write() (wouldBlock bool, err error) {
	t.wBlock, t.wErr = false, nil
	t.wgate.Lock()
	var rerr error
	if l := t.e.shm; l != nil {
		t.writeRing(l)
	} else {
		rerr = t.e.rc.Control(t.wfn)
	}
	t.wgate.Unlock()
	wouldBlock, err = t.wBlock, t.wErr
	if err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return false, err
	}
	return wouldBlock, nil
}

// testAfterWrite, when set (tests), runs after each writev (or ring write,
// or direct placement) that moved bytes, before the messages it finished
// are retired.
var testAfterWrite func(e *Endpoint)

// writeFD is write's part under the socket reference.
func (t *txState) writeFD(fd uintptr) {
	for t.wi < len(t.iov) {
		t.iovecs = t.iovecs[:0]
		for i := t.wi; i < len(t.iov) && len(t.iovecs) < batchIOV; i++ {
			b := t.iov[i]
			if i == t.wi {
				b = b[t.wo:]
			}
			if len(b) == 0 {
				continue
			}
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			t.iovecs = append(t.iovecs, v)
		}
		if len(t.iovecs) == 0 {
			t.wi = len(t.iov)
			break
		}
		// sendmsg, not writev: MSG_NOSIGNAL turns a peer that went away
		// into EPIPE instead of a SIGPIPE into the application.
		t.msg.Iov = &t.iovecs[0]
		t.msg.SetIovlen(len(t.iovecs))
		n, _, errno := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&t.msg)), unix.MSG_NOSIGNAL)
		runtime.KeepAlive(t.iov)
		if errno == syscall.EINTR {
			continue
		}
		if errno == syscall.EAGAIN {
			if t.giveUp {
				t.wErr = errno
				return
			}
			t.wBlock = true
			return
		}
		if errno != 0 {
			t.wErr = errno
			return
		}
		t.advance(int(n))
		t.e.ctr.AddTx(0, uint64(n))
		if testAfterWrite != nil {
			testAfterWrite(t.e)
		}
		// Complete what this write finished at once: a later writev
		// of the batch may fail, and the peer may already answer
		// (and close) what it received.
		t.retire()
	}
}

// writeRing is writeFD for a same-host connection: the batch goes into the
// outbound ring, as much as fits. A fault on application memory while
// copying is EFAULT, as sendmsg's.
func (t *txState) writeRing(l *shmLink) {
	t.rn = 0
	if !memSafe(t.rfn) {
		t.wErr = unix.EFAULT
	}
	if n := t.rn; n > 0 {
		l.wroteOut()
		t.e.ctr.AddTx(0, uint64(n))
		if testAfterWrite != nil {
			testAfterWrite(t.e)
		}
		t.retire()
	}
	if t.wErr == nil && t.wi < len(t.iov) {
		if t.giveUp {
			t.wErr = errShmStalled
		} else {
			t.wBlock = true
		}
	}
}

// copyRing copies the batch into the outbound ring up to a full ring.
func (t *txState) copyRing() {
	out := t.e.shm.out
	for t.wi < len(t.iov) {
		b := t.iov[t.wi][t.wo:]
		k := out.Write(b)
		if k == 0 && len(b) > 0 {
			return
		}
		t.advance(k)
		t.rn += k
	}
}

func (t *txState) advance(n int) {
	t.written += int64(n)
	for n > 0 && t.wi < len(t.iov) {
		r := len(t.iov[t.wi]) - t.wo
		if n < r {
			t.wo += n
			return
		}
		n -= r
		t.wi++
		t.wo = 0
	}
	for t.wi < len(t.iov) && len(t.iov[t.wi]) == t.wo {
		t.wi++
		t.wo = 0
	}
}

// retire finishes the messages whose last byte is on the socket.
func (t *txState) retire() {
	k := 0
	for k < len(t.acts) && t.acts[k].end <= t.written {
		t.finish(t.acts[k].m)
		t.acts[k].m = nil
		k++
	}
	if k > 0 {
		n := copy(t.acts, t.acts[k:])
		t.acts = t.acts[:n]
	}
}

func (t *txState) finish(m *txMsg) {
	m.release()
	switch m.kind {
	case kindSQ:
		if m.complete {
			t.e.completeSend(m.idx, verbs.WCSuccess, m.byteLen)
		}
		t.free = append(t.free, m) // on the socket: nothing refers to it any more
	case kindReadResp, kindAtomicResp:
		t.freeIRD(m) // normally done when framed
		t.mu.Lock()
		t.respFree = append(t.respFree, m)
		t.mu.Unlock()
	case kindTerm:
		t.e.ctr.TermSent()
		t.finSent = true
		t.e.closeWrite()
	}
}
