package provider

import (
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// Pollers of a quiet connection stop reading its socket after pollIdleLimit
// empty reads (each one a syscall); what arrives then is read by the RX
// goroutine on the netpoller's wake-up, after which pollers read again.
func TestQuietPollerLeavesSocketToNetpoller(t *testing.T) {
	p := connectPair(t, tcpPair())
	b, mr := p.srv.mem(4096, 0)
	cb, cmr := p.cli.mem(4096, 0)
	p.srv.postRecv(rqe(1, sge(mr, b, 0, 64)))
	rx := p.srv.ep.rx.Load()

	for p.srv.rcq.Progress() { // what the connection's set-up left to read
	}
	// The RX goroutine may still read a last bit of the set-up (and reset
	// the count): poll until the limit is reached, a bounded number of times.
	for i := 0; rx.idlePolls.Load() < pollIdleLimit; i++ {
		require.Less(t, i, 100*pollIdleLimit, "the pollers never went quiet")
		require.False(t, p.srv.rcq.Progress(), "nothing has arrived")
	}
	nread := func() uint64 { rx.tok.Lock(); defer rx.tok.Unlock(); return rx.rd.nread }
	before := nread()
	require.False(t, p.srv.rcq.Progress())
	require.Equal(t, before, nread(), "a quiet poller reads no more")

	copy(cb, "ping")
	p.cli.postSend(sqe(2, verbs.WRSend, verbs.SendSignaled, sge(cmr, cb, 0, 64)))
	c := pollCQ(t, p.srv.rcq, 5*time.Second) // never calls Progress
	require.EqualValues(t, verbs.WCSuccess, c.Status)
	require.Equal(t, uint64(1), c.WRID)
	require.Equal(t, "ping", string(b[:4]))
	require.Eventually(t, func() bool { return rx.idlePolls.Load() == 0 }, 5*time.Second, time.Millisecond,
		"the RX goroutine's read lets pollers read again")
}

// A quiet connection's pollers still read while a Read or Atomic Response
// is due: it is sure to come, and on a busy machine the RX goroutine may not
// run for a while.
func TestQuietPollerReadsForDueResponse(t *testing.T) {
	p := connectPair(t, tcpPair())
	ep := p.cli.ep
	// The initiator starts its receive path just after it reports Established.
	require.Eventually(t, func() bool { return ep.rx.Load() != nil }, 5*time.Second, time.Millisecond)
	rx := ep.rx.Load()
	for p.cli.scq.Progress() {
	}
	rx.idlePolls.Store(pollIdleLimit)
	ep.tx.ordOut.Store(1) // as if a Read were outstanding
	defer ep.tx.ordOut.Store(0)
	require.False(t, p.cli.scq.Progress(), "nothing has arrived")
	// The poll read the socket (pollIdleLimit+1), unless the RX goroutine
	// read a late byte of the set-up meanwhile (0); returning early leaves
	// the count alone.
	require.NotEqual(t, uint32(pollIdleLimit), rx.idlePolls.Load(), "the poller read the socket")
}
