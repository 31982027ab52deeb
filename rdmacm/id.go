package rdmacm

import (
	"net"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/verbs"
)

// State of a CM id, after the kernel's enum rdma_cm_state.
type State int

// CM id states.
const (
	StateIdle State = iota
	StateAddrQuery
	StateAddrResolved
	StateRouteQuery
	StateRouteResolved
	StateConnect        // active: rdma_connect issued, MPA in progress
	StateConnectRequest // passive: request reported, not yet accepted or rejected
	StateAccepting      // passive: accepted, waiting for the initiator's first FPDU
	StateEstablished
	StateClosed // disconnected, rejected, unreachable or failed: a terminal state
	StateAddrBound
	StateListen
	StateDestroying
)

var stateNames = [...]string{"idle", "addr-query", "addr-resolved", "route-query",
	"route-resolved", "connect", "connect-request", "accepting", "established",
	"closed", "addr-bound", "listen", "destroying"}

func (s State) String() string { return stateNames[s] }

// Port spaces (enum rdma_port_space).
const (
	PSIPoIB = 0x0002
	PSIB    = 0x013F
	PSTCP   = 0x0106
	PSUDP   = 0x0111
)

// MaxPrivateData is the most user private data an iWARP peer accepts with MPA
// v2: 256 bytes of MPA private data minus the 4-byte v2 IRD/ORD header.
const MaxPrivateData = 252

// MaxBacklog is the kernel's rdma_ucm max_backlog: the backlog of a listen
// call that passes 0, a negative value or more.
const MaxBacklog = 1024

// Options of rdma_set_option.
const (
	OptionLevelID   = 0
	OptionLevelIB   = 1
	OptionTOS       = 0
	OptionReuseAddr = 1
	OptionAFOnly    = 2
	OptionAckTmo    = 3
	OptionIBPath    = 1
)

// ID is a CM id.
type ID struct {
	Cookie unsafe.Pointer // capi: the C struct rdma_cm_id (C memory)
	Handle uintptr        // capi: the handle of this id
	PS     int
	eng    Engine

	mu            sync.Mutex
	ch            *Channel
	state         State
	src, dst      *net.TCPAddr
	dev           string
	sock          int
	tcpLn         *net.TCPListener
	ln            Listener
	ep            Endpoint
	appQP         *verbs.QP // the application's own QP, bound by conn_param.qp_num
	req           Request
	listen        *ID // passive: the listening id that reported us
	backlog       int
	pending       int   // listener: requests reported and not yet answered
	reqIRD        uint8 // passive: responder_resources of the request
	reqORD        uint8 // passive: initiator_depth of the request
	tos, afonly   int
	reuse         bool
	ackTmo        int // RDMA_OPTION_ID_ACK_TIMEOUT, -1 unset
	disconnecting bool
	destroyed     bool

	ackMu   sync.Mutex
	ackCond sync.Cond
	reports int
	acks    int
}

// NewID creates an id on ch. Port spaces iWARP cannot serve (UDP, IPoIB)
// are refused with EPROTONOSUPPORT; RDMA_PS_IB is served as TCP, as the
// kernel's rdma_cm does on an iWARP device.
func NewID(ch *Channel, ps int, eng Engine) (*ID, error) {
	switch ps {
	case PSTCP, PSIB:
	default:
		return nil, unix.EPROTONOSUPPORT
	}
	if ch == nil {
		return nil, unix.EINVAL
	}
	if eng == nil {
		eng = DefaultEngine
	}
	id := &ID{PS: ps, eng: eng, ch: ch, sock: -1, tos: -1, afonly: -1, ackTmo: -1}
	id.ackCond.L = &id.ackMu
	return id, nil
}

// State returns the id's state.
func (id *ID) State() State {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.state
}

// Channel returns the id's event channel.
func (id *ID) Channel() *Channel {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.ch
}

// Addrs returns the source and destination addresses and the device name.
func (id *ID) Addrs() (src, dst *net.TCPAddr, dev string) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.src, id.dst, id.dev
}

// RequestDepths are responder_resources and initiator_depth of the
// connection request that created a passive id.
func (id *ID) RequestDepths() (responderResources, initiatorDepth uint8) {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.reqIRD, id.reqORD
}

func (id *ID) reported() {
	id.ackMu.Lock()
	id.reports++
	id.ackMu.Unlock()
}

