package provider

import (
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// noSpinPair is a TCP pair whose RX goroutines do not spin: a spinner holds
// the RX token now and then (a poller that finds it taken reads nothing),
// and mutes the socket while it spins.
func noSpinPair() pairOpts {
	o := tcpPair()
	o.cliPol.RxSpin, o.srvPol.RxSpin = 0, 0
	return o
}

// goQuiet polls the server's receive CQ until its pollers stop reading the
// socket; nothing is sent meanwhile.
func goQuiet(t *testing.T, p *pair) {
	rx := p.srv.ep.rx.Load()
	for range 2 { // what the connection's set-up left to read, late bytes too
		for p.srv.rcq.Progress() {
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The RX goroutine may still read a last bit of the set-up (and reset
	// the count): poll until the limit is reached, a bounded number of times.
	for i := 0; rx.idlePolls.Load() < pollIdleLimit; i++ {
		require.Less(t, i, 100*pollIdleLimit, "the pollers never went quiet")
		require.False(t, p.srv.rcq.Progress(), "nothing has arrived")
	}
}

// Pollers of a quiet connection stop reading its socket after pollIdleLimit
// empty reads (each one a syscall); what arrives then is read by the event
// loop, after which pollers read again.
func TestQuietPollerLeavesSocketToEventLoop(t *testing.T) {
	p := connectPair(t, noSpinPair())
	b, mr := p.srv.mem(4096, 0)
	cb, cmr := p.cli.mem(4096, 0)
	p.srv.postRecv(rqe(1, sge(mr, b, 0, 64)))
	rx := p.srv.ep.rx.Load()
	goQuiet(t, p)
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

// A quiet connection's pollers still read once every pollQuietProbe visits,
// so that a message the RX goroutine is slow to read (its thread waiting for
// the CPU the polling thread holds) is found by the pollers themselves.
func TestQuietPollerProbes(t *testing.T) {
	p := connectPair(t, noSpinPair())
	rx := p.srv.ep.rx.Load()
	goQuiet(t, p)
	// Visits that pass the quiet check and take the token read; one of
	// them may find the token held by the RX goroutine.
	reads := func() uint64 { rx.tok.Lock(); defer rx.tok.Unlock(); return rx.rd.reads }
	before := reads()
	for range 4 * pollQuietProbe {
		require.False(t, p.srv.rcq.Progress(), "nothing has arrived")
	}
	require.InDelta(t, 4, reads()-before, 1, "one read in pollQuietProbe quiet visits")
}

// A quiet connection's pollers still read while a Read or Atomic Response
// is due: it is sure to come, and on a busy machine the RX goroutine may not
// run for a while.
func TestQuietPollerReadsForDueResponse(t *testing.T) {
	p := connectPair(t, noSpinPair())
	ep := p.cli.ep
	// The initiator starts its receive path just after it reports Established.
	require.Eventually(t, func() bool { return ep.rx.Load() != nil }, 5*time.Second, time.Millisecond)
	rx := ep.rx.Load()
	for p.cli.scq.Progress() {
	}
	rx.idlePolls.Store(pollIdleLimit)
	ep.tx.ordOut.Store(1) // as if a Read were outstanding
	defer ep.tx.ordOut.Store(0)
	// The poll read the socket (pollIdleLimit+1), unless the RX goroutine
	// read a late byte of the set-up meanwhile (0) or held the token then
	// (tries spread over tens of milliseconds, fewer than a quiet poller's
	// probe takes); returning early leaves the count alone.
	for range pollQuietProbe / 2 {
		require.False(t, p.cli.scq.Progress(), "nothing has arrived")
		if rx.idlePolls.Load() != pollIdleLimit {
			break
		}
		time.Sleep(50 * time.Microsecond)
	}
	require.NotEqual(t, uint32(pollIdleLimit), rx.idlePolls.Load(), "the poller read the socket")
}

// sendRecv sends n bytes of cb from the client into b at the server and
// waits for the receive's completion, as a poller (Progress) or as a
// program that never polls the engine.
func sendRecv(t *testing.T, p *pair, b []byte, mr *verbs.MR, cb []byte, cmr *verbs.MR, wrid uint64, n int, poll bool) verbs.CQE {
	p.srv.postRecv(rqe(wrid, sge(mr, b, 0, n)))
	p.cli.postSend(sqe(wrid, verbs.WRSend, 0, sge(cmr, cb, 0, n)))
	var c verbs.CQE
	if poll {
		deadline := time.Now().Add(5 * time.Second)
		for cqEmpty(p.srv.rcq) {
			require.True(t, time.Now().Before(deadline), "no completion")
			p.srv.rcq.Progress()
		}
		c = pollCQ(t, p.srv.rcq, time.Second)
	} else {
		c = pollCQ(t, p.srv.rcq, 5*time.Second) // never calls Progress
	}
	require.EqualValues(t, verbs.WCSuccess, c.Status)
	require.Equal(t, wrid, c.WRID)
	return c
}

// muteByPolling exchanges small messages, polling, until the server's
// socket is muted: the RX goroutine may read first now and then, but a
// poller that keeps polling reads one of them.
func muteByPolling(t *testing.T, p *pair, b []byte, mr *verbs.MR, cb []byte, cmr *verbs.MR) {
	withMuteVisitGap(t, time.Hour)
	rx := p.srv.ep.rx.Load()
	for i := uint64(1); !rx.muted.Load(); i++ {
		require.Less(t, i, uint64(1000), "a poller never read a message")
		sendRecv(t, p, b, mr, cb, cmr, i, 64, true)
	}
}

// withMuteVisitGap sets muteVisitGap for the test: these tests poll
// between messages of their own making, whose gaps (under -race above all)
// say nothing of a program's spinning; an hour makes every poller spin.
func withMuteVisitGap(t *testing.T, d time.Duration) {
	old := muteVisitGap.Swap(int64(d))
	t.Cleanup(func() { muteVisitGap.Store(old) })
}

// lowat is the endpoint's SO_RCVLOWAT: 1 while the socket is loud.
func lowat(e *Endpoint) int {
	var v int
	_ = e.rc.Control(func(fd uintptr) {
		v, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT)
	})
	return v
}

// A poller that reads a message mutes the socket (SO_RCVLOWAT up: what
// arrives wakes no thread while pollers read); pollIdleLimit empty reads,
// or pollers that stop coming, unmute it, and what arrives then is read by
// the event loop.
func TestPolledSocketMuted(t *testing.T) {
	for _, how := range []string{"pollers-stop", "idle-limit"} {
		t.Run(how, func(t *testing.T) {
			p := connectPair(t, noSpinPair())
			b, mr := p.srv.mem(4096, 0)
			cb, cmr := p.cli.mem(4096, 0)
			rx := p.srv.ep.rx.Load()
			muted := rx.muted.Load
			muteByPolling(t, p, b, mr, cb, cmr)
			require.Greater(t, lowat(p.srv.ep), 1)
			if how == "idle-limit" {
				for i := 0; muted(); i++ {
					require.Less(t, i, 100*pollIdleLimit, "never unmuted")
					p.srv.rcq.Progress()
				}
			} else {
				require.Eventually(t, func() bool { return !muted() }, 5*time.Second, time.Millisecond,
					"pollers stopped and the socket stayed muted")
			}
			require.Equal(t, 1, lowat(p.srv.ep))
			sendRecv(t, p, b, mr, cb, cmr, 5000, 64, false)
		})
	}
}

// Only a poller that spins mutes the socket: one whose previous visit ended
// longer than muteVisitGap before (here every visit: the gap is 0) reads
// what it finds and leaves the socket loud, so what arrives after it wakes
// the event loop. The same exchanges mute it when every poller counts as
// spinning (TestPolledSocketMuted).
func TestPollerAfterLongGapLeavesSocketLoud(t *testing.T) {
	withMuteVisitGap(t, 0)
	p := connectPair(t, noSpinPair())
	b, mr := p.srv.mem(4096, 0)
	cb, cmr := p.cli.mem(4096, 0)
	rx := p.srv.ep.rx.Load()
	polls := rx.polls.Load()
	for i := uint64(1); i <= 300; i++ {
		sendRecv(t, p, b, mr, cb, cmr, i, 64, true)
		require.False(t, rx.muted.Load(), "muted after message %d", i)
	}
	require.Greater(t, rx.polls.Load(), polls, "the pollers came")
	require.LessOrEqual(t, lowat(p.srv.ep), 1, "the mark was never raised")
}

// A bulk arrival crosses the muted socket's mark and wakes the event loop,
// which reads it unless a poller is at it; when the pollers stop, the
// watch hands the socket back to the event loop, so a large message on a
// muted socket completes either way.
func TestMutedBulkArrival(t *testing.T) {
	const size = 8 * mutedLowat
	for _, poll := range []bool{true, false} {
		name := map[bool]string{true: "pollers-read", false: "pollers-stop"}[poll]
		t.Run(name, func(t *testing.T) {
			p := connectPair(t, noSpinPair())
			b, mr := p.srv.mem(size, 0)
			cb, cmr := p.cli.mem(size, 0)
			muteByPolling(t, p, b, mr, cb, cmr)
			for i := range cb {
				cb[i] = byte(i * 7)
			}
			c := sendRecv(t, p, b, mr, cb, cmr, 9000, size, poll)
			require.EqualValues(t, size, c.ByteLen)
			require.Equal(t, cb, b)
		})
	}
}

// The muted socket's mark follows its receive buffer (a quarter of it, at
// least mutedLowat), set when pollers mute it and raised by the event loop
// when a stream crosses it after autotuning grew the buffer; a
// message larger than the mark still completes, read by pollers or, once
// they stop, by the event loop.
func TestMutedMarkFollowsReceiveBuffer(t *testing.T) {
	for _, poll := range []bool{true, false} {
		name := map[bool]string{true: "pollers-read", false: "pollers-stop"}[poll]
		t.Run(name, func(t *testing.T) {
			p := connectPair(t, noSpinPair())
			ep := p.srv.ep
			rx := ep.rx.Load()
			rcvbuf := func(set int) int {
				var v int
				require.NoError(t, ep.rc.Control(func(fd uintptr) {
					if set > 0 {
						require.NoError(t, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, set))
					}
					v, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
				}))
				return v
			}
			small := rcvbuf(1 << 20)
			b, mr := p.srv.mem(4<<20, 0)
			cb, cmr := p.cli.mem(4<<20, 0)
			muteByPolling(t, p, b, mr, cb, cmr)
			require.Equal(t, small/4, lowat(ep), "muted: a quarter of the receive buffer")

			big := rcvbuf(4 << 20)
			rx.tok.Lock()
			require.True(t, rx.muted.Load())
			require.NoError(t, ep.rc.Control(raiseMark))
			rx.tok.Unlock()
			require.Equal(t, big/4, lowat(ep), "the mark follows the grown buffer")

			n := big / 4 * 3 / 2 // crosses the mark
			for i := range n {
				cb[i] = byte(i * 7)
			}
			c := sendRecv(t, p, b, mr, cb, cmr, 9000, n, poll)
			require.EqualValues(t, n, c.ByteLen)
			require.Equal(t, cb[:n], b[:n])
		})
	}
}

// A poller's read that comes back short took all the socket held, so the
// poller stops there rather than reading again to be told EAGAIN: the
// syscall it saves stands between a message's arrival and its completion.
// The test holds the RX token while the messages arrive, so that only the
// poll it then makes (the poller's own closure, as Progress runs it) reads
// them.
func TestPollerStopsAtShortRead(t *testing.T) {
	for _, tc := range []struct {
		name        string
		size, msgs  int
		wantReads   uint64
		description string
	}{
		{"one-message", 64, 1, 1, "one read into the header buffer"},
		{"two-queued", 64, 2, 1, "one read takes both"},
		{"readv", 6000, 1, 2, "a full header-buffer read, then a short readv of the rest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := connectPair(t, tcpPair())
			b, mr := p.srv.mem(2*8192, 0)
			cb, cmr := p.cli.mem(8192, 0)
			ep := p.srv.ep
			rx := ep.rx.Load()
			wireLen := tc.msgs * wire.FPDULen(wire.DDPUntaggedHeaderLen+tc.size)
			queued := func() int {
				var n int
				_ = ep.rc.Control(func(fd uintptr) {
					n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
				})
				return n
			}
			for ep.Progress() { // what the connection's set-up left to read
			}

			rx.tok.Lock()
			for i := range tc.msgs {
				p.srv.postRecv(rqe(uint64(i), sge(mr, b, i*8192, tc.size)))
				p.cli.postSend(sqe(uint64(i), verbs.WRSend, 0, sge(cmr, cb, 0, tc.size)))
			}
			require.Eventually(t, func() bool { return queued() == wireLen }, 5*time.Second, time.Millisecond)
			before := rx.rd.reads
			require.NoError(t, ep.rc.Control(rx.ctl))
			reads, consumed := rx.rd.reads-before, rx.prog
			rx.tok.Unlock()

			require.True(t, consumed)
			require.Equal(t, tc.wantReads, reads, tc.description)
			for i := range tc.msgs {
				c := pollCQ(t, p.srv.rcq, time.Second)
				require.EqualValues(t, verbs.WCSuccess, c.Status)
				require.EqualValues(t, i, c.WRID)
				require.EqualValues(t, tc.size, c.ByteLen)
			}
			require.Zero(t, queued())
			// What comes after is read as before: by the next poll.
			sendRecv(t, p, b, mr, cb, cmr, 99, tc.size, true)
		})
	}
}

// The muted socket's watch does not wait for a token a poller holds: it
// looks again a watch later, and notices that pollers went away once the
// token is free.
func TestMutedWatchWhileTokenHeld(t *testing.T) {
	p := connectPair(t, tcpPair())
	b, mr := p.srv.mem(4096, 0)
	cb, cmr := p.cli.mem(4096, 0)
	rx := p.srv.ep.rx.Load()
	for {
		muteByPolling(t, p, b, mr, cb, cmr)
		rx.tok.Lock()
		if rx.muted.Load() {
			break
		}
		rx.tok.Unlock() // a watch came between the last poll and the Lock
	}
	time.Sleep(12 * time.Duration(rx.watch.Load()))
	stillMuted := rx.muted.Load()
	rx.tok.Unlock() // before asserting: a failing test that held it would hang in Close
	require.True(t, stillMuted, "the watch unmutes under the token only")
	require.Eventually(t, func() bool { return !rx.muted.Load() }, 5*time.Second, time.Millisecond,
		"pollers stopped and the socket stayed muted")
	sendRecv(t, p, b, mr, cb, cmr, 7, 64, false)
}

// A CQ armed for an event (req_notify_cq) means the application is about to
// wait on the channel rather than poll: a socket the polls muted is made
// loud at once, and polls made while armed mute nothing; either way what
// arrives next is read by the event loop, not left for the watch.
func TestArmedCQKeepsSocketLoud(t *testing.T) {
	for _, when := range []string{"armed after the polls", "armed before the polls"} {
		t.Run(when, func(t *testing.T) {
			o := tcpPair()
			o.srvPol.RxSpin = 0 // a spinning RX goroutine mutes the socket while it spins
			p := connectPair(t, o)
			b, mr := p.srv.mem(4096, 0)
			cb, cmr := p.cli.mem(4096, 0)
			rx := p.srv.ep.rx.Load()
			if when == "armed after the polls" {
				muteByPolling(t, p, b, mr, cb, cmr)
				p.srv.rcq.Armed()
				require.False(t, rx.muted.Load(), "arming left the socket muted")
			} else {
				p.srv.rcq.Armed()
				require.NotZero(t, rx.arms.Load(), "the receive thread was not told (keepOffPoster)")
				for i := uint64(1); i < 200; i++ {
					sendRecv(t, p, b, mr, cb, cmr, i, 64, true)
					require.False(t, rx.muted.Load(), "a poll muted the socket of an armed CQ")
				}
			}
			// The mark is down, so the event loop is signalled what
			// comes next (no timed assertion: CI machines are noisy).
			require.LessOrEqual(t, lowat(p.srv.ep), 1, "the mark is raised")
			sendRecv(t, p, b, mr, cb, cmr, 5000, 64, false)
		})
	}
}

// The muted socket's watch is the long one after a poller's read completed
// work (that poller waits on the CQ and comes back), the short one after a
// poller only placed a Write (it came for something else).
func TestMutedWatchFollowsWhatPollerFound(t *testing.T) {
	p := connectPair(t, noSpinPair()) // a spinner's mute leaves the watch as it was
	b, mr := p.srv.mem(4096, verbs.AccessRemoteWrite)
	cb, cmr := p.cli.mem(4096, 0)
	rx := p.srv.ep.rx.Load()
	muteByPolling(t, p, b, mr, cb, cmr)
	require.EqualValues(t, leaseAfterCompletion*DefaultPollLease, rx.watch.Load(), "after a receive")

	// writeByte has the client write cb[off] over b[off].
	writeByte := func(wrid uint64, off int) {
		w := sqe(wrid, verbs.WRRDMAWrite, verbs.SendSignaled, sge(cmr, cb, off, 1))
		w.RKey, w.RemoteAddr = mr.STag, addr(b, off)
		p.cli.postSend(w)
	}
	cb[100] = 0x5a
	for i := uint64(1); time.Duration(rx.watch.Load()) != DefaultPollLease; i++ {
		require.Less(t, i, uint64(1000), "a poller never read a Write")
		b[100] = 0
		writeByte(i, 100)
		deadline := time.Now().Add(5 * time.Second)
		for b[100] != 0x5a {
			require.True(t, time.Now().Before(deadline), "the Write never landed")
			p.srv.rcq.Progress()
		}
		pollCQ(t, p.cli.scq, time.Second)
	}
	// What the short watch is for: nobody polls, a Write still lands.
	b[200], cb[200] = 0, 0x77
	writeByte(9999, 200)
	require.Eventually(t, func() bool { return b[200] == 0x77 }, 5*time.Second, 100*time.Microsecond)
}

func TestPollLeaseFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{
		{"", DefaultPollLease},
		{"250us", 250 * time.Microsecond},
		{"0.002", 2 * time.Millisecond},
		{"0", DefaultPollLease},  // refused: a lease of nothing
		{"2s", DefaultPollLease}, // refused: over 1s
		{"soon", DefaultPollLease},
	} {
		t.Setenv("GOIWARP_POLL_LEASE", tc.env)
		require.Equal(t, tc.want, PolicyFromEnv().PollLease, "GOIWARP_POLL_LEASE=%q", tc.env)
	}
}
