package rdmacm

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/verbs"
)

// fakeEngine stands in for the iWARP engine: the test drives its callbacks.
type fakeEngine struct {
	mu       sync.Mutex
	conns    []func(provider.Event)
	connErr  error
	listenCB func(Request)
}

type fakeEP struct{ disc int }

func (e *fakeEP) Disconnect() { e.disc++ }

type fakeListener struct{ closed bool }

func (l *fakeListener) Close() { l.closed = true }

func (f *fakeEngine) Connect(qp *verbs.QP, laddr, raddr *net.TCPAddr, p provider.ConnParams,
	timeout time.Duration, cb func(provider.Event)) (Endpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.connErr != nil {
		return nil, f.connErr
	}
	f.conns = append(f.conns, cb)
	return &fakeEP{}, nil
}

func (f *fakeEngine) Listen(ln *net.TCPListener, cb func(Request)) Listener {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listenCB = cb
	return &fakeListener{}
}

type fakeReq struct {
	p        provider.ConnParams
	rejected []byte
	accepted bool
	cb       func(provider.Event)
}

func (r *fakeReq) Params() provider.ConnParams { return r.p }
func (r *fakeReq) Addrs() (*net.TCPAddr, *net.TCPAddr) {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 1}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 2}
}
func (r *fakeReq) Accept(qp *verbs.QP, p provider.ConnParams, cb func(provider.Event)) (Endpoint, error) {
	r.accepted, r.cb = true, cb
	return &fakeEP{}, nil
}
func (r *fakeReq) Reject(pd []byte) error { r.rejected = append([]byte{}, pd...); return nil }

func waitEvent(t *testing.T, ch *Channel) *Event {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if e := ch.TryPop(); e != nil {
			return e
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no event")
	return nil
}

func loopback() *net.TCPAddr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4()} }

// activeID brings an id to ROUTE_RESOLVED.
func activeID(t *testing.T, ch *Channel, eng Engine) *ID {
	id, err := NewID(ch, PSTCP, eng)
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 9}, time.Second))
	e := waitEvent(t, ch)
	require.Equal(t, EventAddrResolved, e.Type)
	e.Owner().Ack()
	require.NoError(t, id.ResolveRoute(time.Second))
	e = waitEvent(t, ch)
	require.Equal(t, EventRouteResolved, e.Type)
	e.Owner().Ack()
	return id
}

func TestPortSpaces(t *testing.T) {
	ch, err := NewChannel()
	require.NoError(t, err)
	defer ch.Close()
	for _, tc := range []struct {
		ps  int
		err error
	}{{PSTCP, nil}, {PSIB, nil}, {PSUDP, unix.EPROTONOSUPPORT}, {PSIPoIB, unix.EPROTONOSUPPORT}} {
		_, err := NewID(ch, tc.ps, &fakeEngine{})
		assert.Equal(t, tc.err, err, "ps %#x", tc.ps)
	}
}

