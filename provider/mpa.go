package provider

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
)

// negotiated is what the MPA exchange settled for the stream.
type negotiated struct {
	crc          bool
	mkTx, mkRx   bool // insert markers when sending / expect them when receiving
	ird, ord     uint8
	rtr          rtrSet // P2P: the RTR message type; 0 without P2P
	rev          int
	initiator    bool
	peerUserData []byte
}

// Errors of the MPA exchange.
var (
	ErrPrivateDataTooLong = errors.New("goiwarp: private data too long")
	errCRCRefused         = errors.New("goiwarp: peer did not set C and CRC is required")
	errNoRTR              = errors.New("goiwarp: no matching RTR type")
	// errNoReply: the peer closed or reset the connection before any byte
	// of its MPA frame (wraps the socket's error).
	errNoReply = errors.New("goiwarp: connection closed before any MPA byte")
)

func clampIRDORD(v uint16) uint8 { return uint8(min(v, verbs.MaxIRD)) }

// privateData builds the private data we send: IRD/ORD header + user data.
func (p *Policy) privateData(rev int, enh bool, user []byte, ird, ord uint8, v2 wire.MPAV2Params) ([]byte, error) {
	switch {
	case rev == 2 && enh:
		if len(user)+wire.MPAV2ParamsLen > p.MaxPrivData {
			return nil, ErrPrivateDataTooLong
		}
		v2.IRD, v2.ORD = uint16(ird), uint16(ord)
		return wire.AppendMPAV2PrivateData(nil, v2, user), nil
	case rev == 1 && p.V1IRDORD:
		if len(user)+wire.MPAV1IRDORDLen > p.MaxPrivData {
			return nil, ErrPrivateDataTooLong
		}
		return wire.AppendMPAV1PrivateData(nil, uint32(ird), uint32(ord), user), nil
	}
	if len(user) > p.MaxPrivData {
		return nil, ErrPrivateDataTooLong
	}
	return append([]byte(nil), user...), nil
}

// writeFrame writes all of b to c with MSG_NOSIGNAL (net.Conn.Write is a
// write(2)): a peer that went away gives EPIPE, never a SIGPIPE into the
// application's process. c's write deadline applies.
func writeFrame(c *net.TCPConn, b []byte) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			n, err := unix.SendmsgN(int(fd), b, nil, nil, unix.MSG_NOSIGNAL)
			switch err {
			case nil:
				b = b[n:]
			case unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				werr = err
				return true
			}
		}
		return true
	})
	if werr != nil {
		return werr
	}
	return err
}

// readMPAFrame reads exactly one request/reply frame and nothing after it.
func readMPAFrame(c net.Conn, want wire.MPAKind) (wire.MPAFields, []byte, error) {
	var hdr [wire.MPAHeaderLen]byte
	if n, err := io.ReadFull(c, hdr[:]); err != nil {
		if n == 0 && peerGone(err) {
			err = fmt.Errorf("%w: %w", errNoReply, err)
		}
		return wire.MPAFields{}, nil, err
	}
	f, err := wire.ParseMPAHeader(hdr[:])
	if err != nil {
		return f, nil, err
	}
	if f.Kind != want {
		return f, nil, wire.ErrMPABadKey
	}
	pd := make([]byte, f.PrivateDataLen)
	if _, err := io.ReadFull(c, pd); err != nil {
		return f, nil, err
	}
	return f, pd, nil
}

// splitPrivateData removes the IRD/ORD header of an MPA frame.
func splitPrivateData(f wire.MPAFields, pd []byte, pol *Policy) (v2 wire.MPAV2Params, hasV2 bool, user []byte, err error) {
	switch {
	case f.Revision == 2 && f.Enhanced:
		v2, user, err = wire.SplitMPAV2PrivateData(pd)
		return v2, err == nil, user, err
	case f.Revision == 1 && pol.V1IRDORD && len(pd) >= wire.MPAV1IRDORDLen:
		ird, ord, u, _ := wire.SplitMPAV1PrivateData(pd)
		return wire.MPAV2Params{IRD: uint16(min(ird, 0x3fff)), ORD: uint16(min(ord, 0x3fff))}, true, u, nil
	}
	return wire.MPAV2Params{}, false, pd, nil
}

