package provider

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

// Endpoint is one iWARP connection: the LLP stream under an RTS QP. It is
// the QP's verbs.Transport.
//
// Threads: the process's event loop (evloop.go) reads a TCP connection's
// socket when no poller does, places data and writes CQEs (a thread polling
// a CQ of the QP takes a turn: Progress); a same-host connection has an RX
// goroutine for its ring instead. One TX goroutine transmits what a burst
// of posts handed over and resumes a transmitter that found the socket
// full once the loop sees room; events go to the callback from a
// short-lived goroutine so that the callback may call anything (including
// Close). Transmission itself runs in the context of whoever holds the TX
// token (an application thread in post_send, the receive path sending
// responses, a poller or the TX goroutine).
type Endpoint struct {
	qp  *verbs.QP
	pd  *verbs.PD
	pol *Policy
	cb  func(Event)
	ctr *Counters // the device's; nil without a device (tests)

	ctrLive atomic.Bool // counted in ctr's live connections

	mu sync.Mutex
	c  *net.TCPConn
	// rc reaches the socket's fd once the connection started: s's on TCP,
	// c's on a same-host connection (whose socket only carries its end).
	rc     rawControl
	s      *sock // the TCP socket in the event loop (evloop.go); nil on a same-host connection
	closed bool  // the attempt or the connection was given up
	local  *net.TCPAddr
	remote *net.TCPAddr

	neg      negotiated
	shm      *shmLink    // the rings of a same-host connection (shm.go); nil on TCP
	mulpdu   int         // largest ULPDU we send; the TX token holder's once started (txState.maxULPDU)
	awaitRTR atomic.Bool // responder: not yet established
	txHeld   atomic.Bool // responder without P2P: established, transmitter held (establishedHeld)
	holdT    atomic.Pointer[time.Timer]
	ordCap   atomic.Int32 // CM-less: the QP's max_rd_atomic when below neg.ord (0: none)

	// dead: no more work is started or completed; the QP is in ERR (or
	// being destroyed). Set under compMu.
	dead   atomic.Bool
	compMu sync.Mutex
	// failStarted: fail has begun (it sets dead once the Terminate is out).
	failStarted atomic.Bool
	// life: transmitters hold it shared; Close(false) takes it exclusively
	// to wait for them.
	life sync.RWMutex

	tx       txState
	txHand   chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
	rxDone   chan struct{}
	rx       atomic.Pointer[rxState] // set once the receive path runs
	txDone   chan struct{}

	evMu      sync.Mutex
	evQ       []Event
	evRunning bool
	evEnded   bool // Disconnected (or a failed attempt) was delivered

	failOnce sync.Once
	hardOnce sync.Once
	discOnce sync.Once
	discT    atomic.Pointer[time.Timer] // Disconnect's bound on the peer's FIN
	lingerT  atomic.Pointer[time.Timer] // streamEnded's, for a CM-less QP
	gone     atomic.Bool                // closed hard: the QP's rings may go away
}

func newEndpoint(qp *verbs.QP, cb func(Event), pol *Policy) *Endpoint {
	if cb == nil {
		cb = func(Event) {}
	}
	e := &Endpoint{qp: qp, pol: pol, cb: cb, txHand: make(chan struct{}, 1), quit: make(chan struct{}),
		rxDone: make(chan struct{}), txDone: make(chan struct{})}
	if qp != nil {
		e.pd = qp.PD
		if qp.Ctx != nil && qp.Ctx.Dev != nil {
			e.ctr = DeviceCounters(qp.Ctx.Dev.Name)
		}
	}
	return e
}

// Addrs returns the local and remote addresses (nil before TCP connected).
func (e *Endpoint) Addrs() Addrs {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Addrs{Local: e.local, Remote: e.remote}
}

// setSocket binds c; false if the endpoint was already closed.
func (e *Endpoint) setSocket(c *net.TCPConn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.c = c
	e.local, _ = c.LocalAddr().(*net.TCPAddr)
	e.remote, _ = c.RemoteAddr().(*net.TCPAddr)
	return true
}

