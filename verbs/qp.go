package verbs

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Transport is the provider's connection under an RTS QP: the iWARP engine.
type Transport interface {
	// Kick transmits what the send queue holds. The caller owns the TX token
	// (see QP.TakeTx) and hands it to the transport.
	Kick()
	// Close ends the connection: gracefully (FIN after queued work) or not.
	Close(graceful bool)
	// Progress makes non-blocking progress on the receive side (and on a
	// transmitter waiting for room) from the caller's thread; poll_cq calls
	// it through CQ.Progress when it finds a CQ of the QP empty. It reports
	// whether anything happened. It must be cheap when there is nothing to
	// do.
	Progress() bool
	// Armed tells the QP that the application armed a CQ it completes
	// into (ibv_req_notify_cq): it is about to wait on the CQ's channel
	// rather than poll, so whatever arrives must wake the engine.
	Armed()
}

// AccessWatcher is a Transport that places remote accesses without the
// engine's receive path (same-host direct placement): Modify tells it when
// the QP's access flags change while it is attached.
type AccessWatcher interface {
	AccessChanged()
}

// RecvWaiter is a Transport whose receive path, waiting for a receive
// buffer, reads on when the application posts one (RecvPosted, on the
// posting thread; no verbs lock held).
type RecvWaiter interface {
	RecvPosted()
}

type progHolder struct{ t Transport }

// QPCaps are the queue sizes of a QP.
type QPCaps struct {
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInline uint32
}

// QPInit are the creation attributes of a QP (RC only: iWARP has nothing else).
type QPInit struct {
	PD             *PD
	SendCQ, RecvCQ *CQ
	SRQ            *SRQ
	Caps           QPCaps
	SigAll         bool
	Cookie         uintptr // address of the C struct ibv_qp, for async events
	// Connector numbers and connects the QP when its program uses no CM;
	// nil means the installed one (SetConnector). Tests give each
	// simulated process its own.
	Connector Connector
}

// QPAttr is the part of struct ibv_qp_attr that iWARP uses.
type QPAttr struct {
	State         QPState
	AccessFlags   int
	PortNum       uint8
	PKeyIndex     uint16
	ORD           uint8 // max_rd_atomic: Read/Atomic requests we may have outstanding
	IRD           uint8 // max_dest_rd_atomic: Read/Atomic requests we serve at once
	SQDrainNotify bool

	// Connecting without a CM (see Connector): set at RTR and RTS, kept
	// for ibv_query_qp. The rest of IB's path attributes mean nothing to
	// a TCP stream and are accepted and kept only as far as these go.
	Peer        Peer
	PathMTU     uint8
	Timeout     uint8
	RetryCnt    uint8
	RNRRetry    uint8
	MinRNRTimer uint8
}

// Values of enum ibv_qp_attr_mask that iWARP QPs look at.
const (
	QPAttrState         = 1 << 0
	QPAttrCurState      = 1 << 1
	QPAttrAccessFlags   = 1 << 3
	QPAttrPKeyIndex     = 1 << 4
	QPAttrPort          = 1 << 5
	QPAttrAV            = 1 << 7
	QPAttrPathMTU       = 1 << 8
	QPAttrTimeout       = 1 << 9
	QPAttrRetryCnt      = 1 << 10
	QPAttrRNRRetry      = 1 << 11
	QPAttrRQPSN         = 1 << 12
	QPAttrMaxQPRdAtomic = 1 << 13
	QPAttrMinRNRTimer   = 1 << 15
	QPAttrSQPSN         = 1 << 16
	QPAttrMaxDestRdAtom = 1 << 17
	QPAttrCap           = 1 << 19
	QPAttrDestQPN       = 1 << 20
)

