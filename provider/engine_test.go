package provider

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

const to = 5 * time.Second

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

var modes = []struct {
	name string
	pol  func() Policy
}{
	{"default", DefaultPolicy},
	{"crc", func() Policy { p := DefaultPolicy(); p.CRC = true; return p }},
	{"markers", func() Policy { p := DefaultPolicy(); p.Markers = true; return p }},
	{"crc+markers", func() Policy { p := DefaultPolicy(); p.CRC, p.Markers = true, true; return p }},
	{"rev1", func() Policy { p := DefaultPolicy(); p.Revision = 1; return p }},
	{"rev1-irdord", func() Policy { p := DefaultPolicy(); p.Revision = 1; p.V1IRDORD = true; return p }},
	{"p2p-write", func() Policy { p := DefaultPolicy(); p.P2P = true; p.RTR = rtrWrite; return p }},
	{"p2p-read", func() Policy { p := DefaultPolicy(); p.P2P = true; p.RTR = rtrRead; return p }},
	{"p2p-send", func() Policy { p := DefaultPolicy(); p.P2P = true; p.RTR = rtrSend; return p }},
}

// TestSendWriteRead runs the basic opcodes in every negotiated mode.
func TestSendWriteRead(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			pol := m.pol()
			p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol, cliPD: []byte("hello"), srvPD: []byte("world")})
			c, s := p.cli, p.srv
			const n = 300 << 10
			src, smr := c.mem(n, 0)
			dst, dmr := s.mem(n, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			fill(src, 1)

			// Send with three SGEs into a receive with two.
			s.postRecv(rqe(7, sge(dmr, dst, 0, 1000), sge(dmr, dst, 5000, 200000)))
			c.postSend(sqe(1, verbs.WRSend, verbs.SendSignaled, sge(smr, src, 0, 10), sge(smr, src, 100, 90000), sge(smr, src, 200000, 50000)))
			cq := pollCQ(t, c.scq, to)
			require.Equal(t, verbs.CQE{WRID: 1, Status: verbs.WCSuccess, Opcode: verbs.WCOpSend, ByteLen: 140010, QPNum: c.qp.Num}, cq)
			rc := pollCQ(t, s.rcq, to)
			require.EqualValues(t, verbs.WCSuccess, rc.Status)
			require.EqualValues(t, 7, rc.WRID)
			require.EqualValues(t, 140010, rc.ByteLen)
			want := append(append(append([]byte{}, src[:10]...), src[100:90100]...), src[200000:250000]...)
			got := append(append([]byte{}, dst[:1000]...), dst[5000:5000+140010-1000]...)
			require.True(t, bytes.Equal(want, got[:len(want)]), "send payload")

			// Inline send.
			s.postRecv(rqe(8, sge(dmr, dst, 0, 64)))
			e := sqe(2, verbs.WRSend, verbs.SendSignaled|verbs.SendInline)
			e.InlineLen = 11
			copy(e.InlineData(), "inline data")
			c.postSend(e)
			require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
			rc = pollCQ(t, s.rcq, to)
			require.EqualValues(t, 11, rc.ByteLen)
			require.Equal(t, "inline data", string(dst[:11]))

			// Write.
			w := sqe(3, verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, 0, n))
			w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 0)
			c.postSend(w)
			cq = pollCQ(t, c.scq, to)
			require.Equal(t, verbs.CQE{WRID: 3, Status: verbs.WCSuccess, Opcode: verbs.WCOpRDMAWrite, ByteLen: n, QPNum: c.qp.Num}, cq)
			// The write is visible once a later send arrives (ordering).
			s.postRecv(rqe(9, sge(dmr, dst, 0, 0)))
			c.postSend(sqe(4, verbs.WRSend, 0))
			require.EqualValues(t, verbs.WCSuccess, pollCQ(t, s.rcq, to).Status)
			require.True(t, bytes.Equal(src, dst), "write payload")

			// Read back into another buffer.
			back, bmr := c.mem(n, 0)
			r := sqe(5, verbs.WRRDMARead, verbs.SendSignaled, sge(bmr, back, 0, n))
			r.RKey, r.RemoteAddr = dmr.STag, addr(dst, 0)
			c.postSend(r)
			cq = pollCQ(t, c.scq, to)
			require.Equal(t, verbs.CQE{WRID: 5, Status: verbs.WCSuccess, Opcode: verbs.WCOpRDMARead, ByteLen: n, QPNum: c.qp.Num}, cq)
			require.True(t, bytes.Equal(src, back), "read payload")

			// The server sends too (after the RTR).
			c.postRecv(rqe(10, sge(bmr, back, 0, 100)))
			s.postSend(sqe(11, verbs.WRSend, verbs.SendSignaled|verbs.SendSolicited, sge(dmr, dst, 0, 100)))
			require.EqualValues(t, verbs.WCSuccess, pollCQ(t, s.scq, to).Status)
			rc = pollCQ(t, c.rcq, to)
			require.EqualValues(t, 100, rc.ByteLen)

			p.cli.ep.Disconnect()
			p.cli.wait(Disconnected, to)
			p.srv.wait(Disconnected, to)
			require.Equal(t, verbs.QPSErr, c.qp.State())
			require.Equal(t, verbs.QPSErr, s.qp.State())
		})
	}
}

