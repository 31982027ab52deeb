package provider

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// TestCRCOverChangingSource: with CRC on, an application may change a
// buffer while a Send or Write from it (or a Read Response a peer asked of
// it) is in flight — what arrives is then undefined, but every FPDU must
// still carry the CRC of the octets it carries. A thread rewrites the
// client's region without pause while the client Sends and Writes from it
// and the server Reads it; no side may see a CRC error (the connection would
// end with a Terminate and the work requests fail). Completions are polled
// as capi polls them (pollProgress).
func TestCRCOverChangingSource(t *testing.T) {
	for _, mk := range []bool{false, true} {
		name := "crc"
		if mk {
			name = "crc+markers"
		}
		t.Run(name, func(t *testing.T) {
			pol := tcpPolicy()
			pol.CRC, pol.CRCStrict, pol.Markers = true, true, mk
			p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
			c, s := p.cli, p.srv
			const n = 1 << 20
			src, smr := c.mem(n, verbs.AccessRemoteRead)
			dst, dmr := s.mem(n, verbs.AccessRemoteWrite)

			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					for j := 0; j < n; j += 61 {
						src[j] = byte(i + j)
					}
				}
			}()
			defer func() { stop.Store(true); wg.Wait() }()

			for r := uint64(0); r < 16; r++ {
				s.postRecv(rqe(r, sge(dmr, dst, 0, n)))
				c.postSend(sqe(r, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, n)))
				w := sqe(r+100, verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, 0, n))
				w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 0)
				c.postSend(w)
				rd := sqe(r+200, verbs.WRRDMARead, verbs.SendSignaled, sge(dmr, dst, 0, n))
				rd.RKey, rd.RemoteAddr = smr.STag, addr(src, 0)
				s.postSend(rd)

				for _, want := range []uint64{r, r + 100} {
					cq := pollProgress(t, c.scq, to)
					require.EqualValues(t, verbs.WCSuccess, cq.Status, "round %d: client's %d", r, cq.WRID)
					require.Equal(t, want, cq.WRID)
				}
				rc := pollProgress(t, s.rcq, to)
				require.EqualValues(t, verbs.WCSuccess, rc.Status, "round %d: server's receive", r)
				cq := pollProgress(t, s.scq, to)
				require.EqualValues(t, verbs.WCSuccess, cq.Status, "round %d: server's Read", r)
			}
		})
	}
}