// QP is a reliable-connected queue pair.
type QP struct {
	Ctx            *Context
	PD             *PD
	Num            uint32
	SendCQ, RecvCQ *CQ
	SRQ            *SRQ
	SQ, RQ         *Ring // RQ is nil with an SRQ
	Caps           QPCaps
	SigAll         bool
	Cookie         uintptr

	mu   sync.Mutex
	attr QPAttr
	conn Transport
	// remote is attr.AccessFlags for the engine, which checks every
	// incoming Write, Read Request and Atomic Request against it.
	remote atomic.Int32
	// cmless: the QP was moved to RTR with an address vector and its
	// connection is the Connector's business (connecting, or attached).
	cmless bool
	cn     Connector                  // the one that numbered the QP; nil without one
	prog   atomic.Pointer[progHolder] // conn, for the pollers' progress hook

	// Send queue shadow, guarded by sqMu: sqNext is the next entry to start
	// (advanced by the TX token holder), sqDone marks finished entries so they
	// retire in posting order.
	sqMu   sync.Mutex
	sqNext uint32
	sqDone []sqResult

	// rqMu admits one consumer of the RQ at a time: the receive path, or a
	// flush (the move to ERR, or post_recv's doorbell in ERR from any
	// application thread). A flush holds it throughout: its CQEs keep the
	// RQ's order.
	rqMu sync.Mutex

	// recvWake is signalled when a receive is posted while the receive
	// path waits for one (ArmRecvWait).
	recvWake chan struct{}
}

type sqResult struct {
	done    bool
	status  uint32
	byteLen uint32
}

var qpNumbers atomic.Uint32

// CreateQP creates a QP in RESET.
func (c *Context) CreateQP(in QPInit) (*QP, error) {
	caps := in.Caps
	if in.PD == nil || in.SendCQ == nil || in.RecvCQ == nil ||
		caps.MaxSendWR > MaxQPWR || caps.MaxRecvWR > MaxQPWR ||
		caps.MaxSendSGE > MaxSGE || caps.MaxRecvSGE > MaxSGE || caps.MaxInline > MaxInline {
		return nil, unix.EINVAL
	}
	caps.MaxSendWR = max(caps.MaxSendWR, 1)
	caps.MaxRecvWR = max(caps.MaxRecvWR, 1)
	caps.MaxSendSGE = max(caps.MaxSendSGE, 1)
	caps.MaxRecvSGE = max(caps.MaxRecvSGE, 1)
	sq, err := newRing(int(caps.MaxSendWR), unsafe.Sizeof(SQE{}))
	if err != nil {
		return nil, err
	}
	cn := in.Connector
	if cn == nil {
		cn = currentConnector()
	}
	var num uint32
	if cn != nil {
		num = cn.Number()
	} else {
		num = qpNumbers.Add(1)
	}
	release := func() {
		if cn != nil {
			cn.Release(num)
		}
	}
	qp := &QP{Ctx: c, PD: in.PD, Num: num, cn: cn, SendCQ: in.SendCQ, RecvCQ: in.RecvCQ,
		SRQ: in.SRQ, SQ: sq, SigAll: in.SigAll, Cookie: in.Cookie,
		sqDone: make([]sqResult, sq.Size()), recvWake: make(chan struct{}, 1)}
	if in.SRQ != nil {
		in.SRQ.attach(qp)
	}
	if in.SRQ == nil {
		if qp.RQ, err = newRing(int(caps.MaxRecvWR), unsafe.Sizeof(RQE{})); err != nil {
			sq.free()
			release()
			return nil, err
		}
		caps.MaxRecvWR = qp.RQ.Size()
	} else {
		caps.MaxRecvWR, caps.MaxRecvSGE = 0, 0
	}
	caps.MaxSendWR = sq.Size()
	caps.MaxInline = MaxInline
	qp.Caps = caps
	qp.attr.IRD, qp.attr.ORD = 1, 1
	sq.hdr.Doorbell = 1
	// iWARP has no RESET distinct from INIT (siw's IDLE is both, and
	// ibv_query_qp reports it as INIT): a new QP is in INIT, with no
	// remote rights until ibv_modify_qp or the CM grants them.
	qp.publishState(QPSInit)
	qp.SendCQ.register(qp)
	if qp.RecvCQ != qp.SendCQ {
		qp.RecvCQ.register(qp)
	}
	qpTable.Store(qp.Num, qp)
	return qp, nil
}

