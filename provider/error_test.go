package provider

import (
	"bytes"
	"encoding/hex"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

func TestConnectFailures(t *testing.T) {
	c := newSide(t)
	pol := DefaultPolicy()

	// Closed port: Rejected with ECONNREFUSED so clients retry.
	tl, err := netListen()
	require.NoError(t, err)
	a := tl.Addr().(*net.TCPAddr)
	tl.Close()
	_, err = connectPolicy(c.qp, nil, a, ConnParams{}, time.Second, c.cb, &pol)
	require.NoError(t, err)
	ev := c.wait(Rejected, to)
	require.ErrorIs(t, ev.Err, syscall.ECONNREFUSED)

	// A listener that accepts TCP but never answers MPA: Unreachable in time.
	tl, err = netListen()
	require.NoError(t, err)
	defer tl.Close()
	go func() {
		conn, err := tl.Accept()
		if err == nil {
			defer conn.Close()
			_, _ = io.Copy(io.Discard, conn)
		}
	}()
	start := time.Now()
	_, err = connectPolicy(c.qp, nil, tl.Addr().(*net.TCPAddr), ConnParams{}, 300*time.Millisecond, c.cb, &pol)
	require.NoError(t, err)
	c.wait(Unreachable, to)
	require.Less(t, time.Since(start), 3*time.Second)
	require.Equal(t, verbs.QPSInit, c.qp.State())
}

// A listener drops a peer that never sends its MPA request.
func TestListenerTimeout(t *testing.T) {
	tl, err := netListen()
	require.NoError(t, err)
	pol := DefaultPolicy()
	pol.Timeout = 200 * time.Millisecond
	ln := listenPolicy(tl, func(r *Request) { t.Error("unexpected request") }, pol)
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}

func flushed(t *testing.T, cq *verbs.CQ, wrid uint64) {
	t.Helper()
	e := pollCQ(t, cq, to)
	require.EqualValues(t, wrid, e.WRID)
	require.EqualValues(t, verbs.WCWRFlushErr, e.Status)
}

func TestReceiveNotPosted(t *testing.T) {
	p := connectPair(t, pairOpts{})
	c, s := p.cli, p.srv
	src, smr := c.mem(4096, 0)
	c.postRecv(rqe(77, sge(smr, src, 0, 100)))
	c.postSend(sqe(1, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, 100)))
	// Done once on the socket (as siw), unless the Terminate overtook that.
	require.Contains(t, []uint32{verbs.WCSuccess, verbs.WCWRFlushErr}, pollCQ(t, c.scq, to).Status)
	s.wait(Disconnected, to)
	c.wait(Disconnected, to)
	require.Equal(t, verbs.QPSErr, s.qp.State())
	require.Equal(t, verbs.QPSErr, c.qp.State())
	flushed(t, c.rcq, 77)
	// Work posted afterwards is flushed.
	c.postSend(sqe(2, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, 100)))
	flushed(t, c.scq, 2)
}

func TestInvalidLKey(t *testing.T) {
	p := connectPair(t, pairOpts{})
	c := p.cli
	src, smr := c.mem(4096, 0)
	bad := sge(smr, src, 0, 100)
	bad.LKey ^= 0x5a5a5a5a
	c.postRecv(rqe(9))
	c.postSend(sqe(1, verbs.WRSend, verbs.SendSignaled, bad))
	e := pollCQ(t, c.scq, to)
	require.EqualValues(t, 1, e.WRID)
	require.EqualValues(t, verbs.WCLocProtErr, e.Status)
	c.wait(Disconnected, to)
	require.Equal(t, verbs.QPSErr, c.qp.State())
	flushed(t, c.rcq, 9)
	p.srv.wait(Disconnected, to)
}

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name   string
		op     uint8
		access int
		off    int
		want   uint32
		async  uint32
	}{
		{"write-without-remote-write", verbs.WRRDMAWrite, verbs.AccessRemoteRead, 0, verbs.WCSuccess, verbs.EventQPAccessErr},
		{"write-out-of-bounds", verbs.WRRDMAWrite, verbs.AccessRemoteWrite, 4000, verbs.WCSuccess, verbs.EventQPAccessErr},
		{"read-without-remote-read", verbs.WRRDMARead, verbs.AccessRemoteWrite, 0, verbs.WCRemAccessErr, verbs.EventQPAccessErr},
		{"read-out-of-bounds", verbs.WRRDMARead, verbs.AccessRemoteRead, 4000, verbs.WCRemAccessErr, verbs.EventQPAccessErr},
		{"atomic-without-remote-atomic", verbs.WRAtomicFetchAdd, verbs.AccessRemoteWrite, 0, verbs.WCRemAccessErr, verbs.EventQPAccessErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := connectPair(t, pairOpts{})
			c, s := p.cli, p.srv
			src, smr := c.mem(4096, 0)
			dst, dmr := s.mem(4096, tc.access)
			c.postRecv(rqe(50))
			n := 200
			if tc.op == verbs.WRAtomicFetchAdd {
				n = 8
			}
			w := sqe(1, tc.op, verbs.SendSignaled, sge(smr, src, 0, n))
			w.RKey, w.RemoteAddr = dmr.STag, addr(dst, tc.off)
			c.postSend(w)
			requireRemoteAccessFails(t, c, s, 1, tc.want, tc.async)
		})
	}
}

