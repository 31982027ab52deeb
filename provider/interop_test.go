package provider

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// Behaviours found against Linux siw 6.1 (tests/interop).

// acceptedResponder runs a hand-made MPA v2 initiator against our responder
// (policy pol), whose application posts nsend 100-byte Sends as soon as it
// is Established. It returns the initiator's socket, the MPA reply read.
func acceptedResponder(t *testing.T, pol Policy, nsend int) (*side, *net.TCPConn) {
	s, c, acc := dialResponder(t, pol)
	sendMPARequest(t, c)
	require.NoError(t, <-acc)
	s.wait(Established, to)
	buf, mr := s.mem(4096, 0)
	for i := range nsend {
		s.postSend(sqe(uint64(i), verbs.WRSend, verbs.SendSignaled, sge(mr, buf, 0, 100)))
	}
	_ = c.SetReadDeadline(time.Now().Add(to))
	f, _, err := readMPAFrame(c, wire.MPAReply)
	require.NoError(t, err)
	require.False(t, f.Reject)
	return s, c
}

// dialResponder listens with pol and connects a raw socket to it: the side
// that accepts the connection (with IRD = ORD = 4) once an MPA request
// comes, the initiator's socket, and where Accept's result arrives.
func dialResponder(t *testing.T, pol Policy) (*side, *net.TCPConn, <-chan error) {
	s := newSide(t)
	tl, err := netListen()
	require.NoError(t, err)
	acc := make(chan error, 1)
	ln := listenPolicy(tl, func(r *Request) {
		ep, err := r.Accept(s.qp, ConnParams{IRD: 4, ORD: 4}, s.cb)
		s.ep = ep
		acc <- err
	}, pol)
	t.Cleanup(ln.Close)
	c, err := net.DialTCP("tcp", nil, ln.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return s, c, acc
}

// sendMPARequest writes goiwarp's MPA v2 request (IRD = ORD = 4) to c.
func sendMPARequest(t *testing.T, c *net.TCPConn) {
	req := wire.MPAFields{Kind: wire.MPARequest, Enhanced: true, Revision: 2}
	pd := wire.AppendMPAV2PrivateData(nil, wire.MPAV2Params{IRD: 4, ORD: 4}, nil)
	_, err := c.Write(wire.AppendMPAFrame(nil, &req, pd))
	require.NoError(t, err)
}

// An MPA responder sends no FPDU before the initiator's first one (RFC 5044
// 7.1.2): siw 6.1 as initiator reads past the reply's private data and
// fails the connection (EPROTO) when an FPDU is already there, which a
// server that posts Sends as soon as it is established (ucmatose) caused.
func TestResponderWaitsForFirstFPDU(t *testing.T) {
	pol := DefaultPolicy()
	pol.ResponderHold = time.Minute // only the first FPDU releases it here
	s, c := acceptedResponder(t, pol, 3)

	// Nothing follows the reply while the initiator has not spoken.
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	n, err := c.Read(b[:])
	require.Zero(t, n, "the responder transmitted before the initiator's first FPDU")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	require.True(t, cqEmpty(s.scq))

	// The initiator's first FPDU (a zero-length Write, as siw's RTR)
	// releases the three Sends.
	h := &hostile{t: t, s: s, conn: c}
	h.send(h.fpdu(&wire.Header{Opcode: wire.OpWrite, Last: true, STag: 1}, nil))
	_ = c.SetReadDeadline(time.Now().Add(to))
	for i := range 3 {
		require.Equal(t, wire.OpSend, fpduOp(t, readFPDU(t, c)), "FPDU %d", i)
	}
	for range 3 {
		require.Equal(t, uint32(verbs.WCSuccess), uint32(pollCQ(t, s.scq, to).Status))
	}
}

// A server that speaks first and whose initiator never sends (perftest's
// write_lat data QP) transmits once Policy.ResponderHold has passed.
func TestResponderHoldEnds(t *testing.T) {
	pol := DefaultPolicy()
	pol.ResponderHold = 150 * time.Millisecond
	start := time.Now()
	s, c := acceptedResponder(t, pol, 1)
	f := readFPDU(t, c)
	require.GreaterOrEqual(t, time.Since(start), pol.ResponderHold)
	require.Equal(t, wire.OpSend, fpduOp(t, f))
	require.Equal(t, uint32(verbs.WCSuccess), uint32(pollCQ(t, s.scq, to).Status))

	// Hold 0: the Send follows the reply at once.
	pol.ResponderHold = 0
	_, c = acceptedResponder(t, pol, 1)
	_ = c.SetReadDeadline(time.Now().Add(pol.Timeout))
	readFPDU(t, c)
}

// readFPDU reads one FPDU (no markers) from c.
func readFPDU(t *testing.T, c net.Conn) []byte {
	t.Helper()
	var l [2]byte
	_, err := io.ReadFull(c, l[:])
	require.NoError(t, err)
	b := make([]byte, wire.FPDULen(int(l[0])<<8|int(l[1])))
	copy(b, l[:])
	_, err = io.ReadFull(c, b[2:])
	require.NoError(t, err)
	return b
}

// fpduOp is the RDMAP opcode of FPDU f.
func fpduOp(t *testing.T, f []byte) wire.Opcode {
	var h wire.Header
	require.NoError(t, wire.ParseHeader(&h, f[2:], int(f[0])<<8|int(f[1])))
	return h.Opcode
}

// A port forwarder (qemu's user-mode network, a proxy) accepts a connection
// for a server that does not listen yet and closes it before any MPA byte.
// Within Policy.RefusedRetry that is a refused connection: tried again, not
// reported (perftest -R's client crashed in its own retry after REJECTED).
func TestConnectRetryAcceptedThenClosed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window time.Duration
		reset  bool // close with RST instead of FIN
		want   EventType
	}{
		{"fin, retried", 5 * time.Second, false, Established},
		{"rst, retried", 5 * time.Second, true, Established},
		{"no retry", 0, false, Rejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := netListen()
			require.NoError(t, err)
			// The forwarder: accepts and closes until 200 ms have passed,
			// then hands connections to a real MPA listener.
			var dropped atomic.Int32
			reqs := make(chan *Request, 1)
			pol := DefaultPolicy()
			ln := &Listener{ln: tl, pol: pol, cb: func(r *Request) { reqs <- r }, done: make(chan struct{})}
			until := time.Now().Add(200 * time.Millisecond)
			go func() {
				defer close(ln.done)
				for {
					c, err := tl.AcceptTCP()
					if err != nil {
						return
					}
					if time.Now().Before(until) {
						if tc.reset {
							_ = c.SetLinger(0)
						}
						dropped.Add(1)
						c.Close()
						continue
					}
					turn := make(chan struct{})
					close(turn)
					go ln.handshake(c, turn, make(chan struct{}))
				}
			}()
			t.Cleanup(ln.Close)

			s := newSide(t)
			cp := DefaultPolicy()
			cp.RefusedRetry = tc.window
			_, err = connectPolicy(s.qp, nil, ln.Addr(), ConnParams{IRD: 1, ORD: 1}, 5*time.Second, s.cb, &cp)
			require.NoError(t, err)
			if tc.want == Established {
				var r *Request
				select {
				case r = <-reqs:
				case ev := <-s.events:
					t.Fatalf("%+v (dropped %d)", ev, dropped.Load())
				case <-time.After(to):
					t.Fatal("no request")
				}
				srv := newSide(t)
				_, err := r.Accept(srv.qp, ConnParams{IRD: 1, ORD: 1}, srv.cb)
				require.NoError(t, err)
			}
			ev := s.wait(tc.want, to)
			require.Positive(t, dropped.Load())
			if tc.want == Rejected {
				require.ErrorIs(t, ev.Err, syscall.ECONNRESET)
			}
		})
	}
}

func TestResponderHoldEnv(t *testing.T) {
	t.Setenv("GOIWARP_RESPONDER_HOLD", "0")
	require.Equal(t, time.Duration(0), PolicyFromEnv().ResponderHold)
	t.Setenv("GOIWARP_RESPONDER_HOLD", "2s")
	require.Equal(t, 2*time.Second, PolicyFromEnv().ResponderHold)
	t.Setenv("GOIWARP_RESPONDER_HOLD", "-1s") // refused: the default
	require.Equal(t, DefaultResponderHold, PolicyFromEnv().ResponderHold)
}
