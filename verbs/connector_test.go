package verbs

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestGIDTable(t *testing.T) {
	mapped := func(s string) (g [16]byte) { copy(g[:], net.ParseIP(s).To16()); return }
	for _, tc := range []struct {
		name  string
		addrs []string
		want  [][16]byte // after entry 0
	}{
		{"loopback", []string{"127.0.0.1", "::1"}, [][16]byte{mapped("127.0.0.1"), mapped("::1")}},
		{"ipv4 first whatever the order", []string{"fd00::2", "192.0.2.2", "fe80::fc:ff:fe00:1"},
			[][16]byte{mapped("192.0.2.2"), mapped("fd00::2"), mapped("fe80::fc:ff:fe00:1")}},
		{"no address", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Device{Name: "giw_x", Ifname: "x", MAC: [6]byte{2, 1, 2, 3, 4, 5}}
			for _, a := range tc.addrs {
				d.Addrs = append(d.Addrs, net.ParseIP(a))
			}
			g := d.GIDs()
			require.Len(t, g, 1+len(tc.want))
			assert.Equal(t, d.GID(), g[0], "entry 0 stays the MAC-based GID")
			if len(tc.want) > 0 {
				assert.Equal(t, tc.want, g[1:])
			}
			_, ok := GIDAddr(g[0])
			assert.False(t, ok, "entry 0 names no address")
			for i, w := range tc.want {
				ip, ok := GIDAddr(g[1+i])
				require.True(t, ok)
				assert.True(t, ip.Equal(net.IP(w[:])), "%v", ip)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		d := &Device{}
		for i := range 40 {
			d.Addrs = append(d.Addrs, net.IPv4(10, 0, 0, byte(i)))
		}
		assert.Len(t, d.GIDs(), MaxGIDs)
	})
}

func TestLID(t *testing.T) {
	for _, tc := range []struct {
		addrs   []string
		lid     uint16
		peerLID uint16
		peer    string // "" when the LID names no address
	}{
		{[]string{"127.0.0.1", "::1"}, 0x0001, 0x0001, "127.0.0.1"},
		{[]string{"fd00::2", "198.18.5.1"}, 0x0501, 0x0502, "198.18.5.2"},
		{[]string{"10.1.200.7"}, 0xc807, 0, ""},
		{[]string{"fd00::2"}, 0, 0x0102, ""},
	} {
		d := &Device{}
		for _, a := range tc.addrs {
			d.Addrs = append(d.Addrs, net.ParseIP(a))
		}
		assert.Equal(t, tc.lid, d.LID(), "%v", tc.addrs)
		ip, ok := d.LIDAddr(tc.peerLID)
		if tc.peer == "" {
			assert.False(t, ok)
			continue
		}
		require.True(t, ok)
		assert.Equal(t, tc.peer, ip.String())
	}
}

func TestGIDAddr(t *testing.T) {
	for _, tc := range []struct {
		gid  string // an IP in text form, or "" for a raw value below
		raw  [16]byte
		want string
	}{
		{gid: "::ffff:10.1.2.3", want: "10.1.2.3"},
		{gid: "::1", want: "::1"},
		{gid: "fe80::1", want: "fe80::1"},
		{raw: [16]byte{}, want: ""},
		{raw: [16]byte{0x02, 0x42, 0xac, 0x11, 0x00, 0x02}, want: ""}, // MAC form
	} {
		g := tc.raw
		if tc.gid != "" {
			copy(g[:], net.ParseIP(tc.gid).To16())
		}
		ip, ok := GIDAddr(g)
		if tc.want == "" {
			assert.False(t, ok, "%x", g)
			continue
		}
		require.True(t, ok, tc.gid)
		assert.Equal(t, tc.want, ip.String())
	}
}

// fakeConnector records what the QP state machine asks of it.
type fakeConnector struct {
	mu       sync.Mutex
	next     uint32
	startErr error
	calls    []string
	released []uint32
}

func (f *fakeConnector) log(s string) { f.mu.Lock(); f.calls = append(f.calls, s); f.mu.Unlock() }
func (f *fakeConnector) Number() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	return 0x20000 | f.next
}
func (f *fakeConnector) Release(n uint32) {
	f.mu.Lock()
	f.released = append(f.released, n)
	f.mu.Unlock()
}
func (f *fakeConnector) Start(*QP, Peer) error { f.log("start"); return f.startErr }
func (f *fakeConnector) Ready(*QP)             { f.log("ready") }
func (f *fakeConnector) Cancel(*QP)            { f.log("cancel") }

type nopTransport struct{ kicks, closes int }

func (n *nopTransport) Kick()          { n.kicks++ }
func (n *nopTransport) Close(bool)     { n.closes++ }
func (n *nopTransport) Progress() bool { return false }
func (n *nopTransport) Armed()         {}

