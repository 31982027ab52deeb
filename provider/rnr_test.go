package provider

import (
	"bytes"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// A Send that arrives before its receive is posted waits for it (the
// receive path stops reading) instead of Terminating at once, as long as
// the receive comes within the RNR timeout; later Sends queue behind it.
func TestRNRWaitsForReceive(t *testing.T) {
	for _, imm := range []bool{false, true} {
		p := connectPair(t, pairOpts{})
		c, s := p.cli, p.srv
		const n = 200 << 10
		src, smr := c.mem(n, 0)
		dst, dmr := s.mem(2*n, verbs.AccessRemoteWrite)
		fill(src, 3)
		for i := uint64(1); i <= 3; i++ {
			w := sqe(i, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, n))
			if imm {
				w = sqe(i, verbs.WRRDMAWriteWithImm, verbs.SendSignaled, sge(smr, src, 0, n))
				w.RKey, w.RemoteAddr, w.ImmInv = dmr.STag, addr(dst, n), uint32(i)
			}
			c.postSend(w)
		}
		waitRNR(t, s)
		require.True(t, cqEmpty(s.rcq))
		require.Equal(t, verbs.QPSRTS, s.qp.State(), "Terminated instead of waiting")
		for i := uint64(1); i <= 3; i++ {
			s.postRecv(rqe(10+i, sge(dmr, dst, 0, n)))
			rc := pollCQ(t, s.rcq, to)
			require.EqualValues(t, verbs.WCSuccess, rc.Status)
			require.EqualValues(t, 10+i, rc.WRID)
			require.EqualValues(t, n, rc.ByteLen)
			if i < 3 {
				waitRNR(t, s) // the next Send waits for its receive
			}
		}
		for i := uint64(1); i <= 3; i++ {
			cq := pollCQ(t, c.scq, to)
			require.EqualValues(t, verbs.WCSuccess, cq.Status)
		}
		if imm {
			require.True(t, bytes.Equal(src, dst[n:]))
		} else {
			require.True(t, bytes.Equal(src, dst[:n]))
		}
	}
}

// waitRNR waits until a Send (or Immediate Data) that found no receive
// posted holds s's receive path.
func waitRNR(t *testing.T, s *side) {
	t.Helper()
	rx := s.ep.rx.Load()
	require.Eventually(t, func() bool {
		rx.tok.Lock()
		defer rx.tok.Unlock()
		return !rx.rnrSince.IsZero()
	}, to, time.Millisecond, "no Send waits for a receive")
}

// Past the RNR timeout (or with a timeout of 0, at once, as siw) the Send
// is Terminated: DDP untagged buffer error, no buffer.
func TestRNRTimeout(t *testing.T) {
	for _, d := range []time.Duration{0, 200 * time.Millisecond} {
		pol := DefaultPolicy()
		pol.RNRTimeout = d
		p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
		c, s := p.cli, p.srv
		src, smr := c.mem(4096, 0)
		start := time.Now()
		c.postSend(sqe(1, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, 100)))
		s.wait(Disconnected, to)
		took := time.Since(start)
		require.GreaterOrEqual(t, took, d)
		require.Less(t, took, d+2*time.Second)
		require.Equal(t, verbs.QPSErr, s.qp.State())
		c.wait(Disconnected, to)
		// DDP untagged buffer error (no buffer): a request error here,
		// and the peer got a Terminate.
		require.Equal(t, verbs.EventQPReqErr, asyncEvent(t, s.ctx, 2*time.Second))
		require.Equal(t, verbs.EventQPFatal, asyncEvent(t, c.ctx, 2*time.Second))
	}
}

func TestRNRTimeoutEnv(t *testing.T) {
	t.Setenv("GOIWARP_RNR_TIMEOUT", "0")
	require.Equal(t, time.Duration(0), PolicyFromEnv().RNRTimeout)
	t.Setenv("GOIWARP_RNR_TIMEOUT", "250ms")
	require.Equal(t, 250*time.Millisecond, PolicyFromEnv().RNRTimeout)
	t.Setenv("GOIWARP_RNR_TIMEOUT", "")
	require.Equal(t, DefaultRNRTimeout, PolicyFromEnv().RNRTimeout)
}

// A Send still waiting for its receive when the application disconnects
// (qperf's rc_bi_bw ends so): the timeout's Terminate cannot follow the FIN
// already sent, and is dropped; the connection ends on both sides instead
// of the transmitter looping on it for ever.
func TestRNRTimeoutAfterDisconnect(t *testing.T) {
	pol := DefaultPolicy()
	pol.RNRTimeout = 200 * time.Millisecond
	p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
	c, s := p.cli, p.srv
	src, smr := c.mem(4096, 0)
	c.postSend(sqe(1, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, 100)))
	waitRNR(t, s)
	s.ep.Disconnect()
	s.wait(Disconnected, to)
	c.wait(Disconnected, to)
	require.Equal(t, verbs.QPSErr, s.qp.State())
}

// A hard Close (destroy_qp) of a QP whose receive path waits for a buffer
// returns at once, not at the RNR timeout: nothing but the application's
// post_recv or the timeout would read on otherwise.
func TestRNRWaitHardClose(t *testing.T) {
	pol := DefaultPolicy()
	pol.RNRTimeout = time.Minute
	p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
	c, s := p.cli, p.srv
	src, smr := c.mem(4096, 0)
	c.postSend(sqe(1, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, 100)))
	waitRNR(t, s)
	start := time.Now()
	s.ep.Close(false)
	require.Less(t, time.Since(start), 5*time.Second)
}