// Ack acknowledges one event owned by id (rdma_ack_cm_event).
func (id *ID) Ack() {
	id.ackMu.Lock()
	id.acks++
	id.ackCond.Broadcast()
	id.ackMu.Unlock()
}

// Unacked is the number of events reported for id and not acknowledged.
func (id *ID) Unacked() int {
	id.ackMu.Lock()
	defer id.ackMu.Unlock()
	return id.reports - id.acks
}

func (id *ID) waitAcks() {
	id.ackMu.Lock()
	for id.acks < id.reports {
		id.ackCond.Wait()
	}
	id.ackMu.Unlock()
}

// queueLocked queues an event about id, owned by id unless e.owner is set.
// id.mu is held, which keeps one id's events in order.
func (id *ID) queueLocked(e *Event) {
	if id.destroyed {
		return
	}
	if e.owner == nil {
		e.owner = id
	}
	e.ID = id
	e.Src, e.Dst, e.Dev = id.src, id.dst, id.dev
	tracef("id %p: queue %v status %d", id, e.Type, e.Status)
	id.ch.push(e)
}

// Bind binds the id to a local address (rdma_bind_addr). Port 0 picks one.
func (id *ID) Bind(a *net.TCPAddr) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateIdle {
		return unix.EINVAL
	}
	return id.bindLocked(a)
}

func (id *ID) bindLocked(a *net.TCPAddr) error {
	dev := deviceFor(a.IP)
	if dev == "" && !a.IP.IsUnspecified() {
		return unix.EADDRNOTAVAIL
	}
	if a.IP.IsLoopback() {
		// The kernel's rdma_cm binds a loopback address as it binds the
		// wildcard (cma_any_addr): the id gets no device until a
		// connection names one (siw 6.1: verbs NULL after binding
		// 127.0.0.1 or ::1). libfabric's verbs provider relies on it: it
		// binds "localhost" and keeps only the device the id reports.
		dev = ""
	}
	fd, bound, err := bindSocket(a, id.afonly, id.tos)
	if err != nil {
		return err
	}
	id.sock, id.src, id.dev = fd, bound, dev
	id.state = StateAddrBound
	return nil
}

// ResolveAddr resolves dst and, unless the id is bound or src is given, the
// source address; ADDR_RESOLVED or ADDR_ERROR follows.
func (id *ID) ResolveAddr(src, dst *net.TCPAddr, timeout time.Duration) error {
	if dst == nil {
		return unix.EINVAL
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	switch id.state {
	case StateIdle, StateAddrBound, StateAddrResolved:
	default:
		return unix.EINVAL
	}
	if src != nil && id.state == StateIdle {
		if err := id.bindLocked(src); err != nil {
			return err
		}
	}
	id.dst = dst
	prev := id.state
	id.state = StateAddrQuery
	status := 0
	if id.src == nil || id.src.IP.IsUnspecified() {
		ip, err := sourceFor(dst)
		switch {
		case err != nil:
			status = -int(errnoOf(err))
		case isV4(dst):
			ip = ip.To4()
		default:
			ip = ip.To16()
		}
		if status == 0 {
			port := 0
			if id.src != nil {
				port = id.src.Port
			}
			id.src = &net.TCPAddr{IP: ip, Port: port, Zone: dst.Zone}
		}
	}
	if status == 0 && id.src != nil && isV4(id.src) != isV4(dst) {
		status = -int(unix.EAFNOSUPPORT)
	}
	if status == 0 {
		if id.dev = deviceFor(id.src.IP); id.dev == "" {
			status = -int(unix.ENODEV)
		}
	}
	if status == 0 && id.sock < 0 {
		// Reserve the source port now, as rdma_cm binds at resolve time:
		// rdma_get_src_port answers before the connection exists.
		fd, bound, err := bindSocket(&net.TCPAddr{IP: id.src.IP, Zone: id.src.Zone}, id.afonly, id.tos)
		if err != nil {
			status = -int(errnoOf(err))
		} else {
			id.sock, id.src = fd, bound
		}
	}
	e := &Event{Type: EventAddrResolved, Status: status}
	if status != 0 {
		e.Type = EventAddrError
		id.state = prev
	} else {
		id.state = StateAddrResolved
	}
	go func() {
		id.mu.Lock()
		defer id.mu.Unlock()
		id.queueLocked(e)
	}()
	return nil
}

// ResolveRoute: iWARP routes are IP routes, already known; ROUTE_RESOLVED follows.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state != StateAddrResolved {
		return unix.EINVAL
	}
	id.state = StateRouteResolved
	go func() {
		id.mu.Lock()
		defer id.mu.Unlock()
		id.queueLocked(&Event{Type: EventRouteResolved})
	}()
	return nil
}