// initiate runs the initiator's side of the MPA exchange on c. It returns
// rejected=true with the reject's private data, or the negotiated stream.
func initiate(c *net.TCPConn, pol *Policy, p ConnParams) (neg negotiated, rejectPD []byte, rejected bool, err error) {
	enh := pol.Revision == 2
	v2 := wire.MPAV2Params{}
	if pol.P2P && enh {
		v2.PeerToPeer = true
		v2.WriteRTR = pol.RTR&rtrWrite != 0
		v2.ReadRTR = pol.RTR&rtrRead != 0
		v2.SendRTR = pol.RTR&rtrSend != 0
	}
	pd, err := pol.privateData(pol.Revision, enh, p.PrivateData, p.IRD, p.ORD, v2)
	if err != nil {
		return neg, nil, false, err
	}
	req := wire.MPAFields{Kind: wire.MPARequest, Markers: pol.Markers, CRC: pol.CRC, Enhanced: enh,
		Revision: uint8(pol.Revision)}
	frame := wire.AppendMPAFrame(nil, &req, pd)
	if err := writeFrame(c, frame); err != nil {
		if peerGone(err) {
			err = fmt.Errorf("%w: %w", errNoReply, err)
		}
		return neg, nil, false, err
	}
	f, rpd, err := readMPAFrame(c, wire.MPAReply)
	if err != nil {
		return neg, nil, false, err
	}
	rv2, hasV2, user, err := splitPrivateData(f, rpd, pol)
	if f.Reject {
		if err != nil {
			user = rpd
		}
		return neg, user, true, nil
	}
	if err != nil {
		return neg, nil, false, err
	}
	if int(f.Revision) > pol.Revision {
		return neg, nil, false, wire.ErrMPABadRevision
	}
	if pol.CRCStrict && !f.CRC {
		return neg, nil, false, errCRCRefused
	}
	neg = negotiated{crc: f.CRC || pol.CRC, mkTx: f.Markers, mkRx: pol.Markers, rev: int(f.Revision),
		initiator: true, ird: p.IRD, ord: p.ORD, peerUserData: user}
	if hasV2 {
		neg.ord = min(p.ORD, clampIRDORD(rv2.IRD))
		if rv2.PeerToPeer {
			switch {
			case rv2.WriteRTR && v2.WriteRTR:
				neg.rtr = rtrWrite
			case rv2.ReadRTR && v2.ReadRTR:
				neg.rtr = rtrRead
			case rv2.SendRTR && v2.SendRTR:
				neg.rtr = rtrSend
			default:
				return neg, nil, false, errNoRTR
			}
		}
	}
	return neg, nil, false, nil
}

// Connect dials raddr (from laddr when given), runs MPA as the initiator and
// moves qp (in INIT or RTR) to RTS. It returns when the TCP handshake is
// over, or after orderWait at most; cb gets Established,
// Rejected (Err ECONNREFUSED when TCP was refused, ECONNRESET when the peer
// reset or closed it during MPA), Unreachable or ConnectError, and later
// Disconnected, in order.
func Connect(qp *verbs.QP, laddr, raddr *net.TCPAddr, p ConnParams, timeout time.Duration, cb func(Event)) (*Endpoint, error) {
	pol := PolicyFromEnv()
	return connectPolicy(qp, laddr, raddr, p, timeout, cb, &pol)
}

