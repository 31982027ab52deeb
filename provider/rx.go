package provider

import (
	"encoding/binary"
	"errors"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

// Receive side: a resumable state machine (header → payload → trailer) that
// reads the socket without blocking and places payload straight from the
// socket into registered memory; headers go through a small buffer that also
// catches what follows a payload read (readv), so a stream of FPDUs costs
// about one read(2) per FPDU. Completions are written after the FPDU's CRC
// was checked.
//
// Only the holder of the RX token (rxState.tok) reads the socket: the event
// loop, which waits for readability in its epoll set (evloop.go), or a thread
// polling a CQ of the QP (Endpoint.Progress), which never waits. Whoever
// holds the token reads until the socket is empty, so no edge of readability
// is lost between them: the event loop until EAGAIN, a poller until a read
// comes back short (see rxReader.pollerRead). All of the state below, the
// carry-over buffer included, belongs to the token.

// rxReader is the inbound MPA stream: buffered header reads, direct payload
// reads, and the stream's codec (wire.Stream) removing markers and summing
// the CRC.
type rxReader struct {
	fd     int      // valid while the token holder has a reference on the socket
	shm    *shmLink // a same-host connection's rings: read the inbound one instead
	buf    []byte
	r, w   int
	st     wire.Stream
	fstart uint64  // stream offset where the current FPDU began
	mkb    [4]byte // a marker being read
	mkn    int
	iov    [2]unix.Iovec
	nread  uint64 // bytes read from the socket, ever
	reads  uint64 // read(2) and readv(2) calls, ever: what a poll costs
	// finSeen: the shm reader saw the TCP stream end; finLeft bytes of
	// the ring were still to read then.
	finSeen bool
	finLeft int
	// owing: a Read or Atomic Response was queued and not yet handed to
	// the transmitter; pay does that, before the next read from the socket
	// and when the receive machine stops, so that the responses to all the
	// requests of one read leave together (one wake, one sendmsg).
	owing bool
	pay   func()
	// pollerRead: a poller holds the token (Endpoint.Progress). A read of
	// the socket that came back short took all it held then, and the next
	// one would only say EAGAIN: a poller stops there (drained) instead of
	// paying that syscall before its completion is seen. What arrives
	// later is an edge of its own for the event loop, or the pollers' next
	// visit. The event loop reads on to EAGAIN.
	pollerRead bool
	drained    bool
}

// settle hands queued responses to the transmitter.
func (rd *rxReader) settle() {
	if rd.owing {
		rd.owing = false
		rd.pay()
	}
}

const rxBufSize = 4096

var (
	errAgain = errors.New("goiwarp: socket empty")
	errDead  = errors.New("goiwarp: endpoint down")
	// errShmCorrupt: the peer wrote impossible positions into the header
	// of the ring we read (shmring.Ring.Corrupt); the stream is lost.
	errShmCorrupt = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrLocalCatastrophic,
		Code: wire.RDMAPCodeLocalCatastrophic, Reason: "the peer corrupted the shared-memory ring"}
	// errRNRWait: a Send or Immediate Data found no receive buffer; the
	// receive path stops reading and waits for one (bounded by the RNR
	// timeout).
	errRNRWait = errors.New("goiwarp: waiting for a receive buffer")
)