// Listen starts listening (rdma_listen). An unbound id binds 0.0.0.0:0.
func (id *ID) Listen(backlog int) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == StateIdle {
		if err := id.bindLocked(&net.TCPAddr{IP: net.IPv4zero.To4()}); err != nil {
			return err
		}
	}
	if id.state == StateListen {
		if backlog > 0 && backlog <= MaxBacklog {
			id.backlog = backlog
		}
		return nil
	}
	if id.state != StateAddrBound {
		return unix.EINVAL
	}
	if backlog <= 0 || backlog > MaxBacklog {
		backlog = MaxBacklog
	}
	if id.eng == nil {
		return unix.ENODEV
	}
	ln, err := listenOn(id.sock, backlog)
	if err != nil {
		return err
	}
	id.sock = -1
	id.tcpLn = ln
	id.backlog = backlog
	id.state = StateListen
	id.ln = id.eng.Listen(ln, id.onRequest)
	return nil
}

func sameFamily(a *net.TCPAddr, v4 bool) *net.TCPAddr {
	if a == nil {
		return nil
	}
	c := *a
	if v4 {
		c.IP = a.IP.To4()
	} else {
		c.IP = a.IP.To16()
	}
	return &c
}

func (id *ID) onRequest(r Request) {
	p := r.Params()
	local, remote := r.Addrs()
	id.mu.Lock()
	if id.state != StateListen || id.destroyed || id.pending >= id.backlog {
		id.mu.Unlock()
		_ = r.Reject(nil)
		return
	}
	id.pending++
	v4 := isV4(id.src)
	n := &ID{PS: id.PS, eng: id.eng, ch: id.ch, state: StateConnectRequest, sock: -1,
		src: sameFamily(local, v4), dst: sameFamily(remote, v4), req: r, listen: id,
		reqIRD: p.ORD, reqORD: p.IRD, tos: -1, afonly: -1, ackTmo: -1}
	n.ackCond.L = &n.ackMu
	if local != nil {
		n.dev = deviceFor(local.IP)
	}
	if n.dev == "" {
		n.dev = id.dev
	}
	e := &Event{Type: EventConnectRequest, Listen: id, owner: id,
		PrivateData: slices.Clone(p.PrivateData), ResponderResources: p.ORD, InitiatorDepth: p.IRD}
	e.ID = n
	e.Src, e.Dst, e.Dev = n.src, n.dst, n.dev
	tracef("listen %p: queue CONNECT_REQUEST for %p from %v", id, n, n.dst)
	id.ch.push(e)
	id.mu.Unlock()
}

func (id *ID) requestDone() {
	id.mu.Lock()
	id.pending--
	id.mu.Unlock()
}

// checkConn is what Connect and Accept refuse before any state change: no QP
// (iWARP connects one), or private data or IRD/ORD beyond the limits.
func checkConn(qp *verbs.QP, p provider.ConnParams) error {
	if qp == nil || len(p.PrivateData) > MaxPrivateData {
		return unix.EINVAL
	}
	if p.IRD > verbs.MaxIRD || p.ORD > verbs.MaxORD {
		return unix.EINVAL
	}
	return nil
}

// Connect starts the active side (rdma_connect). iWARP needs the QP.
func (id *ID) Connect(qp *verbs.QP, p provider.ConnParams) error {
	return id.connect(qp, false, p)
}

// ConnectQPNum is rdma_connect on an id without a QP: the connection is
// bound to the application's own QP numbered qpNum (conn_param.qp_num), as
// the kernel's iw_cm_connect looks it up on the id's device.
func (id *ID) ConnectQPNum(qpNum uint32, p provider.ConnParams) error {
	qp, err := id.lookupQP(qpNum)
	if err != nil {
		return err
	}
	return id.connect(qp, true, p)
}