// abandoned reports whether the endpoint was closed while connecting.
func (e *Endpoint) abandoned() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// event queues ev for the callback; events are delivered in order from one
// goroutine at a time. Nothing follows a terminal event.
func (e *Endpoint) event(ev Event) {
	if ev.Type == Disconnected && e.ctrLive.CompareAndSwap(true, false) {
		e.ctr.connDown(e)
	}
	e.evMu.Lock()
	if e.evEnded {
		e.evMu.Unlock()
		return
	}
	if ev.Type != Established {
		e.evEnded = true
	}
	e.evQ = append(e.evQ, ev)
	if e.evRunning {
		e.evMu.Unlock()
		return
	}
	e.evRunning = true
	e.evMu.Unlock()
	go func() {
		for {
			e.evMu.Lock()
			if len(e.evQ) == 0 {
				e.evRunning = false
				e.evMu.Unlock()
				return
			}
			ev := e.evQ[0]
			e.evQ = e.evQ[1:]
			e.evMu.Unlock()
			e.cb(ev)
		}
	}()
}

// finishFailed ends an attempt that never reached RTS.
func (e *Endpoint) finishFailed() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.dead.Store(true)
	if e.shm != nil {
		e.shm.close()
		e.shm = nil
	}
	for _, ch := range []chan struct{}{e.rxDone, e.txDone} {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// rawControl runs a function with a socket's fd held open.
type rawControl interface {
	Control(func(fd uintptr)) error
}

// mulpduFor is the largest ULPDU we send on rc, for the connection's MSS
// now (mulpduForMSS).
func mulpduFor(rc rawControl, markers bool) int {
	mss := 1460
	_ = rc.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG); err == nil && v > 0 {
			mss = v
		}
	})
	return mulpduForMSS(mss, markers)
}

// gsoGoal is about what a TCP socket hands the device in one go: a GSO
// burst of up to 64 KiB, which the kernel (or the NIC) cuts into segments
// in bulk.
const gsoGoal = 64000

// mulpduForMSS sizes FPDUs as siw does: without markers an FPDU fills what
// the socket sends in one go -- as many whole segments as fit in gsoGoal --
// not one segment. Over a path of MTU 1500, one FPDU per segment made a
// 64 KiB message 45 FPDUs, each framed, CRC'd and placed apart, and moved a
// third of what TCP moves; FPDUs may span segments (the receiver reads a
// stream), and the kernel cuts the burst at the same cost either way. With
// markers (a peer that asked for them wants to find FPDUs in any segment) an
// FPDU fits one segment, as RFC 5044's MULPDU. Within what the 16-bit length
// field and a sane minimum allow.
func mulpduForMSS(mss int, markers bool) int {
	emss := mss
	if !markers {
		emss = max(gsoGoal/mss, 1) * mss
	}
	return max(min(wire.MULPDU(emss, markers), 0xfffc), 128)
}

// start applies the negotiated parameters and moves the QP to RTS.
func (e *Endpoint) start(neg negotiated) error {
	e.neg = neg
	c := e.c
	_ = c.SetNoDelay(true)
	var rc rawControl
	var s *sock
	if e.shm == nil {
		var err error
		if s, err = newSock(c); err != nil {
			return err
		}
		rc = s
	} else {
		r, err := c.SyscallConn()
		if err != nil {
			return err
		}
		rc = r
	}
	// Under mu, as Close looks: a hard Close that came first has returned
	// without waiting for goroutines this would start.
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		if s != nil {
			s.close()
		}
		return net.ErrClosed
	}
	e.rc, e.s = rc, s
	e.mu.Unlock()
	e.mulpdu = mulpduFor(rc, neg.mkTx)
	e.tx.init(e)
	if !e.awaitRTR.Load() {
		e.tx.ready = true
	}
	if neg.initiator && neg.rtr != 0 {
		if err := e.sendRTR(); err != nil {
			return err
		}
	}
	// Counted before anything can report Disconnected (which uncounts it).
	if e.ctr != nil {
		e.ctrLive.Store(true)
		e.ctr.connUp(e)
	}
	go e.txLoop()
	if err := e.qp.Attach(e, neg.ird, neg.ord); err != nil {
		e.stopTxLoop()
		<-e.txDone
		if e.ctrLive.CompareAndSwap(true, false) {
			e.ctr.connFailed(e)
		}
		return err
	}
	path := "tcp"
	if e.shm != nil {
		path = "shm"
	}
	Infof("qp %d: %v -> %v over %s", e.qp.Num, e.local, e.remote, path)
	Debugf("qp %d: RTS %v -> %v (rev %d, crc %v, markers tx %v rx %v, ird %d ord %d)",
		e.qp.Num, e.local, e.remote, neg.rev, neg.crc, neg.mkTx, neg.mkRx, neg.ird, neg.ord)
	return nil
}