func TestActiveEventMapping(t *testing.T) {
	for _, tc := range []struct {
		name   string
		evs    []provider.Event
		want   []EventType
		status []int
	}{
		{"established then disconnected",
			[]provider.Event{{Type: provider.Established, Params: provider.ConnParams{PrivateData: []byte{7}, IRD: 1, ORD: 2}}, {Type: provider.Disconnected}},
			[]EventType{EventEstablished, EventDisconnected}, []int{0, 0}},
		{"rejected with private data",
			[]provider.Event{{Type: provider.Rejected, Params: provider.ConnParams{PrivateData: []byte("no")}}},
			[]EventType{EventRejected}, []int{-int(unix.ECONNREFUSED)}},
		{"nobody listening", []provider.Event{{Type: provider.Rejected, Err: unix.ECONNREFUSED}},
			[]EventType{EventRejected}, []int{-int(unix.ECONNRESET)}},
		{"reset or closed during mpa", []provider.Event{{Type: provider.Rejected, Err: unix.ECONNRESET}},
			[]EventType{EventRejected}, []int{-int(unix.ECONNRESET)}},
		{"mpa timeout", []provider.Event{{Type: provider.Unreachable}},
			[]EventType{EventUnreachable}, []int{-int(unix.ETIMEDOUT)}},
		{"mpa error", []provider.Event{{Type: provider.ConnectError}},
			[]EventType{EventConnectError}, []int{-int(unix.ECONNRESET)}},
		{"disconnected twice reports once",
			[]provider.Event{{Type: provider.Established}, {Type: provider.Disconnected}, {Type: provider.Disconnected}},
			[]EventType{EventEstablished, EventDisconnected}, []int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := NewChannel()
			require.NoError(t, err)
			defer ch.Close()
			eng := &fakeEngine{}
			id := activeID(t, ch, eng)
			require.ErrorIs(t, id.Connect(nil, provider.ConnParams{}), unix.EINVAL)
			qp := appQP(t)
			require.ErrorIs(t, id.Connect(qp, provider.ConnParams{PrivateData: make([]byte, MaxPrivateData+1)}), unix.EINVAL)
			require.NoError(t, id.Connect(qp, provider.ConnParams{PrivateData: make([]byte, MaxPrivateData)}))
			require.Equal(t, StateConnect, id.State())
			for _, ev := range tc.evs {
				eng.conns[0](ev)
			}
			for i, w := range tc.want {
				e := waitEvent(t, ch)
				assert.Equal(t, w, e.Type)
				assert.Equal(t, tc.status[i], e.Status)
				if e.Type == EventRejected && tc.evs[0].Params.PrivateData != nil {
					assert.Equal(t, tc.evs[0].Params.PrivateData, e.PrivateData)
				}
				if e.Type == EventEstablished {
					assert.Equal(t, tc.evs[0].Params.IRD, e.ResponderResources)
					assert.Equal(t, tc.evs[0].Params.ORD, e.InitiatorDepth)
				}
				e.Owner().Ack()
			}
			assert.Nil(t, ch.TryPop())
			pending, err := id.Disconnect()
			assert.NoError(t, err)
			assert.False(t, pending)
			id.Destroy()
		})
	}
}

func TestPassiveAcceptRejectBacklog(t *testing.T) {
	ch, err := NewChannel()
	require.NoError(t, err)
	defer ch.Close()
	eng := &fakeEngine{}
	l, err := NewID(ch, PSTCP, eng)
	require.NoError(t, err)
	require.NoError(t, l.Bind(loopback()))
	require.NoError(t, l.Listen(1))
	src, _, _ := l.Addrs()
	require.NotZero(t, src.Port)

	// A second listener on the port: EADDRINUSE at bind or listen.
	l2, err := NewID(ch, PSTCP, eng)
	require.NoError(t, err)
	err = l2.Bind(src)
	if err == nil {
		err = l2.Listen(1)
	}
	require.ErrorIs(t, err, unix.EADDRINUSE)
	l2.Destroy()

	r1 := &fakeReq{p: provider.ConnParams{PrivateData: []byte{1, 2, 3}, IRD: 3, ORD: 4}}
	eng.listenCB(r1)
	r2 := &fakeReq{}
	eng.listenCB(r2) // over the backlog of 1
	assert.NotNil(t, r2.rejected)
	e := waitEvent(t, ch)
	require.Equal(t, EventConnectRequest, e.Type)
	assert.Same(t, l, e.Listen)
	assert.Same(t, l, e.Owner())
	assert.Equal(t, []byte{1, 2, 3}, e.PrivateData)
	assert.Equal(t, uint8(4), e.ResponderResources) // the initiator's ORD
	assert.Equal(t, uint8(3), e.InitiatorDepth)     // the initiator's IRD
	n := e.ID
	require.Equal(t, StateConnectRequest, n.State())
	require.NoError(t, n.Accept(appQP(t), provider.ConnParams{IRD: 4, ORD: 3}))
	assert.True(t, r1.accepted)
	r1.cb(provider.Event{Type: provider.Established})
	est := waitEvent(t, ch)
	assert.Equal(t, EventEstablished, est.Type)
	assert.Same(t, n, est.ID)
	est.Owner().Ack()

	// destroy of the listener waits for the unacked CONNECT_REQUEST (a
	// duration: it must still be waiting 50 ms later, when the event is acked)
	done := make(chan struct{})
	go func() { l.Destroy(); close(done) }()
	select {
	case <-done:
		t.Fatal("destroy returned with an unacked event")
	case <-time.After(50 * time.Millisecond):
	}
	e.Owner().Ack()
	<-done

	// reject on another listener
	l3, err := NewID(ch, PSTCP, eng)
	require.NoError(t, err)
	require.NoError(t, l3.Listen(0))
	r3 := &fakeReq{}
	eng.listenCB(r3)
	e = waitEvent(t, ch)
	require.ErrorIs(t, e.ID.Reject(make([]byte, MaxPrivateData+1)), unix.EINVAL)
	require.NoError(t, e.ID.Reject([]byte("busy")))
	assert.Equal(t, []byte("busy"), r3.rejected)
	e.Owner().Ack()
	e.ID.Destroy()
	l3.Destroy()
	n.Destroy()
}

