package provider

import (
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// waitReadable polls fd as a thread in ibv_get_cq_event does.
func waitReadable(t *testing.T, fd int) {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 5000)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the socket never turned readable")
}

// beginWait begins a wait on ep's connection as a thread in
// ibv_get_cq_event does, once its receive path is served.
func beginWait(t *testing.T, ep *Endpoint) int {
	t.Helper()
	fd := -1
	require.Eventually(t, func() bool { fd = ep.WaitFD(true); return fd >= 0 }, 5*time.Second, time.Millisecond,
		"the connection was never offered")
	return fd
}

// A TCP socket offered to a waiting thread is lent to it: the event loop
// does not read what arrives (a second thread woken), the waiter does, and
// keeps the lease for its next wait.
func TestLentSocketReadByWaiter(t *testing.T) {
	o := noSpinPair()
	o.srvPol.PollLease = time.Hour // the watch never gives it back here
	p := connectPair(t, o)
	b, mr := p.srv.mem(4096, 0)
	cb, cmr := p.cli.mem(4096, 0)
	rx := p.srv.ep.rx.Load()
	for i := uint64(1); i <= 3; i++ {
		fd := beginWait(t, p.srv.ep)
		require.True(t, rx.lent.Load())
		p.srv.postRecv(rqe(i, sge(mr, b, 0, 64)))
		copy(cb, []byte{'p', 'i', 'n', byte('0' + i)})
		p.cli.postSend(sqe(i, verbs.WRSend, verbs.SendSignaled, sge(cmr, cb, 0, 4)))
		pollCQ(t, p.cli.scq, 5*time.Second)
		time.Sleep(20 * time.Millisecond)
		require.True(t, cqEmpty(p.srv.rcq), "the event loop read a lent socket")
		waitReadable(t, fd)
		require.True(t, p.srv.ep.WaitRead(), "the waiter stops waiting on its socket")
		c := pollCQ(t, p.srv.rcq, time.Second)
		require.Equal(t, i, c.WRID)
		require.Equal(t, string(cb[:4]), string(b[:4]))
	}
}