// sendRTR writes the initiator's RFC 6581 ready-to-receive FPDU: a
// zero-length Write to STag 1 at TO 0 (what siw sends), a zero-length Read
// Request, or a zero-length Send.
func (e *Endpoint) sendRTR() error {
	var h wire.Header
	switch e.neg.rtr {
	case rtrWrite:
		h = wire.Header{Opcode: wire.OpWrite, Last: true, STag: 1}
	case rtrRead:
		h = wire.Header{Opcode: wire.OpReadRequest, Last: true, MSN: e.tx.msn[wire.QNReadRequest], SinkSTag: 1, SrcSTag: 1}
		e.tx.msn[wire.QNReadRequest]++
		e.tx.rtrRead = true
	default:
		h = wire.Header{Opcode: wire.OpSend, Last: true, MSN: e.tx.msn[wire.QNSend]}
		e.tx.msn[wire.QNSend]++
	}
	var b [2 + wire.DDPUntaggedHeaderLen + wire.ReadRequestLen + 8 + 16]byte
	hl, _ := wire.EncodeHeader(b[2:], &h)
	wire.PutULPDULen(b[:], hl)
	n := wire.MPALenSize + hl + wire.PadLen(hl)
	frame := e.tx.frameOne(b[:n])
	var err error
	if l := e.shm; l != nil {
		l.out.Write(frame) // the ring is empty: it fits
		l.wroteOut()
	} else {
		var d time.Duration
		if e.pol != nil {
			d = e.pol.Timeout
		}
		err = e.writeFrame(frame, d)
	}
	if err == nil {
		e.ctr.AddTx(1, uint64(len(frame)))
	}
	return err
}

func (e *Endpoint) stopTxLoop() { e.quitOnce.Do(func() { close(e.quit) }) }

// writeFrame writes a frame of the connection's set-up (RTR, the MPA
// reply) once the connection started, waiting at most d for room.
func (e *Endpoint) writeFrame(frame []byte, d time.Duration) error {
	if d <= 0 {
		d = DefaultPolicy().Timeout
	}
	if e.s != nil {
		return e.s.writeAll(frame, time.Now().Add(d))
	}
	_ = e.c.SetWriteDeadline(time.Now().Add(d))
	defer func() { _ = e.c.SetWriteDeadline(time.Time{}) }()
	return writeFrame(e.c, frame)
}

// closeSock closes the socket start took from the netpoller when the
// connection does not start after all: nothing serves it.
func (e *Endpoint) closeSock() {
	if e.s != nil {
		e.s.close()
	}
}

// closeWrite ends our direction of the stream (FIN).
func (e *Endpoint) closeWrite() {
	if e.s != nil {
		e.s.shutdown(unix.SHUT_WR)
	} else if c := e.c; c != nil {
		_ = c.CloseWrite()
	}
}

// abort ends the stream in both directions, which wakes whatever waits on
// it (what closing c does to the netpoller's waiters).
func abort(c *net.TCPConn, s *sock) {
	if s != nil {
		s.shutdown(unix.SHUT_RDWR)
	} else if c != nil {
		c.Close()
	}
}

// established is the responder's moment: the initiator's first FPDU arrived.
func (e *Endpoint) established() {
	if !e.awaitRTR.CompareAndSwap(true, false) {
		return
	}
	e.event(Event{Type: Established, Params: ConnParams{PrivateData: nil, IRD: e.neg.ird, ORD: e.neg.ord}})
	e.tx.setReady()
}

// establishedHeld is the responder's moment without P2P, its MPA reply
// being out: Established now, so that a server that speaks first can post,
// but nothing on the wire before the initiator's first FPDU or the end of
// Policy.ResponderHold (why: DefaultResponderHold).
func (e *Endpoint) establishedHeld() {
	if !e.awaitRTR.CompareAndSwap(true, false) {
		return
	}
	hold := e.pol.ResponderHold
	if hold > 0 {
		e.txHeld.Store(true)
		e.holdT.Store(time.AfterFunc(hold, e.releaseTx))
	}
	e.event(Event{Type: Established, Params: ConnParams{PrivateData: nil, IRD: e.neg.ird, ORD: e.neg.ord}})
	if hold <= 0 {
		e.tx.setReady()
	}
}

// releaseTx ends establishedHeld's hold (first FPDU or timer).
func (e *Endpoint) releaseTx() {
	if !e.txHeld.CompareAndSwap(true, false) {
		return
	}
	if t := e.holdT.Load(); t != nil {
		t.Stop()
	}
	e.tx.setReady()
}