// lookupQP finds the QP an application created itself: it must live on the
// id's device (siw connects a QP that is IDLE or RTR, and IDLE covers RESET
// and INIT; setUpQP checks the state).
func (id *ID) lookupQP(num uint32) (*verbs.QP, error) {
	qp := verbs.QPByNum(num)
	if qp == nil {
		return nil, unix.EINVAL
	}
	id.mu.Lock()
	dev := id.dev
	id.mu.Unlock()
	if dev != "" && qp.Ctx != nil && qp.Ctx.Dev != nil && qp.Ctx.Dev.Name != dev {
		return nil, unix.EINVAL
	}
	return qp, nil
}

// setUpQP readies the QP a connect or accept binds (the CM's own or the
// application's): one nobody set up (RESET, or INIT as created, without
// rights) gets iw_cm's INIT attributes plus atomics, as IB's CM grants them
// with reads (responder resources), or rdma_cm programs (perftest -R) could
// not use them; one the application set up keeps its own. goiwarp's engine
// attaches a QP from INIT or RTR.
func setUpQP(qp *verbs.QP) error {
	switch qp.State() {
	case verbs.QPSInit:
		if qp.Attr().AccessFlags != 0 {
			return nil
		}
		fallthrough
	case verbs.QPSReset:
		a, mask := connectedQPAttr(verbs.QPSInit)
		a.AccessFlags |= verbs.AccessRemoteAtomic
		return qp.Modify(a, mask)
	case verbs.QPSRTR:
		return nil
	}
	return unix.EINVAL
}

func (id *ID) connect(qp *verbs.QP, app bool, p provider.ConnParams) error {
	if err := checkConn(qp, p); err != nil {
		return err
	}
	if err := setUpQP(qp); err != nil {
		return err
	}
	id.mu.Lock()
	if id.state != StateRouteResolved || id.eng == nil {
		id.mu.Unlock()
		return unix.EINVAL
	}
	if err := id.applyAckTmoLocked(qp); err != nil {
		id.mu.Unlock()
		return err
	}
	if app {
		id.appQP = qp
	}
	laddr, raddr := *id.src, *id.dst
	// The engine dials from the reserved port (binding it with
	// SO_REUSEADDR too); the reservation stays until the engine's first
	// event, when the dial is over: closed earlier, another socket could
	// take the port in between and the dial would fail with EADDRINUSE.
	id.state = StateConnect
	eng := id.eng
	id.mu.Unlock()

	p.PrivateData = slices.Clone(p.PrivateData)
	ep, err := eng.Connect(qp, &laddr, &raddr, p, 0, id.onConnEvent)

	id.mu.Lock()
	defer id.mu.Unlock()
	if err != nil {
		if errnoOf(err) == unix.ECONNREFUSED {
			// Nobody listens: REJECTED, as a TCP RST gives on iWARP
			// (status: rejectStatus).
			id.state = StateClosed
			id.queueLocked(&Event{Type: EventRejected, Status: rejectStatus(err)})
			return nil
		}
		if id.state == StateConnect {
			id.state = StateRouteResolved
		}
		id.appQP = nil
		return err
	}
	id.ep = ep
	if id.destroyed {
		go ep.Disconnect()
	}
	return nil
}

// applyAckTmoLocked gives the connection's QP the ACK timeout set with
// rdma_set_option, as the kernel's CM does where it drives the QP (IB's
// cma_modify_qp_rts); its iw_cm drops it (siw reports 0). goiwarp's CM
// drives the QP on iWARP too, so the option is kept like ibv_modify_qp's
// IBV_QP_TIMEOUT: an attribute reported back, retransmission being TCP's.
func (id *ID) applyAckTmoLocked(qp *verbs.QP) error {
	if id.ackTmo < 0 {
		return nil
	}
	return qp.Modify(verbs.QPAttr{Timeout: uint8(id.ackTmo)}, verbs.QPAttrTimeout)
}

// Accept accepts a connection request (rdma_accept).
func (id *ID) Accept(qp *verbs.QP, p provider.ConnParams) error {
	return id.accept(qp, false, p)
}

// AcceptQPNum is rdma_accept on an id without a QP: the application's own
// QP numbered qpNum (conn_param.qp_num) takes the connection.
func (id *ID) AcceptQPNum(qpNum uint32, p provider.ConnParams) error {
	qp, err := id.lookupQP(qpNum)
	if err != nil {
		return err
	}
	return id.accept(qp, true, p)
}

