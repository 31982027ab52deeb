package provider

import (
	"encoding/binary"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Ports the CM-less tests' listeners take (the first free from here).
const cmlessTestBase = 30700

func TestQPNPort(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base      int
		qpn       uint32
		port      int
		reachable bool
	}{
		{"slot 0", 18600, QPNumber(0, 1), 18600, true},
		{"slot 7", 18600, QPNumber(7, 0xffff), 18607, true},
		{"last slot", 18600, QPNumber(254, 3), 18854, true},
		{"no listener", 18600, QPNumber(qpnNoSlot, 3), 0, false},
		{"index 0 is never handed out", 18600, QPNumber(1, 0), 0, false},
		{"beyond port 65535", 65500, QPNumber(100, 1), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, ok := QPNPort(tc.base, tc.qpn)
			assert.Equal(t, tc.reachable, ok)
			assert.Equal(t, tc.port, port)
			assert.Less(t, tc.qpn, uint32(1<<24), "QPNs are 24 bits")
		})
	}
}

func TestHello(t *testing.T) {
	h := hello{dst: 0x10002, src: 0x00003, addr: net.ParseIP("192.0.2.7")}
	b := h.encode()
	require.Len(t, b, helloLen)
	assert.Equal(t, "GIWQ", string(b[:4]))
	assert.EqualValues(t, 0x10002, binary.BigEndian.Uint32(b[8:]), "dst QPN")
	assert.EqualValues(t, 0x00003, binary.BigEndian.Uint32(b[12:]), "src QPN")
	got, ok := parseHello(b)
	require.True(t, ok)
	assert.Equal(t, h.dst, got.dst)
	assert.Equal(t, h.src, got.src)
	assert.True(t, got.addr.Equal(h.addr))
	for n := range len(b) {
		_, ok := parseHello(b[:n])
		assert.False(t, ok, "prefix of %d bytes", n)
	}
	bad := append([]byte(nil), b...)
	bad[4] = 9
	_, ok = parseHello(bad)
	assert.False(t, ok, "unknown version")
	bad[0] = 'X'
	_, ok = parseHello(bad)
	assert.False(t, ok, "bad magic")

	for _, r := range []byte{rejNotReady, rejNoQP, rejMismatch, rejGone} {
		got, ok := parseReject(rejectData(r))
		require.True(t, ok)
		assert.Equal(t, r, got)
	}
	_, ok = parseReject([]byte("GIWQ"))
	assert.False(t, ok)
}

func TestInitiates(t *testing.T) {
	a, b := net.ParseIP("10.0.0.1"), net.ParseIP("10.0.0.2")
	for _, tc := range []struct {
		name       string
		la         net.IP
		lq         uint32
		ra         net.IP
		rq         uint32
		want, fail bool
	}{
		{"smaller address dials", a, 0x50001, b, 0x00001, true, false},
		{"larger address waits", b, 0x00001, a, 0x50001, false, false},
		{"same host: smaller QPN dials", a, 0x00002, a, 0x10001, true, false},
		{"same host: larger QPN waits", a, 0x10001, a, 0x00002, false, false},
		{"a QP to itself", a, 5, a, 5, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := initiates(tc.la, tc.lq, tc.ra, tc.rq)
			if tc.fail {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			other, err := initiates(tc.ra, tc.rq, tc.la, tc.lq)
			require.NoError(t, err)
			assert.NotEqual(t, got, other, "exactly one side dials")
		})
	}
}

var testLo = &verbs.Device{Name: "giw_lo", Ifname: "lo", MAC: [6]byte{2, 0, 0, 0, 0, 1},
	Addrs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}

func gidOf(s string) (g [16]byte) {
	copy(g[:], net.ParseIP(s).To16())
	return
}