// sys reads from the socket without blocking: n > 0, or an error
// (errAgain when it is empty, io.EOF at the end).
func (rd *rxReader) sys(p []byte) (int, error) {
	rd.settle()
	if l := rd.shm; l != nil {
		if l.tcpDone.Load() {
			// The peer closed: all it wrote before is in the ring now.
			// A peer that goes on writing (or its ring does) is not read
			// beyond that, so the stream ends (loopShm).
			if !rd.finSeen {
				rd.finSeen, rd.finLeft = true, l.in.Buffered()
			}
			p = p[:min(len(p), rd.finLeft)]
		}
		n := l.in.Read(p)
		if n == 0 {
			// Asked after Read, whose one look at the tail decided: a
			// scribble between a look here and Read's would have Read
			// take stale bytes for FPDUs.
			if l.in.Corrupt() {
				return 0, errShmCorrupt
			}
			return 0, errAgain
		}
		if rd.finSeen {
			rd.finLeft -= n
		}
		l.readIn()
		rd.nread += uint64(n)
		return n, nil
	}
	if rd.drained {
		return 0, errAgain
	}
	for {
		rd.reads++
		n, err := rd.read(p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, errAgain
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		rd.nread += uint64(n)
		rd.drained = rd.pollerRead && n < len(p)
		return n, nil
	}
}

// read is read(2) of the non-blocking socket. One of rx.ctl's (a poller's,
// or the spinner's) is a raw system call: it never blocks, reads at most
// rxBufSize, and comes from a thread spinning on empty reads, where the
// runtime's entry and exit of a system call (entersyscall, exitsyscall)
// took a tenth of ib_send_lat's polling thread.
func (rd *rxReader) read(p []byte) (int, error) {
	if !rd.pollerRead {
		return unix.Read(rd.fd, p)
	}
	n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(rd.fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// A read into a large payload carries over only the FPDU's trailer and the
// next header or two: the rest of a large next FPDU then goes straight to
// its target, not through the carry-over buffer and a copy (4 KiB of every
// 64 KiB FPDU of a stream of large Writes).
const (
	bigRead  = 16 << 10
	bigCarry = 256
)

// sysv reads into dst and then into the empty carry-over buffer, one readv.
func (rd *rxReader) sysv(dst []byte) (int, error) {
	if rd.shm != nil {
		return rd.sys(dst) // straight from the ring into dst: no carry-over needed
	}
	rd.settle()
	if rd.drained {
		return 0, errAgain
	}
	rd.iov[0] = unix.Iovec{Base: &dst[0]}
	rd.iov[0].SetLen(len(dst))
	carry := len(rd.buf)
	if len(dst) >= bigRead {
		carry = bigCarry
	}
	rd.iov[1] = unix.Iovec{Base: &rd.buf[0]}
	rd.iov[1].SetLen(carry)
	for {
		rd.reads++
		n, _, errno := unix.Syscall(unix.SYS_READV, uintptr(rd.fd), uintptr(unsafe.Pointer(&rd.iov[0])), 2)
		switch {
		case errno == unix.EINTR:
			continue
		case errno == unix.EAGAIN:
			return 0, errAgain
		case errno != 0:
			return 0, errno
		case n == 0:
			return 0, io.EOF
		}
		rd.nread += uint64(n)
		rd.drained = rd.pollerRead && int(n) < len(dst)+carry
		if int(n) > len(dst) {
			rd.r, rd.w = 0, int(n)-len(dst)
			return len(dst), nil
		}
		return int(n), nil
	}
}

// raw consumes up to len(dst) stream bytes into dst: at least one, or an error.
func (rd *rxReader) raw(dst []byte) (int, error) {
	if rd.r < rd.w {
		k := copy(dst, rd.buf[rd.r:rd.w])
		rd.r += k
		return k, nil
	}
	if len(dst) >= 512 {
		return rd.sysv(dst)
	}
	n, err := rd.sys(rd.buf)
	if err != nil {
		return 0, err
	}
	k := copy(dst, rd.buf[:n])
	rd.r, rd.w = k, n
	return k, nil
}

// rawFill fills dst[*got:] with stream bytes (no markers, no CRC).
func (rd *rxReader) rawFill(dst []byte, got *int) error {
	for *got < len(dst) {
		n, err := rd.raw(dst[*got:])
		*got += n
		if err != nil {
			return err
		}
	}
	return nil
}

// skipMarker consumes the marker due at the current position, if any.
func (rd *rxReader) skipMarker() error {
	for rd.st.MarkerDue() {
		n, err := rd.raw(rd.mkb[rd.mkn:])
		rd.mkn += n
		if err != nil {
			return err
		}
		if rd.mkn < wire.MarkerLen {
			continue
		}
		rd.mkn = 0
		if err := rd.st.CheckMarker(rd.mkb[:]); err != nil {
			return err
		}
	}
	return nil
}

// fill reads FPDU bytes (not the CRC field) into dst[*got:], removing
// markers and summing the CRC; it returns nil once dst is full.
func (rd *rxReader) fill(dst []byte, got *int) error {
	for *got < len(dst) {
		if err := rd.skipMarker(); err != nil {
			return err
		}
		k := rd.st.Room(len(dst) - *got)
		n, err := rd.raw(dst[*got : *got+k])
		if n > 0 {
			rd.st.Sum(dst[*got : *got+n])
			*got += n
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rxMsg is the untagged message being received into an RQE.
type rxMsg struct {
	active bool
	rqe    verbs.RQE
	spans  [verbs.MaxSGE]verbs.Span
	pinned [verbs.MaxSGE]bool
	cap    int
	placed int
	msn    uint32
}

func (m *rxMsg) release() {
	for i := range m.spans {
		if m.pinned[i] {
			m.spans[i].Release()
			m.pinned[i] = false
		}
	}
	m.active = false
}

type rxAct uint8

const (
	actNone rxAct = iota
	actRecvDone
	actReadDone
	actAtomicDone
	actTerminate
)

// Phases of the receive machine within an FPDU.
const (
	phHdr uint8 = iota // length and header into hdr
	phPay              // payload into segs
	phPad              // pad (and a marker before the CRC)
	phCRC              // the CRC field
)

// What the end of the payload does.
const (
	postNone uint8 = iota
	postWrite
	postReadResp
	postSend
	postTerm
)

type rxState struct {
	e   *Endpoint
	tok sync.Mutex // the RX token

	// The RX goroutine's, at keepOffPoster's last look: the send queue's
	// index, and arms; and how many looks in a row were a ping-pong's.
	posterPosts, posterArms uint32
	pingPongs               uint32        // such looks in a row (pinAfter)
	arms                    atomic.Uint32 // CQs of the QP armed (Endpoint.Armed)
	napping                 atomic.Bool   // loopShm naps (napShm)

	// The socket lent to threads waiting on a completion channel
	// (waiter.go): lent says the event loop does not hear its arrivals;
	// waits counts the waits begun on it, lendSeen at the lendT's last
	// look (both under lendMu).
	lendMu   sync.Mutex
	lent     atomic.Bool
	waits    atomic.Uint64
	lendSeen uint64
	lendT    *time.Timer

	// Everything below belongs to the token holder.
	ended bool // the stream is over (error, EOF, or the endpoint went down)
	// errComp posts the error completion of the work request whose FPDU
	// failed; it waits until the Terminate is out (see failTerm).
	errComp func()
	rd      rxReader
	hdr     [2 + wire.DDPUntaggedHeaderLen + wire.AtomicRequestLen]byte
	h       wire.Header
	ulen    int
	hl      int
	msn     [5]uint32 // expected MSN per untagged queue
	cur     rxMsg

	phase uint8
	begun bool // the current FPDU's stream state is set up (wire.Stream.Begin)
	hgot  int
	segs  [verbs.MaxSGE][]byte
	nseg  int
	segi  int
	sgot  int
	post  uint8
	n     int        // payload length of the current FPDU
	wspan verbs.Span // the Write's target, held during its payload
	wheld bool
	ro    *ordEntry // the Read Response's request
	tr    [8]byte
	tgot  int

	act        rxAct
	recvCQE    verbs.CQE
	solicited  bool
	writeBytes uint32 // placed by Writes since the last Immediate Data
	atomicMSN  uint32
	termBody   [64]byte
	termLen    int
	termCtrl   wire.TermControl

	ctl     func(fd uintptr) // bound once: the poller's body under Control
	loopCtl func(fd uintptr) // bound once: the event loop's (onReadable)
	waitCtl func(fd uintptr) // bound once: a waiting thread's (waitRead)
	loud    func(fd uintptr) // bound once: setMuted(fd, false)
	mute    func(fd uintptr) // bound once: setMuted(fd, true)
	prog    bool             // result of ctl, loopCtl and waitCtl
	// completed: the last pump completed work (a receive, a Read or an
	// Atomic), which a poller waits for on the CQ.
	completed bool
	// watch is the period of the muted socket's watch (armLocked), set by
	// the poller that last made progress: see leaseAfterCompletion;
	// watchT runs it (onWatch).
	watch  atomic.Int64
	watchT *time.Timer

	// away: a goroutine of the connection reads it for now (spinning, or
	// closing the stream), or it waits for a receive buffer (parked), and
	// the event loop leaves it alone; finishing: the stream's end is being
	// closed.
	away      atomic.Bool
	finishing atomic.Bool
	// parked: a TCP connection's receive path waits for a receive buffer
	// (parkForRecv); the application's post_recv (RecvPosted) or rnrT, at
	// the RNR timeout, reads on.
	parked atomic.Bool
	rnrT   *time.Timer

	// Receiver not ready: the current FPDU's header is parsed and it needs
	// a receive buffer that is not posted yet. rnrSince is when the wait
	// began; rnrWait says the last pump stopped for it.
	rnrTimeout time.Duration
	rnrSince   time.Time
	rnrWait    bool
	// kicked: on a same-host connection, a poller woke the RX goroutine
	// for work only it does: wait for a receive buffer (and the timeout)
	// even if nobody polls any more, or close the stream that ended.
	kicked atomic.Bool

	// idlePolls counts pollers' visits in a row that found nothing; from
	// pollIdleLimit on, pollers read only once in pollQuietProbe visits
	// (a syscall per empty poll), unless a Read or Atomic Response is
	// due, until they or the event loop read something.
	idlePolls atomic.Uint32

	// muted: pollers are reading the socket, and its SO_RCVLOWAT is
	// raised (mutedMark), so that what they read as it arrives wakes no
	// thread. Otherwise every segment wakes the loop's thread out of
	// epoll_wait, and on a machine whose cores the polling threads keep
	// busy that thread takes one of them from a poller (bench/README.md:
	// scheduler trace of ib_send_lat). A backlog past the mark still
	// wakes the loop: a poller preempted by other work leaves a bulk
	// stream to it rather than to its own next time slice (across a veth
	// pair under load, taking the socket out of the loop's interest
	// instead cost single-stream ib_write_bw 10-25 %). A spinning poller
	// that finds data mutes it (one whose last visit ended within
	// muteVisitGap); pollIdleLimit empty reads in a row, or a watch
	// period in which no poller came (the application went to sleep on a
	// completion channel), put the mark back to 1, which reports what is
	// queued. Changed under the token (setMuted); atomic for looks
	// without it.
	muted atomic.Bool
	// polls counts pollers' visits, whether they read or found the token
	// taken; watchPolls is its value when the watch began.
	polls      atomic.Uint64
	watchPolls uint64
	spinWindow time.Duration // Policy.RxSpin (rxspin.go)
	lease      time.Duration // Policy.PollLease
	// lastVisit is when a poller's last read of the socket ended (since
	// visitEpoch); spinning, that the current poller's read began within
	// muteVisitGap of it: the token holder's.
	lastVisit time.Duration
	spinning  bool
}

// muteVisitGap: a poller mutes the socket only if the previous visit ended
// this recently before its own began, so that it visibly spins on the CQ.
// A program that polls once after posting and then watches its memory
// (qperf's rc_rdma_write_poll_lat) comes back only after the answer is
// placed; a socket it muted left every answer to the watch: 326-553 us a
// round trip over TCP on two cores, against 19-35 unmuted. A spinning
// poller's visits are a system call apart. Atomic: tests change it while
// event loops of earlier tests run.
var muteVisitGap atomic.Int64

func init() { muteVisitGap.Store(int64(10 * time.Microsecond)) }

// pollerSpins reports whether the last poller's visit ended within
// muteVisitGap (token held).
func (rx *rxState) pollerSpins() bool {
	return time.Since(visitEpoch)-rx.lastVisit < time.Duration(muteVisitGap.Load())
}

var visitEpoch = time.Now()

// The poller's lease (Policy.PollLease, GOIWARP_POLL_LEASE) is how long the
// event loop leaves a muted socket (the RX goroutine a same-host ring) to the
// application's pollers before it looks whether they still come: the
// longest a message waits when they stop. leaseAfterCompletion is how many
// leases a poller's read that completed work buys: that poller waits on the
// CQ for the next completion and comes back, and each look wakes a
// thread, which takes a core from a poller on a machine the
// polling threads keep busy (ib_send_lat -R: 99 % 12-13 us against 19-24 at
// one lease of 1 ms). A poller that only placed Writes came for something
// else -- ib_write_lat's target, polling for its send completion, reads the
// peer's next Write now and then, then waits on memory.
const leaseAfterCompletion = 8

// pollIdleLimit is how many empty reads in a row a QP's pollers make before
// they leave the socket to the event loop: a millisecond or two of spinning,
// longer than a round trip on loopback and than most of the time a busy
// sender's thread waits for a CPU, so a ping-pong or a stream keeps reading
// on the polling thread, and a quiet connection costs no syscalls. The
// hand-over is dear where the polling thread holds the CPU the RX
// goroutine's thread would need: with the server in a session of its own
// (its own scheduling group, sched_autogroup), ib_send_bw 64 KiB went
// quiet about 40 times a second at 256 reads and ran at 0.7-3.0 GB/s
// against 3.5-4.3 at 4096.
//
// pollQuietProbe: a quiet connection's pollers still read once every so
// many visits (tens of microseconds of polling), which bounds what a
// message waits when the event loop cannot get a CPU, at a syscall per
// thousands of empty polls.
const (
	pollIdleLimit  = 4096
	pollQuietProbe = 1024
)

func (e *Endpoint) startRX() {
	rx := &rxState{e: e, msn: [5]uint32{1, 1, 1, 1, 1}, atomicMSN: 1, rnrTimeout: DefaultRNRTimeout}
	rx.lease = DefaultPollLease
	if e.pol != nil {
		rx.rnrTimeout, rx.spinWindow = e.pol.RNRTimeout, e.pol.RxSpin
		if e.pol.PollLease > 0 { // a Policy built without DefaultPolicy
			rx.lease = e.pol.PollLease
		}
	}
	rx.watch.Store(int64(rx.lease))
	rx.rd = rxReader{buf: make([]byte, rxBufSize), st: wire.NewStream(e.neg.crc, e.neg.mkRx, 0), pay: e.tx.wake, shm: e.shm}
	rx.ctl = func(fd uintptr) {
		rx.rd.pollerRead = true
		rx.prog = rx.pump(fd)
		rx.rd.pollerRead, rx.rd.drained = false, false
		if !rx.prog || rx.ended {
			return
		}
		if rx.completed {
			rx.watch.Store(int64(leaseAfterCompletion * rx.lease))
		} else {
			rx.watch.Store(int64(rx.lease))
		}
		if !rx.muted.Load() && !e.qp.EventsArmed() && rx.spinning {
			// (An application armed for events is about to stop polling;
			// one whose previous visit was long ago polls now and then.)
			rx.setMuted(fd, true)
		}
	}
	rx.loopCtl = func(fd uintptr) {
		rx.prog = rx.pump(fd)
		if rx.muted.Load() {
			raiseMark(fd)
		}
	}
	rx.waitCtl = func(fd uintptr) {
		// Its poll(2) reports what comes after a short read: stop there,
		// as a poller does.
		rx.rd.pollerRead = true
		rx.prog = rx.pump(fd)
		rx.rd.pollerRead, rx.rd.drained = false, false
	}
	rx.loud = func(fd uintptr) { rx.setMuted(fd, false) }
	rx.mute = func(fd uintptr) { rx.setMuted(fd, true) }
	if e.shm == nil {
		// Before pollers can see rx (they may mute the socket at once).
		rx.watchT = time.AfterFunc(time.Hour, rx.onWatch)
		rx.watchT.Stop()
		rx.rnrT = time.AfterFunc(time.Hour, func() {
			if rx.endPark() {
				rx.back() // the pump Terminates: the time is up
			}
		})
		rx.rnrT.Stop()
		rx.lendT = time.AfterFunc(time.Hour, rx.onLendWatch)
		rx.lendT.Stop()
	}
	e.rx.Store(rx)
	if e.shm != nil {
		if e.pd != nil {
			e.shm.openTarget(e.pd.ID, e.qp.Allows(verbs.AccessRemoteWrite))
		}
		go e.shm.watch(e.c)
		go rx.loopShm()
		return
	}
	if err := e.s.serve(rx.onLoopReadable, e.tx.onWritable); err != nil {
		// Closed already (a hard Close): nothing will arrive.
		rx.endStream()
	}
}

// pump runs the receive machine until the socket is empty or the stream
// ends; the caller holds the token and a reference on fd. It reports
// whether anything was consumed or ended.
func (rx *rxState) pump(fd uintptr) bool {
	rx.completed = false
	if rx.ended {
		return false
	}
	rx.rd.fd = int(fd)
	pos, nread := rx.rd.st.Pos(), rx.rd.nread
	ti, err := rx.guardedStep()
	rx.rd.settle()
	rx.rd.fd = -1
	rx.rnrWait = err == errRNRWait
	if err == errAgain && rx.rd.shm != nil {
		// All that was read is processed, but for what waits in the
		// carry-over buffer (a header split across writes).
		rx.rd.shm.placed(rx.rd.nread - uint64(rx.rd.w-rx.rd.r))
	}
	if err == errAgain || err == errRNRWait {
		return rx.rd.st.Pos() != pos || rx.rd.nread != nread
	}
	rx.ended = true
	e := rx.e
	if ti != nil {
		e.failTerm(ti, err, asyncFor(ti.ctrl), rx.errCompletions)
		return true
	}
	rx.errCompletions()
	switch {
	case err == errDead:
	case rx.act == actTerminate:
		e.failEv(nil, err, rx.termAsync())
	default:
		// EOF, reset, or a local error: the stream is over.
		e.streamEnded()
	}
	return true
}

// Progress is verbs.Transport.Progress: a poller's turn at the socket.
// Whatever arrives is placed on the polling thread (progress belongs to
// whoever is spinning: a server that polls while its peer streams Writes
// would otherwise leave every byte to the event loop, whose thread needs a
// core the spinning threads hold). A connection on which the pollers' reads
// found nothing pollIdleLimit times in a row is left to the event loop until
// it reads again, so a quiet connection costs no syscall per poll -- except
// while a Read or Atomic Response is due.
func (e *Endpoint) Progress() bool {
	did := false
	if e.tx.blocked.Load() {
		e.life.RLock()
		if !e.gone.Load() {
			did = e.tx.progress()
		}
		e.life.RUnlock()
	}
	rx := e.rx.Load()
	if rx == nil || e.dead.Load() {
		return did
	}
	if e.shm != nil {
		return rx.readShm(true) || did
	}
	rx.polls.Add(1)
	if e.tx.ordOut.Load() == 0 && rx.idlePolls.Load() >= pollIdleLimit && rx.idlePolls.Add(1)%pollQuietProbe != 0 {
		return did
	}
	// No life lock here (fail, called from the pump, may wake the
	// transmitter, which takes it): the rings stay valid because a hard
	// Close waits for the receive path's end (finish, or loopShm), which
	// takes the token and marks the stream ended, after which a poller
	// touches nothing.
	if !rx.tok.TryLock() {
		return did
	}
	rx.spinning = rx.pollerSpins()
	rx.prog = false
	_ = e.rc.Control(rx.ctl)
	rx.lastVisit = time.Since(visitEpoch)
	if rx.prog {
		rx.idlePolls.Store(0)
	} else if rx.idlePolls.Add(1) == pollIdleLimit && rx.muted.Load() {
		_ = e.rc.Control(rx.loud) // the event loop takes over
	}
	did, ended := did || rx.prog, rx.ended
	rnr, since := rx.rnrWait && !ended, rx.rnrSince
	rx.tok.Unlock()
	if rnr {
		// Wait for the receive buffer (and the timeout) even if nobody
		// polls any more.
		rx.parkForRecv(since)
	}
	if ended {
		rx.finishAsync()
	}
	return did
}

// setMuted raises or lowers the socket's SO_RCVLOWAT (token held): muted,
// only a backlog past the mark wakes the event loop (a poller that was
// preempted); lowering the mark reports what is queued.
func (rx *rxState) setMuted(fd uintptr, on bool) {
	lowat := 1
	if on {
		lowat = mutedMark(fd)
	}
	// Loud before the mark comes down: lowering it wakes the loop at
	// once, which must not take the socket for a muted one (and leave
	// it, the token being held here).
	was := rx.muted.Swap(on)
	if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, lowat) != nil {
		rx.muted.Store(was)
		return
	}
	rx.armLocked()
}

// mutedLowat is the least SO_RCVLOWAT while muted (mutedMark): more than
// the small messages of a latency-bound exchange, and small enough for the
// initial receive buffer, so that the kernel neither grows the buffer nor
// clamps the window to the mark (tcp_set_rcvlowat).
const mutedLowat = 32 << 10

// mutedMark is the mark of a muted socket: mutedLowat, or a quarter of the
// receive buffer once autotuning grew it, so that a stream of large
// messages, which the pollers drain as it comes, does not cross it either:
// each crossing wakes the loop's thread, which takes a core from a polling
// thread. A quarter keeps the mark's window within what the buffer holds
// (see mutedLowat).
func mutedMark(fd uintptr) int {
	rcvbuf, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		return mutedLowat
	}
	return max(mutedLowat, rcvbuf/4)
}

// raiseMark is the event loop's answer to a muted socket's crossing (token
// held): the mark follows the receive buffer if autotuning grew it since.
func raiseMark(fd uintptr) {
	_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, mutedMark(fd))
}

// armLocked starts the muted socket's watch, or stops a loud one's (token
// held).
func (rx *rxState) armLocked() {
	if rx.muted.Load() && !rx.ended && !rx.e.dead.Load() {
		rx.watchPolls = rx.polls.Load()
		rx.watchT.Reset(time.Duration(rx.watch.Load()))
	} else {
		rx.watchT.Stop()
	}
}

// onWatch is the muted socket's watch: a lease went by; if no poller came
// meanwhile (the application went to sleep, or computes), the socket goes
// back to the event loop. A token held means a poller is at the socket,
// which is all the watch wants to know: it looks again a watch later rather
// than wait, which would have the poller's Unlock hand the token over and
// wake a thread, on a core the polling program needs. (A holder that
// unmutes meanwhile stops the watch, and this one then fires once for
// nothing.)
func (rx *rxState) onWatch() {
	if !rx.tok.TryLock() {
		rx.watchT.Reset(time.Duration(rx.watch.Load()))
		return
	}
	if !rx.ended && rx.muted.Load() {
		if rx.polls.Load() == rx.watchPolls {
			_ = rx.e.rc.Control(rx.loud) // pollers went away
		} else {
			rx.armLocked()
		}
	}
	rx.tok.Unlock()
}

// louden gives a muted socket back to the event loop (token held): the
// pollers stop coming.
func (rx *rxState) louden() {
	if rx.muted.Load() && !rx.ended && !rx.e.dead.Load() {
		_ = rx.e.rc.Control(rx.loud)
	}
}

// Armed is verbs.Transport.Armed: the application armed a CQ of the QP and
// is about to wait on its channel, so its polls stop. A socket the polls
// muted goes back to the event loop at once; left to the watch, every message of a
// program that waits for events (rping, perftest -e) waited for it. A
// same-host ring's receive goroutine stops napping (napShm).
func (e *Endpoint) Armed() {
	rx := e.rx.Load()
	if rx == nil {
		return
	}
	rx.arms.Add(1) // offcpu.go
	if e.shm != nil {
		if rx.napping.CompareAndSwap(true, false) {
			e.shm.kick()
		}
		return
	}
	if rx.muted.Load() {
		rx.tok.Lock()
		rx.louden()
		rx.tok.Unlock()
	}
}

// readShm reads the inbound ring on a thread other than the RX goroutine,
// unless somebody holds the token: a poller's visit (Progress; looking at
// the ring costs no syscall, so pollers always look, and their visits tell
// the RX goroutine to nap rather than compete with them for the CPU), or a
// thread about to sleep on a completion channel (WaitRead), which is not a
// visit: the RX goroutine would nap, and the writer signals only a
// sleeping one.
func (rx *rxState) readShm(visit bool) bool {
	l := rx.e.shm
	if visit {
		l.polls.Add(1)
	}
	if !rx.tok.TryLock() {
		return false
	}
	did := rx.pump(0)
	if did {
		rx.idlePolls.Store(0)
		if visit {
			l.pollReads.Add(1)
		}
	}
	if (rx.rnrWait && !rx.ended || rx.ended && did) && !rx.kicked.Swap(true) {
		// The RX goroutine waits for the receive buffer (and the RNR
		// timeout), or closes the stream. Under the token: the link's
		// fds stay open until the RX goroutine took it for the last time.
		l.kick()
	}
	rx.tok.Unlock()
	return did
}

// napShm leaves the ring to the pollers for a lease, unless a CQ of the QP
// is armed: the application sleeps, or is about to, on its channel, and a
// message arriving meanwhile would wait out the nap (sockperf over rsockets
// on the same-host path: 99 % at 150-600 us with a 1 ms lease). An arm
// during the nap cuts it short (Armed). The CQ's flag is set before Armed
// looks at napping, and looked at here after napping is set, so one of the
// two sees the other.
func (rx *rxState) napShm() {
	rx.napping.Store(true)
	if !rx.e.qp.EventsArmed() {
		rx.e.shm.nap(rx.lease)
	}
	rx.napping.Store(false)
}

// loopShm is loop on a same-host connection: it reads the inbound ring,
// napping while pollers come by and find the data themselves, else sleeping
// on the ring's eventfd (a program that waits for a Write by watching its
// memory polls a CQ now and then but never finds that data: it needs this
// goroutine woken); the TCP stream's end (watch) ends it once the ring is
// drained.
func (rx *rxState) loopShm() {
	e, l := rx.e, rx.e.shm
	defer close(e.rxDone)
	var polls, pollReads uint64
	nap := false
	for {
		done := l.tcpDone.Load() // before the pump: what preceded the FIN is in the ring
		if !rx.tok.TryLock() {
			if nap && !e.qp.EventsArmed() && !rx.kicked.Load() {
				// A poller is at the ring: leave it another lease.
				// Queueing for the token would have the poller's
				// Unlock wake this goroutine's thread, on a core the
				// polling program needs (same-host ib_send_lat: one
				// round trip in 250).
				rx.napShm()
				continue
			}
			rx.tok.Lock()
		}
		got := false
		if !rx.ended && !e.gone.Load() && rx.pump(0) {
			rx.idlePolls.Store(0)
			got = true
		}
		if pr := l.pollReads.Load(); got {
			nap = false // the data waited for this goroutine
		} else if pr != pollReads {
			nap, pollReads = true, pr
		}
		ended := rx.ended || e.gone.Load()
		rnr, since := rx.rnrWait && !ended, rx.rnrSince
		rx.kicked.Store(false)
		if done && !ended && !rnr {
			rx.ended = true
			rx.tok.Unlock()
			if !e.dead.Load() {
				e.streamEnded()
			}
			break
		}
		rx.tok.Unlock()
		switch {
		case ended:
		case rnr:
			rx.waitRecv(since)
			continue
		case got && !done && spinAllowed(rx.spinWindow):
			rx.spin() // rxspin.go
			continue
		case nap && l.polls.Load() != polls:
			polls = l.polls.Load()
			rx.napShm()
			continue
		default:
			if l.in.Sleep() && !l.tcpDone.Load() {
				l.waitData()
			}
			continue
		}
		break
	}
	rx.tok.Lock()
	rx.ended = true // pollers touch the ring no more
	rx.cleanup()
	rx.tok.Unlock()
	// Wait for the peer's FIN (bounded by a read deadline), then close.
	c := e.c
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	<-l.watchDone
	if e.lingerT.Load() != nil {
		<-e.quit // as loop
	}
	c.Close()
}

// onLoopReadable is the event loop's readability handler: nothing while
// the socket is lent to a thread waiting on a completion channel (the
// loop hears no arrivals then, but an error, or an edge a loop that holds
// a single socket takes for one, comes anyway: the waiter reads).
func (rx *rxState) onLoopReadable() {
	if !rx.lent.Load() {
		rx.onReadable()
	}
}

// onReadable reads what arrived on a connection that no poller is reading:
// the event loop's, or a goroutine's that read it in the loop's stead.
func (rx *rxState) onReadable() {
	if rx.away.Load() {
		return // a goroutine of the connection reads it (goAway)
	}
	e := rx.e
	if rx.muted.Load() {
		// Past the mark: a poller's backlog. A poller that is at it, or
		// spins on it (its last visit ended within muteVisitGap), drains
		// it: reading too would make a second reader, on a core the
		// pollers or the peer need (ib_write_bw -s 4096 over loopback
		// ran at 0.55x). One that lost its core leaves it to the loop.
		if !rx.tok.TryLock() {
			return
		}
		if rx.muted.Load() && rx.pollerSpins() {
			_ = e.rc.Control(raiseMark)
			rx.tok.Unlock()
			return
		}
	} else {
		rx.tok.Lock()
	}
	got, completed, on := rx.readLocked(rx.loopCtl)
	if !on {
		return
	}
	if got && spinAllowed(rx.spinWindow) {
		rx.goAway(rx.spinAway)
	}
	if got && e.pol != nil && e.pol.PinRX {
		cpu, posts := e.qp.Poster()
		rx.keepOffPoster(cpu, posts, rx.arms.Load(), completed) // offcpu.go
	}
}

// readLocked reads the socket with ctl (the loop's, or a waiting thread's)
// and gives the token back (held on entry); it reports whether anything was
// consumed, whether work completed, and whether the reader may go on: not
// if the stream ended (it is closed now) or the receive path parked for a
// buffer (post_recv or the RNR timer reads on).
func (rx *rxState) readLocked(ctl func(fd uintptr)) (got, completed, on bool) {
	e := rx.e
	if e.gone.Load() {
		rx.ended = true // a hard Close: touch the rings no more
	}
	if rx.ended {
		rx.tok.Unlock()
		rx.finishAsync()
		return false, false, false
	}
	rx.prog = false
	_ = e.rc.Control(ctl)
	got = rx.prog
	if got {
		rx.idlePolls.Store(0) // pollers read again
	}
	completed, ended := rx.completed, rx.ended
	rnr, since := rx.rnrWait && !ended, rx.rnrSince
	rx.tok.Unlock()
	switch {
	case ended:
		rx.finishAsync()
		return got, completed, false
	case rnr:
		// Stop reading (TCP back-pressure) until a receive is posted
		// or the RNR timeout passes; the next pump retries (and
		// Terminates once the time is up). The park gives a lent
		// socket back.
		rx.parkForRecv(since)
		return got, completed, false
	}
	return got, completed, true
}

// goAway runs fn on a goroutine of its own, which reads the socket instead
// of the event loop until it comes back (back); nothing if one does.
func (rx *rxState) goAway(fn func()) {
	if rx.away.CompareAndSwap(false, true) {
		go fn()
	}
}

// back returns the socket to the event loop and reads what arrived while
// it was away (the loop passed those edges over).
func (rx *rxState) back() {
	rx.away.Store(false)
	rx.onReadable()
}

// parkForRecv leaves a TCP connection unread (back-pressure) while its
// receive path waits for a receive buffer: the application's post_recv
// reads on, on its own thread (RecvPosted), or rnrT when the RNR timeout
// is up (the pump then Terminates). No goroutine waits: a storage server
// that reposts its one receive per request after the next Send arrived
// paid a goroutine, a timer and two wake-ups a message (fio's rdma Sends
// at depth 1 over TCP: a third of the requests).
func (rx *rxState) parkForRecv(since time.Time) {
	if !rx.away.CompareAndSwap(false, true) {
		return
	}
	rx.reclaim() // whoever reads on after the park, the loop hears the socket
	e := rx.e
	left := rx.rnrTimeout - time.Since(since)
	rx.parked.Store(true) // before ArmRecvWait: RecvPosted after it sees it
	if left <= 0 || e.dead.Load() || e.qp.ArmRecvWait() {
		// Time is up, or a receive came meanwhile: read on now, on a
		// goroutine (the caller may be the loop or a poller in the pump's
		// aftermath; this is the rare path).
		if rx.endPark() {
			go rx.back()
		}
		return
	}
	rx.rnrT.Reset(left)
}

// RecvPosted is verbs.RecvWaiter's: the application posted a receive while
// the receive path waited for one.
func (e *Endpoint) RecvPosted() {
	if rx := e.rx.Load(); rx != nil {
		rx.unpark()
	}
}

// endPark ends a park, once: it reports whether the caller is the one to
// have the connection read on.
func (rx *rxState) endPark() bool {
	if !rx.parked.CompareAndSwap(true, false) {
		return false // never parked (a same-host ring's goroutine waits itself)
	}
	rx.rnrT.Stop()
	return true
}

// unpark ends a park (parkForRecv), once, and has whoever drives the
// connection read on: its pollers, while they keep it muted (their next
// visit reads); the caller, when the application waits for events (its
// post_recv thread would only go to sleep: fio's Sends at depth 1 ran at
// twice the rate so); else the event loop's way, a goroutine. (One
// polling thread serving 64 QPs lost a quarter of its rate reading each
// socket inside its post_recv.)
func (rx *rxState) unpark() {
	if !rx.endPark() {
		return
	}
	switch {
	case rx.muted.Load():
		rx.away.Store(false)
	case rx.e.qp.EventsArmed():
		rx.back()
	default:
		go rx.back()
	}
}

func (rx *rxState) spinAway() {
	rx.spin() // rxspin.go
	rx.back()
}

// endStream ends the stream from our side, whatever the peer does: fail's
// bound (boundSock), or a socket closed before it could be served.
func (rx *rxState) endStream() {
	rx.tok.Lock()
	was := rx.ended
	rx.ended = true
	rx.tok.Unlock()
	if !was && !rx.e.dead.Load() {
		rx.e.streamEnded()
	}
	rx.finishAsync()
}

// finishAsync closes the ended stream once, on a goroutine of its own.
func (rx *rxState) finishAsync() {
	if rx.finishing.CompareAndSwap(false, true) {
		rx.away.Store(true)
		go rx.finish()
	}
}

func (rx *rxState) finish() {
	e := rx.e
	defer close(e.rxDone)
	rx.tok.Lock()
	rx.ended = true
	rx.cleanup()
	rx.tok.Unlock()
	rx.watchT.Stop()
	rx.lendT.Stop()
	s := e.s
	if !e.gone.Load() {
		// Wait for the peer's FIN (bounded), then close: closing with
		// its data unread would reset the connection, and the peer's
		// kernel would drop what we sent last (a Terminate).
		s.drain(2 * time.Second)
	}
	if e.lingerT.Load() != nil {
		// A lingering CM-less QP (streamEnded) keeps its socket until it
		// goes down: a send posted meanwhile (ibv_srq_pingpong's last ones,
		// posted as its peer exits) is written as on an open stream
		// instead of failing on a socket we closed ourselves.
		<-e.quit
	}
	s.close()
}

// errCompletions posts what the stream's end did to the work in progress:
// the error of the work request that failed (errComp), then, in order, a
// receive taken for a Send that did not complete (its FPDU failed, or the
// stream ended inside it), flushed.
func (rx *rxState) errCompletions() {
	if rx.errComp != nil {
		rx.errComp()
		rx.errComp = nil
	}
	rx.flushCur()
}

// flushCur completes the receive being filled, if any, with a flush error.
func (rx *rxState) flushCur() {
	if !rx.cur.active {
		return
	}
	rqe := rx.cur.rqe
	rx.cur.release()
	if !rx.e.gone.Load() {
		rx.e.completeRecv(&rqe, verbs.CQE{Status: verbs.WCWRFlushErr, Opcode: verbs.WCOpRecv}, false)
	}
}

// waitRecv waits for a receive to be posted, at most until the RNR
// timeout counted from since, or until the endpoint closes.
func (rx *rxState) waitRecv(since time.Time) {
	e := rx.e
	left := rx.rnrTimeout - time.Since(since)
	if left <= 0 || e.dead.Load() || e.qp.ArmRecvWait() {
		return
	}
	tm := time.NewTimer(left)
	defer tm.Stop()
	select {
	case <-e.qp.RecvWake():
	case <-tm.C:
	case <-e.quit:
	}
}

func (rx *rxState) cleanup() {
	rx.flushCur()
	if rx.wheld {
		rx.wspan.Release()
		rx.wheld = false
	}
	t := &rx.e.tx
	t.mu.Lock()
	ord := t.ord
	t.ord = nil
	t.ordOut.Store(0)
	t.mu.Unlock()
	for _, o := range ord {
		o.span.Release()
	}
}

// termFor builds the Terminate for a protocol error in the current FPDU.
func (rx *rxState) termFor(err *wire.Error, hdrLen int) (*termInfo, error) {
	hl := min(hdrLen, len(rx.hdr)-2)
	return &termInfo{ctrl: err.Terminate(), segLen: uint16(rx.ulen),
		hdr: append([]byte(nil), rx.hdr[2:2+hl]...)}, err
}

// ioErr maps an error of the reader: a bad marker is a protocol error;
// EFAULT (readv into a registered buffer the application unmapped) is a
// fault on application memory.
func (rx *rxState) ioErr(err error, hl int) (*termInfo, error) {
	switch err {
	case wire.ErrMPAMarker:
		return rx.termFor(wire.ErrMPAMarker, hl)
	case unix.EFAULT:
		return rx.memFault()
	case errShmCorrupt:
		return rx.termFor(errShmCorrupt, hl)
	}
	return nil, err
}

// guardedStep is step with a fault on application memory made an error of
// this QP (see memfault.go): the receive machine stops where it was, which
// is safe because pump then ends the stream for good.
func (rx *rxState) guardedStep() (ti *termInfo, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if !isMemFault(r) {
				panic(r)
			}
			ti, err = rx.memFault()
		}
	}()
	return rx.step()
}

// memFault completes the work request whose memory faulted in the current
// FPDU (the receive of a Send, the Read or Atomic of a response) with a
// local protection error and returns the Terminate for the peer.
func (rx *rxState) memFault() (*termInfo, error) {
	e := rx.e
	switch rx.h.Opcode {
	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		if rx.cur.active {
			rqe := rx.cur.rqe
			rx.cur.release()
			rx.errComp = func() {
				e.completeRecv(&rqe, verbs.CQE{Status: verbs.WCLocProtErr, Opcode: verbs.WCOpRecv}, false)
			}
		}
	case wire.OpReadResponse, wire.OpAtomicResponse:
		if o := e.tx.popORD(); o != nil {
			o.span.Release()
			if !o.rtr {
				rx.errComp = func() { e.completeSend(o.idx, verbs.WCLocProtErr, 0) }
			}
		}
	}
	return rx.termFor(errMemFault, rx.hl)
}

// step runs the receive machine until the socket is empty (errAgain), the
// stream fails, or the endpoint is down. A protocol error returns the
// Terminate to send. It checks CRC and markers piecewise with the stream's
// codec (payload goes straight from the socket to registered memory).
func (rx *rxState) step() (*termInfo, error) {
	rd := &rx.rd
	e := rx.e
	for {
		switch rx.phase {
		case phHdr:
			hb := rx.hdr[:]
			if rx.hgot == 0 && e.dead.Load() {
				return nil, errDead
			}
			if !rx.begun {
				// Once per FPDU: a marker in front of its length field
				// may be read before the socket runs dry.
				rd.fstart = rd.st.Pos()
				rd.st.Begin()
				rx.act = actNone
				rx.begun = true
			}
			if rx.hgot < 4 {
				if err := rd.fill(hb[:4], &rx.hgot); err != nil {
					return rx.ioErr(err, 0)
				}
				rx.ulen = wire.ULPDULen(hb)
				hl, err := wire.HeaderLen(hb[2:4])
				if err != nil {
					return rx.termFor(wire.AsError(err), 2)
				}
				if rx.ulen < hl {
					return rx.termFor(wire.ErrRDMAPLength, 2)
				}
				rx.hl = hl
			}
			if err := rd.fill(hb[:2+rx.hl], &rx.hgot); err != nil {
				return rx.ioErr(err, rx.hl)
			}
			h := &rx.h
			if err := wire.ParseHeader(h, hb[2:2+rx.hl], rx.ulen); err != nil {
				return rx.termFor(wire.AsError(err), rx.hl)
			}
			rx.n = rx.ulen - rx.hl
			rx.nseg, rx.segi, rx.sgot, rx.post = 0, 0, 0, postNone
			if werr := rx.begin(rx.n); werr != nil {
				if werr != errRNR {
					return rx.termFor(werr, rx.hl)
				}
				// No receive buffer: wait for one with the header read
				// (the next pump parses it again), or give up.
				now := time.Now()
				if rx.rnrSince.IsZero() {
					rx.rnrSince = now
				}
				if now.Sub(rx.rnrSince) < rx.rnrTimeout {
					return nil, errRNRWait
				}
				rx.rnrSince = time.Time{}
				return rx.termFor(errNoBuffer, rx.hl)
			}
			rx.rnrSince = time.Time{}
			rx.phase = phPay
		case phPay:
			for rx.segi < rx.nseg {
				if err := rd.fill(rx.segs[rx.segi], &rx.sgot); err != nil {
					return rx.ioErr(err, rx.hl)
				}
				rx.segs[rx.segi] = nil
				rx.segi++
				rx.sgot = 0
			}
			if werr := rx.endPayload(); werr != nil {
				return rx.termFor(werr, rx.hl)
			}
			rx.phase, rx.tgot = phPad, 0
		case phPad:
			pad := wire.PadLen(rx.ulen)
			if err := rd.fill(rx.tr[:pad], &rx.tgot); err != nil {
				return rx.ioErr(err, rx.hl)
			}
			// A marker may precede the CRC.
			if err := rd.skipMarker(); err != nil {
				return rx.ioErr(err, rx.hl)
			}
			rx.phase, rx.tgot = phCRC, 0
		case phCRC:
			if err := rd.rawFill(rx.tr[4:8], &rx.tgot); err != nil {
				return rx.ioErr(err, rx.hl)
			}
			rx.phase, rx.hgot, rx.begun = phHdr, 0, false
			if err := rd.st.CheckTrailer(rx.tr[4:]); err != nil {
				return rx.termFor(wire.ErrMPACRC, rx.hl)
			}
			e.ctr.AddRx(1, rd.st.Pos()-rd.fstart)
			if e.awaitRTR.Load() {
				e.established()
			} else if e.txHeld.Load() {
				e.releaseTx()
			}
			if err := rx.commit(); err != nil {
				return nil, err
			}
		}
	}
}

// seg adds a payload destination.
func (rx *rxState) seg(b []byte) {
	if len(b) > 0 {
		rx.segs[rx.nseg] = b
		rx.nseg++
	}
}

// endPayload finishes what the payload of the FPDU did, once it is placed.
func (rx *rxState) endPayload() *wire.Error {
	switch rx.post {
	case postWrite:
		rx.wspan.Release()
		rx.wheld = false
		rx.wspan = verbs.Span{}
		rx.writeBytes += uint32(rx.n)
	case postReadResp:
		rx.ro.placed += uint32(rx.n)
		rx.ro = nil
		if rx.h.Last {
			rx.act = actReadDone
		}
	case postSend:
		return rx.untaggedDone()
	case postTerm:
		rx.termLen = 4 + rx.n
		rx.act = actTerminate
	}
	return nil
}

// commit runs what the FPDU completed, once its CRC was checked.
func (rx *rxState) commit() error {
	e := rx.e
	switch rx.act {
	case actRecvDone:
		rqe := rx.cur.rqe
		rx.cur.release()
		e.afterOwnWrites()
		e.completeRecv(&rqe, rx.recvCQE, rx.solicited)
		rx.completed = true
	case actReadDone, actAtomicDone:
		t := &e.tx
		o := t.popORD()
		o.span.Release()
		if !o.rtr {
			e.afterOwnWrites()
			e.completeSend(o.idx, verbs.WCSuccess, o.placed)
			rx.completed = true
		}
		t.putORD(o)
		t.wake()
	case actTerminate:
		return rx.gotTerminate()
	}
	return nil
}

// remoteAccess is the check of a peer's Write, Read Request or Atomic
// Request: the QP's access flags must grant it (RFC 5040 §7.2: remote
// protection error, access rights violation, as for a region without the
// right), then the region must (verbs.Access).
func (e *Endpoint) remoteAccess(stag uint32, to, length uint64, access int) (verbs.Span, error) {
	if !e.qp.Allows(access) {
		return verbs.Span{}, verbs.ErrAccess
	}
	return verbs.Access(e.pd, stag, to, length, access)
}

func taggedErr(err error) *wire.Error {
	mk := func(l wire.Layer, t wire.ErrorType, c wire.ErrorCode, r string) *wire.Error {
		return &wire.Error{Layer: l, Type: t, Code: c, Reason: r}
	}
	switch err {
	case verbs.ErrInvalidSTag:
		return mk(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedInvalidSTag, "invalid STag")
	case verbs.ErrBounds:
		return mk(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedBaseBounds, "base or bounds violation")
	case verbs.ErrWrongPD:
		// RFC 5041 §7.2 (siw_tagged_error): a DDP tagged buffer error.
		return mk(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedSTagNotAssociated, "STag not associated with DDP stream")
	}
	return mk(wire.LayerRDMAP, wire.RDMAPErrRemoteProtection, wire.RDMAPCodeAccessRights, "access rights violation")
}

// rdmapProt maps an access error on a Read Request or Atomic Request source.
func rdmapProt(err error) *wire.Error {
	c := wire.RDMAPCodeAccessRights
	switch err {
	case verbs.ErrInvalidSTag:
		c = wire.RDMAPCodeInvalidSTag
	case verbs.ErrBounds:
		c = wire.RDMAPCodeBaseBounds
	case verbs.ErrWrongPD:
		c = wire.RDMAPCodeSTagNotAssociated
	}
	return &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteProtection, Code: c, Reason: err.Error()}
}