func (qp *QP) publishState(s QPState) {
	qp.attr.State = s
	// post_send reads the state, then EarlyPosts: the flag is raised before
	// the state becomes RTR and lowered after it has left RTR.
	if s == QPSRTR && qp.cmless {
		atomic.StoreUint32(&qp.SQ.hdr.EarlyPosts, 1)
		atomic.StoreUint32(&qp.SQ.hdr.State, uint32(s))
	} else {
		atomic.StoreUint32(&qp.SQ.hdr.State, uint32(s))
		atomic.StoreUint32(&qp.SQ.hdr.EarlyPosts, 0)
	}
	if qp.RQ != nil {
		atomic.StoreUint32(&qp.RQ.hdr.State, uint32(s))
	}
}

// Attr returns the current attributes.
func (qp *QP) Attr() QPAttr {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.attr
}

// Allows reports whether the QP's access flags grant the remote access
// (AccessRemoteWrite, AccessRemoteRead or AccessRemoteAtomic) a peer asks
// for; the region's own rights are checked apart (Access).
func (qp *QP) Allows(access int) bool { return int(qp.remote.Load())&access == access }

// State returns the current state.
func (qp *QP) State() QPState { return QPState(atomic.LoadUint32(&qp.SQ.hdr.State)) }

// legalTransition is the RC part of the IB state table; iWARP reaches RTS
// only through a connection (Connect/Accept or a socket handed over).
func legalTransition(from, to QPState) bool {
	switch to {
	case QPSReset, QPSErr:
		return true
	case QPSInit:
		return from == QPSReset || from == QPSInit
	case QPSRTR:
		// RTR again is nothing, as siw ignores it: a modify without a
		// state, or naming RTR, in RTR (rdma_init_qp_attr's RTS answer
		// is IBV_QP_PORT alone).
		return from == QPSInit || from == QPSRTR
	case QPSRTS:
		return from == QPSRTR || from == QPSRTS || from == QPSSQD || from == QPSSQE
	case QPSSQD:
		return from == QPSRTS || from == QPSSQD
	case QPSSQE:
		return false
	}
	return false
}

// cmlessMask is what makes INIT to RTR a connection without a CM: the
// address vector and the peer's QP number.
const cmlessMask = QPAttrAV | QPAttrDestQPN