func TestPeerAddrs(t *testing.T) {
	devs := func() []*verbs.Device { return []*verbs.Device{testLo} }
	for _, tc := range []struct {
		name          string
		p             verbs.Peer
		local, remote string
		err           bool
	}{
		{"no GRH, LID 0: this host", verbs.Peer{}, "127.0.0.1", "127.0.0.1", false},
		{"no GRH: the LID in our /16", verbs.Peer{DLID: 0x0203}, "127.0.0.1", "127.0.2.3", false},
		{"IPv4-mapped GID", verbs.Peer{Global: true, SGIDIndex: 1, DGID: gidOf("192.0.2.9")}, "127.0.0.1", "192.0.2.9", false},
		{"IPv6 GID", verbs.Peer{Global: true, SGIDIndex: 2, DGID: gidOf("fd00::9")}, "::1", "fd00::9", false},
		{"MAC GID of a local device", verbs.Peer{Global: true, SGIDIndex: 0, DGID: testLo.GID()}, "127.0.0.1", "127.0.0.1", false},
		{"MAC GID of another host", verbs.Peer{Global: true, DGID: [16]byte{2, 9, 9, 9, 9, 9}}, "", "", true},
		{"sgid index beyond the table", verbs.Peer{Global: true, SGIDIndex: 3, DGID: gidOf("10.0.0.1")}, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, r, err := peerAddrs(testLo, tc.p, devs)
			if tc.err {
				assert.ErrorIs(t, err, syscall.EINVAL)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.local, l.String())
			assert.Equal(t, tc.remote, r.String())
		})
	}
}

// testProc is one simulated process: its own manager (listener, QPNs).
func testProc(t *testing.T, timeout, linger time.Duration) *cmlessMgr {
	m := newCMLessMgr()
	m.policy = func() Policy {
		p := DefaultPolicy()
		p.QPPortBase, p.QPConnectTimeout, p.QPLinger, p.Timeout = cmlessTestBase, timeout, linger, 2*time.Second
		p.RefusedRetry = 0
		return p
	}
	m.devs = func() []*verbs.Device { return []*verbs.Device{testLo} }
	return m
}