var (
	errNoBuffer  = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedNoBuffer, Reason: "no receive buffer posted"}
	errRNR       = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedNoBuffer, Reason: "no receive buffer posted (yet)"} // begin: wait or Terminate
	errMSN       = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedMSNRange, Reason: "MSN out of range"}
	errMO        = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedInvalidMO, Reason: "unexpected MO"}
	errTooLong   = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedTooLong, Reason: "message too long for the receive buffer"}
	errUnexpOp   = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation, Code: wire.RDMAPCodeUnexpectedOpcode, Reason: "unexpected opcode"}
	errLocalCat  = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrLocalCatastrophic, Code: wire.RDMAPCodeLocalCatastrophic, Reason: "local protection error on a receive buffer"}
	errIRD       = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedMSNRange, Reason: "IRD exceeded"}
	errMisalign  = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteProtection, Code: wire.RDMAPCodeBaseBounds, Reason: "atomic target not 8-byte aligned"}
	errTermShort = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation, Code: wire.RDMAPCodeCatastrophicStream, Reason: "terminate too long"}
)

// begin checks the header of the current FPDU (payload of n bytes) and
// sets where its payload goes (rx.segs) and what follows it (rx.post). It
// returns a protocol error (Terminate).
func (rx *rxState) begin(n int) *wire.Error {
	e := rx.e
	h := &rx.h
	switch h.Opcode {
	case wire.OpWrite:
		if n == 0 {
			return nil // zero-length Write (the P2P RTR among them): nothing to check
		}
		sp, err := e.remoteAccess(h.STag, h.TO, uint64(n), verbs.AccessRemoteWrite)
		if err != nil {
			return taggedErr(err)
		}
		rx.wspan, rx.wheld = sp, true
		rx.seg(sp.Buf)
		rx.post = postWrite
		return nil

	case wire.OpReadResponse:
		t := &e.tx
		if t.rtrRead && n == 0 && h.Last {
			t.rtrRead = false // the answer to our zero-length Read RTR
			return nil
		}
		o := t.ordHead()
		if o == nil || o.atomic {
			return errUnexpOp
		}
		if n > 0 && h.STag != o.sinkSTag {
			return taggedErr(verbs.ErrInvalidSTag)
		}
		if n > 0 && (h.TO < o.sinkTO || h.TO-o.sinkTO != uint64(o.placed) || uint64(o.placed)+uint64(n) > uint64(o.length)) {
			return taggedErr(verbs.ErrBounds)
		}
		if n > 0 {
			rx.seg(o.span.Buf[o.placed : int(o.placed)+n])
		}
		rx.ro = o
		rx.post = postReadResp
		return nil

	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		return rx.untagged(n)

	case wire.OpImmediate, wire.OpImmediateSE:
		if h.MSN != rx.msn[wire.QNSend] || rx.cur.active {
			return errMSN
		}
		rqe, ok := e.qp.TakeRecv()
		if !ok {
			return rx.noRecv()
		}
		rx.msn[wire.QNSend]++
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], h.Immediate)
		rx.cur = rxMsg{active: true, rqe: rqe}
		rx.recvCQE = verbs.CQE{Status: verbs.WCSuccess, Opcode: verbs.WCOpRecvRDMAWImm, ByteLen: rx.writeBytes,
			ImmInv: binary.NativeEndian.Uint32(b[:4]), WCFlags: verbs.WCWithImm}
		rx.writeBytes = 0
		rx.solicited = h.Opcode == wire.OpImmediateSE
		rx.act = actRecvDone
		return nil

	case wire.OpReadRequest:
		if h.MSN != rx.msn[wire.QNReadRequest] {
			return errMSN
		}
		rx.msn[wire.QNReadRequest]++
		t := &e.tx
		if !t.takeIRD() {
			return errIRD
		}
		m := t.newResponse(kindReadResp, wire.Header{Opcode: wire.OpReadResponse, STag: h.SinkSTag})
		m.baseTO, m.total = h.SinkTO, int(h.ReadSize)
		if h.ReadSize > 0 {
			sp, err := e.remoteAccess(h.SrcSTag, h.SrcTO, uint64(h.ReadSize), verbs.AccessRemoteRead)
			if err != nil {
				t.putIRD()
				return rdmapProt(err)
			}
			if !probe(sp.Buf) {
				sp.Release()
				t.putIRD()
				return errMemFault
			}
			m.spans = append(m.spans, sp)
			m.data = append(m.data, sp.Buf)
		}
		t.addInternal(m)
		rx.rd.owing = true
		return nil

	case wire.OpAtomicRequest:
		if h.MSN != rx.msn[wire.QNAtomicRequest] {
			return errMSN
		}
		rx.msn[wire.QNAtomicRequest]++
		t := &e.tx
		if !t.takeIRD() {
			return errIRD
		}
		sp, err := e.remoteAccess(h.RemoteSTag, h.RemoteTO, 8, verbs.AccessRemoteAtomic)
		if err != nil {
			t.putIRD()
			return rdmapProt(err)
		}
		p := unsafe.Pointer(&sp.Buf[0])
		if uintptr(p)%8 != 0 {
			sp.Release()
			t.putIRD()
			return errMisalign
		}
		var orig uint64
		ok := memSafe(func() { orig = doAtomic((*uint64)(p), h) })
		sp.Release()
		if !ok {
			t.putIRD()
			return errMemFault
		}
		m := t.newResponse(kindAtomicResp, wire.Header{Opcode: wire.OpAtomicResponse, Last: true,
			MSN: rx.atomicMSN, AtomicReqID: h.AtomicReqID, OrigValue: orig})
		rx.atomicMSN++
		t.addInternal(m)
		rx.rd.owing = true
		return nil

	case wire.OpAtomicResponse:
		t := &e.tx
		o := t.ordHead()
		if o == nil || !o.atomic || o.reqID != h.AtomicReqID {
			return errUnexpOp
		}
		binary.NativeEndian.PutUint64(o.span.Buf[:8], h.OrigValue)
		o.placed = 8
		rx.act = actAtomicDone
		return nil

	case wire.OpTerminate:
		if n > len(rx.termBody)-wire.TermControlLen {
			return errTermShort
		}
		binary.BigEndian.PutUint32(rx.termBody[:4], 0)
		h.Term.Put(rx.termBody[:4])
		rx.seg(rx.termBody[4 : 4+n])
		rx.post = postTerm
		return nil
	}
	return errUnexpOp
}

