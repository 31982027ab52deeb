package provider

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// pollProgress polls cq the way capi's poll_cq does: an empty ring gives
// the CQ's connected QPs a turn (CQ.Progress).
func pollProgress(t *testing.T, cq *verbs.CQ, d time.Duration) verbs.CQE {
	t.Helper()
	deadline := time.Now().Add(d)
	for cqEmpty(cq) {
		cq.Progress()
		if time.Now().After(deadline) {
			t.Fatalf("no completion within %v", d)
		}
	}
	return pollCQ(t, cq, 0)
}

// pingPong is ib_write_lat's exchange: each side posts a signaled Write of
// its round number (bytes 0-3 of its buffer to 4-7 of the peer's), polls for its completion, then waits for the
// peer's Write in its memory. The server stops answering after answers
// rounds. It reports, per client round, whether the server's answer was in
// the client's memory when the client's completion came.
type pingPong struct {
	p                  *pair
	cliBuf, srvBuf     []byte
	cliMR, srvMR       *verbs.MR
	answers            int
	answeredAtComplete []bool
}

func newPingPong(t *testing.T) *pingPong {
	pp := &pingPong{p: connectPair(t, tcpPair())}
	pp.cliBuf, pp.cliMR = pp.p.cli.mem(64, verbs.AccessRemoteWrite)
	pp.srvBuf, pp.srvMR = pp.p.srv.mem(64, verbs.AccessRemoteWrite)
	return pp
}

func writeRound(s *side, k int, src []byte, mr *verbs.MR, dst []byte, dmr *verbs.MR) {
	binary.NativeEndian.PutUint32(src, uint32(k))
	w := sqe(uint64(k), verbs.WRRDMAWrite, verbs.SendSignaled, sge(mr, src, 0, 4))
	w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 4)
	s.postSend(w)
}

// seen: the peer's Write of round k is in b.
func seen(b []byte, k int) bool {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[4]))) == uint32(k)
}

// run plays rounds client rounds; the server answers the first answers.
func (pp *pingPong) run(t *testing.T, rounds, answers int) {
	p := pp.p
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(10 * time.Second)
		for k := 1; k <= answers; k++ {
			for !seen(pp.srvBuf, k) {
				if time.Now().After(deadline) {
					return // the client failed
				}
				runtime.Gosched()
			}
			writeRound(p.srv, k, pp.srvBuf, pp.srvMR, pp.cliBuf, pp.cliMR)
			if k == answers {
				return // held until the client's next Write, or holdMax
			}
			for cqEmpty(p.srv.scq) {
				if time.Now().After(deadline) {
					return
				}
				p.srv.scq.Progress()
			}
			if pollCQ(t, p.srv.scq, 0).Status != verbs.WCSuccess {
				return
			}
		}
	}()
	start := len(pp.answeredAtComplete)
	for k := start + 1; k <= start+rounds; k++ {
		writeRound(p.cli, k, pp.cliBuf, pp.cliMR, pp.srvBuf, pp.srvMR)
		c := pollProgress(t, p.cli.scq, 10*time.Second)
		require.EqualValues(t, verbs.WCSuccess, c.Status)
		require.EqualValues(t, k, c.WRID)
		pp.answeredAtComplete = append(pp.answeredAtComplete, seen(pp.cliBuf, k))
		if k <= answers {
			deadline := time.Now().Add(10 * time.Second)
			for !seen(pp.cliBuf, k) {
				require.False(t, time.Now().After(deadline), "no answer %d", k)
				runtime.Gosched()
			}
		}
	}
	<-done
}

func held(answered []bool) (n int) {
	for _, a := range answered {
		if a {
			n++
		}
	}
	return n
}

// setHoldMax sets holdMax for the test (read by the posting goroutine).
func setHoldMax(t *testing.T, d time.Duration) {
	old := holdMax
	holdMax = d
	t.Cleanup(func() { holdMax = old })
}

func TestWriteCompletionWaitsForAnswer(t *testing.T) {
	setHoldMax(t, 10*time.Second) // released by the answer alone
	pp := newPingPong(t)
	const rounds = 200
	pp.run(t, rounds, rounds)
	// Without holding, the completion is there as soon as the Write is on
	// the socket, a round trip before the answer.
	require.Greater(t, held(pp.answeredAtComplete[2*holdAfter:]), (rounds-2*holdAfter)/2,
		"completions found the answer in memory: %v", pp.answeredAtComplete)
}

func TestHeldCompletionReleased(t *testing.T) {
	for _, tc := range []struct {
		name    string
		after   time.Duration // when release releases
		release func(pp *pingPong, after time.Duration)
		streak  bool // the streak survives (one time-out does not end it)
		loud    bool // the socket is left loud: the application stopped polling
	}{
		{"by holdMax", time.Millisecond, func(pp *pingPong, after time.Duration) {
			holdMax = after // read when the next Write is held
		}, true, true},
		{"by an arm", 20 * time.Millisecond, func(pp *pingPong, after time.Duration) {
			go func() {
				time.Sleep(after)
				pp.p.cli.scq.Armed()
			}()
		}, true, true},
		{"by the next completion", 20 * time.Millisecond, func(pp *pingPong, after time.Duration) {
			go func() {
				time.Sleep(after)
				pp.p.cli.postSend(sqe(1000, verbs.WRSend, verbs.SendSignaled))
			}()
		}, true, false},
		{"by the connection's end", 20 * time.Millisecond, func(pp *pingPong, after time.Duration) {
			go func() {
				time.Sleep(after)
				pp.p.srv.ep.Close(false)
			}()
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setHoldMax(t, 10*time.Second)
			pp := newPingPong(t)
			pp.p.srv.postRecv(rqe(1))
			const answered = 4 * holdAfter
			pp.run(t, answered, answered)
			require.True(t, pp.answeredAtComplete[answered-1], "the hold never engaged")
			tc.release(pp, tc.after)
			start := time.Now()
			k := answered + 1
			writeRound(pp.p.cli, k, pp.cliBuf, pp.cliMR, pp.srvBuf, pp.srvMR)
			c := pollProgress(t, pp.p.cli.scq, 5*time.Second)
			require.EqualValues(t, k, c.WRID)
			require.EqualValues(t, verbs.WCSuccess, c.Status)
			require.GreaterOrEqual(t, time.Since(start), tc.after, "not held")
			if !tc.streak {
				require.Zero(t, pp.p.cli.ep.hold.streak.Load())
			}
			require.False(t, pp.p.cli.ep.hold.on.Load())
			if tc.loud {
				// What comes next must wake the RX goroutine, whatever
				// the pollers muted.
				require.False(t, pp.p.cli.ep.rx.Load().muted.Load(), "still muted")
			}
		})
	}
}