// completeSend finishes an SQ entry unless the QP already went down (its
// entries were flushed then).
func (e *Endpoint) completeSend(idx uint32, status uint32, n uint32) {
	e.compMu.Lock()
	if !e.dead.Load() {
		e.qp.CompleteSend(idx, status, n)
	}
	e.compMu.Unlock()
}

func (e *Endpoint) completeRecv(rqe *verbs.RQE, c verbs.CQE, solicited bool) {
	e.compMu.Lock()
	if e.dead.Load() {
		c = verbs.CQE{Status: verbs.WCWRFlushErr, Opcode: verbs.WCOpRecv}
	}
	e.qp.CompleteRecv(rqe, c, solicited)
	e.compMu.Unlock()
}

// afterOwnWrites returns once a write of the transmitter that is in
// progress has completed what it finished. The receiver calls it before a
// completion caused by the peer's data (a message, a Read or Atomic
// Response): the peer sent that data only after it received ours, so our
// work request's completion must be on the CQ first, as on hardware. Without
// it the gap between a sendmsg (or ring write, or direct placement) and the
// completions it retires let the answer's completion come first.
func (e *Endpoint) afterOwnWrites() {
	e.tx.wgate.Lock()
	e.tx.wgate.Unlock()
}

// termInfo is a Terminate to send: its control word and the offending header.
type termInfo struct {
	ctrl   wire.TermControl
	segLen uint16
	hdr    []byte // from the DDP control byte on
}

// fail takes the connection down after an error: the QP goes to ERR and is
// flushed, term (if any) is sent before the stream is closed, asyncEv (if
// >= 0) is posted, and the callback gets Disconnected. Idempotent.
func (e *Endpoint) fail(term *termInfo, err error) { e.failing(term, err, -1, false, nil) }

func (e *Endpoint) failEv(term *termInfo, err error, asyncEv int) {
	e.failing(term, err, asyncEv, false, nil)
}

// failTerm is fail for a protocol error found by the receiver: the
// Terminate goes to the socket first, then errComp posts the completions
// the error itself caused, then the QP goes to ERR. A program that exits
// on its first error completion closes the socket with it; the Terminate
// must be out by then.
func (e *Endpoint) failTerm(term *termInfo, err error, asyncEv int, errComp func()) {
	e.failing(term, err, asyncEv, false, errComp)
}

// failTx is fail from a transmitter (the TX token holder, under the life
// lock): it does not wake the transmitter, which goes on by itself and
// frames the Terminate (fillDead); waking would take the life lock again.
func (e *Endpoint) failTx(term *termInfo, err error, asyncEv int) {
	e.failing(term, err, asyncEv, true, nil)
}

// testFailing, when set (tests), runs as a connection starts failing, before
// it waits for a write in progress; atomic, as other endpoints may be failing
// while a test sets it.
var testFailing atomic.Pointer[func(e *Endpoint)]

func (e *Endpoint) failing(term *termInfo, err error, asyncEv int, fromTx bool, errComp func()) {
	e.failOnce.Do(func() {
		// From here a transmitter's write error is not a new failure: this
		// one ends the connection (and a transmitter woken below must not
		// enter the Once again).
		e.failStarted.Store(true)
		if f := testFailing.Load(); f != nil {
			(*f)(e)
		}
		e.mu.Lock()
		e.closed = true
		c, s := e.c, e.s
		started := e.rc != nil // e.shm is settled
		e.mu.Unlock()
		// Bound everything that might still wait on the peer.
		if s != nil {
			e.boundSock(s)
		} else if c != nil {
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		}
		// Queued before dead is set: a transmitter that sees dead has seen
		// the Terminate too, and does not end the stream without it.
		e.tx.queueTerminate(term)
		if term != nil && !fromTx {
			// Onto the socket now if no transmitter is busy (one that is
			// sends it next); nothing else is framed after it.
			e.tx.wake()
		}
		if errComp != nil {
			errComp()
		}
		// After a write in progress retired what it finished (see wgate).
		if l := e.shm; started && l != nil {
			l.closeTarget()
		}
		e.tx.wgate.Lock()
		e.compMu.Lock()
		e.dead.Store(true)
		changed := e.qp.SetError()
		e.compMu.Unlock()
		e.tx.wgate.Unlock()
		if changed && asyncEv >= 0 {
			e.qp.Ctx.PostAsync(uint32(asyncEv), e.qp.Cookie)
		}
		if !fromTx {
			e.tx.wake()
		}
		e.event(Event{Type: Disconnected, Err: err})
	})
}

