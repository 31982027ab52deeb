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

// A lone small Write between goiwarp ends on one host is placed directly
// (one process_vm_writev, no FPDU) when the target's checks pass, with the
// data, completion and ordering of the FPDU path; anything else goes
// through the rings.
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
		direct bool
	}{
		{"write-8", verbs.WRRDMAWrite, 3, 8, true},
		{"write-16K", verbs.WRRDMAWrite, 4096, directMax, true},
		{"write-64K", verbs.WRRDMAWrite, 4096, 64 << 10, false}, // the rings move those faster
		{"read-2", verbs.WRRDMARead, 5, 2, false},               // Reads are never placed directly
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
			if tc.direct {
				// Placed before the completion: no waiting for the data.
				require.True(t, bytes.Equal(cb[tc.off:tc.off+tc.n], sb[tc.off:tc.off+tc.n]))
				require.Equal(t, before+1, directOps(p))
			} else {
				require.Eventually(t, func() bool { return bytes.Equal(cb[tc.off:tc.off+tc.n], sb[tc.off:tc.off+tc.n]) },
					to, time.Millisecond)
				require.Equal(t, before, directOps(p))
				require.Eventually(t, func() bool { _, ok := p.cli.ep.shm.directTarget(); return ok }, to, time.Millisecond)
			}
		})
	}

	t.Run("write-then-send", func(t *testing.T) {
		clear(sb)
		rb, rmr := s.mem(4096, 0)
		s.postRecv(rqe(70, sge(rmr, rb, 0, 4096)))
		before := directOps(p)
		w := sqe(10, verbs.WRRDMAWrite, 0, sge(cmr, cb, 0, 4096))
		w.RKey, w.RemoteAddr = smr.STag, addr(sb, 0)
		c.postSend(w)
		require.Equal(t, before+1, directOps(p))
		c.postSend(sqe(11, verbs.WRSend, verbs.SendSignaled, sge(cmr, cb, 0, 16)))
		require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
		require.EqualValues(t, verbs.WCSuccess, pollCQ(t, s.rcq, to).Status)
		require.True(t, bytes.Equal(cb[:4096], sb[:4096]), "the Write is visible once its Send arrived")
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

// A Write or Read the target's checks refuse is never placed directly: the
// target's engine refuses it as over TCP.
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
			w := sqe(uint64(100+i), verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, i%64*directMax, directMax))
			w.RKey, w.RemoteAddr = dmr.STag, addr(dst, i%64*directMax)
			c.postSend(w)
			if pollCQ(t, c.scq, to).Status != verbs.WCSuccess {
				return
			}
		}
	}()
	require.Eventually(t, func() bool { return directOps(p) > 0 }, to, 100*time.Microsecond, "no Write was placed directly")
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
	require.False(t, pol.ShmDirect)
	p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
	sendWriteRead(t, p)
	require.Zero(t, directOps(p))
}
