package provider

import (
	"bytes"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// paths are the two data paths a connection between goiwarp ends may take.
var paths = []struct {
	name string
	shm  ShmMode
}{{"tcp", ShmOff}, {"shm", ShmOn}}

func modePair(m ShmMode) pairOpts {
	o := pairOpts{cliPol: DefaultPolicy(), srvPol: DefaultPolicy()}
	o.cliPol.SHM, o.srvPol.SHM = m, m
	return o
}

func TestShmNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name          string
		cli, srv      ShmMode
		ring          int
		wantShm       bool
		wantCliReject bool // the client's connect fails (GOIWARP_SHM=1, no peer offer)
		wantSrvReject bool // the server refuses (GOIWARP_SHM=1, no offer)
	}{
		{"auto-auto", ShmAuto, ShmAuto, 0, true, false, false},
		{"auto-small-ring", ShmAuto, ShmAuto, minShmRing, true, false, false},
		{"on-on", ShmOn, ShmOn, 0, true, false, false},
		{"off-auto", ShmOff, ShmAuto, 0, false, false, false},
		{"auto-off", ShmAuto, ShmOff, 0, false, false, false},
		{"on-off", ShmOn, ShmOff, 0, false, true, false},
		{"off-on", ShmOff, ShmOn, 0, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, sp := DefaultPolicy(), DefaultPolicy()
			cp.SHM, sp.SHM = tc.cli, tc.srv
			if tc.ring != 0 {
				cp.ShmRing = tc.ring
			}
			if tc.wantCliReject || tc.wantSrvReject {
				c, s := newSide(t), newSide(t)
				tl, err := netListen()
				require.NoError(t, err)
				acc := make(chan error, 1)
				ln := listenPolicy(tl, func(r *Request) {
					_, err := r.Accept(s.qp, ConnParams{IRD: 4, ORD: 4}, s.cb)
					acc <- err
				}, sp)
				t.Cleanup(ln.Close)
				_, err = connectPolicy(c.qp, nil, ln.Addr(), ConnParams{IRD: 4, ORD: 4}, to, c.cb, &cp)
				require.NoError(t, err)
				if tc.wantSrvReject {
					require.ErrorIs(t, <-acc, errShmUnavailable)
					c.wait(Rejected, to)
					return
				}
				require.NoError(t, <-acc)
				ev := c.wait(ConnectError, to)
				require.ErrorIs(t, ev.Err, errShmUnavailable)
				return
			}
			p := connectPair(t, pairOpts{cliPol: cp, srvPol: sp})
			require.Equal(t, tc.wantShm, p.cli.ep.shm != nil, "client on shm")
			require.Equal(t, tc.wantShm, p.srv.ep.shm != nil, "server on shm")
			if tc.wantShm && tc.ring != 0 {
				require.Equal(t, tc.ring, p.srv.ep.shm.in.Cap(), "the initiator's ring size counts")
			}
			sendWriteRead(t, p)
		})
	}
}