// requireRemoteAccessFails checks what a remote access the responder
// refuses does to both sides: the requester's completion of wrid (want),
// both connections down, both QPs in ERR, the requester's receives flushed,
// and the responder's async event.
func requireRemoteAccessFails(t *testing.T, c, s *side, wrid uint64, want, async uint32) {
	t.Helper()
	e := pollCQ(t, c.scq, to)
	require.EqualValues(t, wrid, e.WRID)
	if want == verbs.WCSuccess {
		// A Write completes once on the socket; the Terminate may
		// overtake that and flush it.
		require.Contains(t, []uint32{verbs.WCSuccess, verbs.WCWRFlushErr}, e.Status)
	} else {
		require.EqualValues(t, want, e.Status)
	}
	c.wait(Disconnected, to)
	s.wait(Disconnected, to)
	require.Equal(t, verbs.QPSErr, c.qp.State())
	require.Equal(t, verbs.QPSErr, s.qp.State())
	flushed(t, c.rcq, 50)
	var rec [verbs.AsyncEventSize]byte
	_, err := syscall.Read(s.ctx.AsyncFD(), rec[:])
	require.NoError(t, err)
	require.EqualValues(t, async, rec[0])
}

func TestDisconnectFromServer(t *testing.T) {
	p := connectPair(t, pairOpts{})
	c, s := p.cli, p.srv
	buf, mr := c.mem(4096, 0)
	c.postRecv(rqe(5, sge(mr, buf, 0, 100)))
	p.srv.ep.Disconnect()
	p.srv.ep.Disconnect() // idempotent
	s.wait(Disconnected, to)
	c.wait(Disconnected, to)
	flushed(t, c.rcq, 5)
	p.cli.ep.Disconnect() // peer already closed: fine
	p.cli.ep.Close(false)
	require.Equal(t, verbs.QPSErr, c.qp.State())
}

func TestBigTransfers(t *testing.T) {
	for _, crc := range []bool{false, true} {
		pol := DefaultPolicy()
		pol.CRC = crc
		p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
		c, s := p.cli, p.srv
		const n = 8 << 20
		src, smr := c.mem(n, 0)
		dst, dmr := s.mem(n, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		fill(src, 3)
		// Many writes of 1 MiB back to back, then a send.
		for i := 0; i < 8; i++ {
			w := sqe(uint64(i), verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, i<<20, 1<<20))
			w.RKey, w.RemoteAddr = dmr.STag, addr(dst, i<<20)
			c.postSend(w)
		}
		for i := 0; i < 8; i++ {
			require.EqualValues(t, i, pollCQ(t, c.scq, to).WRID)
		}
		s.postRecv(rqe(1, sge(dmr, dst, 0, 0)))
		c.postSend(sqe(9, verbs.WRSend, 0))
		pollCQ(t, s.rcq, to)
		require.True(t, bytes.Equal(src, dst))
		// A big send and a big read.
		clear(dst)
		s.postRecv(rqe(2, sge(dmr, dst, 0, n)))
		c.postSend(sqe(10, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, n)))
		pollCQ(t, c.scq, to)
		require.EqualValues(t, n, pollCQ(t, s.rcq, to).ByteLen)
		require.True(t, bytes.Equal(src, dst))
		clear(src)
		r := sqe(11, verbs.WRRDMARead, verbs.SendSignaled, sge(smr, src, 0, n))
		r.RKey, r.RemoteAddr = dmr.STag, addr(dst, 0)
		c.postSend(r)
		require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
		require.True(t, bytes.Equal(src, dst))
	}
}