// noRecv is begin's answer when a message needs a receive buffer and none
// is posted: wait for one (errRNR) unless the RNR timeout is 0.
func (rx *rxState) noRecv() *wire.Error {
	if rx.rnrTimeout > 0 {
		return errRNR
	}
	return errNoBuffer
}

func doAtomic(p *uint64, h *wire.Header) uint64 {
	switch h.AtomicOp {
	case wire.AtomicFetchAdd:
		return atomic.AddUint64(p, h.AddSwap) - h.AddSwap
	case wire.AtomicCmpSwap, wire.AtomicSwap:
		for {
			old := atomic.LoadUint64(p)
			if h.AtomicOp == wire.AtomicCmpSwap && (old^h.Compare)&h.CompareMask != 0 {
				return old
			}
			nv := old&^h.AddSwapMask | h.AddSwap&h.AddSwapMask
			if atomic.CompareAndSwapUint64(p, old, nv) {
				return old
			}
		}
	}
	return atomic.LoadUint64(p)
}

// untagged sets up the placement of a segment of a Send into the current
// receive buffer.
func (rx *rxState) untagged(n int) *wire.Error {
	e := rx.e
	h := &rx.h
	cur := &rx.cur
	if h.MO == 0 {
		if cur.active || h.MSN != rx.msn[wire.QNSend] {
			return errMSN
		}
		if e.awaitRTR.Load() && e.neg.rtr == rtrSend && n == 0 && h.Last {
			rx.msn[wire.QNSend]++ // the zero-length Send RTR
			return nil
		}
		rqe, ok := e.qp.TakeRecv()
		if !ok {
			return rx.noRecv()
		}
		*cur = rxMsg{active: true, rqe: rqe, msn: h.MSN}
		for _, s := range rqe.SGEs() {
			cur.cap += int(s.Length)
		}
	} else if !cur.active || h.MSN != cur.msn {
		return errMSN
	} else if int(h.MO) != cur.placed {
		return errMO
	}
	if cur.placed+n > cur.cap {
		rqe := cur.rqe
		cur.release()
		rx.errComp = func() {
			e.completeRecv(&rqe, verbs.CQE{Status: verbs.WCLocLenErr, Opcode: verbs.WCOpRecv}, false)
		}
		return errTooLong
	}
	// Scatter into the SGEs, pinning each on first use.
	off := cur.placed
	left := n
	base := 0
	for i, s := range cur.rqe.SGEs() {
		l := int(s.Length)
		if left == 0 {
			break
		}
		if off >= base+l {
			base += l
			continue
		}
		if !cur.pinned[i] {
			sp, err := verbs.LocalAccess(e.pd, s, true)
			if err != nil {
				rqe := cur.rqe
				cur.release()
				e.completeRecv(&rqe, verbs.CQE{Status: verbs.WCLocProtErr, Opcode: verbs.WCOpRecv}, false)
				rx.nseg = 0
				return errLocalCat
			}
			cur.spans[i], cur.pinned[i] = sp, true
		}
		o := off - base
		k := min(l-o, left)
		rx.seg(cur.spans[i].Buf[o : o+k])
		off += k
		left -= k
		base += l
	}
	rx.post = postSend
	return nil
}

