package provider

// Connections without a CM: InfiniBand-style programs (ibv_rc_pingpong,
// perftest without -R, qperf without -cm1, MPI bootstraps) exchange GID, QPN
// (and LID, PSN) over a socket of their own and move their QPs through INIT,
// RTR and RTS with ibv_modify_qp. The TCP connection and the MPA exchange are
// set up underneath that, goiwarp to goiwarp, with the machinery of
// Connect/Accept.
//
// Reaching a QP from its GID and QPN: every process that has QPs runs one
// listener on the first free port of [QPPortBase, QPPortBase+255); a QP
// number is slot<<16 | index, slot = port - QPPortBase, so the peer's GID
// names the host (an IP-form GID is an address) and its QPN the process's
// port. Slot 255 means "no listener" (all 255 ports were taken): such QPs
// can still connect out, and through a CM, but not be reached.
//
// Which side opens the connection: the one whose (address, QPN) is smaller,
// each side comparing its own address (the GID at ah_attr.grh.sgid_index) and
// QPN with the peer's. The initiator's MPA request carries a hello (the QPN
// it dials, its own QPN and address); the listener accepts it into the QP
// with that number if that QP waits, in RTR or RTS, for exactly that peer,
// and otherwise rejects it with a reason: not ready yet (the initiator tries
// again until its bound), no such QP, or not the expected peer (both fatal).
// A QP whose connection is not up within QPConnectTimeout of RTR, or whose
// connection later fails, goes to ERR with its work flushed and
// IBV_EVENT_QP_FATAL.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
)

// QP number layout.
const (
	qpnSlotShift = 16
	qpnIndexMask = 1<<qpnSlotShift - 1
	qpnSlots     = 255 // slots 0..254 name ports
	qpnNoSlot    = 255 // the process has no listener
)

// QPNumber composes a QP number from a listener slot and an index.
func QPNumber(slot int, index uint16) uint32 { return uint32(slot)<<qpnSlotShift | uint32(index) }

// QPNPort is the port of the listener of the process that owns qpn, with
// base as GOIWARP_QP_PORT_BASE; false when qpn names no listener.
func QPNPort(base int, qpn uint32) (int, bool) {
	slot := int(qpn >> qpnSlotShift)
	if slot >= qpnSlots || qpn&qpnIndexMask == 0 || base+slot > 65535 || base < 1 {
		return 0, false
	}
	return base + slot, true
}

// The initiator's hello, the private data of its MPA request.
const (
	helloVersion = 1
	helloLen     = 32
)

var helloMagic = [4]byte{'G', 'I', 'W', 'Q'}

type hello struct {
	dst, src uint32 // the QPN dialed, the dialer's QPN
	addr     net.IP // the dialer's address (its sgid's)
}

func (h hello) encode() []byte {
	b := make([]byte, helloLen)
	copy(b, helloMagic[:])
	b[4] = helloVersion
	binary.BigEndian.PutUint32(b[8:], h.dst)
	binary.BigEndian.PutUint32(b[12:], h.src)
	copy(b[16:], h.addr.To16())
	return b
}

func parseHello(b []byte) (hello, bool) {
	if len(b) < helloLen || !bytes.Equal(b[:4], helloMagic[:]) || b[4] != helloVersion {
		return hello{}, false
	}
	return hello{dst: binary.BigEndian.Uint32(b[8:]), src: binary.BigEndian.Uint32(b[12:]),
		addr: net.IP(bytes.Clone(b[16:32]))}, true
}

// Why the listener rejects a hello (the reject's private data).
const (
	rejNotReady byte = 1 + iota // the QP exists but waits for no one yet: try again
	rejNoQP                     // no QP with that number
	rejMismatch                 // the QP waits for another peer, or initiates itself
	rejGone                     // the QP's attempt is over (ERR, timed out)
)

func rejectData(reason byte) []byte {
	return []byte{helloMagic[0], helloMagic[1], helloMagic[2], helloMagic[3], helloVersion, reason}
}

func parseReject(b []byte) (byte, bool) {
	if len(b) < 6 || !bytes.Equal(b[:4], helloMagic[:]) || b[4] != helloVersion {
		return 0, false
	}
	return b[5], true
}

