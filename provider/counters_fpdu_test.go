package provider

import (
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// The engine counts FPDUs and bytes both ways and Terminates sent and
// received on its device (giw_lo here; other tests may add to it, so only
// lower bounds are checked).
func TestFPDUCounters(t *testing.T) {
	c0 := DeviceCounters("giw_lo").Snapshot("giw_lo")
	pol := DefaultPolicy()
	pol.RNRTimeout = 0
	p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
	c, s := p.cli, p.srv
	const n = 100 << 10
	src, smr := c.mem(n, 0)
	dst, dmr := s.mem(n, verbs.AccessRemoteWrite)
	s.postRecv(rqe(1, sge(dmr, dst, 0, n)))
	c.postSend(sqe(1, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, n)))
	require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
	require.EqualValues(t, verbs.WCSuccess, pollCQ(t, s.rcq, to).Status)
	c1 := DeviceCounters("giw_lo").Snapshot("giw_lo")
	require.GreaterOrEqual(t, c1.TxFPDUs-c0.TxFPDUs, uint64(2), "tx FPDUs")
	require.GreaterOrEqual(t, c1.RxFPDUs-c0.RxFPDUs, uint64(2), "rx FPDUs")
	require.GreaterOrEqual(t, c1.TxBytes-c0.TxBytes, uint64(n))
	require.GreaterOrEqual(t, c1.RxBytes-c0.RxBytes, uint64(n))

	// A Send without a receive: the server sends a Terminate, the client gets it.
	c.postSend(sqe(2, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, 10)))
	s.wait(Disconnected, to)
	c.wait(Disconnected, to)
	deadline := time.Now().Add(to)
	for {
		c2 := DeviceCounters("giw_lo").Snapshot("giw_lo")
		if c2.TerminatesSent > c1.TerminatesSent && c2.TerminatesRecv > c1.TerminatesRecv {
			break
		}
		require.True(t, time.Now().Before(deadline), "terminates not counted: %+v", c2)
		time.Sleep(time.Millisecond)
	}
}
