package provider

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// resetSpin clears the process-wide spin state around a test.
func resetSpin(t *testing.T) {
	clear := func() { spinFails.Store(0); spinRefusedUntil.Store(0) }
	clear()
	t.Cleanup(clear)
}

// Fruitless spins in a row back spinning off for twice as long each time,
// up to spinBackoff << spinBackoffMax.
func TestSpinBackoff(t *testing.T) {
	resetSpin(t)
	now := time.Now()
	for i, want := range []time.Duration{20, 40, 80, 160, 320, 640, 1280, 1280, 1280} {
		spinFailed(now)
		require.Equal(t, now.Add(want*time.Millisecond).UnixNano(), spinRefusedUntil.Load(), "failure %d", i+1)
		require.False(t, spinAllowed(time.Millisecond), "refused during the backoff")
	}
	spinRefusedUntil.Store(0)
	require.True(t, spinAllowed(time.Millisecond))
	require.False(t, spinAllowed(0), "GOIWARP_RX_SPIN=0")
	spinSlot.Store(true)
	require.False(t, spinAllowed(time.Millisecond), "one spinner per process")
	spinSlot.Store(false)
}

// A descheduled spin goes on only as the application's sole receiver of a
// stream: it found data, no poller came, and the socket is TCP.
func TestSpinSurvivesDescheduling(t *testing.T) {
	for _, tc := range []struct {
		name       string
		found, tcp bool
		start, now uint64
		wantGoesOn bool
	}{
		{"found data, no poller came", true, true, 7, 7, true},
		{"found nothing", false, true, 7, 7, false},
		{"a poller came", true, true, 7, 8, false},
		{"a same-host ring", true, false, 7, 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.wantGoesOn, spinSurvives(tc.found, tc.tcp, tc.start, tc.now))
		})
	}
}

// A target that never polls (perftest's server without -R) serves RDMA
// Reads on its RX goroutine, which then spins on the socket or the ring;
// the data is right with and without spinning, a poller at the socket or
// ring stops the spinner, and spinning ends with the traffic.
func TestSpinServesReads(t *testing.T) {
	for _, path := range paths {
		for _, window := range []time.Duration{0, DefaultRxSpin, 2 * time.Second} {
			t.Run(path.name+"/"+window.String(), func(t *testing.T) {
				testSpinServesReads(t, path.shm, window)
			})
		}
	}
}

func testSpinServesReads(t *testing.T, shm ShmMode, window time.Duration) {
	resetSpin(t)
	o := modePair(shm)
	o.cliPol.RxSpin, o.srvPol.RxSpin = window, window
	p := connectPair(t, o)
	const n = 256
	src, smr := p.srv.mem(n, verbs.AccessRemoteRead)
	for i := range src {
		src[i] = byte(i * 7)
	}
	back, bmr := p.cli.mem(n, 0)
	var spun atomic.Bool
	for i := 0; i < 200 || window > 0 && !spun.Load() && i < 20000; i++ {
		clear(back)
		spinRefusedUntil.Store(0) // a slow machine's backoff would hide the spinner
		r := sqe(uint64(i), verbs.WRRDMARead, verbs.SendSignaled, sge(bmr, back, 0, n))
		r.RKey, r.RemoteAddr = smr.STag, addr(src, 0)
		p.cli.postSend(r)
		c := pollCQ(t, p.cli.scq, 5*time.Second) // no Progress: RX goroutines only
		require.EqualValues(t, verbs.WCSuccess, c.Status)
		require.True(t, bytes.Equal(src, back), "read %d", i)
		if spinSlot.Load() {
			spun.Store(true)
		}
	}
	if window == 0 {
		require.False(t, spun.Load(), "GOIWARP_RX_SPIN=0 spins")
		return
	}
	require.True(t, spun.Load(), "the RX goroutine never spun")
	if window > DefaultRxSpin {
		// The spinner of the long window (either side's RX goroutine:
		// one process) is still on: a poller that holds the token sends
		// it back to waiting.
		srx, crx := p.srv.ep.rx.Load(), p.cli.ep.rx.Load()
		srx.tok.Lock()
		crx.tok.Lock()
		stopped := assert.Eventually(t, func() bool { return !spinSlot.Load() }, 5*time.Second, 100*time.Microsecond,
			"a poller at the socket did not stop the spinner")
		crx.tok.Unlock()
		srx.tok.Unlock()
		require.True(t, stopped)
		return
	}
	require.Eventually(t, func() bool { return !spinSlot.Load() }, 5*time.Second, time.Millisecond,
		"spinning outlived the traffic")
}

func TestRxSpinFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{
		{"", DefaultRxSpin},
		{"0", 0},
		{"50us", 50 * time.Microsecond},
		{"0.001", time.Millisecond},
		{"-1ms", DefaultRxSpin}, // refused, logged
		{"soon", DefaultRxSpin},
	} {
		t.Setenv("GOIWARP_RX_SPIN", tc.env)
		require.Equal(t, tc.want, PolicyFromEnv().RxSpin, "GOIWARP_RX_SPIN=%q", tc.env)
	}
}
