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

// A target that never polls (perftest's server without -R) serves RDMA
// Reads on its RX goroutine, which then spins on the socket or the ring;
// the data is right with and without spinning, a poller at the socket or
// ring stops the spinner, and spinning ends with the traffic.
func TestSpinServesReads(t *testing.T) {
	for _, path := range paths {
		for _, window := range []time.Duration{0, 200 * time.Microsecond, 2 * time.Second} {
			t.Run(path.name+"/"+window.String(), func(t *testing.T) {
				testSpinServesReads(t, path.shm, window)
			})
		}
	}
}

func testSpinServesReads(t *testing.T, shm ShmMode, window time.Duration) {
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
	if window > time.Second {
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
		{"200us", 200 * time.Microsecond},
		{"0.001", time.Millisecond},
		{"-1ms", DefaultRxSpin}, // refused, logged
		{"soon", DefaultRxSpin},
	} {
		t.Setenv("GOIWARP_RX_SPIN", tc.env)
		require.Equal(t, tc.want, PolicyFromEnv().RxSpin, "GOIWARP_RX_SPIN=%q", tc.env)
	}
}