// Modify applies attributes selected by mask, as ibv_modify_qp does.
func (qp *QP) Modify(a QPAttr, mask int) error {
	qp.mu.Lock()
	cur := qp.attr.State
	to := cur
	if mask&QPAttrState != 0 && !backToSetup(cur, a.State) {
		to = a.State
	}
	fail := func(err error) error {
		qp.mu.Unlock()
		return err
	}
	if mask&QPAttrCurState != 0 && a.State != cur && mask&QPAttrState == 0 {
		return fail(unix.EINVAL)
	}
	if !legalTransition(cur, to) {
		return fail(unix.EINVAL)
	}
	// RESET to INIT needs what iw_cm's INIT attributes carry: access and port
	// (IB also wants a pkey index, which iWARP has no use for).
	if cur == QPSReset && to == QPSInit && mask&(QPAttrAccessFlags|QPAttrPort) != QPAttrAccessFlags|QPAttrPort {
		return fail(unix.EINVAL)
	}
	// INIT to RTR with an address vector and a peer QP number is how
	// InfiniBand programs connect: the Connector sets up the stream.
	startPeer := cur == QPSInit && to == QPSRTR && mask&cmlessMask == cmlessMask
	if startPeer && (qp.cn == nil || qp.conn != nil) {
		return fail(unix.EOPNOTSUPP)
	}
	if to == QPSRTS && cur != QPSRTS && qp.conn == nil && !qp.cmless {
		// RTS needs the LLP stream: only the CM (or a handed-over socket)
		// gets there, or a connection that RTR started.
		return fail(unix.EOPNOTSUPP)
	}
	if mask&QPAttrPort != 0 && a.PortNum != 1 {
		return fail(unix.EINVAL)
	}
	if mask&QPAttrMaxQPRdAtomic != 0 && a.ORD > MaxORD || mask&QPAttrMaxDestRdAtom != 0 && a.IRD > MaxIRD {
		return fail(unix.EINVAL)
	}
	prev := qp.attr
	if mask&QPAttrMaxQPRdAtomic != 0 {
		qp.attr.ORD = a.ORD
	}
	if mask&QPAttrMaxDestRdAtom != 0 {
		qp.attr.IRD = a.IRD
	}
	if mask&QPAttrAccessFlags != 0 {
		qp.attr.AccessFlags = a.AccessFlags
		qp.remote.Store(int32(a.AccessFlags))
	}
	if mask&QPAttrPKeyIndex != 0 {
		qp.attr.PKeyIndex = a.PKeyIndex
	}
	if mask&QPAttrPort != 0 {
		qp.attr.PortNum = a.PortNum
	}
	qp.applyPath(a, mask)
	conn := qp.conn
	cmless := qp.cmless
	if to == QPSReset || to == QPSErr || to == QPSSQD && cur == QPSRTS {
		// Leaving RTS other than for SQD drops the connection; SQD closes it
		// gracefully after the queued work (iWARP has no drained-and-resume).
		if to != QPSSQD {
			qp.conn = nil
		}
	}
	if to == QPSReset {
		qp.cmless = false
	}
	if startPeer {
		qp.cmless = true
	}
	qp.publishState(to)
	peer := qp.attr.Peer
	qp.mu.Unlock()

	if startPeer {
		if err := qp.cn.Start(qp, peer); err != nil {
			// Nothing started: the QP stays as it was.
			qp.mu.Lock()
			if qp.attr.State == QPSRTR && qp.conn == nil {
				qp.cmless = false
				qp.attr = prev
				qp.remote.Store(int32(prev.AccessFlags))
				qp.publishState(cur)
			}
			qp.mu.Unlock()
			return err
		}
	}
	if cmless && (to == QPSReset || to == QPSErr && cur != QPSErr) {
		qp.cn.Cancel(qp)
	}
	if conn != nil && to != QPSSQD && (to == QPSReset || to == QPSErr) {
		qp.setProg(nil)
	}

	switch {
	case to == QPSErr && cur != QPSErr:
		if conn != nil {
			conn.Close(false)
		}
		qp.Flush()
	case to == QPSSQD && cur == QPSRTS && conn != nil:
		conn.Close(true)
	case to == QPSReset:
		if conn != nil {
			conn.Close(false)
		}
		qp.resetQueues()
	case to == QPSRTS && cmless && mask&QPAttrState != 0:
		// (from RTR, or from the RTS the connection brought: Attach)
		qp.cn.Ready(qp)
	}
	if w, ok := conn.(AccessWatcher); ok && mask&QPAttrAccessFlags != 0 && (to == QPSRTS || to == QPSRTR) {
		w.AccessChanged()
	}
	return nil
}

// applyPath keeps the IB path attributes a CM-less connection uses or
// reports (under qp.mu).
func (qp *QP) applyPath(a QPAttr, mask int) {
	p := &qp.attr.Peer
	if mask&QPAttrAV != 0 {
		p.Global, p.DGID, p.SGIDIndex, p.DLID = a.Peer.Global, a.Peer.DGID, a.Peer.SGIDIndex, a.Peer.DLID
	}
	if mask&QPAttrDestQPN != 0 {
		p.DestQPN = a.Peer.DestQPN
	}
	if mask&QPAttrRQPSN != 0 {
		p.RQPSN = a.Peer.RQPSN
	}
	if mask&QPAttrSQPSN != 0 {
		p.SQPSN = a.Peer.SQPSN
	}
	if mask&QPAttrPathMTU != 0 {
		qp.attr.PathMTU = a.PathMTU
	}
	if mask&QPAttrTimeout != 0 {
		qp.attr.Timeout = a.Timeout
	}
	if mask&QPAttrRetryCnt != 0 {
		qp.attr.RetryCnt = a.RetryCnt
	}
	if mask&QPAttrRNRRetry != 0 {
		qp.attr.RNRRetry = a.RNRRetry
	}
	if mask&QPAttrMinRNRTimer != 0 {
		qp.attr.MinRNRTimer = a.MinRNRTimer
	}
}