func (id *ID) accept(qp *verbs.QP, app bool, p provider.ConnParams) error {
	if err := checkConn(qp, p); err != nil {
		return err
	}
	if err := setUpQP(qp); err != nil {
		return err
	}
	id.mu.Lock()
	if id.state != StateConnectRequest {
		id.mu.Unlock()
		return unix.EINVAL
	}
	if err := id.applyAckTmoLocked(qp); err != nil {
		id.mu.Unlock()
		return err
	}
	id.state = StateAccepting
	if app {
		id.appQP = qp
	}
	req := id.req
	id.mu.Unlock()

	p.PrivateData = slices.Clone(p.PrivateData)
	ep, err := req.Accept(qp, p, id.onConnEvent)

	id.mu.Lock()
	defer id.mu.Unlock()
	if err != nil {
		if id.state == StateAccepting {
			id.state = StateConnectRequest
		}
		id.appQP = nil
		return err
	}
	id.req = nil
	id.ep = ep
	if id.listen != nil {
		go id.listen.requestDone()
	}
	if id.destroyed {
		go ep.Disconnect()
	}
	return nil
}

// Establish is rdma_establish on an active id whose connection runs on the
// application's own QP (ConnectQPNum). On IB it sends the RTU that completes
// a connection reported by CONNECT_RESPONSE; iWARP has neither, the
// connection is complete once ESTABLISHED was reported, so this succeeds
// then and is EINVAL in any other state or kind of id.
//
// The kernel's iWARP CM answers EINVAL even then (ucma_accept without
// conn_param reaches cma_accept_iw, which requires one): rping -c -q, which
// calls it after ESTABLISHED, fails against a kernel iWARP device (measured
// on siw 6.1 with rdma-core 44). goiwarp deliberately lets it succeed.
func (id *ID) Establish() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.listen != nil || id.appQP == nil || id.state != StateEstablished {
		return unix.EINVAL
	}
	return nil
}

// Reject refuses a connection request with private data (rdma_reject).
func (id *ID) Reject(privateData []byte) error {
	if len(privateData) > MaxPrivateData {
		return unix.EINVAL
	}
	id.mu.Lock()
	if id.state != StateConnectRequest {
		id.mu.Unlock()
		return unix.EINVAL
	}
	req := id.req
	id.req = nil
	id.state = StateClosed
	id.mu.Unlock()
	err := req.Reject(slices.Clone(privateData))
	if id.listen != nil {
		id.listen.requestDone()
	}
	return err
}

// Disconnect closes the connection gracefully (rdma_disconnect). It is
// idempotent: a second call, or one after the peer closed, succeeds. pending
// tells whether the id's closing event is still to come.
func (id *ID) Disconnect() (pending bool, err error) {
	id.mu.Lock()
	switch id.state {
	case StateConnect, StateAccepting, StateEstablished:
	case StateClosed:
		id.mu.Unlock()
		return false, nil
	default:
		id.mu.Unlock()
		return false, unix.EINVAL
	}
	ep := id.ep
	first := !id.disconnecting
	id.disconnecting = true
	id.mu.Unlock()
	if first && ep != nil {
		ep.Disconnect()
	}
	return true, nil
}

// rejectStatus is REJECTED's status as the kernel's iWARP CM reports it:
// cma_iw_handler turns a CONNECT_REPLY of -ECONNRESET or -ECONNREFUSED into
// REJECTED with the driver's status, and the drivers give
//   - an MPA reject frame (err nil): -ECONNREFUSED, as iw_cxgb4 (siw 6.1
//     reports -ECONNRESET);
//   - a refused TCP connection (ECONNREFUSED): -ECONNRESET, as iw_cxgb4
//     reports its failed active open (CPL_ERR_CONN_RESET; siw instead fails
//     rdma_connect itself with ECONNREFUSED);
//   - a reset or close before the MPA reply (ECONNRESET): -ECONNRESET, as
//     siw's PEER_CLOSE in AWAIT_MPAREP and iw_cxgb4's peer abort.
func rejectStatus(err error) int {
	if err == nil {
		return -int(unix.ECONNREFUSED)
	}
	return -int(unix.ECONNRESET)
}

func eventErrno(err error, def unix.Errno) int {
	if err == nil {
		return -int(def)
	}
	return -int(errnoOf(err))
}