var errCMLessRejected = errors.New("peer rejected the connection")

// initiates reports whether the side (laddr, lqpn) opens the connection to
// (raddr, rqpn): the smaller pair does. Both sides compute the same answer
// as long as each one's own address is the other's peer address.
func initiates(laddr net.IP, lqpn uint32, raddr net.IP, rqpn uint32) (bool, error) {
	switch c := bytes.Compare(laddr.To16(), raddr.To16()); {
	case c < 0:
		return true, nil
	case c > 0:
		return false, nil
	}
	if lqpn == rqpn {
		return false, syscall.EOPNOTSUPP // a QP connected to itself
	}
	return lqpn < rqpn, nil
}

var loopback = net.IPv4(127, 0, 0, 1)

// peerAddrs resolves what RTR says into our address and the peer's. A GID
// in IP form is its address. Without a GRH (is_global 0: the program had
// only a LID) the LID names the peer within our IPv4 address's /16
// (verbs.Device.LID); LID 0, or a MAC-form GID of one of this host's
// devices, means this host: both ends are 127.0.0.1.
func peerAddrs(dev *verbs.Device, p verbs.Peer, devs func() []*verbs.Device) (local, remote net.IP, err error) {
	if !p.Global {
		if dev != nil {
			if r, ok := dev.LIDAddr(p.DLID); ok {
				return dev.IPv4(), r, nil
			}
		}
		return loopback, loopback, nil
	}
	var ok bool
	if dev != nil {
		gids := dev.GIDs()
		if int(p.SGIDIndex) >= len(gids) {
			return nil, nil, syscall.EINVAL
		}
		local, ok = verbs.GIDAddr(gids[p.SGIDIndex])
	}
	if !ok {
		local = loopback
	}
	if remote, ok = verbs.GIDAddr(p.DGID); ok {
		return local, remote, nil
	}
	for _, d := range devs() {
		if d.GID() == p.DGID {
			return loopback, loopback, nil
		}
	}
	return nil, nil, syscall.EINVAL
}

// CMLess is the process's Connector (capi installs it).
var CMLess = newCMLessMgr()

type cmlessMgr struct {
	devs   func() []*verbs.Device
	policy func() Policy

	mu   sync.Mutex
	ln   []*Listener // IPv4 and (where there is IPv6) IPv6, one port
	base int
	slot int
	qps  map[uint32]*cmlessQP // numbered and not destroyed
	next uint32               // last index handed out
}

type cmlessQP struct {
	att *attempt // the current attempt (from RTR until RESET), or nil
}

// Attempt states.
const (
	attWaiting   = iota // passive: waits for the initiator
	attAccepting        // passive: accepting its request
	attDialing          // active: dialing (and retrying)
	attUp               // connected: the stream is the QP's transport
	attOver             // failed, ended or cancelled
)

type attempt struct {
	qp            *verbs.QP
	peer          verbs.Peer
	local, remote net.IP
	active        bool
	deadline      time.Time

	// under cmlessMgr.mu
	state     int
	cancelled bool // by the application (RESET, ERR, destroy): no QP_FATAL
	ep        *Endpoint
	timer     *time.Timer
	stop      context.CancelFunc

	wg sync.WaitGroup // goroutines that may still touch qp
}

func newCMLessMgr() *cmlessMgr {
	return &cmlessMgr{devs: verbs.Devices, policy: PolicyFromEnv, slot: qpnNoSlot,
		qps: map[uint32]*cmlessQP{}}
}

// connPolicy is the environment's with MPA revision 2 (these connections
// are goiwarp to goiwarp): its IRD/ORD header carries the limits. The
// responder transmits at once: the hold is for initiators that read past
// their MPA reply (siw), and a goiwarp initiator reads the reply exactly;
// held, a server QP that only sends (ib_write_bw's client is one when the
// order of the QPNs makes it the responder) would wait the whole hold.
func (m *cmlessMgr) connPolicy() Policy {
	p := m.policy()
	p.Revision = 2
	p.ResponderHold = 0
	p.cmless = true
	return p
}