// untaggedDone finishes a Send segment once its payload is placed.
func (rx *rxState) untaggedDone() *wire.Error {
	e := rx.e
	h := &rx.h
	cur := &rx.cur
	cur.placed += rx.n
	if h.Last {
		rx.msn[wire.QNSend]++
		c := verbs.CQE{Status: verbs.WCSuccess, Opcode: verbs.WCOpRecv, ByteLen: uint32(cur.placed)}
		if h.Opcode == wire.OpSendInv || h.Opcode == wire.OpSendSEInv {
			c.ImmInv = h.InvalidateSTag
			c.WCFlags = verbs.WCWithInv
			if err := verbs.InvalidateSTag(e.pd, h.InvalidateSTag); err != nil {
				return &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation,
					Code: wire.RDMAPCodeCannotInvalidate, Reason: "STag cannot be invalidated"}
			}
		}
		rx.recvCQE = c
		rx.solicited = h.Opcode == wire.OpSendSE || h.Opcode == wire.OpSendSEInv
		rx.act = actRecvDone
	}
	return nil
}

// termStatus maps a received Terminate to the status of the affected WQE.
func termStatus(c wire.TermControl) uint32 {
	switch {
	case c.Layer == wire.LayerRDMAP && c.Type == wire.RDMAPErrRemoteProtection,
		c.Layer == wire.LayerDDP && c.Type == wire.DDPErrTaggedBuffer:
		return verbs.WCRemAccessErr
	case c.Layer == wire.LayerDDP && c.Type == wire.DDPErrUntaggedBuffer:
		return verbs.WCRemInvReqErr
	case c.Layer == wire.LayerRDMAP && c.Type == wire.RDMAPErrRemoteOperation:
		return verbs.WCRemOpErr
	}
	return verbs.WCGeneralErr
}