func (id *ID) onConnEvent(ev provider.Event) {
	id.mu.Lock()
	defer id.mu.Unlock()
	st := id.state
	tracef("id %p state %v: engine event %d err %v", id, st, ev.Type, ev.Err)
	if id.sock >= 0 {
		// The dial is over: the port reservation of Connect goes.
		unix.Close(id.sock)
		id.sock = -1
	}
	active := id.listen == nil
	var e *Event
	switch ev.Type {
	case provider.Established:
		if st != StateConnect && st != StateAccepting {
			return
		}
		id.state = StateEstablished
		// The engine reports our negotiated IRD/ORD.
		e = &Event{Type: EventEstablished,
			ResponderResources: ev.Params.IRD, InitiatorDepth: ev.Params.ORD}
		if active {
			e.PrivateData = slices.Clone(ev.Params.PrivateData)
		}
	case provider.Rejected:
		if st != StateConnect {
			return
		}
		id.state = StateClosed
		e = &Event{Type: EventRejected, Status: rejectStatus(ev.Err),
			PrivateData: slices.Clone(ev.Params.PrivateData)}
	case provider.Unreachable, provider.ConnectError:
		if st != StateConnect && st != StateAccepting {
			return
		}
		id.state = StateClosed
		if ev.Type == provider.Unreachable && active {
			e = &Event{Type: EventUnreachable, Status: eventErrno(ev.Err, unix.ETIMEDOUT)}
		} else {
			e = &Event{Type: EventConnectError, Status: eventErrno(ev.Err, unix.ECONNRESET)}
		}
	case provider.Disconnected:
		switch st {
		case StateEstablished:
			id.state = StateClosed
			e = &Event{Type: EventDisconnected}
		case StateConnect, StateAccepting:
			id.state = StateClosed
			e = &Event{Type: EventConnectError, Status: eventErrno(ev.Err, unix.ECONNRESET)}
		default:
			return
		}
	default:
		return
	}
	if e.Type != EventEstablished && e.Type != EventDisconnected && id.appQP != nil {
		// A failed attempt leaves the application's QP in ERR, as siw's
		// release of the endpoint does (siw_qp_llp_close); librdmacm does
		// it only for its own QP, on REJECTED (capi).
		_ = id.appQP.Modify(verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState)
	}
	id.queueLocked(e)
}

// connectedQPAttr is iw_cm's answer for a connection's QP (iwcm.c,
// iw_cm_init_qp_attr): INIT and RTR give access for remote writes and reads,
// RTS nothing; rdma_init_qp_attr adds the port.
func connectedQPAttr(state verbs.QPState) (verbs.QPAttr, int) {
	a := verbs.QPAttr{State: state, PortNum: 1}
	if state == verbs.QPSRTS {
		return a, verbs.QPAttrPort
	}
	a.AccessFlags = verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	return a, verbs.QPAttrState | verbs.QPAttrAccessFlags | verbs.QPAttrPort
}