// sendWriteRead moves data both ways with a Send, a Write and a Read.
func sendWriteRead(t *testing.T, p *pair) {
	c, s := p.cli, p.srv
	cb, cmr := c.mem(1<<20, verbs.AccessRemoteWrite)
	sb, smr := s.mem(1<<20, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	for i := range sb {
		sb[i] = byte(i * 31)
	}
	s.postRecv(rqe(7, sge(smr, sb, 0, 1<<20)))
	copy(cb, "hello over memory")
	c.postSend(sqe(1, verbs.WRSend, verbs.SendSignaled, sge(cmr, cb, 0, 17)))
	require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
	rc := pollCQ(t, s.rcq, to)
	require.EqualValues(t, verbs.WCSuccess, rc.Status)
	require.EqualValues(t, 17, rc.ByteLen)
	require.Equal(t, "hello over memory", string(sb[:17]))

	for i := range sb {
		sb[i] = byte(i * 31)
	}
	r := sqe(2, verbs.WRRDMARead, verbs.SendSignaled, sge(cmr, cb, 0, 1<<20))
	r.RKey, r.RemoteAddr = smr.STag, addr(sb, 0)
	c.postSend(r)
	require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
	require.True(t, bytes.Equal(cb, sb), "Read of 1 MiB")

	clear(sb)
	w := sqe(3, verbs.WRRDMAWrite, verbs.SendSignaled, sge(cmr, cb, 0, 1<<20))
	w.RKey, w.RemoteAddr = smr.STag, addr(sb, 0)
	c.postSend(w)
	require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
	require.Eventually(t, func() bool { return bytes.Equal(cb, sb) }, to, time.Millisecond, "Write of 1 MiB")
}

// A peer that is not goiwarp (here a hand-made MPA responder on a raw
// socket) sees the standard MPA request, byte for byte what goiwarp sends
// with the shared-memory path off, and the connection runs over TCP.
func TestShmPlainMPAPeer(t *testing.T) {
	requestBytes := func(m ShmMode) []byte {
		c := newSide(t)
		tl, err := netListen()
		require.NoError(t, err)
		defer tl.Close()
		pol := DefaultPolicy()
		pol.SHM = m
		c.ep, err = connectPolicy(c.qp, nil, tl.Addr().(*net.TCPAddr), ConnParams{IRD: 4, ORD: 4, PrivateData: []byte("pd")}, to, c.cb, &pol)
		require.NoError(t, err)
		raw, err := tl.AcceptTCP()
		require.NoError(t, err)
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(to))
		f, pd, err := readMPAFrame(raw, wire.MPARequest)
		require.NoError(t, err)
		req := wire.AppendMPAFrame(nil, &f, pd)
		// Accept, then expect the initiator's first FPDU on the socket.
		rep := wire.MPAFields{Kind: wire.MPAReply, Enhanced: true, Revision: 2}
		_, err = raw.Write(wire.AppendMPAFrame(nil, &rep, wire.AppendMPAV2PrivateData(nil, wire.MPAV2Params{IRD: 4, ORD: 4}, nil)))
		require.NoError(t, err)
		c.wait(Established, to)
		require.Nil(t, c.ep.shm)
		c.postSend(sqe(0, verbs.WRRDMAWrite, 0))
		require.Equal(t, wire.OpWrite, fpduOp(t, readFPDU(t, raw)))
		return req
	}
	off := requestBytes(ShmOff)
	auto := requestBytes(ShmAuto)
	require.Equal(t, off, auto)
}

// Errors of the target's access checks give the same completions, Terminate
// and async events over shared memory as over TCP.
func TestShmRemoteAccessErrors(t *testing.T) {
	for _, m := range paths {
		for _, tc := range []struct {
			name   string
			op     uint8
			badKey bool
			off    int
			want   uint32
			async  uint32
		}{
			{"write-bad-stag", verbs.WRRDMAWrite, true, 0, verbs.WCSuccess, verbs.EventQPAccessErr},
			{"write-out-of-bounds", verbs.WRRDMAWrite, false, 4000, verbs.WCSuccess, verbs.EventQPAccessErr},
			{"read-bad-stag", verbs.WRRDMARead, true, 0, verbs.WCRemAccessErr, verbs.EventQPAccessErr},
			{"read-out-of-bounds", verbs.WRRDMARead, false, 4000, verbs.WCRemAccessErr, verbs.EventQPAccessErr},
		} {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				p := connectPair(t, modePair(m.shm))
				require.Equal(t, m.shm == ShmOn, p.cli.ep.shm != nil)
				c, s := p.cli, p.srv
				src, smr := c.mem(4096, 0)
				dst, dmr := s.mem(4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
				c.postRecv(rqe(50))
				w := sqe(1, tc.op, verbs.SendSignaled, sge(smr, src, 0, 200))
				w.RKey, w.RemoteAddr = dmr.STag, addr(dst, tc.off)
				if tc.badKey {
					w.RKey ^= 0x5500
				}
				c.postSend(w)
				requireRemoteAccessFails(t, c, s, 1, tc.want, tc.async)
			})
		}
	}
}