// Attach binds the connection and moves the QP to RTS. ird/ord are the
// negotiated limits. A QP connected without a CM keeps the IRD/ORD its
// program set (it sets its ORD at RTS, maybe after this) and goes to RTS
// from RTR too: iWARP programs expect to send from a QP they left in RTR
// (perftest's send_bw server, which never moves to RTS, returns receive
// credits with Sends, as it may once rdma_accept made its QP RTS).
func (qp *QP) Attach(conn Transport, ird, ord uint8) error {
	qp.mu.Lock()
	s := qp.attr.State
	ok := s == QPSInit || s == QPSRTR
	if qp.cmless {
		ok = (s == QPSRTR || s == QPSRTS) && qp.conn == nil
	}
	if !ok {
		qp.mu.Unlock()
		return unix.EINVAL
	}
	qp.conn = conn
	if !qp.cmless {
		qp.attr.IRD, qp.attr.ORD = ird, ord
	}
	qp.publishState(QPSRTS)
	qp.mu.Unlock()
	qp.setProg(conn)
	// Work posted before RTS waits in the ring; send it now.
	if qp.TakeTx() {
		conn.Kick()
	}
	return nil
}

// Looked changes whenever the application polls a CQ of the QP (CQ.Looked).
func (qp *QP) Looked() uint64 {
	l := qp.SendCQ.Looked()
	if qp.RecvCQ != qp.SendCQ {
		l += qp.RecvCQ.Looked()
	}
	return l
}

// EventsArmed reports whether a CQ of the QP is armed for an event: the
// application waits on its channel between polls.
func (qp *QP) EventsArmed() bool {
	return qp.SendCQ.armed.Load() || qp.RecvCQ.armed.Load()
}

// Connected reports whether the QP has its stream (for a CM-less QP in
// RTR or RTS: whether the connection came up).
func (qp *QP) Connected() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.conn != nil
}

// SetError moves the QP to ERR from the engine: the connection failed or a
// Terminate was exchanged. Outstanding work is flushed. It reports whether
// this call made the transition.
func (qp *QP) SetError() bool {
	qp.mu.Lock()
	if qp.attr.State == QPSErr || qp.attr.State == QPSReset {
		qp.mu.Unlock()
		return false
	}
	// The transport stays attached: Destroy and the move to RESET still call
	// its Close(false), which waits until the engine no longer touches the rings.
	qp.publishState(QPSErr)
	qp.mu.Unlock()
	qp.Flush()
	return true
}

// Poster is the CPU the application thread that posted last ran on (-1 if
// unknown) and the send queue's producer index, which tells whether it
// posted since an earlier look.
func (qp *QP) Poster() (cpu int, posts uint32) {
	return int(atomic.LoadUint32(&qp.SQ.hdr.PostCPU)) - 1, qp.SQ.prod()
}

// Doorbell is capi's call after post_send found the engine idle: the caller
// now owns the TX token, and must leave it with the engine or in the ring.
// A poster that publishes while the token is held here does not ring, so
// giving the token back looks at the ring again.
func (qp *QP) Doorbell() {
	// After the send is out. The send CQ's turn: the thread that posts
	// usually polls that CQ too, and one yield per turn is enough for it.
	defer qp.SendCQ.turn.tick()
	for {
		qp.mu.Lock()
		conn, st := qp.conn, qp.attr.State
		qp.mu.Unlock()
		switch {
		case st == QPSRTS && conn != nil:
			conn.Kick()
			return
		case st == QPSErr:
			qp.flushSend()
			if !qp.ReleaseTx() {
				return
			}
			// posted during the flush: flush that too
		default:
			// Work waits for the state to change; whoever changes it takes
			// the token (Attach) or flushes (to ERR), unless it came while
			// the token was held here: then look again.
			qp.DropTx()
			if qp.State() == st || !qp.TakeTx() {
				return
			}
		}
	}
}

// TakeTx claims the TX token; false means someone else transmits.
func (qp *QP) TakeTx() bool {
	return atomic.CompareAndSwapUint32(&qp.SQ.hdr.Doorbell, 1, 0)
}

// ReleaseTx gives the TX token back. It reports true when work arrived
// meanwhile and the token was taken again: the caller must go on transmitting.
func (qp *QP) ReleaseTx() bool {
	atomic.StoreUint32(&qp.SQ.hdr.Doorbell, 1)
	qp.sqMu.Lock()
	pending := qp.sqNext != qp.SQ.prod()
	qp.sqMu.Unlock()
	return pending && qp.TakeTx()
}