// openLocked starts the listener on the first free port of the range: an
// IPv4 socket and an IPv6-only one on the same port. Not one dual-stack
// socket: connections accepted on it are IPv6 sockets with IPv4-mapped
// addresses, whose path through the kernel costs a quarter more latency on
// loopback (ib_read_lat 2 B, alternated: 26-32 us against 20-25 us).
func (m *cmlessMgr) openLocked() {
	pol := m.connPolicy()
	m.base, m.slot = pol.QPPortBase, qpnNoSlot
	if m.base == 0 {
		return // GOIWARP_QP_PORT_BASE=0: no listener (QPs can still dial)
	}
	for s := range qpnSlots {
		port := m.base + s
		if port > 65535 {
			break
		}
		ln4, err := net.ListenTCP("tcp4", &net.TCPAddr{Port: port})
		if err != nil {
			continue
		}
		ln6, err := listenV6Only(port)
		if err != nil && !errors.Is(err, syscall.EAFNOSUPPORT) && !errors.Is(err, syscall.EADDRNOTAVAIL) {
			ln4.Close() // the port is taken for IPv6
			continue
		}
		m.slot = s
		m.ln = []*Listener{listenPolicy(ln4, m.incoming, pol)}
		if ln6 != nil {
			m.ln = append(m.ln, listenPolicy(ln6, m.incoming, pol))
		}
		Debugf("QPs without a CM: listening on port %d (QPNs 0x%02x....)", port, s)
		return
	}
	Warnf("QPs without a CM: no free port in %d-%d (GOIWARP_QP_PORT_BASE): peers cannot reach this process's QPs",
		m.base, m.base+qpnSlots-1)
}

// listenV6Only listens on [::]:port for IPv6 only; nil without IPv6.
func listenV6Only(port int) (*net.TCPListener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	l, err := lc.Listen(context.Background(), "tcp6", net.JoinHostPort("::", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	return l.(*net.TCPListener), nil
}

// Number is verbs.Connector.Number.
func (m *cmlessMgr) Number() uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.qps) == 0 && len(m.ln) == 0 {
		m.openLocked()
	}
	for range qpnIndexMask {
		m.next = m.next%qpnIndexMask + 1
		n := QPNumber(m.slot, uint16(m.next))
		if _, used := m.qps[n]; !used {
			m.qps[n] = &cmlessQP{}
			return n
		}
	}
	panic("goiwarp: more live QPs than QP numbers") // verbs.MaxQP is far below
}

// Release is verbs.Connector.Release: the listener closes with the last QP.
func (m *cmlessMgr) Release(qpn uint32) {
	m.mu.Lock()
	delete(m.qps, qpn)
	var ln []*Listener
	if len(m.qps) == 0 {
		ln, m.ln = m.ln, nil
	}
	m.mu.Unlock()
	for _, l := range ln {
		l.Close()
	}
}

// Start is verbs.Connector.Start.
func (m *cmlessMgr) Start(qp *verbs.QP, p verbs.Peer) error {
	var dev *verbs.Device
	if qp.Ctx != nil {
		dev = qp.Ctx.Dev
	}
	local, remote, err := peerAddrs(dev, p, m.devs)
	if err != nil {
		return err
	}
	active, err := initiates(local, qp.Num, remote, p.DestQPN)
	if err != nil {
		return err
	}
	pol := m.connPolicy()
	var raddr *net.TCPAddr
	if active {
		port, ok := QPNPort(pol.QPPortBase, p.DestQPN)
		if !ok {
			return syscall.EINVAL
		}
		raddr = &net.TCPAddr{IP: remote, Port: port}
		if remote.IsLinkLocalUnicast() && dev != nil {
			raddr.Zone = dev.Ifname
		}
	}
	att := &attempt{qp: qp, peer: p, local: local, remote: remote, active: active,
		deadline: time.Now().Add(pol.QPConnectTimeout)}
	m.mu.Lock()
	ent := m.qps[qp.Num]
	if ent == nil {
		m.mu.Unlock()
		return syscall.EINVAL // not numbered here
	}
	ent.att = att
	if active {
		ctx, stop := context.WithDeadline(context.Background(), att.deadline)
		att.state, att.stop = attDialing, stop
		att.wg.Add(1)
		go m.dial(att, raddr, pol, ctx)
	} else {
		att.state = attWaiting
		att.timer = time.AfterFunc(pol.QPConnectTimeout, func() {
			m.fail(att, attWaiting, syscall.ETIMEDOUT, "no connection from the peer")
		})
	}
	m.mu.Unlock()
	Debugf("qp %#x: RTR to qp %#x at %v, %s", qp.Num, p.DestQPN, remote,
		map[bool]string{true: "dialing", false: "waiting"}[active])
	return nil
}