type termError struct{ f wire.TerminateFields }

func (t *termError) Error() string {
	return "goiwarp: peer sent Terminate (layer " + t.f.Layer.String() + ")"
}

// gotTerminate completes the affected request and takes the QP down.
func (rx *rxState) gotTerminate() error {
	e := rx.e
	e.ctr.TermRecv()
	f, err := wire.ParseTerminate(rx.termBody[:rx.termLen])
	if err != nil {
		f = wire.TerminateFields{TermControl: wire.TermControl{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation}}
	}
	if o := e.tx.popORD(); o != nil {
		o.span.Release()
		if !o.rtr {
			e.completeSend(o.idx, termStatus(f.TermControl), 0)
		}
	}
	rx.termCtrl = f.TermControl
	return &termError{f}
}

func (rx *rxState) termAsync() int {
	if termStatus(rx.termCtrl) == verbs.WCRemAccessErr {
		return verbs.EventQPAccessErr
	}
	return verbs.EventQPFatal
}
func asyncFor(c wire.TermControl) int {
	switch {
	case c.Layer == wire.LayerRDMAP && c.Type == wire.RDMAPErrRemoteProtection,
		c.Layer == wire.LayerDDP && c.Type == wire.DDPErrTaggedBuffer:
		return verbs.EventQPAccessErr
	case c.Layer == wire.LayerDDP && c.Type == wire.DDPErrUntaggedBuffer,
		c.Layer == wire.LayerRDMAP && c.Type == wire.RDMAPErrRemoteOperation:
		return verbs.EventQPReqErr
	}
	return verbs.EventQPFatal
}
