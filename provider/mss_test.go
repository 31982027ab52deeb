package provider

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/stretchr/testify/require"
)

// FPDUs follow the connection's MSS as it grows after the handshake
// (loopback's starts at half its final size, bounded by the peer's first
// window), asked again at most every mssRecheck, as siw's follow the
// socket's segment size: framed to the handshake's MSS, a bulk transfer
// took twice the sendmsg and readv calls it needs.
func TestFPDUsFollowMSS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		s, err := l.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, s)
			s.Close()
		}
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer nc.Close()
	c := nc.(*net.TCPConn)
	rc, err := c.SyscallConn()
	require.NoError(t, err)

	e := &Endpoint{rc: rc, neg: negotiated{ird: 1, ord: 1}}
	e.mulpdu = mulpduFor(rc, false) // as start sets it
	tx := &e.tx
	tx.init(e)
	atHandshake := e.mulpdu

	chunk := make([]byte, 1<<20)
	for i := 0; mulpduFor(rc, false) <= atHandshake; i++ {
		require.Less(t, i, 256, "the MSS never grew past the handshake's")
		_, err := c.Write(chunk)
		require.NoError(t, err)
	}

	// The reader still drains, so the MSS may grow on between two looks.
	tx.mssAt = time.Now()
	require.Equal(t, atHandshake, tx.maxULPDU(), "asked again within mssRecheck")
	tx.mssAt = time.Now().Add(-mssRecheck)
	require.Greater(t, tx.maxULPDU(), atHandshake)

	// A message of many FPDUs is cut to the grown size.
	tx.mssAt = time.Time{}
	e.mulpdu = atHandshake
	const size = 8 << 20
	tx.internal = []*txMsg{{kind: kindReadResp, h: wire.Header{Opcode: wire.OpReadResponse, STag: 1},
		data: [][]byte{make([]byte, size)}, total: size}}
	require.True(t, tx.fill())
	require.NotNil(t, tx.cur, "8 MiB is framed over several batches")
	hdr := wire.OpReadResponse.Info().HeaderLen
	require.LessOrEqual(t, tx.cur.seg, e.mulpdu-hdr, "within the size it asked")
	require.Greater(t, tx.cur.seg, atHandshake-hdr)
}

// FPDUs fill a GSO burst of whole segments without markers, one segment
// with them (RFC 5044's MULPDU); loopback's segments are already that big.
func TestFPDUSizeForPath(t *testing.T) {
	for _, tc := range []struct {
		mss     int
		markers bool
		want    int
	}{
		{1448, false, 44*1448 - 6},    // veth or Ethernet, MTU 1500
		{8948, false, 7*8948 - 6},     // MTU 9000
		{65483, false, 65483 - 6 - 3}, // loopback
		{32741, false, 32741 - 6 - 1}, // loopback at the handshake
		{1448, true, 1448 - 6 - 4*3},  // markers: one segment
		{536, false, 119*536 - 6},     // the least MSS
		{100, true, 128},              // the floor
	} {
		got := mulpduForMSS(tc.mss, tc.markers)
		require.Equal(t, tc.want, got, "mss %d markers %v", tc.mss, tc.markers)
		require.LessOrEqual(t, wire.FPDULen(got), 0xffff+wire.MPALenSize+wire.MPACRCSize)
	}
}