// Ready is verbs.Connector.Ready.
func (m *cmlessMgr) Ready(qp *verbs.QP) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ent := m.qps[qp.Num]; ent != nil && ent.att != nil && ent.att.state == attUp {
		capORD(ent.att)
	}
}

// capORD limits the engine's outstanding Reads to the QP's max_rd_atomic,
// which the program sets at RTS, after the MPA exchange advertised
// verbs.MaxORD. Under m.mu, so that the latest value wins.
func capORD(att *attempt) {
	if att.ep != nil {
		att.ep.ordCap.Store(int32(max(att.qp.Attr().ORD, 1)))
	}
}

// Cancel is verbs.Connector.Cancel.
func (m *cmlessMgr) Cancel(qp *verbs.QP) {
	m.mu.Lock()
	ent := m.qps[qp.Num]
	if ent == nil || ent.att == nil {
		m.mu.Unlock()
		return
	}
	att := ent.att
	ent.att = nil
	att.cancelled = true
	var ep *Endpoint
	if att.state != attUp {
		ep = att.ep
	}
	att.state = attOver
	if att.timer != nil {
		att.timer.Stop()
	}
	if att.stop != nil {
		att.stop()
	}
	m.mu.Unlock()
	if ep != nil {
		ep.Close(false) // ends an MPA exchange in progress
	}
	att.wg.Wait()
}

// fail ends att if it is still in state from (any state but over when from
// is -1): the QP goes to ERR, its work is flushed, QP_FATAL is posted.
func (m *cmlessMgr) fail(att *attempt, from int, err error, why string) {
	m.mu.Lock()
	if att.state == attOver || from >= 0 && att.state != from {
		m.mu.Unlock()
		return
	}
	att.state = attOver
	if att.timer != nil {
		att.timer.Stop()
	}
	att.wg.Add(1) // Cancel waits for the QP to be left alone
	m.mu.Unlock()
	defer att.wg.Done()
	Warnf("qp %#x: connection to qp %#x at %v failed: %s: %v", att.qp.Num, att.peer.DestQPN, att.remote, why, err)
	att.qp.SetError()
	att.qp.Ctx.PostAsync(verbs.EventQPFatal, att.qp.Cookie)
}

// event handles an established connection's later events: a connection
// that ends without the application asking is a fatal error of the QP
// (even one whose dialer or acceptor has not yet recorded it as up).
func (m *cmlessMgr) event(att *attempt, ev Event) {
	if ev.Type != Disconnected {
		return
	}
	m.mu.Lock()
	live := att.state != attOver && !att.cancelled
	m.mu.Unlock()
	if live {
		m.fail(att, -1, ev.Err, "connection lost")
	}
}

func (m *cmlessMgr) params(att *attempt) ConnParams {
	return ConnParams{IRD: max(att.qp.Attr().IRD, 1), ORD: verbs.MaxORD}
}