func TestAttachSocket(t *testing.T) {
	tl, err := netListen()
	require.NoError(t, err)
	defer tl.Close()
	acc := make(chan *net.TCPConn, 1)
	go func() {
		conn, err := tl.AcceptTCP()
		if err == nil {
			acc <- conn
		}
	}()
	cc, err := net.DialTCP("tcp", nil, tl.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	sc := <-acc
	// Streaming mode first.
	_, err = cc.Write([]byte("login"))
	require.NoError(t, err)
	b := make([]byte, 5)
	_, err = io.ReadFull(sc, b)
	require.NoError(t, err)
	c, s := newSide(t), newSide(t)
	pol := DefaultPolicy()
	_, err = attachSocketPolicy(s.qp, sc, false, ConnParams{PrivateData: []byte("srv"), IRD: 1, ORD: 1}, to, s.cb, &pol)
	require.NoError(t, err)
	_, err = attachSocketPolicy(c.qp, cc, true, ConnParams{PrivateData: []byte("cli"), IRD: 1, ORD: 1}, to, c.cb, &pol)
	require.NoError(t, err)
	ev := c.wait(Established, to)
	require.Equal(t, "srv", string(ev.Params.PrivateData))
	dst, dmr := s.mem(4096, 0)
	src, smr := c.mem(4096, 0)
	copy(src, "rdma mode")
	s.postRecv(rqe(1, sge(dmr, dst, 0, 100)))
	c.postSend(sqe(1, verbs.WRSend, 0, sge(smr, src, 0, 9)))
	s.wait(Established, to)
	require.EqualValues(t, 9, pollCQ(t, s.rcq, to).ByteLen)
	require.Equal(t, "rdma mode", string(dst[:9]))
}

// Our MPA request and reply for the default policy equal siw's bytes
// (captures/siw/rping-siw.pcap, rping-siw-crc.pcap, rping-siw-p2p.pcap).
func TestMPAFramesMatchSiw(t *testing.T) {
	cases := []struct {
		name     string
		pol      func() Policy
		req, rep string
		rtr      string
	}{
		{"default", DefaultPolicy, "4d504120494420526571204672616d651002000400010001", "4d504120494420526570204672616d651002000400010001", ""},
		{"crc", func() Policy { p := DefaultPolicy(); p.CRC = true; return p },
			"4d504120494420526571204672616d655002000400010001", "4d504120494420526570204672616d655002000400010001", ""},
		{"p2p", func() Policy { p := DefaultPolicy(); p.P2P = true; return p },
			"4d504120494420526571204672616d65100200048001c001", "4d504120494420526570204672616d651002000480018001",
			"000ec14000000001000000000000000000000000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := tc.pol()
			// Initiator against a raw peer that answers with siw's reply.
			tl, err := netListen()
			require.NoError(t, err)
			defer tl.Close()
			got := make(chan []byte, 2)
			rep, _ := hex.DecodeString(tc.rep)
			go func() {
				conn, err := tl.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				b := make([]byte, 24)
				_, _ = io.ReadFull(conn, b)
				got <- b
				_, _ = conn.Write(rep)
				if tc.rtr != "" {
					r := make([]byte, 20)
					_, _ = io.ReadFull(conn, r)
					got <- r
				}
				_, _ = io.Copy(io.Discard, conn)
			}()
			c := newSide(t)
			_, err = connectPolicy(c.qp, nil, tl.Addr().(*net.TCPAddr), ConnParams{IRD: 1, ORD: 1}, to, c.cb, &pol)
			require.NoError(t, err)
			require.Equal(t, tc.req, hex.EncodeToString(<-got))
			c.wait(Established, to)
			if tc.rtr != "" {
				require.Equal(t, tc.rtr, hex.EncodeToString(<-got))
			}

			// Responder against siw's request.
			tl2, err := netListen()
			require.NoError(t, err)
			s := newSide(t)
			ln := listenPolicy(tl2, func(r *Request) {
				_, err := r.Accept(s.qp, ConnParams{IRD: 1, ORD: 1}, s.cb)
				require.NoError(t, err)
			}, pol)
			defer ln.Close()
			conn, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			req, _ := hex.DecodeString(tc.req)
			_, err = conn.Write(req)
			require.NoError(t, err)
			b := make([]byte, 24)
			_ = conn.SetReadDeadline(time.Now().Add(to))
			_, err = io.ReadFull(conn, b)
			require.NoError(t, err)
			require.Equal(t, tc.rep, hex.EncodeToString(b))
			if tc.rtr != "" {
				rtr, _ := hex.DecodeString(tc.rtr)
				_, _ = conn.Write(rtr)
				s.wait(Established, to)
			}
		})
	}
}

// rdmacm keeps its port reservation (a socket bound with SO_REUSEADDR)
// until the dial from that port is over, so that no other socket takes the
// port in between; the dial must bind next to it.
func TestConnectFromReservedPort(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	require.NoError(t, syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1))
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}

	tl, err := netListen()
	require.NoError(t, err)
	reqs := make(chan *Request, 1)
	ln := listenPolicy(tl, func(r *Request) { reqs <- r }, DefaultPolicy())
	t.Cleanup(ln.Close)
	c := newSide(t)
	pol := DefaultPolicy()
	_, err = connectPolicy(c.qp, local, ln.Addr(), ConnParams{}, to, c.cb, &pol)
	require.NoError(t, err)
	select {
	case r := <-reqs:
		require.Equal(t, local.Port, r.Remote.Port)
		require.NoError(t, r.Reject(nil))
	case ev := <-c.events:
		t.Fatalf("dial from the reserved port: %+v", ev)
	case <-time.After(to):
		t.Fatal("no request")
	}
	c.wait(Rejected, to)
}