// InitQPAttr is rdma_init_qp_attr as the kernel answers it on iWARP
// (ucma_init_qp_attr, cma.c's rdma_init_qp_attr, iw_cm_init_qp_attr):
//   - a state beyond ERR, or an id without a device (unbound, bound to a
//     wildcard address): EINVAL;
//   - before rdma_connect (no iw_cm id yet): the state asked for, no access
//     flags, the port;
//   - a connection, from the request or connect through its end (iw_cm's
//     CONN_RECV, CONN_SENT, ESTABLISHED and, once it closed or failed,
//     IDLE): connectedQPAttr for INIT, RTR and RTS, EINVAL for other states;
//   - a listener: EINVAL.
//
// Every other field of the attributes is zero. Measured on Linux 6.1 siw
// with rdma-core 44 (every state, both sides): the same answers, also right
// after rdma_disconnect (iw_cm's CLOSING, which would refuse, has passed
// by the time the call returns there).
func (id *ID) InitQPAttr(state verbs.QPState) (verbs.QPAttr, int, error) {
	if state > verbs.QPSErr {
		return verbs.QPAttr{}, 0, unix.EINVAL
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == "" {
		return verbs.QPAttr{}, 0, unix.EINVAL
	}
	switch id.state {
	case StateAddrBound, StateAddrQuery, StateAddrResolved, StateRouteQuery, StateRouteResolved:
		return verbs.QPAttr{State: state, PortNum: 1},
			verbs.QPAttrState | verbs.QPAttrAccessFlags | verbs.QPAttrPort, nil
	case StateConnect, StateConnectRequest, StateAccepting, StateEstablished, StateClosed:
		switch state {
		case verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS:
			a, mask := connectedQPAttr(state)
			return a, mask, nil
		}
	}
	return verbs.QPAttr{}, 0, unix.EINVAL
}

// Migrate moves the id to another channel (rdma_migrate_id): its queued
// events move along; events already read from the old channel must be
// acknowledged before it returns.
func (id *ID) Migrate(ch *Channel) {
	id.mu.Lock()
	old := id.ch
	id.ch = ch
	if old != ch {
		for _, e := range old.take(id) {
			ch.push(e)
		}
	}
	id.mu.Unlock()
	id.waitAcks()
}

// Destroy releases the id (rdma_destroy_id): Close, then WaitAcks.
func (id *ID) Destroy() {
	id.Close(true)
	id.WaitAcks()
}

// Close is the first half of rdma_destroy_id: the listener, connection or
// unanswered request go and queued events are dropped. Nothing is queued
// for the id afterwards. hasQP false means the application destroyed the
// id's QP already, which ended the connection: the endpoint is left alone
// (unless the connection runs on the application's own QP, appQP).
func (id *ID) Close(hasQP bool) {
	id.mu.Lock()
	if id.destroyed {
		id.mu.Unlock()
		return
	}
	id.destroyed = true
	prev := id.state
	id.state = StateDestroying
	ln, tcpLn, ep, req, sock, ch := id.ln, id.tcpLn, id.ep, id.req, id.sock, id.ch
	hasQP = hasQP || id.appQP != nil
	id.ln, id.tcpLn, id.ep, id.req, id.sock = nil, nil, nil, nil, -1
	id.mu.Unlock()

	if ln != nil {
		ln.Close()
	}
	if tcpLn != nil {
		_ = tcpLn.Close()
	}
	if req != nil && prev == StateConnectRequest {
		_ = req.Reject(nil)
		if id.listen != nil {
			id.listen.requestDone()
		}
	}
	if ep != nil && hasQP {
		// With the application's own QP (appQP) the connection ends here
		// too, as the kernel's destroy_cm_id ends it; a QP destroyed
		// already left a dead endpoint, whose Disconnect does nothing.
		ep.Disconnect()
	}
	if sock >= 0 {
		unix.Close(sock)
	}
	for _, e := range ch.take(id) {
		if e.Type == EventConnectRequest && e.ID != id {
			e.ID.Destroy() // never seen by the application
		}
	}
}

// WaitAcks returns once every event the application read for the id was
// acknowledged (the second half of rdma_destroy_id).
func (id *ID) WaitAcks() { id.waitAcks() }

// SetOption is rdma_set_option for the options the kernel accepts on iWARP.
func (id *ID) SetOption(level, name int, val []byte) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	getInt := func() (int, error) {
		if len(val) != 4 {
			return 0, unix.EINVAL
		}
		return int(int32(uint32(val[0]) | uint32(val[1])<<8 | uint32(val[2])<<16 | uint32(val[3])<<24)), nil
	}
	switch level {
	case OptionLevelID:
		switch name {
		case OptionTOS:
			if len(val) != 1 {
				return unix.EINVAL
			}
			id.tos = int(val[0])
			if id.sock >= 0 {
				_ = unix.SetsockoptInt(id.sock, unix.IPPROTO_IP, unix.IP_TOS, id.tos)
			}
			return nil
		case OptionReuseAddr:
			v, err := getInt()
			if err != nil {
				return err
			}
			if id.state != StateIdle {
				return unix.EINVAL
			}
			id.reuse = v != 0
			return nil
		case OptionAFOnly:
			v, err := getInt()
			if err != nil {
				return err
			}
			if id.state != StateIdle {
				return unix.EINVAL
			}
			id.afonly = min(max(v, 0), 1)
			return nil
		case OptionAckTmo:
			if len(val) != 1 {
				return unix.EINVAL
			}
			id.ackTmo = int(val[0])
			return nil
		}
	case OptionLevelIB:
		if name == OptionIBPath {
			// A path record on iWARP only completes route resolution.
			if id.state != StateAddrResolved {
				return unix.EINVAL
			}
			id.state = StateRouteResolved
			return nil
		}
	}
	return unix.ENOSYS
}