// dial is the initiator: it connects until the listener accepts, a reason
// to stop comes, or the deadline passes.
func (m *cmlessMgr) dial(att *attempt, raddr *net.TCPAddr, pol Policy, ctx context.Context) {
	defer att.wg.Done()
	defer att.stop() // the deadline's timer
	cp := m.params(att)
	cp.PrivateData = hello{dst: att.peer.DestQPN, src: att.qp.Num, addr: att.local}.encode()
	pause := 5 * time.Millisecond
	for {
		d := net.Dialer{}
		nc, err := d.DialContext(ctx, "tcp", raddr.String())
		if err != nil {
			// (a no-op after Cancel: the attempt is over)
			m.fail(att, attDialing, err, "TCP connect to "+raddr.String())
			return
		}
		first := make(chan Event, 1)
		var once sync.Once
		e := newEndpoint(att.qp, func(ev Event) {
			fired := false
			once.Do(func() { first <- ev; fired = true })
			if !fired {
				m.event(att, ev)
			}
		}, &pol)
		m.mu.Lock()
		if att.state != attDialing {
			m.mu.Unlock()
			nc.Close()
			return
		}
		att.ep = e
		m.mu.Unlock()
		e.runInitiator(nc.(*net.TCPConn), cp, min(pol.Timeout, max(time.Until(att.deadline), time.Millisecond)), time.Time{})
		// runInitiator has queued its first event, unless Cancel closed
		// the endpoint before it had the socket.
		var ev Event
		select {
		case ev = <-first:
		case <-ctx.Done():
			if ctx.Err() == context.Canceled {
				return
			}
			ev = <-first
		}
		switch reason, ok := parseReject(ev.Params.PrivateData); {
		case ev.Type == Established:
			m.mu.Lock()
			if att.state == attDialing {
				att.state = attUp
				capORD(att)
			}
			m.mu.Unlock()
			Debugf("qp %#x: connected to qp %#x at %v", att.qp.Num, att.peer.DestQPN, raddr)
			return
		case ev.Type == Rejected && ok && reason == rejNotReady:
			// The peer has not reached RTR yet: try again.
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				if ctx.Err() == context.DeadlineExceeded {
					m.fail(att, attDialing, syscall.ETIMEDOUT, "the peer QP did not reach RTR")
				}
				return
			}
			pause = min(2*pause, 100*time.Millisecond)
		case ev.Type == Rejected && ok:
			m.fail(att, attDialing, errCMLessRejected, map[byte]string{rejNoQP: "no such QP",
				rejMismatch: "the peer QP expects another peer", rejGone: "the peer QP gave up"}[reason])
			return
		default:
			err := ev.Err
			if err == nil {
				err = errCMLessRejected
			}
			m.fail(att, attDialing, err, "MPA exchange")
			return
		}
	}
}

// incoming is the listener's callback: an MPA request arrived.
func (m *cmlessMgr) incoming(r *Request) {
	h, ok := parseHello(r.Params.PrivateData)
	if !ok {
		_ = r.Reject(rejectData(rejMismatch))
		return
	}
	m.mu.Lock()
	ent := m.qps[h.dst]
	var att *attempt
	var reason byte
	switch {
	case ent == nil:
		reason = rejNoQP
	case ent.att == nil:
		reason = rejNotReady
	case ent.att.state == attOver:
		reason = rejGone
	case ent.att.active, ent.att.state != attWaiting, h.src != ent.att.peer.DestQPN,
		!h.addr.Equal(ent.att.remote):
		reason = rejMismatch
	default:
		att = ent.att
		att.state = attAccepting
		att.timer.Stop()
		att.wg.Add(1)
	}
	m.mu.Unlock()
	if att == nil {
		Debugf("rejecting qp %#x's connection to qp %#x from %v: reason %d", h.src, h.dst, r.Remote, reason)
		_ = r.Reject(rejectData(reason))
		return
	}
	defer att.wg.Done()
	e, err := r.Accept(att.qp, m.params(att), func(ev Event) { m.event(att, ev) })
	m.mu.Lock()
	if err == nil && att.state == attAccepting {
		att.ep = e
		att.state = attUp
		capORD(att)
	}
	m.mu.Unlock()
	if err != nil {
		m.fail(att, attAccepting, err, "accepting")
		return
	}
	Debugf("qp %#x: accepted qp %#x from %v", att.qp.Num, h.src, r.Remote)
}

// Port is the port of the process's listener, 0 when it has none.
func (m *cmlessMgr) Port() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ln) == 0 {
		return 0
	}
	return m.ln[0].Addr().Port
}