func cmlessQP(t *testing.T, fc *fakeConnector) *QP {
	c := openCtx(t)
	cq, err := c.CreateCQ(16, nil, 0)
	require.NoError(t, err)
	t.Cleanup(cq.Destroy)
	qp, err := c.CreateQP(QPInit{PD: c.AllocPD(), SendCQ: cq, RecvCQ: cq, Connector: fc,
		Caps: QPCaps{MaxSendWR: 4, MaxRecvWR: 4}})
	require.NoError(t, err)
	t.Cleanup(qp.FreeRings)
	toInit(t, qp)
	return qp
}

var rtr = QPAttr{State: QPSRTR, Peer: Peer{Global: true, DestQPN: 0x10001, RQPSN: 7}, IRD: 4}

const rtrMask = QPAttrState | QPAttrAV | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtom |
	QPAttrPathMTU | QPAttrMinRNRTimer

func TestConnectorStateMachine(t *testing.T) {
	t.Run("numbers come from the connector and go back to it", func(t *testing.T) {
		fc := &fakeConnector{}
		qp := cmlessQP(t, fc)
		assert.EqualValues(t, 0x20001, qp.Num)
		qp.Destroy()
		assert.Equal(t, []uint32{0x20001}, fc.released)
	})
	t.Run("rtr starts, rts before the stream waits, attach goes on", func(t *testing.T) {
		fc := &fakeConnector{}
		qp := cmlessQP(t, fc)
		require.NoError(t, qp.Modify(rtr, rtrMask))
		assert.Equal(t, QPSRTR, qp.State())
		a := qp.Attr()
		assert.EqualValues(t, 0x10001, a.Peer.DestQPN)
		assert.EqualValues(t, 7, a.Peer.RQPSN)
		require.NoError(t, qp.Modify(QPAttr{State: QPSRTS, ORD: 8, Peer: Peer{SQPSN: 9}},
			QPAttrState|QPAttrSQPSN|QPAttrMaxQPRdAtomic))
		assert.Equal(t, QPSRTS, qp.State())
		assert.False(t, qp.Connected())
		tr := &nopTransport{}
		require.NoError(t, qp.Attach(tr, 1, 1))
		assert.True(t, qp.Connected())
		a = qp.Attr()
		assert.EqualValues(t, 8, a.ORD, "the program's ORD stays")
		assert.EqualValues(t, 4, a.IRD)
		assert.EqualValues(t, 9, a.Peer.SQPSN)
		assert.Equal(t, 1, tr.kicks, "work queued while connecting goes out")
		assert.Equal(t, []string{"start", "ready"}, fc.calls)
		qp.Destroy()
		assert.Equal(t, 1, tr.closes)
	})
	t.Run("a stream that comes up in RTR makes the QP RTS", func(t *testing.T) {
		fc := &fakeConnector{}
		qp := cmlessQP(t, fc)
		require.NoError(t, qp.Modify(rtr, rtrMask))
		require.NoError(t, qp.Attach(&nopTransport{}, 1, 1))
		assert.Equal(t, QPSRTS, qp.State())
		require.NoError(t, qp.Modify(QPAttr{State: QPSRTS}, QPAttrState), "the program's own RTS")
		assert.Equal(t, []string{"start", "ready"}, fc.calls)
		qp.Destroy()
	})
	t.Run("a refused start leaves the QP in INIT", func(t *testing.T) {
		fc := &fakeConnector{startErr: unix.EINVAL}
		qp := cmlessQP(t, fc)
		assert.ErrorIs(t, qp.Modify(rtr, rtrMask), unix.EINVAL)
		assert.Equal(t, QPSInit, qp.State())
		assert.ErrorIs(t, qp.Modify(QPAttr{State: QPSRTS}, QPAttrState), unix.EINVAL)
		qp.Destroy()
		assert.Equal(t, []string{"start"}, fc.calls, "nothing to cancel")
	})
	for _, to := range []QPState{QPSReset, QPSErr} {
		t.Run("to "+map[QPState]string{QPSReset: "RESET", QPSErr: "ERR"}[to]+" cancels", func(t *testing.T) {
			fc := &fakeConnector{}
			qp := cmlessQP(t, fc)
			require.NoError(t, qp.Modify(rtr, rtrMask))
			require.NoError(t, qp.Modify(QPAttr{State: to}, QPAttrState))
			assert.Equal(t, []string{"start", "cancel"}, fc.calls)
			if to == QPSReset {
				toInit(t, qp)
				require.NoError(t, qp.Modify(rtr, rtrMask), "a reset QP connects again")
			}
			qp.Destroy()
		})
	}
	t.Run("destroy while connecting cancels", func(t *testing.T) {
		fc := &fakeConnector{}
		qp := cmlessQP(t, fc)
		require.NoError(t, qp.Modify(rtr, rtrMask))
		qp.Destroy()
		assert.Equal(t, []string{"start", "cancel"}, fc.calls)
		assert.Len(t, fc.released, 1)
	})
	t.Run("without a connector RTR with an address vector is unsupported", func(t *testing.T) {
		f := newFixture(t, 16, false)
		toInit(t, f.qp)
		assert.ErrorIs(t, f.qp.Modify(rtr, rtrMask), unix.EOPNOTSUPP)
		assert.Equal(t, QPSInit, f.qp.State())
	})
}