// boundSock bounds what waits on a failed connection's peer (a write and
// a read deadline on a net.Conn): a transmitter waiting for room gives up
// after a second; the receive path, which reads on meanwhile for the
// peer's FIN, ends the stream after two.
func (e *Endpoint) boundSock(s *sock) {
	time.AfterFunc(time.Second, func() {
		s.wexpired.Store(true)
		e.wakeTxGoroutine()
	})
	time.AfterFunc(2*time.Second, func() {
		if rx := e.rx.Load(); rx != nil {
			rx.endStream()
		}
	})
}

// failed reports that the connection is down or going down: a transmitter's
// error then needs no fail of its own.
func (e *Endpoint) failed() bool { return e.dead.Load() || e.failStarted.Load() }

// streamEnded is the end of the stream from the peer's side (FIN, reset) or
// a read error. Normally the connection fails at once. A CM-less QP lingers
// first: an InfiniBand program's peer that finished and destroyed its QP
// (or exited) is invisible on IB until a send goes unanswered, so such
// programs poll on after their peer left (ibv_rc_pingpong reaps its last
// send completion with a batch that would hold the flushed receives).
// Until the linger time passes the QP stays up with its receives posted; a
// send fails it sooner, when writing to the closed stream fails.
func (e *Endpoint) streamEnded() {
	if e.pol == nil || !e.pol.cmless || e.pol.QPLinger <= 0 {
		e.fail(nil, nil)
		return
	}
	e.lingerT.Store(time.AfterFunc(e.pol.QPLinger, func() {
		if !e.gone.Load() {
			e.fail(nil, nil)
		}
	}))
}

// Disconnect closes the stream gracefully: queued work goes out first,
// then FIN. Both sides then see Disconnected, their QPs in ERR and flushed.
// It is idempotent and does not fail when the peer already closed.
func (e *Endpoint) Disconnect() {
	if e.dead.Load() {
		// Closed hard already (the QP was destroyed): its rings may be gone.
		return
	}
	e.mu.Lock()
	c, s := e.c, e.s
	if c == nil || e.rc == nil {
		// Still connecting: abandon the attempt.
		e.closed = true
		e.mu.Unlock()
		if c != nil {
			c.Close()
		}
		return
	}
	e.mu.Unlock()
	e.discOnce.Do(func() {
		e.tx.setClosing()
		// A peer that never closes its side is not waited for forever.
		e.discT.Store(time.AfterFunc(5*time.Second, func() {
			if !e.gone.Load() {
				e.fail(nil, nil)
			}
			abort(c, s)
		}))
	})
}

// Close is verbs.Transport.Close: graceful as Disconnect, or at once. A
// hard Close returns when no goroutine of the endpoint touches the QP's
// rings any more; event callbacks run on their own goroutine, so they may
// call it too.
func (e *Endpoint) Close(graceful bool) {
	if graceful {
		e.Disconnect()
		return
	}
	e.gone.Store(true)
	for _, t := range []*time.Timer{e.discT.Load(), e.lingerT.Load()} {
		if t != nil {
			t.Stop()
		}
	}
	e.compMu.Lock()
	e.dead.Store(true)
	e.compMu.Unlock()
	e.mu.Lock()
	e.closed = true
	c, s := e.c, e.s
	started := e.rc != nil
	e.mu.Unlock()
	abort(c, s)
	if !started {
		return
	}
	if rx := e.rx.Load(); rx != nil && rx.endPark() {
		// A receive path waiting for a buffer ends now; on a goroutine,
		// as the caller may hold verbs locks.
		go rx.back()
	} else if rx != nil {
		rx.reclaim() // the loop reads the end of the aborted stream
	}
	if l := e.shm; l != nil {
		l.closeTarget()
	}
	e.hardOnce.Do(e.quiesce)
}

// quiesce waits until no goroutine or thread of the endpoint runs, then
// releases what the transmitter held.
func (e *Endpoint) quiesce() {
	e.life.Lock() // wait for transmitters in other threads
	e.life.Unlock()
	e.stopTxLoop()
	<-e.txDone
	<-e.rxDone
	e.tx.dropAll()
	e.tx.releaseToken()
	if e.shm != nil {
		e.shm.close()
	}
	e.event(Event{Type: Disconnected})
}

// MPARevision is the MPA revision the exchange settled on (1 or 2); valid
// once Established was delivered.
func (e *Endpoint) MPARevision() int { return e.neg.rev }