// A connect that finds nobody listening tries again for Policy.RefusedRetry
// (a server between two listening ids on one port), then reports Rejected.
func TestConnectRefusedRetry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window time.Duration
		late   bool // a listener appears after 150 ms
		want   EventType
	}{
		{"no retry", 0, false, Rejected},
		{"nobody comes", 300 * time.Millisecond, false, Rejected},
		{"listener comes late", 5 * time.Second, true, Established},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A port with nobody listening: take one and close it.
			tl, err := netListen()
			require.NoError(t, err)
			addr := tl.Addr().(*net.TCPAddr)
			require.NoError(t, tl.Close())

			s := newSide(t)
			pol := DefaultPolicy()
			pol.RefusedRetry = tc.window
			reqs := make(chan *Request, 1)
			started := make(chan *Listener, 1)
			if tc.late {
				go func() {
					time.Sleep(150 * time.Millisecond) // the gap being tested
					ln, err := net.ListenTCP("tcp", addr)
					if err != nil {
						started <- nil
						return
					}
					started <- listenPolicy(ln, func(r *Request) { reqs <- r }, DefaultPolicy())
				}()
			}
			start := time.Now()
			_, err = connectPolicy(s.qp, nil, addr, ConnParams{IRD: 1, ORD: 1}, 5*time.Second, s.cb, &pol)
			require.NoError(t, err)
			if tc.late {
				l := <-started
				require.NotNil(t, l, "listen on %v", addr)
				defer l.Close()
				var r *Request
				select {
				case r = <-reqs:
				case <-time.After(5 * time.Second):
					t.Fatal("no request")
				}
				srv := newSide(t)
				_, err := r.Accept(srv.qp, ConnParams{IRD: 1, ORD: 1}, srv.cb)
				require.NoError(t, err)
			}
			ev := s.wait(tc.want, 10*time.Second)
			if tc.want == Rejected {
				require.ErrorIs(t, ev.Err, syscall.ECONNREFUSED)
				require.GreaterOrEqual(t, time.Since(start), tc.window)
			}
		})
	}
}

// A peer that resets or closes the TCP connection after reading our MPA
// request, before any reply: Rejected with ECONNRESET, as siw reports its
// PEER_CLOSE in AWAIT_MPAREP (measured on siw 6.1: REJECTED, status -104,
// for both) — once Policy.RefusedRetry has passed when not a byte of the
// reply came (TestConnectRetryAcceptedThenClosed). A part of a reply first
// changes nothing. The QP stays in INIT.
func TestConnectPeerGoneDuringMPA(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset bool
		first []byte // written before the close
		bound bool   // dial from one local port, as rdmacm does: every retry reuses it
	}{
		{"reset", true, nil, false},
		{"close", false, nil, false},
		{"reset within the reply header", true, []byte("MPA ID Rep"), false},
		{"close within the reply header", false, []byte("MPA ID Rep"), false},
		{"close, from a bound port", false, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSide(t)
			pol := DefaultPolicy()
			tl, err := netListen()
			require.NoError(t, err)
			defer tl.Close()
			// Every connection, until the test ends: without a byte of
			// the reply the connect tries again for RefusedRetry.
			got := make(chan int, 1)
			go func() {
				for {
					conn, err := tl.Accept()
					if err != nil {
						return
					}
					// The whole request: a close with unread bytes would
					// be a reset, whatever the case asks for.
					var req [wire.MPAHeaderLen]byte
					n, _ := io.ReadFull(conn, req[:])
					pd := make([]byte, int(req[18])<<8|int(req[19]))
					_, _ = io.ReadFull(conn, pd)
					select {
					case got <- n:
					default:
					}
					if tc.first != nil {
						_, _ = conn.Write(tc.first)
					}
					if tc.reset {
						_ = conn.(*net.TCPConn).SetLinger(0)
					}
					conn.Close()
				}
			}()
			var laddr *net.TCPAddr
			if tc.bound {
				laddr = freeLocalPort(t)
			}
			_, err = connectPolicy(c.qp, laddr, tl.Addr().(*net.TCPAddr), ConnParams{PrivateData: []byte("hello")}, 5*time.Second, c.cb, &pol)
			require.NoError(t, err)
			ev := c.wait(Rejected, to)
			require.ErrorIs(t, ev.Err, syscall.ECONNRESET)
			require.Equal(t, wire.MPAHeaderLen, <-got, "the peer read our whole MPA header")
			require.Equal(t, verbs.QPSInit, c.qp.State())
		})
	}
}