// A peer whose connection resets in the middle of a stream of Writes (its
// process died) fails the connection as over TCP: Disconnected, QP in ERR,
// work flushed.
func TestShmPeerDiesMidTransfer(t *testing.T) {
	for _, m := range paths {
		t.Run(m.name, func(t *testing.T) {
			p := connectPair(t, modePair(m.shm))
			c, s := p.cli, p.srv
			src, smr := c.mem(1<<20, 0)
			dst, dmr := s.mem(1<<20, verbs.AccessRemoteWrite)
			c.postRecv(rqe(50))
			for i := range 32 {
				w := sqe(uint64(100+i), verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, 0, 1<<20))
				w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 0)
				c.postSend(w)
			}
			// The kernel resets a dead process's connections that hold
			// unread data; its memory stays mapped by the survivor.
			require.NoError(t, s.ep.rc.Control(func(fd uintptr) {
				require.NoError(t, unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1}))
			}))
			s.ep.Close(false)
			c.wait(Disconnected, to)
			require.Equal(t, verbs.QPSErr, c.qp.State())
			for {
				e := pollCQ(t, c.scq, to)
				require.Contains(t, []uint32{verbs.WCSuccess, verbs.WCWRFlushErr}, e.Status)
				if e.WRID == 131 {
					break
				}
			}
			flushed(t, c.rcq, 50)
		})
	}
}

func TestShmPolicyFromEnv(t *testing.T) {
	for _, tc := range []struct {
		shm, ring string
		want      ShmMode
		wantRing  int
	}{
		{"", "", defaultShm, DefaultShmRing}, // auto, unless this run is GOIWARP_SHM=0
		{"auto", "1048576", ShmAuto, 1 << 20},
		{"0", "65536", ShmOff, 64 << 10},
		{"1", "100000", ShmOn, DefaultShmRing},              // not a power of two
		{"on", "1024", ShmOn, DefaultShmRing},               // below the minimum
		{"maybe", "1073741824", defaultShm, DefaultShmRing}, // both refused
	} {
		t.Run(tc.shm+"/"+tc.ring, func(t *testing.T) {
			t.Setenv("GOIWARP_SHM", tc.shm)
			t.Setenv("GOIWARP_SHM_RING", tc.ring)
			p := PolicyFromEnv()
			require.Equal(t, tc.want, p.SHM)
			require.Equal(t, tc.wantRing, p.ShmRing)
		})
	}
}

// Connections that come and go leave no eventfd, socket or mapping behind.
func TestShmNoLeak(t *testing.T) {
	count := func() (fds, maps int) {
		d, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		m, err := os.ReadFile("/proc/self/maps")
		require.NoError(t, err)
		return len(d), strings.Count(string(m), "goiwarp-shm")
	}
	run := func() {
		t.Run("pair", func(t *testing.T) {
			p := connectPair(t, modePair(ShmOn))
			sendWriteRead(t, p)
			p.cli.ep.Disconnect()
			p.cli.wait(Disconnected, to)
			p.srv.wait(Disconnected, to)
		})
	}
	run() // warm up: listeners, goroutines, free lists
	fds, maps := count()
	for range 10 {
		run()
	}
	require.Eventually(t, func() bool {
		f, m := count()
		return f <= fds && m <= maps
	}, to, 10*time.Millisecond, "fds %d, shm mappings %d before", fds, maps)
}

// A same-host receive goroutine that naps while pollers come by stops
// napping when the application arms a CQ of the QP, and naps no more while
// it is armed, though the application polls once more before it sleeps (as
// rsockets does): it sleeps on the channel from then on, and a message must
// not wait for the lease (here far longer than the wait below) to pass.
func TestShmArmCutsNap(t *testing.T) {
	o := modePair(ShmOn)
	o.srvPol.RxSpin, o.srvPol.PollLease = 0, 10*time.Second
	p := connectPair(t, o)
	require.NotNil(t, p.srv.ep.shm, "the pair runs over the rings")
	b, mr := p.srv.mem(4096, 0)
	cb, cmr := p.cli.mem(4096, 0)
	rx := p.srv.ep.rx.Load()
	// Pollers find a message themselves and come back: the goroutine naps.
	// It may read a message first now and then; a poller that keeps
	// polling reads one of them.
	wrid := uint64(1)
	for ; !rx.napping.Load(); wrid++ {
		require.Less(t, wrid, uint64(1000), "pollers came by, and no nap began")
		sendRecv(t, p, b, mr, cb, cmr, wrid, 64, true)
		for i := 0; i < 100 && !rx.napping.Load(); i++ {
			p.srv.rcq.Progress()
			time.Sleep(100 * time.Microsecond)
		}
	}
	p.srv.rcq.Armed()
	for range 1000 {
		p.srv.rcq.Progress()
	}
	sendRecv(t, p, b, mr, cb, cmr, wrid, 64, false) // waits up to 5 s, never polls
}