func TestMigrateMovesQueuedEvents(t *testing.T) {
	a, err := NewChannel()
	require.NoError(t, err)
	defer a.Close()
	b, err := NewChannel()
	require.NoError(t, err)
	defer b.Close()
	id, err := NewID(a, PSTCP, &fakeEngine{})
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 9}, time.Second))
	require.Eventually(t, func() bool { return a.Len() == 1 }, time.Second, time.Millisecond)
	id.Migrate(b)
	assert.Equal(t, 0, a.Len())
	e := waitEvent(t, b)
	assert.Equal(t, EventAddrResolved, e.Type)
	e.Owner().Ack()
	id.Destroy()
}

func TestNonblockingChannelFD(t *testing.T) {
	ch, err := NewChannel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, unix.SetNonblock(ch.FD(), true))
	var b [8]byte
	_, err = unix.Read(ch.FD(), b[:])
	require.ErrorIs(t, err, unix.EAGAIN)
	for i := 0; i < 3; i++ {
		ch.push(&Event{Type: EventRouteResolved})
	}
	for i := 0; i < 3; i++ {
		fds := []unix.PollFd{{Fd: int32(ch.FD()), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 1000)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = unix.Read(ch.FD(), b[:])
		require.NoError(t, err)
		require.NotNil(t, ch.Pop())
	}
	_, err = unix.Read(ch.FD(), b[:])
	require.ErrorIs(t, err, unix.EAGAIN)
}

func TestStateErrors(t *testing.T) {
	ch, err := NewChannel()
	require.NoError(t, err)
	defer ch.Close()
	id, err := NewID(ch, PSTCP, &fakeEngine{})
	require.NoError(t, err)
	assert.ErrorIs(t, id.ResolveRoute(time.Second), unix.EINVAL)
	_, err = id.Disconnect()
	assert.ErrorIs(t, err, unix.EINVAL)
	assert.ErrorIs(t, id.Accept(appQP(t), provider.ConnParams{}), unix.EINVAL)
	assert.ErrorIs(t, id.Reject(nil), unix.EINVAL)
	assert.ErrorIs(t, id.SetOption(OptionLevelID, OptionTOS, []byte{1, 2}), unix.EINVAL)
	assert.NoError(t, id.SetOption(OptionLevelID, OptionTOS, []byte{16}))
	assert.NoError(t, id.SetOption(OptionLevelID, OptionAFOnly, []byte{1, 0, 0, 0}))
	assert.ErrorIs(t, id.SetOption(7, 7, nil), unix.ENOSYS)
	require.NoError(t, id.Bind(&net.TCPAddr{IP: net.IPv6loopback}))
	assert.ErrorIs(t, id.Bind(loopback()), unix.EINVAL)
	id.Destroy()
}

// The port reserved at resolve time stays reserved while the engine dials
// from it (with a socket of its own): released earlier, another id's
// resolve could take it and collide with this connection. It is released
// once the engine reports.
func TestSourcePortHeldUntilDialReports(t *testing.T) {
	ch, err := NewChannel()
	require.NoError(t, err)
	defer ch.Close()
	eng := &fakeEngine{}
	id := activeID(t, ch, eng)
	src, _, _ := id.Addrs()
	require.NotZero(t, src.Port)
	bindable := func() bool {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		defer unix.Close(fd)
		return unix.Bind(fd, &unix.SockaddrInet4{Port: src.Port, Addr: [4]byte{127, 0, 0, 1}}) == nil
	}
	require.NoError(t, id.Connect(appQP(t), provider.ConnParams{}))
	assert.False(t, bindable(), "port %d released while the engine dials", src.Port)
	eng.conns[0](provider.Event{Type: provider.Unreachable})
	e := waitEvent(t, ch)
	require.Equal(t, EventUnreachable, e.Type)
	e.Owner().Ack()
	assert.True(t, bindable(), "port %d still held after the dial reported", src.Port)
	id.Destroy()
}