func TestWriteImmAtomicsUnsignaledFence(t *testing.T) {
	p := connectPair(t, pairOpts{})
	c, s := p.cli, p.srv
	src, smr := c.mem(4096, 0)
	dst, dmr := s.mem(4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	fill(src, 2)

	// Write with immediate: the receive completes with the immediate data.
	s.postRecv(rqe(1))
	w := sqe(1, verbs.WRRDMAWriteWithImm, verbs.SendSignaled, sge(smr, src, 0, 1000))
	w.RKey, w.RemoteAddr, w.ImmInv = dmr.STag, addr(dst, 0), 0x11223344
	c.postSend(w)
	require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
	rc := pollCQ(t, s.rcq, to)
	require.EqualValues(t, verbs.WCOpRecvRDMAWImm, rc.Opcode)
	require.EqualValues(t, verbs.WCWithImm, rc.WCFlags)
	require.EqualValues(t, 0x11223344, rc.ImmInv)
	require.EqualValues(t, 1000, rc.ByteLen)
	require.Equal(t, src[:1000], dst[:1000])

	// Fetch-and-add and compare-and-swap.
	binary.NativeEndian.PutUint64(dst[1024:], 40)
	fa := sqe(2, verbs.WRAtomicFetchAdd, verbs.SendSignaled, sge(smr, src, 2048, 8))
	fa.RKey, fa.RemoteAddr, fa.CompareAdd = dmr.STag, addr(dst, 1024), 2
	c.postSend(fa)
	cq := pollCQ(t, c.scq, to)
	require.EqualValues(t, verbs.WCSuccess, cq.Status)
	require.EqualValues(t, verbs.WCOpFetchAdd, cq.Opcode)
	require.EqualValues(t, 40, binary.NativeEndian.Uint64(src[2048:]))
	require.EqualValues(t, 42, binary.NativeEndian.Uint64(dst[1024:]))
	cs := sqe(3, verbs.WRAtomicCmpSwp, verbs.SendSignaled, sge(smr, src, 2056, 8))
	cs.RKey, cs.RemoteAddr, cs.CompareAdd, cs.Swap = dmr.STag, addr(dst, 1024), 42, 7
	c.postSend(cs)
	require.EqualValues(t, verbs.WCSuccess, pollCQ(t, c.scq, to).Status)
	require.EqualValues(t, 42, binary.NativeEndian.Uint64(src[2056:]))
	require.EqualValues(t, 7, binary.NativeEndian.Uint64(dst[1024:]))

	// Unsignaled work produces no completion; a fenced send waits for the read.
	u := sqe(4, verbs.WRRDMAWrite, 0, sge(smr, src, 0, 100))
	u.RKey, u.RemoteAddr = dmr.STag, addr(dst, 0)
	c.postSend(u)
	r := sqe(5, verbs.WRRDMARead, verbs.SendSignaled, sge(smr, src, 3000, 500))
	r.RKey, r.RemoteAddr = dmr.STag, addr(dst, 0)
	c.postSend(r)
	s.postRecv(rqe(6, sge(dmr, dst, 3500, 500)))
	c.postSend(sqe(6, verbs.WRSend, verbs.SendSignaled|verbs.SendFence, sge(smr, src, 3000, 500)))
	cq = pollCQ(t, c.scq, to)
	require.EqualValues(t, 5, cq.WRID)
	cq = pollCQ(t, c.scq, to)
	require.EqualValues(t, 6, cq.WRID)
	require.True(t, cqEmpty(c.scq))
	pollCQ(t, s.rcq, to)
	// The fenced send carried what the read fetched.
	require.Equal(t, src[:100], dst[3500:3600])
}

func TestPrivateDataAndReject(t *testing.T) {
	// Private data both ways, longest allowed.
	long := bytes.Repeat([]byte{0xab}, 252)
	connectPair(t, pairOpts{cliPD: long, srvPD: long[:100]})

	// Reject with private data.
	c := newSide(t)
	tl, err := netListen()
	require.NoError(t, err)
	ln := listenPolicy(tl, func(r *Request) {
		require.Equal(t, "please", string(r.Params.PrivateData))
		_ = r.Reject([]byte("no thanks"))
	}, DefaultPolicy())
	defer ln.Close()
	pol := DefaultPolicy()
	_, err = connectPolicy(c.qp, nil, ln.Addr(), ConnParams{PrivateData: []byte("please"), IRD: 1, ORD: 1}, to, c.cb, &pol)
	require.NoError(t, err)
	ev := c.wait(Rejected, to)
	require.Equal(t, "no thanks", string(ev.Params.PrivateData))
	require.Equal(t, verbs.QPSInit, c.qp.State())

	// Too long private data is refused up front.
	_, err = connectPolicy(c.qp, nil, ln.Addr(), ConnParams{PrivateData: make([]byte, 253)}, to, c.cb, &pol)
	require.ErrorIs(t, err, ErrPrivateDataTooLong)
}
