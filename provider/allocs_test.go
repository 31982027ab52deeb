package provider

import (
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// The data path allocates nothing per message once warm: posting a Send or
// a Write, framing and writing it, completing it, and at the peer reading,
// placing and completing it. testing.AllocsPerRun counts the whole
// process's allocations, both engines' goroutines included.
func TestDataPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations")
	}
	for _, tc := range []struct {
		name string
		op   uint8
		size int
	}{
		{"write 8", verbs.WRRDMAWrite, 8},
		{"write 64K", verbs.WRRDMAWrite, 64 << 10},
		{"send 8", verbs.WRSend, 8},
		{"send 64K", verbs.WRSend, 64 << 10},
		{"read 8", verbs.WRRDMARead, 8},
		{"read 64K", verbs.WRRDMARead, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := connectPair(t, pairOpts{})
			src, smr := p.cli.mem(tc.size, 0)
			dst, dmr := p.srv.mem(tc.size, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			one := func() {
				if tc.op == verbs.WRSend {
					p.srv.postRecv(rqe(1, sge(dmr, dst, 0, tc.size)))
				}
				e := sqe(2, tc.op, verbs.SendSignaled, sge(smr, src, 0, tc.size))
				e.RKey, e.RemoteAddr = dmr.STag, addr(dst, 0)
				p.cli.postSend(e)
				// Plain comparisons: testify's would allocate.
				if c := pollCQ(t, p.cli.scq, 5*time.Second); c.Status != verbs.WCSuccess {
					t.Fatalf("send completion status %d", c.Status)
				}
				if tc.op == verbs.WRSend {
					if c := pollCQ(t, p.srv.rcq, 5*time.Second); c.Status != verbs.WCSuccess {
						t.Fatalf("receive completion status %d", c.Status)
					}
				}
			}
			for range 50 { // warm up: free lists, buffers, goroutine stacks
				one()
			}
			n := testing.AllocsPerRun(200, one)
			t.Logf("%s: %.2f allocations per message", tc.name, n)
			require.Zero(t, n, "allocations per message")
		})
	}
}