// rdma_init_qp_attr's answers per state of the id, as Linux 6.1 siw with
// rdma-core 44 gives them (tests/rdmacm/cm_appqp.c prints the same table
// from C): mask, access flags, or EINVAL.
func TestInitQPAttr(t *testing.T) {
	const (
		idle      = verbs.QPAttrState | verbs.QPAttrAccessFlags | verbs.QPAttrPort
		connected = verbs.QPAttrState | verbs.QPAttrAccessFlags | verbs.QPAttrPort
		rw        = verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	)
	type answer struct {
		mask, access int
		err          error
	}
	noConn := func(s verbs.QPState) answer {
		if s > verbs.QPSErr {
			return answer{err: unix.EINVAL}
		}
		return answer{mask: idle}
	}
	conn := func(s verbs.QPState) answer {
		switch s {
		case verbs.QPSInit, verbs.QPSRTR:
			return answer{mask: connected, access: rw}
		case verbs.QPSRTS:
			return answer{mask: verbs.QPAttrPort}
		}
		return answer{err: unix.EINVAL}
	}
	refused := func(verbs.QPState) answer { return answer{err: unix.EINVAL} }

	ch, err := NewChannel()
	require.NoError(t, err)
	defer ch.Close()
	eng := &fakeEngine{}
	newID := func() *ID {
		id, err := NewID(ch, PSTCP, eng)
		require.NoError(t, err)
		t.Cleanup(id.Destroy)
		return id
	}
	ack := func(want EventType) *Event {
		e := waitEvent(t, ch)
		require.Equal(t, want, e.Type)
		e.Owner().Ack()
		return e
	}
	for _, tc := range []struct {
		name string
		id   func() *ID
		want func(verbs.QPState) answer
	}{
		{"unbound", newID, refused},
		{"bound to the wildcard address", func() *ID {
			id := newID()
			require.NoError(t, id.Bind(&net.TCPAddr{IP: net.IPv4zero}))
			return id
		}, refused},
		{"bound to loopback (no device, as the kernel binds it)", func() *ID {
			id := newID()
			require.NoError(t, id.Bind(loopback()))
			return id
		}, refused},
		{"resolved from a loopback source", func() *ID {
			id := newID()
			require.NoError(t, id.Bind(loopback()))
			require.NoError(t, id.ResolveAddr(nil, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 9}, time.Second))
			ack(EventAddrResolved)
			return id
		}, noConn},
		{"listening", func() *ID {
			id := newID()
			require.NoError(t, id.Bind(loopback()))
			require.NoError(t, id.Listen(1))
			return id
		}, refused},
		{"route resolved", func() *ID { return activeID(t, ch, eng) }, noConn},
		{"connecting", func() *ID {
			id := activeID(t, ch, eng)
			require.NoError(t, id.Connect(appQP(t), provider.ConnParams{}))
			return id
		}, conn},
		{"established", func() *ID {
			id := activeID(t, ch, eng)
			require.NoError(t, id.Connect(appQP(t), provider.ConnParams{}))
			eng.conns[len(eng.conns)-1](provider.Event{Type: provider.Established})
			ack(EventEstablished)
			return id
		}, conn},
		{"disconnected", func() *ID {
			id := activeID(t, ch, eng)
			require.NoError(t, id.Connect(appQP(t), provider.ConnParams{}))
			eng.conns[len(eng.conns)-1](provider.Event{Type: provider.Established})
			ack(EventEstablished)
			eng.conns[len(eng.conns)-1](provider.Event{Type: provider.Disconnected})
			ack(EventDisconnected)
			return id
		}, conn},
		{"rejected", func() *ID {
			id := activeID(t, ch, eng)
			require.NoError(t, id.Connect(appQP(t), provider.ConnParams{}))
			eng.conns[len(eng.conns)-1](provider.Event{Type: provider.Rejected, Err: unix.ECONNRESET})
			ack(EventRejected)
			return id
		}, conn},
		{"connect request", func() *ID {
			l := newID()
			require.NoError(t, l.Bind(loopback()))
			require.NoError(t, l.Listen(4))
			eng.listenCB(&fakeReq{})
			e := ack(EventConnectRequest)
			t.Cleanup(e.ID.Destroy)
			return e.ID
		}, conn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.id()
			for s := verbs.QPSReset; s <= verbs.QPSErr+1; s++ {
				a, mask, err := id.InitQPAttr(s)
				w := tc.want(s)
				if w.err != nil {
					assert.ErrorIs(t, err, w.err, "state %v", s)
					continue
				}
				require.NoError(t, err, "state %v", s)
				assert.Equal(t, verbs.QPAttr{State: s, PortNum: 1, AccessFlags: w.access}, a, "state %v", s)
				assert.Equal(t, w.mask, mask, "state %v", s)
			}
		})
	}
}

