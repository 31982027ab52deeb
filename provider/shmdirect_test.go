package provider

import (
	"bytes"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// directOps is how many operations the client placed directly.
func directOps(p *pair) uint64 { return p.cli.ep.shm.dir.ops.Load() }

// Writes and Reads between goiwarp ends on one host are placed directly
// (one process_vm copy, no FPDU) when the target's checks pass, with the
// data, completions and ordering of the FPDU path; anything the direct
// path refuses still works through the ring.
func TestShmDirectPlacement(t *testing.T) {
	p := connectPair(t, modePair(ShmOn))
	c, s := p.cli, p.srv
	cb, cmr := c.mem(1<<20, verbs.AccessRemoteWrite)
	sb, smr := s.mem(1<<20, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	for i := range cb {
		cb[i] = byte(i * 7)
	}
	require.Eventually(t, func() bool {
		_, ok := p.cli.ep.shm.directTarget()
		return ok
	}, to, time.Millisecond, "the server's QP never accepted placements")

	for _, tc := range []struct {
		name   string
		op     uint8
		off, n int
	}{
		{"write-8", verbs.WRRDMAWrite, 3, 8},
		{"write-64K", verbs.WRRDMAWrite, 4096, 64 << 10},
		{"write-1M", verbs.WRRDMAWrite, 0, 1 << 20},
		{"read-2", verbs.WRRDMARead, 5, 2},
		{"read-1M", verbs.WRRDMARead, 0, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range sb {
				sb[i] = byte(i * 13)
			}
			for i := range cb {
				cb[i] = byte(i * 7)
			}
			before := directOps(p)
			w := sqe(9, tc.op, verbs.SendSignaled, sge(cmr, cb, tc.off, tc.n))
			w.RKey, w.RemoteAddr = smr.STag, addr(sb, tc.off)
			c.postSend(w)
			e := pollCQ(t, c.scq, to)
			require.EqualValues(t, verbs.WCSuccess, e.Status)
			require.EqualValues(t, 9, e.WRID)
			// Placed before the completion: no waiting for the data.
			require.True(t, bytes.Equal(cb[tc.off:tc.off+tc.n], sb[tc.off:tc.off+tc.n]))
			require.Equal(t, before+1, directOps(p))
		})
	}

	t.Run("write-then-send", func(t *testing.T) {
		clear(sb)
		rb, rmr := s.mem(4096, 0)
		s.postRecv(rqe(70, sge(rmr, rb, 0, 4096)))
		w := sqe(10, verbs.WRRDMAWrite, 0, sge(cmr, cb, 0, 1<<20))
		w.RKey, w.RemoteAddr = smr.STag, addr(sb, 0)
		c.postSend(w)
		c.postSend(sqe(11, verbs.WRSend, verbs.SendSignaled, sge(cmr, cb, 0, 16)))
		require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
		require.EqualValues(t, verbs.WCSuccess, pollCQ(t, s.rcq, to).Status)
		require.True(t, bytes.Equal(cb, sb), "the Write is visible once its Send arrived")
	})

	t.Run("deregistered", func(t *testing.T) {
		// Over FPDUs, as over TCP: the target refuses the Write.
		gone, gmr := s.mem(4096, verbs.AccessRemoteWrite)
		stag := gmr.STag
		gmr.Dereg()
		before := directOps(p)
		c.postRecv(rqe(50))
		w := sqe(12, verbs.WRRDMAWrite, verbs.SendSignaled, sge(cmr, cb, 0, 100))
		w.RKey, w.RemoteAddr = stag, addr(gone, 0)
		c.postSend(w)
		requireRemoteAccessFails(t, c, s, 12, verbs.WCSuccess, verbs.EventQPAccessErr)
		require.Equal(t, before, directOps(p))
	})
}

// A Write or Read the target's checks refuse is never placed directly, and
// a region's deregistration waits for a direct access in progress: after
// Dereg returns nothing of the peer touches the memory.
func TestShmDirectRefused(t *testing.T) {
	for _, tc := range []struct {
		name                string
		op                  uint8
		access              int
		wrongPD, invalidate bool
		off                 int
	}{
		{"write-no-access", verbs.WRRDMAWrite, verbs.AccessRemoteRead, false, false, 0},
		{"read-no-access", verbs.WRRDMARead, verbs.AccessRemoteWrite, false, false, 0},
		{"write-out-of-bounds", verbs.WRRDMAWrite, verbs.AccessRemoteWrite, false, false, 4000},
		{"read-out-of-bounds", verbs.WRRDMARead, verbs.AccessRemoteRead, false, false, 4000},
		{"write-other-pd", verbs.WRRDMAWrite, verbs.AccessRemoteWrite, true, false, 0},
		{"write-invalidated", verbs.WRRDMAWrite, verbs.AccessRemoteWrite, false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := connectPair(t, modePair(ShmOn))
			c, s := p.cli, p.srv
			src, smr := c.mem(4096, 0)
			pd := s.pd
			if tc.wrongPD {
				s.pd = s.ctx.AllocPD()
			}
			dst, dmr := s.mem(4096, tc.access)
			s.pd = pd
			if tc.invalidate {
				require.NoError(t, verbs.InvalidateSTag(s.pd, dmr.STag))
			}
			c.postRecv(rqe(50))
			w := sqe(1, tc.op, verbs.SendSignaled, sge(smr, src, 0, 200))
			w.RKey, w.RemoteAddr = dmr.STag, addr(dst, tc.off)
			c.postSend(w)
			want := uint32(verbs.WCSuccess)
			if tc.op == verbs.WRRDMARead {
				want = verbs.WCRemAccessErr
			}
			requireRemoteAccessFails(t, c, s, 1, want, verbs.EventQPAccessErr)
			require.Zero(t, directOps(p))
		})
	}
}

// Deregistering a region while the peer streams direct Writes into it:
// Dereg returns, and the region's memory is not written after that.
func TestShmDirectDeregRace(t *testing.T) {
	p := connectPair(t, modePair(ShmOn))
	c, s := p.cli, p.srv
	src, smr := c.mem(1<<20, 0)
	for i := range src {
		src[i] = 0xab
	}
	dst, dmr := s.mem(1<<20, verbs.AccessRemoteWrite)
	c.postRecv(rqe(50))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			w := sqe(uint64(100+i), verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, 0, 1<<20))
			w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 0)
			c.postSend(w)
			if pollCQ(t, c.scq, to).Status != verbs.WCSuccess {
				return
			}
		}
	}()
	time.Sleep(2 * time.Millisecond)
	dmr.Dereg()
	clear(dst)
	<-done
	time.Sleep(10 * time.Millisecond)
	require.True(t, bytes.Equal(dst, make([]byte, len(dst))), "written after Dereg returned")
}

// GOIWARP_SHM_DIRECT=0: Writes and Reads go through the rings as FPDUs.
func TestShmRingOnly(t *testing.T) {
	t.Setenv("GOIWARP_SHM_DIRECT", "0")
	pol := PolicyFromEnv()
	pol.SHM = ShmOn
	require.True(t, pol.ShmRingOnly)
	p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
	sendWriteRead(t, p)
	require.Zero(t, directOps(p))
}