// A lent socket goes back to the event loop a lease after the last wait
// began, so what arrives when the application stopped waiting (it computes,
// or polls elsewhere) is still placed and answered: a Send, a Write, and
// Read Requests the responder serves with nobody at its CQs.
func TestLentSocketGivenBack(t *testing.T) {
	p := connectPair(t, noSpinPair())
	b, mr := p.srv.mem(4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	cb, cmr := p.cli.mem(4096, 0)
	rx := p.srv.ep.rx.Load()
	beginWait(t, p.srv.ep)
	require.True(t, rx.lent.Load())
	require.Eventually(t, func() bool { return !rx.lent.Load() }, 5*time.Second, time.Millisecond,
		"the lease was never given back")

	beginWait(t, p.srv.ep) // lent again, then left
	p.srv.postRecv(rqe(1, sge(mr, b, 0, 64)))
	copy(cb, "ping")
	p.cli.postSend(sqe(1, verbs.WRSend, 0, sge(cmr, cb, 0, 4)))
	c := pollCQ(t, p.srv.rcq, 5*time.Second) // never calls Progress
	require.Equal(t, uint64(1), c.WRID)

	beginWait(t, p.srv.ep)
	copy(b[100:], "served")
	r := sqe(2, verbs.WRRDMARead, verbs.SendSignaled, sge(cmr, cb, 100, 6))
	r.RKey, r.RemoteAddr = mr.STag, addr(b, 100)
	p.cli.postSend(r)
	c = pollProgress(t, p.cli.scq, 5*time.Second)
	require.EqualValues(t, verbs.WCSuccess, c.Status)
	require.Equal(t, "served", string(cb[100:106]))
}

// A waiter whose read finds a Send with no receive posted leaves the
// connection parked and gives the socket back: the receive posted next has
// it read on, and later arrivals are the event loop's again.
func TestLentSocketParks(t *testing.T) {
	o := noSpinPair()
	o.srvPol.PollLease = time.Hour
	p := connectPair(t, o)
	b, mr := p.srv.mem(4096, 0)
	cb, cmr := p.cli.mem(4096, 0)
	rx := p.srv.ep.rx.Load()
	fd := beginWait(t, p.srv.ep)
	copy(cb, "early")
	p.cli.postSend(sqe(1, verbs.WRSend, 0, sge(cmr, cb, 0, 5)))
	waitReadable(t, fd)
	require.False(t, p.srv.ep.WaitRead(), "a parked connection is not the waiter's")
	require.False(t, rx.lent.Load(), "the lease outlived the park")
	require.Equal(t, -1, p.srv.ep.WaitFD(false), "a parked connection offered")
	p.srv.postRecv(rqe(1, sge(mr, b, 0, 64)))
	require.Equal(t, uint64(1), pollCQ(t, p.srv.rcq, 5*time.Second).WRID)
	require.Equal(t, "early", string(b[:5]))

	p.srv.postRecv(rqe(2, sge(mr, b, 64, 64)))
	p.cli.postSend(sqe(2, verbs.WRSend, 0, sge(cmr, cb, 0, 5)))
	require.Equal(t, uint64(2), pollCQ(t, p.srv.rcq, 5*time.Second).WRID)
}

// Both sides wait on lent sockets: the responder's waiter answers the Read
// Request, the initiator's places the Response.
func TestLentSocketsRead(t *testing.T) {
	o := noSpinPair()
	o.srvPol.PollLease, o.cliPol.PollLease = time.Hour, time.Hour
	p := connectPair(t, o)
	b, mr := p.srv.mem(4096, verbs.AccessRemoteRead)
	cb, cmr := p.cli.mem(4096, 0)
	for i := uint64(1); i <= 3; i++ {
		sfd, cfd := beginWait(t, p.srv.ep), beginWait(t, p.cli.ep)
		copy(b[100:], []byte{'r', 'e', 'a', byte('0' + i)})
		r := sqe(i, verbs.WRRDMARead, verbs.SendSignaled, sge(cmr, cb, 100, 4))
		r.RKey, r.RemoteAddr = mr.STag, addr(b, 100)
		p.cli.postSend(r)
		waitReadable(t, sfd)
		require.True(t, p.srv.ep.WaitRead())
		waitReadable(t, cfd)
		require.True(t, p.cli.ep.WaitRead())
		c := pollCQ(t, p.cli.scq, time.Second)
		require.EqualValues(t, verbs.WCSuccess, c.Status)
		require.Equal(t, string(b[100:104]), string(cb[100:104]))
	}
}

// A connection that a goroutine of its own took (parked, spinning, closing)
// is not lent, even when the lease races with the taking: the loop hears it.
func TestLendRefusedWhileAway(t *testing.T) {
	p := connectPair(t, noSpinPair())
	beginWait(t, p.srv.ep)
	rx := p.srv.ep.rx.Load()
	rx.reclaim()
	rx.away.Store(true)
	defer rx.away.Store(false)
	require.False(t, rx.lend())
	require.False(t, rx.lent.Load())
	require.Equal(t, -1, p.srv.ep.WaitFD(true))
}

// A thread waiting on a TCP connection spins as the engine would
// (GOIWARP_RX_SPIN), and by default not at all; one waiting on a same-host
// ring leaves the spinning to the ring's RX goroutine.
func TestWaitSpinFollowsPolicy(t *testing.T) {
	for _, spin := range []time.Duration{0, 150 * time.Microsecond} {
		o := noSpinPair()
		o.srvPol.RxSpin = spin
		p := connectPair(t, o)
		require.Equal(t, spin, p.srv.ep.WaitSpin())
		require.Zero(t, p.cli.ep.WaitSpin())
	}
	o := modePair(ShmOn)
	o.srvPol.RxSpin = 150 * time.Microsecond
	p := connectPair(t, o)
	require.NotNil(t, p.srv.ep.shm)
	require.Zero(t, p.srv.ep.WaitSpin())
}