func connectPolicy(qp *verbs.QP, laddr, raddr *net.TCPAddr, p ConnParams, timeout time.Duration, cb func(Event), pol *Policy) (*Endpoint, error) {
	if len(p.PrivateData) > pol.maxUserPrivData() {
		return nil, ErrPrivateDataTooLong
	}
	if timeout <= 0 {
		timeout = pol.Timeout
	}
	e := newEndpoint(qp, cb, pol)
	dialed := make(chan struct{})
	go func(tried chan struct{}) {
		d := net.Dialer{Timeout: timeout}
		if laddr != nil {
			d.LocalAddr = laddr
		}
		if laddr != nil && laddr.Port != 0 {
			// The caller (rdmacm) holds this port with SO_REUSEADDR until
			// the dial is over; the dial's bind must share it.
			d.Control = reuseAddr
		}
		// A connection accepted and closed before any byte of the reply
		// counts as refused: a port forwarder (qemu's, a proxy) accepts for
		// a server that does not listen yet and closes.
		end := time.Now().Add(pol.RefusedRetry)
		for {
			c, err := e.dialRefusedRetry(&d, raddr, time.Until(end), tried)
			tried = nil
			if err != nil {
				switch {
				case errors.Is(err, syscall.ECONNREFUSED):
					e.event(Event{Type: Rejected, Err: syscall.ECONNREFUSED})
				case errors.Is(err, syscall.ECONNRESET):
					e.event(Event{Type: Rejected, Err: syscall.ECONNRESET})
				default:
					e.event(Event{Type: Unreachable, Err: err})
				}
				e.finishFailed()
				return
			}
			if !e.runInitiator(c.(*net.TCPConn), p, timeout, end) {
				return
			}
			time.Sleep(min(20*time.Millisecond, max(time.Until(end), 0)))
		}
	}(dialed)
	awaitTurn(dialed)
	return e, nil
}

// orderWait bounds how long connection setup waits to keep the order of
// the application's calls: Connect for its TCP handshake (so the peer
// accepts connections in the order they were asked for, as siw's blocking
// connect gives), the listener for the MPA request of a connection accepted
// before (so CONNECT_REQUESTs come in accept order). Programs pair the
// QPs of both sides by that order: perftest -R with several QPs exchanges
// each QP's buffers by index, and a swapped pair writes its flow-control
// credits to the wrong QP's counter and both sides wait for ever. A
// connection whose handshake stalls holds the others back this long, once.
const orderWait = 250 * time.Millisecond

// awaitTurn waits until turn is closed, at most orderWait.
func awaitTurn(turn <-chan struct{}) {
	select {
	case <-turn:
		return
	default:
	}
	t := time.NewTimer(orderWait)
	defer t.Stop()
	select {
	case <-turn:
	case <-t.C:
	}
}

