package provider

import (
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// A Send whose bytes all went to the socket completes successfully even
// when the connection fails right after the write (the peer received it,
// answered and closed before the transmitter got to complete it).
func TestSendWrittenThenDisconnect(t *testing.T) {
	for _, op := range []uint8{verbs.WRSend, verbs.WRRDMAWrite} {
		p := connectPair(t, pairOpts{})
		c, s := p.cli, p.srv
		src, smr := c.mem(4096, 0)
		dst, dmr := s.mem(4096, verbs.AccessRemoteWrite)
		s.postRecv(rqe(1, sge(dmr, dst, 0, 4096)))

		var once sync.Once
		failing := make(chan struct{})
		onFail := func(e *Endpoint) {
			if e == c.ep {
				close(failing)
			}
		}
		testFailing.Store(&onFail)
		t.Cleanup(func() { testFailing.Store(nil) })
		testAfterWrite = func(e *Endpoint) {
			if e != c.ep {
				return
			}
			once.Do(func() {
				// The receive side sees the peer's close now: the
				// written messages are retired only once fail waits
				// at the gate (it is one call from it).
				go e.fail(nil, nil)
				select {
				case <-failing:
				case <-time.After(to):
					t.Error("fail did not start")
				}
			})
		}
		w := sqe(9, op, verbs.SendSignaled, sge(smr, src, 0, 1000))
		w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 0)
		c.postSend(w)
		cq := pollCQ(t, c.scq, to)
		testAfterWrite = nil
		require.EqualValues(t, 9, cq.WRID)
		require.EqualValues(t, verbs.WCSuccess, cq.Status, "op %d: a fully written message was flushed", op)
		c.wait(Disconnected, to)
	}
}