func (s *side) rtr(qpn uint32, dgid string) error {
	return s.qp.Modify(verbs.QPAttr{State: verbs.QPSRTR, IRD: 4,
		Peer: verbs.Peer{Global: true, SGIDIndex: 1, DGID: gidOf(dgid), DestQPN: qpn}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtom)
}

func (s *side) rts() {
	require.NoError(s.t, s.qp.Modify(verbs.QPAttr{State: verbs.QPSRTS, ORD: 4},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic))
}

func (s *side) waitConnected(d time.Duration) {
	s.t.Helper()
	require.Eventually(s.t, s.qp.Connected, d, time.Millisecond, "qp %#x not connected", s.qp.Num)
}

// asyncEvent reads the context's next async event within d; ok false if none.
func (s *side) asyncEvent(d time.Duration) (uint32, bool) {
	fds := []unix.PollFd{{Fd: int32(s.ctx.AsyncFD()), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(d/time.Millisecond))
	if err != nil || n == 0 {
		return 0, false
	}
	var rec [verbs.AsyncEventSize]byte
	_, err = unix.Read(s.ctx.AsyncFD(), rec[:])
	require.NoError(s.t, err)
	return binary.NativeEndian.Uint32(rec[:]), true
}

// failedWithin checks what a failed CM-less QP shows within d: ERR, the
// posted receive flushed, IBV_EVENT_QP_FATAL.
func (s *side) failedWithin(d time.Duration) {
	s.t.Helper()
	require.Eventually(s.t, func() bool { return s.qp.State() == verbs.QPSErr }, d, time.Millisecond)
	c := pollCQ(s.t, s.rcq, time.Second)
	assert.EqualValues(s.t, verbs.WCWRFlushErr, c.Status)
	assert.EqualValues(s.t, 77, c.WRID)
	ev, ok := s.asyncEvent(time.Second)
	require.True(s.t, ok, "no async event")
	assert.EqualValues(s.t, verbs.EventQPFatal, ev)
}

// exchange checks data both ways over connected a and b.
func exchange(t *testing.T, a, b *side) {
	abuf, amr := a.mem(4096, 0)
	bbuf, bmr := b.mem(4096, 0)
	copy(abuf, "from a")
	copy(bbuf, "from b")
	b.postRecv(rqe(1, sge(bmr, bbuf, 1024, 64)))
	a.postRecv(rqe(2, sge(amr, abuf, 1024, 64)))
	a.postSend(sqe(3, verbs.WRSend, verbs.SendSignaled, sge(amr, abuf, 0, 6)))
	b.postSend(sqe(4, verbs.WRSend, verbs.SendSignaled, sge(bmr, bbuf, 0, 6)))
	for _, s := range []*side{a, b} {
		c := pollCQ(t, s.scq, 5*time.Second)
		require.EqualValues(t, verbs.WCSuccess, c.Status)
		c = pollCQ(t, s.rcq, 5*time.Second)
		require.EqualValues(t, verbs.WCSuccess, c.Status)
		require.EqualValues(t, 6, c.ByteLen)
	}
	assert.Equal(t, "from a", string(bbuf[1024:1030]))
	assert.Equal(t, "from b", string(abuf[1024:1030]))
}

// Two processes on one host, one QP each: whichever reaches RTR first and
// however late the other comes, they connect and move data.
func TestCMLessOrderOfArrival(t *testing.T) {
	for _, tc := range []struct {
		name        string
		activeFirst bool
		gap         time.Duration
		rtsEarly    bool // the first one goes on to RTS before the other's RTR
	}{
		{"waiting side first", false, 0, false},
		{"dialing side first", true, 0, false},
		{"dialing side first, peer 1.5s later", true, 1500 * time.Millisecond, true},
		{"waiting side first, peer 1.5s later", false, 1500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pa, pb := testProc(t, 10*time.Second, time.Second), testProc(t, 10*time.Second, time.Second)
			a, b := newSideOn(t, testLo, pa), newSideOn(t, testLo, pb)
			for _, s := range []struct {
				m  *cmlessMgr
				qp *verbs.QP
			}{{pa, a.qp}, {pb, b.qp}} {
				port, ok := QPNPort(cmlessTestBase, s.qp.Num)
				require.True(t, ok)
				assert.Equal(t, s.m.Port(), port, "the QPN names its process's listener")
			}
			// a was numbered first: same address, smaller QPN, a dials.
			dials, err := initiates(loopback, a.qp.Num, loopback, b.qp.Num)
			require.NoError(t, err)
			require.True(t, dials)
			first, second := b, a
			if tc.activeFirst {
				first, second = a, b
			}
			peerOf := map[*side]*side{a: b, b: a}
			// Receives posted in INIT wait for the connection.
			fbuf, fmr := first.mem(4096, 0)
			first.postRecv(rqe(10, sge(fmr, fbuf, 0, 64)))
			require.NoError(t, first.rtr(peerOf[first].qp.Num, "::ffff:127.0.0.1"))
			if tc.rtsEarly {
				first.rts()
			}
			time.Sleep(tc.gap)
			require.NoError(t, second.rtr(peerOf[second].qp.Num, "::ffff:127.0.0.1"))
			second.rts()
			if !tc.rtsEarly {
				first.rts()
			}
			a.waitConnected(5 * time.Second)
			b.waitConnected(5 * time.Second)
			// The receive posted before the connection gets the first Send.
			sbuf, smr := second.mem(4096, 0)
			copy(sbuf, "early")
			second.postSend(sqe(11, verbs.WRSend, verbs.SendSignaled, sge(smr, sbuf, 0, 5)))
			c := pollCQ(t, first.rcq, 5*time.Second)
			require.EqualValues(t, verbs.WCSuccess, c.Status)
			assert.EqualValues(t, 10, c.WRID)
			assert.Equal(t, "early", string(fbuf[:5]))
			require.EqualValues(t, verbs.WCSuccess, pollCQ(t, second.scq, 5*time.Second).Status)
			exchange(t, a, b)
			_, ev := a.asyncEvent(0)
			assert.False(t, ev, "no async event on a healthy connection")
		})
	}
}

// The MPA exchange advertises the most Reads; the program's max_rd_atomic,
// set at RTS (before or after the stream came up), bounds them.
func TestCMLessORDFromRTS(t *testing.T) {
	for _, early := range []bool{true, false} {
		pa, pb := testProc(t, 5*time.Second, time.Second), testProc(t, 5*time.Second, time.Second)
		a, b := newSideOn(t, testLo, pa), newSideOn(t, testLo, pb)
		require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1"))
		if early {
			a.rts() // ORD 4 before the connection
		}
		require.NoError(t, b.rtr(a.qp.Num, "::ffff:127.0.0.1"))
		a.waitConnected(5 * time.Second)
		if !early {
			a.rts()
		}
		pa.mu.Lock()
		ep := pa.qps[a.qp.Num].att.ep
		pa.mu.Unlock()
		// The dialer caps ORD on Established, which may come just after
		// the QP is connected (the shared-memory set-up's goroutines).
		assert.Eventually(t, func() bool { return ep.ordCap.Load() == 4 }, 5*time.Second, time.Millisecond, "early RTS %v", early)
		assert.Equal(t, 4, ep.tx.ordMax())
		assert.EqualValues(t, 4, a.qp.Attr().ORD, "ibv_query_qp shows the program's ORD")
	}
}

// Two devices of one process: one listener, QPNs told apart by index.
func TestCMLessOneProcess(t *testing.T) {
	p := testProc(t, 5*time.Second, time.Second)
	eth := &verbs.Device{Name: "giw_test0", Ifname: "lo", MAC: [6]byte{2, 0, 0, 0, 0, 2},
		Addrs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	a, b := newSideOn(t, testLo, p), newSideOn(t, eth, p)
	assert.Equal(t, a.qp.Num>>16, b.qp.Num>>16, "one listener slot")
	require.NoError(t, b.rtr(a.qp.Num, "::ffff:127.0.0.1"))
	require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1"))
	a.rts()
	b.rts()
	a.waitConnected(5 * time.Second)
	b.waitConnected(5 * time.Second)
	exchange(t, a, b)
}

func TestCMLessFailures(t *testing.T) {
	const bound = 600 * time.Millisecond
	for _, tc := range []struct {
		name string
		// run sets up a (and maybe b); a must fail within bound+slack
		run   func(t *testing.T, a, b *side, pb *cmlessMgr)
		slack time.Duration
	}{
		{"peer never comes (waiting side)", func(t *testing.T, a, b *side, _ *cmlessMgr) {
			dials, err := initiates(loopback, a.qp.Num, loopback, b.qp.Num)
			require.NoError(t, err)
			require.False(t, dials)
			require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1")) // b never does RTR
		}, time.Second},
		{"peer QP never reaches RTR (dialing side)", func(t *testing.T, a, b *side, _ *cmlessMgr) {
			require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1"))
		}, time.Second},
		{"wrong QPN", func(t *testing.T, a, b *side, pb *cmlessMgr) {
			require.NoError(t, a.rtr(b.qp.Num+100, "::ffff:127.0.0.1")) // b's listener, no such QP
		}, 0},
		{"wrong GID", func(t *testing.T, a, b *side, _ *cmlessMgr) {
			// b expects a at 127.0.0.3; a dials b at 127.0.0.1: both
			// dial (each thinks it has the smaller pair) and both refuse.
			require.NoError(t, b.rtr(a.qp.Num, "::ffff:127.0.0.3"))
			require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1"))
		}, 0},
		{"process gone (nobody listens)", func(t *testing.T, a, b *side, _ *cmlessMgr) {
			require.NoError(t, a.rtr(QPNumber(200, 1), "::ffff:127.0.0.1"))
		}, 0},
		{"peer dies after the connection", func(t *testing.T, a, b *side, _ *cmlessMgr) {
			require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1"))
			require.NoError(t, b.rtr(a.qp.Num, "::ffff:127.0.0.1"))
			a.rts()
			b.rts()
			a.waitConnected(5 * time.Second)
			require.Equal(t, verbs.QPSRTS, a.qp.State())
			b.qp.Destroy() // its process is gone: the stream closes
			// a lingers (GOIWARP_QP_LINGER), then fails
			time.Sleep(bound / 2)
			require.Equal(t, verbs.QPSRTS, a.qp.State(), "still lingering")
		}, bound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pa, pb := testProc(t, bound, bound), testProc(t, bound, bound)
			var a, b *side
			if strings.Contains(tc.name, "waiting side") {
				// b gets the smaller QPN: a waits for it
				b = newSideOn(t, testLo, pb)
				a = newSideOn(t, testLo, pa)
			} else {
				a = newSideOn(t, testLo, pa)
				b = newSideOn(t, testLo, pb)
			}
			abuf, amr := a.mem(4096, 0)
			a.postRecv(rqe(77, sge(amr, abuf, 0, 64)))
			t0 := time.Now()
			tc.run(t, a, b, pb)
			a.failedWithin(bound + tc.slack + time.Second)
			t.Logf("failed after %v", time.Since(t0).Round(time.Millisecond))
		})
	}
}

// What the application does while a connection is being set up ends it
// cleanly: no QP_FATAL, no hang, and a reset QP connects again.
func TestCMLessCancel(t *testing.T) {
	t.Run("destroy while dialing", func(t *testing.T) {
		pa, pb := testProc(t, 10*time.Second, time.Second), testProc(t, 10*time.Second, time.Second)
		a, b := newSideOn(t, testLo, pa), newSideOn(t, testLo, pb)
		require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1")) // b stays in INIT: a retries
		time.Sleep(100 * time.Millisecond)
		t0 := time.Now()
		a.qp.Destroy()
		assert.Less(t, time.Since(t0), time.Second)
		_, ev := a.asyncEvent(200 * time.Millisecond)
		assert.False(t, ev, "no QP_FATAL for a QP the application destroyed")
	})
	t.Run("destroy while waiting", func(t *testing.T) {
		pa, pb := testProc(t, 10*time.Second, time.Second), testProc(t, 10*time.Second, time.Second)
		a, b := newSideOn(t, testLo, pa), newSideOn(t, testLo, pb)
		require.NoError(t, b.rtr(a.qp.Num, "::ffff:127.0.0.1"))
		b.qp.Destroy()
		_, ev := b.asyncEvent(200 * time.Millisecond)
		assert.False(t, ev)
	})
	for _, to := range []verbs.QPState{verbs.QPSReset, verbs.QPSErr} {
		t.Run(map[verbs.QPState]string{verbs.QPSReset: "reset", verbs.QPSErr: "error"}[to]+" while waiting, then again", func(t *testing.T) {
			pa, pb := testProc(t, 10*time.Second, time.Second), testProc(t, 10*time.Second, time.Second)
			a, b := newSideOn(t, testLo, pa), newSideOn(t, testLo, pb)
			bbuf, bmr := b.mem(4096, 0)
			b.postRecv(rqe(5, sge(bmr, bbuf, 0, 64)))
			require.NoError(t, b.rtr(a.qp.Num, "::ffff:127.0.0.1"))
			require.NoError(t, b.qp.Modify(verbs.QPAttr{State: to}, verbs.QPAttrState))
			if to == verbs.QPSErr {
				c := pollCQ(t, b.rcq, time.Second)
				assert.EqualValues(t, verbs.WCWRFlushErr, c.Status, "ERR flushes")
				require.NoError(t, b.qp.Modify(verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
			}
			_, ev := b.asyncEvent(100 * time.Millisecond)
			assert.False(t, ev)
			require.NoError(t, b.qp.Modify(verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
				verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
			require.NoError(t, b.rtr(a.qp.Num, "::ffff:127.0.0.1"))
			require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1"))
			a.rts()
			b.rts()
			a.waitConnected(5 * time.Second)
			b.waitConnected(5 * time.Second)
			exchange(t, a, b)
		})
	}
	t.Run("reset after the connection closes it", func(t *testing.T) {
		pa, pb := testProc(t, 10*time.Second, 300*time.Millisecond), testProc(t, 10*time.Second, 300*time.Millisecond)
		a, b := newSideOn(t, testLo, pa), newSideOn(t, testLo, pb)
		require.NoError(t, a.rtr(b.qp.Num, "::ffff:127.0.0.1"))
		require.NoError(t, b.rtr(a.qp.Num, "::ffff:127.0.0.1"))
		a.rts()
		b.rts()
		b.waitConnected(5 * time.Second)
		require.NoError(t, a.qp.Modify(verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState))
		_, ev := a.asyncEvent(100 * time.Millisecond)
		assert.False(t, ev, "the application's reset is no fatal error")
		bbuf, bmr := b.mem(4096, 0)
		b.postRecv(rqe(77, sge(bmr, bbuf, 0, 64)))
		b.failedWithin(2 * time.Second) // the peer's end is a lost connection
	})
	t.Run("no listener with port base 0", func(t *testing.T) {
		p := testProc(t, time.Second, time.Second)
		pol := p.policy
		p.policy = func() Policy { q := pol(); q.QPPortBase = 0; return q }
		s := newSideOn(t, testLo, p)
		assert.Zero(t, p.Port())
		assert.EqualValues(t, qpnNoSlot, s.qp.Num>>16)
	})
	t.Run("the listener closes with the last QP", func(t *testing.T) {
		p := testProc(t, time.Second, time.Second)
		s := newSideOn(t, testLo, p)
		require.NotZero(t, p.Port())
		s.qp.Destroy()
		assert.Zero(t, p.Port())
		p.mu.Lock()
		assert.Empty(t, p.qps)
		p.mu.Unlock()
	})
}

// CM-less connections are goiwarp to goiwarp: revision 2, and a responder
// that transmits at once (its peer reads the MPA reply exactly), so a QP
// that only sends does not wait out GOIWARP_RESPONDER_HOLD.
func TestCMLessConnPolicy(t *testing.T) {
	t.Setenv("GOIWARP_MPA_REV", "1")
	t.Setenv("GOIWARP_RESPONDER_HOLD", "5s")
	p := newCMLessMgr().connPolicy()
	require.Equal(t, 2, p.Revision)
	require.Zero(t, p.ResponderHold)
	require.True(t, p.cmless)
}
