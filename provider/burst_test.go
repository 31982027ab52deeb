package provider

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goiwarp/goiwarp/verbs"
)

// TestBurstHandOff: with every doorbell taken as part of a burst, the posts
// after the first only hand the TX token over; the TX goroutine (no poller)
// or the application's poller (one spinning in CQ.Progress) sends them.
// Every work request completes, in order, and the data arrives intact.
func TestBurstHandOff(t *testing.T) {
	old := burstGap
	burstGap = time.Hour
	t.Cleanup(func() { burstGap = old })
	for _, tc := range []struct {
		name   string
		poller bool
	}{
		{"tx-goroutine", false},
		{"poller", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := connectPair(t, pairOpts{})
			const n, size = 300, 512
			src, smr := p.cli.mem(n*size, 0)
			dst, dmr := p.srv.mem(n*size, verbs.AccessRemoteWrite)
			rbuf, rmr := p.srv.mem(n*size, 0)
			for i := range src {
				src[i] = byte(i*7 + i/size)
			}
			var stop atomic.Bool
			var wg sync.WaitGroup
			if tc.poller {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						p.cli.scq.Progress()
					}
				}()
			}
			// Windows of 30 (10 Sends), within the rings' 64 entries.
			const win = 30
			for w := 0; w < n; w += win {
				for i := w + 2; i < w+win; i += 3 {
					p.srv.postRecv(rqe(uint64(1000+i), sge(rmr, rbuf, i*size, size)))
				}
				for i := w; i < w+win; i++ {
					e := sqe(uint64(i), verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, i*size, size))
					e.RKey, e.RemoteAddr = dmr.STag, addr(dst, i*size)
					if i%3 == 2 {
						e.Opcode = verbs.WRSend
					}
					p.cli.postSend(e)
				}
				for i := w; i < w+win; i++ {
					c := pollCQ(t, p.cli.scq, 10*time.Second)
					require.EqualValues(t, verbs.WCSuccess, c.Status)
					require.EqualValues(t, i, c.WRID, "send completions in order")
				}
				for i := w + 2; i < w+win; i += 3 {
					c := pollCQ(t, p.srv.rcq, 10*time.Second)
					require.EqualValues(t, verbs.WCSuccess, c.Status)
					require.EqualValues(t, 1000+i, c.WRID, "receives in order")
				}
			}
			stop.Store(true)
			wg.Wait()
			for i := range n {
				got := dst[i*size : (i+1)*size]
				if i%3 == 2 {
					got = rbuf[i*size : (i+1)*size]
				}
				require.True(t, bytes.Equal(src[i*size:(i+1)*size], got), "message %d", i)
			}
		})
	}
}

// TestHardCloseReleasesHandedToken: a QP moved to ERR while its TX token
// is handed over (a burst, or a full socket) and nobody took it yet gets
// the token back, so work posted afterwards rings and is flushed.
func TestHardCloseReleasesHandedToken(t *testing.T) {
	p := connectPair(t, pairOpts{})
	e := p.cli.ep
	// No TX goroutine to take the hand-over.
	e.stopTxLoop()
	<-e.txDone
	require.True(t, p.cli.qp.TakeTx())
	e.tx.tokSync.Load()
	e.tx.handOff()
	require.NoError(t, p.cli.qp.Modify(verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState))
	src, smr := p.cli.mem(64, 0)
	p.cli.postSend(sqe(9, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, 64)))
	flushed(t, p.cli.scq, 9)
}

// TestDoorbellAfterPollTransmits: however soon after the previous doorbell,
// a post that follows a poll of the QP's CQs transmits on the posting
// thread (a ping-pong polls for the answer before it posts again); a post
// that follows a post with no poll between them is a burst and is handed
// over.
func TestDoorbellAfterPollTransmits(t *testing.T) {
	old := burstGap
	burstGap = time.Hour
	t.Cleanup(func() { burstGap = old })
	p := connectPair(t, pairOpts{})
	e := p.cli.ep
	// Nobody takes a hand-over then but the client's own poller.
	e.stopTxLoop()
	<-e.txDone
	const size = 64
	src, smr := p.cli.mem(3*size, 0)
	rbuf, rmr := p.srv.mem(3*size, 0)
	for i := range 3 {
		p.srv.postRecv(rqe(uint64(100+i), sge(rmr, rbuf, i*size, size)))
	}
	send := func(i int) {
		p.cli.postSend(sqe(uint64(i), verbs.WRSend, verbs.SendSignaled, sge(smr, src, i*size, size)))
	}
	received := func(i int) { // placed by the server's event loop: no poller of the process helps the client's QP
		c := pollCQ(t, p.srv.rcq, 5*time.Second)
		require.EqualValues(t, verbs.WCSuccess, c.Status)
		require.EqualValues(t, 100+i, c.WRID)
	}

	p.cli.scq.Progress() // an empty poll
	send(0)
	received(0)
	require.EqualValues(t, 0, pollCQ(t, p.cli.scq, time.Second).WRID) // a completion taken
	send(1)
	received(1)

	send(2) // no poll since the last post
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); {
		require.True(t, cqEmpty(p.srv.rcq), "a burst's post went out on the posting thread")
		time.Sleep(time.Millisecond)
	}
	require.EqualValues(t, 1, pollProgress(t, p.cli.scq, time.Second).WRID)
	require.EqualValues(t, 2, pollProgress(t, p.cli.scq, 5*time.Second).WRID) // the poller sends it
	received(2)
}