// DropTx gives the TX token back without looking for work (the engine is
// going away: the QP is being destroyed or reset).
func (qp *QP) DropTx() { atomic.StoreUint32(&qp.SQ.hdr.Doorbell, 1) }

// NextSend returns the next send queue entry to start, for the TX token holder.
func (qp *QP) NextSend() (*SQE, uint32, bool) {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	if qp.sqNext == qp.SQ.prod() {
		return nil, 0, false
	}
	i := qp.sqNext
	qp.sqNext++
	return (*SQE)(qp.SQ.entry(i)), i, true
}

// MoreSends reports whether entries are posted beyond those started.
func (qp *QP) MoreSends() bool {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	return qp.sqNext != qp.SQ.prod()
}

// UnstartSend puts back the entry NextSend just returned (ORD full, fence).
func (qp *QP) UnstartSend(idx uint32) {
	qp.sqMu.Lock()
	if qp.sqNext == idx+1 {
		qp.sqNext = idx
	}
	qp.sqMu.Unlock()
}

// SendEntry returns the send queue entry idx (still owned by the engine).
func (qp *QP) SendEntry(idx uint32) *SQE { return (*SQE)(qp.SQ.entry(idx)) }

// CompleteSend finishes entry idx. Entries retire in posting order: a CQE is
// written for signaled or failed ones when everything before them is done.
func (qp *QP) CompleteSend(idx uint32, status uint32, byteLen uint32) {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	qp.sqDone[idx&qp.SQ.mask] = sqResult{done: true, status: status, byteLen: byteLen}
	qp.retireLocked()
}

func (qp *QP) retireLocked() {
	r := qp.SQ
	c := r.cons()
	for c != qp.sqNext {
		res := &qp.sqDone[c&r.mask]
		if !res.done {
			break
		}
		e := (*SQE)(r.entry(c))
		signaled := e.Flags&SendSignaled != 0 || qp.SigAll || res.status != WCSuccess
		cqe := CQE{WRID: e.WRID, Status: res.status, Opcode: sendWCOpcode(e.Opcode), ByteLen: res.byteLen, QPNum: qp.Num}
		*res = sqResult{}
		c++
		// Free the slot before the CQE is visible: an application that posts
		// as soon as it reaps a completion must find room.
		r.setCons(c)
		if signaled {
			qp.SendCQ.Push(&cqe, false)
		}
	}
}

func sendWCOpcode(op uint8) uint32 {
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCOpRDMAWrite
	case WRRDMARead:
		return WCOpRDMARead
	case WRAtomicCmpSwp:
		return WCOpCompSwap
	case WRAtomicFetchAdd:
		return WCOpFetchAdd
	case WRLocalInv:
		return WCOpLocalInv
	case WRBindMW:
		return WCOpBindMW
	}
	return WCOpSend
}

// Flush completes all outstanding work with IBV_WC_WR_FLUSH_ERR.
func (qp *QP) Flush() {
	qp.flushSend()
	qp.flushRecv()
}

func (qp *QP) flushSend() {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	r := qp.SQ
	qp.sqNext = r.prod()
	for i := r.cons(); i != qp.sqNext; i++ {
		if res := &qp.sqDone[i&r.mask]; !res.done {
			*res = sqResult{done: true, status: WCWRFlushErr}
		}
	}
	qp.retireLocked()
}

func (qp *QP) flushRecv() {
	if qp.RQ == nil {
		if qp.SRQ != nil && qp.SRQ.detach(qp) {
			qp.Ctx.PostAsync(EventQPLastWQE, qp.Cookie)
		}
		return
	}
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	for {
		e, ok := qp.takeRQLocked()
		if !ok {
			return
		}
		qp.RecvCQ.Push(&CQE{WRID: e.WRID, Status: WCWRFlushErr, Opcode: WCOpRecv, QPNum: qp.Num}, false)
	}
}

// PostRecvDoorbell is capi's call after post_recv on a QP in ERR, or on one
// whose receive path waits for a receive (the ring's RNRWait flag was set):
// receives posted to an errored QP complete at once with a flush error; a
// waiting receive path is woken.
func (qp *QP) PostRecvDoorbell() {
	if qp.State() == QPSErr {
		qp.flushRecv()
	}
	qp.wakeRecv()
}

