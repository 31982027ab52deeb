package provider

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A test side: one context, PD, CQs and QP, driven the way capi drives them.
type side struct {
	t      testing.TB
	ctx    *verbs.Context
	pd     *verbs.PD
	scq    *verbs.CQ
	rcq    *verbs.CQ
	qp     *verbs.QP
	ep     *Endpoint
	events chan Event
}

func newSide(t testing.TB) *side {
	return newSideOn(t, &verbs.Device{Name: "giw_lo", Ifname: "lo"}, nil)
}

// newSideOn makes a side on dev whose QP is numbered (and, without a CM,
// connected) by cn; nil is verbs' own numbering.
func newSideOn(t testing.TB, dev *verbs.Device, cn verbs.Connector) *side {
	ctx, err := verbs.Open(dev)
	require.NoError(t, err)
	s := &side{t: t, ctx: ctx, pd: ctx.AllocPD(), events: make(chan Event, 16)}
	s.scq, err = ctx.CreateCQ(256, nil, 0)
	require.NoError(t, err)
	s.rcq, err = ctx.CreateCQ(256, nil, 0)
	require.NoError(t, err)
	s.qp, err = ctx.CreateQP(verbs.QPInit{PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
		Caps: verbs.QPCaps{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 8, MaxRecvSGE: 8}, Connector: cn})
	require.NoError(t, err)
	require.NoError(t, s.qp.Modify(verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
	t.Cleanup(func() {
		s.qp.Destroy()
		s.qp.FreeRings()
		s.scq.Destroy()
		s.rcq.Destroy()
		ctx.Close()
	})
	return s
}

func (s *side) cb(ev Event) { s.events <- ev }

func (s *side) wait(want EventType, d time.Duration) Event {
	s.t.Helper()
	select {
	case ev := <-s.events:
		require.Equal(s.t, want, ev.Type, "event %+v", ev)
		return ev
	case <-time.After(d):
		s.t.Fatalf("no event %v within %v", want, d)
	}
	return Event{}
}

// Ring access as capi does it (layout of capi/giw_ring.h).
type ringView struct {
	base unsafe.Pointer
}

func (r ringView) prod() *uint32 { return (*uint32)(r.base) }
func (r ringView) cons() *uint32 { return (*uint32)(unsafe.Add(r.base, 64)) }
func (r ringView) size() uint32  { return *(*uint32)(unsafe.Add(r.base, 128)) }
func (r ringView) esz() uint32   { return *(*uint32)(unsafe.Add(r.base, 132)) }
func (r ringView) entry(i uint32) unsafe.Pointer {
	return unsafe.Add(r.base, 192+uintptr(i&(r.size()-1))*uintptr(r.esz()))
}

func (s *side) postSend(e verbs.SQE) {
	r := ringView{s.qp.SQ.Base()}
	p := atomic.LoadUint32(r.prod())
	if p-atomic.LoadUint32(r.cons()) >= r.size() { // not require.Less: allocation-free (TestDataPathAllocs)
		s.t.Fatalf("SQ full")
	}
	*(*verbs.SQE)(r.entry(p)) = e
	atomic.StoreUint32(r.prod(), p+1)
	if s.qp.TakeTx() {
		s.qp.Doorbell()
	}
}

func (s *side) postRecv(e verbs.RQE) {
	r := ringView{s.qp.RQ.Base()}
	p := atomic.LoadUint32(r.prod())
	*(*verbs.RQE)(r.entry(p)) = e
	atomic.StoreUint32(r.prod(), p+1)
	s.qp.PostRecvDoorbell()
}

func pollCQ(t testing.TB, cq *verbs.CQ, d time.Duration) verbs.CQE {
	t.Helper()
	r := ringView{cq.Ring.Base()}
	deadline := time.Now().Add(d)
	for {
		c := atomic.LoadUint32(r.cons())
		if atomic.LoadUint32(r.prod()) != c {
			e := *(*verbs.CQE)(r.entry(c))
			atomic.StoreUint32(r.cons(), c+1)
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completion within %v", d)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// pollProgress polls as an application spinning on ibv_poll_cq does: an
// empty CQ makes progress on its QPs.
func pollProgress(t *testing.T, cq *verbs.CQ, d time.Duration) verbs.CQE {
	t.Helper()
	deadline := time.Now().Add(d)
	for cqEmpty(cq) {
		cq.Progress()
		if time.Now().After(deadline) {
			t.Fatalf("no completion within %v", d)
		}
	}
	return pollCQ(t, cq, 0)
}

func cqEmpty(cq *verbs.CQ) bool {
	r := ringView{cq.Ring.Base()}
	return atomic.LoadUint32(r.prod()) == atomic.LoadUint32(r.cons())
}

// mem is mmap'd (non-Go) memory registered as an MR.
func (s *side) mem(size int, access int) ([]byte, *verbs.MR) {
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(s.t, err)
	addr := uintptr(unsafe.Pointer(&b[0]))
	mr, err := s.pd.RegMR(addr, uint64(size), uint64(addr), access|verbs.AccessLocalWrite)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { mr.Dereg(); _ = unix.Munmap(b) })
	return b, mr
}

func sge(mr *verbs.MR, b []byte, off, n int) verbs.SGE {
	return verbs.SGE{Addr: uint64(uintptr(unsafe.Pointer(&b[off]))), Length: uint32(n), LKey: mr.STag}
}

func addr(b []byte, off int) uint64 { return uint64(uintptr(unsafe.Pointer(&b[off]))) }

func sqe(wrid uint64, op uint8, flags uint8, sges ...verbs.SGE) verbs.SQE {
	e := verbs.SQE{WRID: wrid, Opcode: op, Flags: flags, NumSGE: uint8(len(sges))}
	copy(e.SGE[:], sges)
	return e
}

func rqe(wrid uint64, sges ...verbs.SGE) verbs.RQE {
	e := verbs.RQE{WRID: wrid, NumSGE: uint32(len(sges))}
	copy(e.SGE[:], sges)
	return e
}

// pair is two connected sides.
type pair struct {
	cli, srv *side
	ln       *Listener
	srvEst   Event
	cliEst   Event
}

type pairOpts struct {
	cliPol, srvPol Policy
	cliPD, srvPD   []byte
	ird, ord       uint8
	noKick         bool // do not send the first FPDU from the client
	srvAccess      int  // the server QP's access flags; 0: newSide's
}

func connectPair(t testing.TB, o pairOpts) *pair {
	t.Helper()
	if o.cliPol.Revision == 0 {
		o.cliPol = DefaultPolicy()
	}
	if o.srvPol.Revision == 0 {
		o.srvPol = DefaultPolicy()
	}
	if o.ird == 0 {
		o.ird, o.ord = 4, 4
	}
	p := &pair{cli: newSide(t), srv: newSide(t)}
	if o.srvAccess != 0 {
		require.NoError(t, p.srv.qp.Modify(verbs.QPAttr{AccessFlags: o.srvAccess}, verbs.QPAttrAccessFlags))
	}
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	reqs := make(chan *Request, 1)
	p.ln = listenPolicy(tl, func(r *Request) { reqs <- r }, o.srvPol)
	t.Cleanup(p.ln.Close)
	cp := o.cliPol
	p.cli.ep, err = connectPolicy(p.cli.qp, nil, p.ln.Addr(), ConnParams{PrivateData: o.cliPD, IRD: o.ird, ORD: o.ord},
		5*time.Second, p.cli.cb, &cp)
	require.NoError(t, err)
	var r *Request
	select {
	case r = <-reqs:
	case <-time.After(5 * time.Second):
		t.Fatal("no request")
	}
	require.Equal(t, string(o.cliPD), string(r.Params.PrivateData))
	p.srv.ep, err = r.Accept(p.srv.qp, ConnParams{PrivateData: o.srvPD, IRD: o.ird, ORD: o.ord}, p.srv.cb)
	require.NoError(t, err)
	p.cliEst = p.cli.wait(Established, 5*time.Second)
	require.Equal(t, string(o.srvPD), string(p.cliEst.Params.PrivateData))
	if !o.noKick && !o.cliPol.P2P {
		// MPA v2 without P2P: the initiator transmits first.
		p.cli.postSend(sqe(0, verbs.WRRDMAWrite, 0))
	}
	if !o.noKick || o.cliPol.P2P {
		p.srvEst = p.srv.wait(Established, 5*time.Second)
	}
	return p
}

func init() {
	// GOIWARP_SHM=0 go test: the whole suite over TCP.
	if PolicyFromEnv().SHM == ShmOff {
		defaultShm = ShmOff
	}
}

// tcpPolicy is the default policy without the shared-memory path, for tests
// of the socket's own behaviour.
func tcpPolicy() Policy {
	p := DefaultPolicy()
	p.SHM = ShmOff
	return p
}

// tcpPair is pairOpts for a connection over TCP.
func tcpPair() pairOpts { return pairOpts{cliPol: tcpPolicy(), srvPol: tcpPolicy()} }

func netListen() (*net.TCPListener, error) {
	return net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
}

// freeLocalPort is a loopback address whose port nobody holds now.
func freeLocalPort(t *testing.T) *net.TCPAddr {
	l, err := netListen()
	require.NoError(t, err)
	a := l.Addr().(*net.TCPAddr)
	require.NoError(t, l.Close())
	return a
}