// appQP is a QP an application created itself on giw_lo, as created.
func appQP(t *testing.T) *verbs.QP {
	ctx, err := verbs.Open(&verbs.Device{Name: "giw_lo", Ifname: "lo"})
	require.NoError(t, err)
	cq, err := ctx.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	qp, err := ctx.CreateQP(verbs.QPInit{PD: ctx.AllocPD(), SendCQ: cq, RecvCQ: cq,
		Caps: verbs.QPCaps{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { qp.Destroy(); qp.FreeRings(); cq.Destroy(); ctx.Close() })
	return qp
}

// conn_param.qp_num: the connection is bound to the application's own QP
// (found by number on the id's device, moved from RESET to INIT as siw
// takes an IDLE QP), rdma_establish completes nothing but succeeds once
// established, and a failed attempt leaves the QP in ERR as siw does.
func TestAppQP(t *testing.T) {
	ch, err := NewChannel()
	require.NoError(t, err)
	defer ch.Close()
	eng := &fakeEngine{}

	t.Run("unknown number", func(t *testing.T) {
		id := activeID(t, ch, eng)
		defer id.Destroy()
		assert.ErrorIs(t, id.ConnectQPNum(0, provider.ConnParams{}), unix.EINVAL)
		assert.ErrorIs(t, id.ConnectQPNum(^uint32(0), provider.ConnParams{}), unix.EINVAL)
		assert.Equal(t, StateRouteResolved, id.State())
	})
	t.Run("destroyed QP", func(t *testing.T) {
		id := activeID(t, ch, eng)
		defer id.Destroy()
		qp := appQP(t)
		qp.Destroy()
		assert.ErrorIs(t, id.ConnectQPNum(qp.Num, provider.ConnParams{}), unix.EINVAL)
	})
	t.Run("QP of another device", func(t *testing.T) {
		id := activeID(t, ch, eng)
		defer id.Destroy()
		ctx, err := verbs.Open(&verbs.Device{Name: "giw_other", Ifname: "other"})
		require.NoError(t, err)
		defer ctx.Close()
		cq, err := ctx.CreateCQ(4, nil, 0)
		require.NoError(t, err)
		defer cq.Destroy()
		qp, err := ctx.CreateQP(verbs.QPInit{PD: ctx.AllocPD(), SendCQ: cq, RecvCQ: cq})
		require.NoError(t, err)
		defer func() { qp.Destroy(); qp.FreeRings() }()
		assert.ErrorIs(t, id.ConnectQPNum(qp.Num, provider.ConnParams{}), unix.EINVAL)
	})
	for _, tc := range []struct {
		name    string
		outcome provider.Event
		want    EventType
		qpState verbs.QPState
	}{
		{"established", provider.Event{Type: provider.Established}, EventEstablished, verbs.QPSInit},
		{"reset during mpa", provider.Event{Type: provider.Rejected, Err: unix.ECONNRESET}, EventRejected, verbs.QPSErr},
		{"mpa timeout", provider.Event{Type: provider.Unreachable}, EventUnreachable, verbs.QPSErr},
		{"bad reply", provider.Event{Type: provider.ConnectError}, EventConnectError, verbs.QPSErr},
	} {
		t.Run("active "+tc.name, func(t *testing.T) {
			id := activeID(t, ch, eng)
			defer id.Destroy()
			qp := appQP(t)
			require.NoError(t, id.ConnectQPNum(qp.Num, provider.ConnParams{IRD: 1, ORD: 1}))
			assert.Equal(t, verbs.QPSInit, qp.State(), "RESET moved to INIT")
			assert.ErrorIs(t, id.Establish(), unix.EINVAL, "before ESTABLISHED")
			eng.conns[len(eng.conns)-1](tc.outcome)
			e := waitEvent(t, ch)
			require.Equal(t, tc.want, e.Type)
			e.Owner().Ack()
			// The fake engine does not attach: the QP is where the CM left it.
			assert.Equal(t, tc.qpState, qp.State())
			if tc.want == EventEstablished {
				assert.NoError(t, id.Establish())
			} else {
				assert.ErrorIs(t, id.Establish(), unix.EINVAL)
			}
		})
	}
	t.Run("passive", func(t *testing.T) {
		l, err := NewID(ch, PSTCP, eng)
		require.NoError(t, err)
		defer l.Destroy()
		require.NoError(t, l.Bind(loopback()))
		require.NoError(t, l.Listen(4))
		r := &fakeReq{}
		eng.listenCB(r)
		e := waitEvent(t, ch)
		require.Equal(t, EventConnectRequest, e.Type)
		n := e.ID
		e.Owner().Ack()
		defer n.Destroy()
		qp := appQP(t)
		// As rping -s -q: INIT, RTR and RTS from rdma_init_qp_attr first.
		for _, s := range []verbs.QPState{verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS} {
			if s == verbs.QPSInit {
				require.NoError(t, qp.Modify(verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrAccessFlags|verbs.QPAttrPKeyIndex))
			}
			a, mask, err := n.InitQPAttr(s)
			require.NoError(t, err)
			require.NoError(t, qp.Modify(a, mask), "to %v", s)
		}
		require.Equal(t, verbs.QPSRTR, qp.State(), "RTS's answer changes no state")
		assert.ErrorIs(t, n.AcceptQPNum(qp.Num+1000, provider.ConnParams{}), unix.EINVAL)
		require.NoError(t, n.AcceptQPNum(qp.Num, provider.ConnParams{}))
		require.True(t, r.accepted)
		r.cb(provider.Event{Type: provider.Established})
		e = waitEvent(t, ch)
		require.Equal(t, EventEstablished, e.Type)
		e.Owner().Ack()
		assert.ErrorIs(t, n.Establish(), unix.EINVAL, "passive ids have nothing to establish")
	})
}

// rdma_set_option's ACK timeout reaches the connection's QP (active and
// passive), as ibv_modify_qp's IBV_QP_TIMEOUT would; unset, the QP keeps its own.
func TestAckTimeoutReachesQP(t *testing.T) {
	ch, err := NewChannel()
	require.NoError(t, err)
	defer ch.Close()
	eng := &fakeEngine{}

	id := activeID(t, ch, eng)
	defer id.Destroy()
	assert.ErrorIs(t, id.SetOption(OptionLevelID, OptionAckTmo, []byte{21, 0}), unix.EINVAL)
	require.NoError(t, id.SetOption(OptionLevelID, OptionAckTmo, []byte{21}))
	qp := appQP(t)
	require.NoError(t, id.ConnectQPNum(qp.Num, provider.ConnParams{}))
	assert.Equal(t, uint8(21), qp.Attr().Timeout)

	l, err := NewID(ch, PSTCP, eng)
	require.NoError(t, err)
	defer l.Destroy()
	require.NoError(t, l.Bind(loopback()))
	require.NoError(t, l.Listen(4))
	for _, tmo := range []int{-1, 14} {
		eng.listenCB(&fakeReq{})
		e := waitEvent(t, ch)
		require.Equal(t, EventConnectRequest, e.Type)
		n := e.ID
		e.Owner().Ack()
		if tmo >= 0 {
			require.NoError(t, n.SetOption(OptionLevelID, OptionAckTmo, []byte{byte(tmo)}))
		}
		qp := appQP(t)
		require.NoError(t, qp.Modify(verbs.QPAttr{Timeout: 3}, verbs.QPAttrTimeout))
		require.NoError(t, n.AcceptQPNum(qp.Num, provider.ConnParams{}))
		assert.Equal(t, uint8(max(tmo, 3)), qp.Attr().Timeout)
		n.Destroy()
	}
}