func (qp *QP) wakeRecv() {
	select {
	case qp.recvWake <- struct{}{}:
	default:
	}
	if h := qp.prog.Load(); h != nil {
		if w, ok := h.t.(RecvWaiter); ok {
			w.RecvPosted()
		}
	}
}

func (qp *QP) recvRing() *Ring {
	if qp.SRQ != nil {
		return qp.SRQ.Ring
	}
	return qp.RQ
}

// ArmRecvWait is the receive path's announcement that it waits for a
// receive: it sets the ring's RNRWait flag (post_recv then rings the receive
// doorbell) and reports whether a receive is there already, in which case
// the caller does not wait. The flag is set before prod is read and
// post_recv publishes prod before it swaps the flag (all sequentially
// consistent): a receive posted meanwhile is never missed.
func (qp *QP) ArmRecvWait() bool {
	r := qp.recvRing()
	if r == nil {
		return false
	}
	atomic.StoreUint32(&r.hdr.RNRWait, 1)
	if r.prod() != r.cons() {
		if qp.SRQ == nil {
			atomic.StoreUint32(&r.hdr.RNRWait, 0)
		}
		return true
	}
	return false
}

// RecvWake is signalled after ArmRecvWait when a receive was posted.
func (qp *QP) RecvWake() <-chan struct{} { return qp.recvWake }

func (qp *QP) resetQueues() {
	qp.sqMu.Lock()
	qp.SQ.setProd(0)
	qp.SQ.setCons(0)
	qp.sqNext = 0
	clear(qp.sqDone)
	qp.sqMu.Unlock()
	if qp.RQ != nil {
		qp.RQ.setProd(0)
		qp.RQ.setCons(0)
	}
	atomic.StoreUint32(&qp.SQ.hdr.Doorbell, 1)
}

func (qp *QP) takeRQLocked() (RQE, bool) {
	r := qp.RQ
	c := r.cons()
	if c == r.prod() {
		return RQE{}, false
	}
	e := *(*RQE)(r.entry(c))
	r.setCons(c + 1)
	return e, true
}

// TakeRecv consumes the next receive buffer, from the QP's RQ or its SRQ.
// Only the QP's receive path calls it.
func (qp *QP) TakeRecv() (RQE, bool) {
	if qp.SRQ != nil {
		return qp.SRQ.take()
	}
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	return qp.takeRQLocked()
}

// CompleteRecv writes a receive completion.
func (qp *QP) CompleteRecv(e *RQE, c CQE, solicited bool) {
	c.WRID = e.WRID
	c.QPNum = qp.Num
	qp.RecvCQ.Push(&c, solicited)
}

// Destroy releases the QP's rings; the connection, if any, is aborted.
func (qp *QP) Destroy() {
	qpTable.CompareAndDelete(qp.Num, qp)
	qp.mu.Lock()
	conn := qp.conn
	qp.conn = nil
	cmless := qp.cmless
	qp.cmless = false
	qp.publishState(QPSReset)
	qp.mu.Unlock()
	if cmless {
		qp.cn.Cancel(qp)
	}
	if qp.cn != nil {
		defer qp.cn.Release(qp.Num)
	}
	qp.setProg(nil)
	qp.SendCQ.unregister(qp)
	if qp.RecvCQ != qp.SendCQ {
		qp.RecvCQ.unregister(qp)
	}
	if conn != nil {
		conn.Close(false)
	}
	if qp.SRQ != nil {
		qp.SRQ.detach(qp)
	}
}

// setProg publishes (or, nil, withdraws) the transport for the progress hook.
func (qp *QP) setProg(t Transport) {
	if t == nil {
		if qp.prog.Swap(nil) == nil {
			return
		}
		progressing.remove(qp)
	} else {
		qp.prog.Store(&progHolder{t: t})
		progressing.add(qp)
	}
	qp.SendCQ.updateActive()
	if qp.RecvCQ != qp.SendCQ {
		qp.RecvCQ.updateActive()
	}
}

// FreeRings unmaps the queue memory; capi calls it once the C side forgot it.
func (qp *QP) FreeRings() {
	qp.SQ.free()
	qp.RQ.free()
}