// dialRefusedRetry dials raddr; a refused connection (or one reset while
// connecting: accepted and reset at once) is dialed again, with growing
// pauses, until window has passed (Policy.RefusedRetry), the endpoint is
// closed, or the dial fails otherwise. tried, if not nil, is closed once
// the first dial is over.
func (e *Endpoint) dialRefusedRetry(d *net.Dialer, raddr *net.TCPAddr, window time.Duration, tried chan struct{}) (net.Conn, error) {
	end := time.Now().Add(window)
	pause := 5 * time.Millisecond
	for {
		c, err := d.Dial("tcp", raddr.String())
		if tried != nil {
			close(tried)
			tried = nil
		}
		refused := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
		if err == nil || !refused || e.abandoned() {
			return c, err
		}
		left := time.Until(end)
		if left <= 0 {
			return nil, err
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// runInitiator does MPA as initiator on an connected socket and goes to RTS.
// Before retryUntil, a peer that closed the connection before any byte of
// its reply is not reported: it returns true and the caller dials again.
func (e *Endpoint) runInitiator(c *net.TCPConn, p ConnParams, timeout time.Duration, retryUntil time.Time) (retry bool) {
	if !e.setSocket(c) {
		c.Close()
		return false
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	offer := offerShm(e.pol, c, timeout)
	neg, rpd, rejected, err := initiate(c, e.pol, p)
	_ = c.SetDeadline(time.Time{})
	if offer != nil {
		e.shm = offer.settle(err == nil && !rejected)
	}
	if err != nil && errors.Is(err, errNoReply) && time.Now().Before(retryUntil) && !e.abandoned() {
		Debugf("connect to %v: %v; trying again", c.RemoteAddr(), err)
		// Closed with a reset: a FIN would leave this socket in LAST_ACK
		// until the peer's ACK is processed (late on a loaded machine), and
		// the next dial from the same bound port would find the 4-tuple
		// taken (EADDRNOTAVAIL). The peer has gone; it loses nothing.
		_ = c.SetLinger(0)
		c.Close()
		return true
	}
	if err == nil && !rejected && e.shm == nil && e.pol.SHM == ShmOn {
		err = errShmUnavailable
	}
	switch {
	case rejected:
		c.Close()
		e.event(Event{Type: Rejected, Params: ConnParams{PrivateData: rpd}})
		e.finishFailed()
		return
	case err != nil:
		c.Close()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			e.event(Event{Type: Unreachable, Err: err})
		case peerGone(err):
			// As siw: a peer that resets or closes the connection before
			// its MPA reply is a CONNECT_REPLY of -ECONNRESET (PEER_CLOSE
			// in AWAIT_MPAREP), which the CM reports as REJECTED.
			e.event(Event{Type: Rejected, Err: syscall.ECONNRESET})
		default:
			e.event(Event{Type: ConnectError, Err: err})
		}
		e.finishFailed()
		return
	}
	if err := e.start(neg); err != nil {
		c.Close()
		e.closeSock()
		e.event(Event{Type: ConnectError, Err: err})
		e.finishFailed()
		return
	}
	e.event(Event{Type: Established, Params: ConnParams{PrivateData: neg.peerUserData, IRD: neg.ird, ORD: neg.ord}})
	e.startRX()
	return false
}

// peerGone reports whether err says the peer reset or closed the TCP
// connection: a read that met its FIN (whole or within a frame), a reset,
// a write after the reset.
func peerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Request is an incoming connection whose MPA request was read.
type Request struct {
	Params        ConnParams // the initiator's private data and IRD/ORD
	Local, Remote *net.TCPAddr

	c     *net.TCPConn
	f     wire.MPAFields
	v2    wire.MPAV2Params
	hasV2 bool
	pol   *Policy
	done  bool
}

// Listener accepts connections and reads their MPA requests.
type Listener struct {
	ln   *net.TCPListener
	pol  Policy
	cb   func(*Request)
	done chan struct{}
}

// Listen runs an accept loop on ln. Every connection whose MPA request is
// read within the MPA timeout goes to cb; bad ones are dropped with a log line.
func Listen(ln *net.TCPListener, cb func(*Request)) *Listener {
	return listenPolicy(ln, cb, PolicyFromEnv())
}

func listenPolicy(ln *net.TCPListener, cb func(*Request), pol Policy) *Listener {
	l := &Listener{ln: ln, pol: pol, cb: cb, done: make(chan struct{})}
	go l.loop()
	return l
}

func (l *Listener) loop() {
	defer close(l.done)
	turn := make(chan struct{})
	close(turn)
	for {
		c, err := l.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		next := make(chan struct{})
		go l.handshake(c, turn, next)
		turn = next
	}
}

// handshake reads the MPA request and hands the request to cb once the
// connection accepted before it had its turn (orderWait); then it is
// next's turn.
func (l *Listener) handshake(c *net.TCPConn, turn <-chan struct{}, next chan<- struct{}) {
	defer close(next)
	r := l.readRequest(c)
	awaitTurn(turn)
	if r != nil {
		l.cb(r)
	}
}

// readRequest reads and checks the MPA request; a bad one is dropped with a
// log line (nil).
func (l *Listener) readRequest(c *net.TCPConn) *Request {
	_ = c.SetDeadline(time.Now().Add(l.pol.Timeout))
	f, pd, err := readMPAFrame(c, wire.MPARequest)
	if err == nil && l.pol.CRCStrict && !f.CRC {
		err = errCRCRefused
	}
	var v2 wire.MPAV2Params
	var has bool
	var user []byte
	if err == nil {
		v2, has, user, err = splitPrivateData(f, pd, &l.pol)
	}
	if err != nil {
		Warnf("dropping connection from %v: MPA request: %v", c.RemoteAddr(), err)
		c.Close()
		return nil
	}
	_ = c.SetDeadline(time.Time{})
	r := &Request{Local: c.LocalAddr().(*net.TCPAddr), Remote: c.RemoteAddr().(*net.TCPAddr),
		c: c, f: f, v2: v2, hasV2: has, pol: &l.pol}
	r.Params = ConnParams{PrivateData: user}
	if has {
		r.Params.IRD, r.Params.ORD = clampIRDORD(v2.IRD), clampIRDORD(v2.ORD)
	}
	return r
}

// Close stops accepting. Requests already handed out stay valid.
func (l *Listener) Close() {
	l.ln.Close()
	<-l.done
}

// Addr is the listening address.
func (l *Listener) Addr() *net.TCPAddr { return l.ln.Addr().(*net.TCPAddr) }

func (r *Request) replyFields(reject bool) wire.MPAFields {
	rev := min(int(r.f.Revision), r.pol.Revision)
	return wire.MPAFields{Kind: wire.MPAReply, Markers: r.pol.Markers, CRC: r.pol.CRC || r.f.CRC,
		Reject: reject, Enhanced: rev == 2 && r.f.Enhanced, Revision: uint8(rev)}
}

// Accept answers with an MPA reply and moves qp to RTS. With P2P,
// Established comes once the initiator's RTR arrived and the QP transmits
// nothing before; without, Established comes with the reply and the QP
// transmits after the initiator's first FPDU or Policy.ResponderHold.
func (r *Request) Accept(qp *verbs.QP, p ConnParams, cb func(Event)) (*Endpoint, error) {
	if r.done {
		return nil, syscall.EINVAL
	}
	if len(p.PrivateData) > r.pol.maxUserPrivData() {
		return nil, ErrPrivateDataTooLong
	}
	e := newEndpoint(qp, cb, r.pol)
	if err := e.acceptInto(r, p); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Endpoint) acceptInto(r *Request, p ConnParams) error {
	r.done = true
	f := r.replyFields(false)
	neg := negotiated{crc: f.CRC, mkTx: r.f.Markers, mkRx: r.pol.Markers, rev: int(f.Revision),
		ird: p.IRD, ord: p.ORD}
	var v2 wire.MPAV2Params
	if r.hasV2 {
		neg.ord = min(p.ORD, clampIRDORD(r.v2.IRD))
		if r.v2.PeerToPeer && f.Enhanced {
			v2.PeerToPeer = true
			switch {
			case r.v2.WriteRTR:
				neg.rtr, v2.WriteRTR = rtrWrite, true
			case r.v2.ReadRTR:
				neg.rtr, v2.ReadRTR = rtrRead, true
			case r.v2.SendRTR:
				neg.rtr, v2.SendRTR = rtrSend, true
			}
		}
	}
	pd, err := r.pol.privateData(int(f.Revision), f.Enhanced, p.PrivateData, neg.ird, neg.ord, v2)
	if err == nil && v2.PeerToPeer && neg.rtr == 0 {
		err = errNoRTR
	}
	if err == nil && !e.setSocket(r.c) {
		err = syscall.ECONNABORTED
	}
	if err == nil {
		// Committed to the rings before the reply, which the initiator
		// reads only after the commit (shm.go).
		e.shm = answerShm(r.pol, r.c)
		if e.shm == nil && r.pol.SHM == ShmOn {
			err = errShmUnavailable
		}
	}
	if err == nil {
		e.awaitRTR.Store(true)
		err = e.start(neg)
	}
	if err != nil {
		if e.shm != nil {
			e.shm.close()
			e.shm = nil
		}
		f.Reject = true
		rpd, _ := r.pol.privateData(int(f.Revision), f.Enhanced, nil, 0, 0, wire.MPAV2Params{})
		if e.s != nil {
			_ = e.writeFrame(wire.AppendMPAFrame(nil, &f, rpd), r.pol.Timeout)
			e.closeSock()
		} else {
			_ = r.c.SetWriteDeadline(time.Now().Add(r.pol.Timeout))
			_ = writeFrame(r.c, wire.AppendMPAFrame(nil, &f, rpd))
		}
		r.c.Close()
		return err
	}
	err = e.writeFrame(wire.AppendMPAFrame(nil, &f, pd), r.pol.Timeout)
	if err == nil && neg.rtr == 0 {
		// Without peer-to-peer RTR the responder is established once its
		// reply is out, as siw (applications whose server speaks first,
		// ib_write_lat, depend on it), but holds its transmitter briefly.
		e.establishedHeld()
	}
	// The receive path starts after Established, as on the initiator: a
	// broken first FPDU (it may follow the reply at once, or come with the
	// request) then ends an established connection (DISCONNECTED) instead
	// of racing Established and reporting a failed accept (CONNECT_ERROR,
	// which rping -P answers by exiting). Until now it waits in the socket.
	e.startRX()
	if err != nil {
		e.fail(nil, fmt.Errorf("MPA reply: %w", err))
		return err
	}
	return nil
}

// Reject answers with an MPA reject frame carrying privateData and closes.
func (r *Request) Reject(privateData []byte) error {
	if r.done {
		return syscall.EINVAL
	}
	r.done = true
	defer r.c.Close()
	f := r.replyFields(true)
	pd, err := r.pol.privateData(int(f.Revision), f.Enhanced, privateData, 0, 0, wire.MPAV2Params{})
	if err != nil {
		return err
	}
	_ = r.c.SetWriteDeadline(time.Now().Add(r.pol.Timeout))
	err = writeFrame(r.c, wire.AppendMPAFrame(nil, &f, pd))
	return err
}

// AttachSocket runs MPA over c, a connected socket the application used in
// streaming mode until now, then moves qp to RTS: goiwarp's socket-to-RDMA
// extension. The side with initiator=true sends the MPA request; the other
// reads it and accepts with p. Like Connect, it returns at once and reports
// through cb. On both sides Established carries the peer's private data
// (the responder's: the request's) and the negotiated IRD/ORD.
func AttachSocket(qp *verbs.QP, c *net.TCPConn, initiator bool, p ConnParams, timeout time.Duration, cb func(Event)) (*Endpoint, error) {
	pol := PolicyFromEnv()
	return attachSocketPolicy(qp, c, initiator, p, timeout, cb, &pol)
}

func attachSocketPolicy(qp *verbs.QP, c *net.TCPConn, initiator bool, p ConnParams, timeout time.Duration, cb func(Event), pol *Policy) (*Endpoint, error) {
	if len(p.PrivateData) > pol.maxUserPrivData() {
		return nil, ErrPrivateDataTooLong
	}
	if timeout <= 0 {
		timeout = pol.Timeout
	}
	if initiator {
		e := newEndpoint(qp, cb, pol)
		go e.runInitiator(c, p, timeout, time.Time{})
		return e, nil
	}
	// Responder: read the request synchronously-bounded in a goroutine and
	// accept it; the endpoint the caller holds is the accepted one.
	// Established reports the request's private data, set before it is queued.
	var reqPD []byte
	if cb == nil {
		cb = func(Event) {}
	}
	e := newEndpoint(qp, func(ev Event) {
		if ev.Type == Established && ev.Params.PrivateData == nil {
			ev.Params.PrivateData = reqPD
		}
		cb(ev)
	}, pol)
	go func() {
		if !e.setSocket(c) {
			c.Close()
			return
		}
		_ = c.SetDeadline(time.Now().Add(timeout))
		f, pd, err := readMPAFrame(c, wire.MPARequest)
		var v2 wire.MPAV2Params
		var has bool
		var user []byte
		if err == nil {
			v2, has, user, err = splitPrivateData(f, pd, pol)
		}
		_ = c.SetDeadline(time.Time{})
		if err != nil {
			c.Close()
			e.event(Event{Type: ConnectError, Err: err})
			e.finishFailed()
			return
		}
		reqPD = user
		r := &Request{c: c, f: f, v2: v2, hasV2: has, pol: pol, Params: ConnParams{PrivateData: user}}
		if err := e.acceptInto(r, p); err != nil {
			e.event(Event{Type: ConnectError, Err: err})
			e.finishFailed()
		}
	}()
	return e, nil
}

// reuseAddr sets SO_REUSEADDR on a socket before it binds.
func reuseAddr(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}); err != nil {
		return err
	}
	return serr
}
