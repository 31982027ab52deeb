package wire

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// siwSendFPDU is the first Send of rping-siw-crc.pcap: a complete FPDU with
// a valid CRC32c trailer.
var siwSendFPDU = cat(
	[]byte{0x00, 0x22}, // ULPDU Length = 34
	headerVectors[2].wire,
	[]byte{0x00, 0x00, 0x56, 0x53, 0xc1, 0xee, 0x23, 0x70, 0x4d, 0x44, 0x32, 0x00, 0x00, 0x00, 0x00, 0x40}, // rping payload
	[]byte{0x9f, 0x22, 0x56, 0xf4}, // CRC (PAD is empty: 2+34 is a multiple of 4)
)

// siwReadReqFPDU is the RDMA Read Request of rping-siw-crc.pcap.
var siwReadReqFPDU = cat(
	[]byte{0x00, 0x2e}, // ULPDU Length = 46
	headerVectors[4].wire,
	[]byte{0x17, 0xb5, 0x73, 0x75}, // CRC
)

func TestPadAndLengths(t *testing.T) {
	for _, tc := range []struct{ ulpdu, pad, fpdu int }{
		{0, 2, 8}, {1, 1, 8}, {2, 0, 8}, {3, 3, 12}, {14, 0, 20}, {18, 0, 24},
		{34, 0, 40}, {35, 3, 44}, {46, 0, 52}, {1442, 0, 1448}, {1443, 3, 1452},
	} {
		assert.Equal(t, tc.pad, PadLen(tc.ulpdu), "pad %d", tc.ulpdu)
		assert.Equal(t, tc.fpdu, FPDULen(tc.ulpdu), "fpdu %d", tc.ulpdu)
		assert.Zero(t, FPDULen(tc.ulpdu)%4)
	}
	for _, tc := range []struct {
		emss    int
		markers bool
		want    int
	}{
		{1448, false, 1442}, {1448, true, 1430},
		{1460, false, 1454}, {1460, true, 1442},
		{1450, false, 1442}, {1450, true, 1430},
		{9000, true, 8922}, {512, true, 502}, {4, true, 0},
	} {
		assert.Equal(t, tc.want, MULPDU(tc.emss, tc.markers), "MULPDU(%d, %v)", tc.emss, tc.markers)
		if tc.want > 0 {
			// The largest FPDU, markers included, fits the segment.
			w := FPDULen(tc.want)
			if tc.markers {
				w = MarkedLen(0, w) + MarkerLen // worst case: an extra marker
			}
			assert.LessOrEqual(t, w-MarkerLen*boolInt(tc.markers), tc.emss)
		}
	}
	// siw's FPDU sizing for a 1448-byte MSS: 1428 bytes of Write payload.
	assert.Equal(t, 1428, MaxPayload(1448, DDPTaggedHeaderLen))
	assert.Equal(t, 1424, MaxPayload(1448, DDPUntaggedHeaderLen))
	assert.Equal(t, 0, MaxPayload(10, DDPTaggedHeaderLen))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestCheckFPDUGolden(t *testing.T) {
	for _, fp := range [][]byte{siwSendFPDU, siwReadReqFPDU} {
		ulpdu, n, err := CheckFPDU(fp, true)
		require.NoError(t, err)
		assert.Equal(t, len(fp), n)
		assert.Equal(t, fp[2:2+ULPDULen(fp)], ulpdu)

		// Rebuilding gives the same bytes, CRC included.
		buf := make([]byte, len(fp))
		copy(buf[2:], ulpdu)
		m, err := FinishFPDU(buf, len(ulpdu), true)
		require.NoError(t, err)
		assert.Equal(t, fp, buf[:m])

		// Without CRC the trailer is zero.
		m, err = FinishFPDU(buf, len(ulpdu), false)
		require.NoError(t, err)
		assert.Equal(t, []byte{0, 0, 0, 0}, buf[m-4:m])

		for i := 0; i < len(fp); i++ {
			_, _, err := CheckFPDU(fp[:i], true)
			assert.ErrorIs(t, err, ErrShort, "prefix %d", i)
		}
		for i := range fp {
			bad := append([]byte(nil), fp...)
			bad[i] ^= 0x04
			if i < 2 {
				continue // a changed length makes a different (short) frame
			}
			_, _, err := CheckFPDU(bad, true)
			assert.ErrorIs(t, err, ErrMPACRC, "flip at %d", i)
		}
	}
	// Pad bytes are zeroed by FinishFPDU.
	buf := bytes.Repeat([]byte{0xee}, 16)
	n, err := FinishFPDU(buf, 3, false)
	require.NoError(t, err)
	assert.Equal(t, 12, n)
	assert.Equal(t, []byte{0x00, 0x03, 0xee, 0xee, 0xee, 0, 0, 0, 0, 0, 0, 0}, buf[:n])
	_, err = FinishFPDU(buf[:11], 3, false)
	assert.ErrorIs(t, err, ErrShort)
	_, err = FinishFPDU(buf, 70000, false)
	assert.ErrorIs(t, err, ErrMPALength)
}

func TestMarkersGolden(t *testing.T) {
	fp := siwSendFPDU // 40 bytes
	for _, tc := range []struct {
		name string
		pos  uint64
		wire []byte
	}{
		{"first FPDU starts with a marker, FPDUPTR 0", 0,
			cat([]byte{0, 0, 0x00, 0x00}, fp)},
		{"marker 12 bytes into the FPDU", 500,
			cat(fp[:12], []byte{0, 0, 0x00, 0x0c}, fp[12:])},
		{"marker 32 bytes in", 480,
			cat(fp[:32], []byte{0, 0, 0x00, 0x20}, fp[32:])},
		{"FPDU ends on the marker position: no marker", 472, fp},
		{"marker before the CRC", 1024 - 36,
			cat(fp[:36], []byte{0, 0, 0x00, 0x24}, fp[36:])},
		{"no marker", 4, fp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, len(tc.wire), MarkedLen(tc.pos, len(fp)))
			dst := make([]byte, len(tc.wire)+8)
			n, err := InsertMarkers(dst, fp, tc.pos)
			require.NoError(t, err)
			assert.Equal(t, tc.wire, dst[:n])
			out := make([]byte, len(fp))
			m, err := StripMarkers(out, tc.wire, tc.pos)
			require.NoError(t, err)
			assert.Equal(t, fp, out[:m])
			_, err = InsertMarkers(dst[:n-1], fp, tc.pos)
			assert.ErrorIs(t, err, ErrShort)
		})
	}
	// A long FPDU spanning three markers: FPDUPTRs 0, 508, 1020 (counted
	// from the ULPDU Length field that follows the first marker).
	long := make([]byte, 1100)
	for i := range long {
		long[i] = byte(i)
	}
	wire := make([]byte, MarkedLen(0, len(long)))
	require.Len(t, wire, 1112)
	_, err := InsertMarkers(wire, long, 0)
	require.NoError(t, err)
	assert.Equal(t, []byte{0, 0, 0, 0}, wire[0:4])
	assert.Equal(t, []byte{0, 0, 0x01, 0xfc}, wire[512:516])
	assert.Equal(t, []byte{0, 0, 0x03, 0xfc}, wire[1024:1028])
	assert.Equal(t, 3, MarkersIn(0, len(wire)))
}

func TestMarkersRoundTrip(t *testing.T) {
	for _, size := range []int{8, 40, 508, 512, 516, 1020, 1448, 4096, 9000} {
		fp := make([]byte, size)
		for i := range fp {
			fp[i] = byte(i*7 + 1)
		}
		for pos := uint64(0); pos < 2*MarkerInterval; pos += 4 {
			p := pos + 1<<32 // offsets past 4 GiB behave the same
			wire := make([]byte, MarkedLen(p, size))
			n, err := InsertMarkers(wire, fp, p)
			require.NoError(t, err)
			require.Equal(t, len(wire), n)
			assert.Equal(t, MarkerLen*MarkersIn(p, n), n-size, "size %d pos %d", size, pos)
			// Strip in place.
			m, err := StripMarkers(wire[:0], wire, p)
			require.NoError(t, err)
			require.Equal(t, fp, wire[:m], "size %d pos %d", size, pos)
		}
	}
}

func TestStripMarkersErrors(t *testing.T) {
	fp := siwSendFPDU
	wire := cat(fp[:12], []byte{0, 0, 0x00, 0x0c}, fp[12:])
	bad := append([]byte(nil), wire...)
	bad[15] = 0x10
	_, err := StripMarkers(make([]byte, 64), bad, 500)
	assert.ErrorIs(t, err, ErrMPAMarker)
	// Marker cut short.
	_, err = StripMarkers(make([]byte, 64), wire[:14], 500)
	assert.ErrorIs(t, err, ErrShort)
	// Destination too small.
	_, err = StripMarkers(make([]byte, 10), wire, 500)
	assert.ErrorIs(t, err, ErrShort)
	assert.Zero(t, testing.AllocsPerRun(50, func() {
		_, _ = StripMarkers(make([]byte, 0, 64), wire, 500)
	}))
	assert.Equal(t, 0, NextMarker(1024))
	assert.Equal(t, 12, NextMarker(500))
	assert.Equal(t, 0, MarkersIn(4, 508))
	assert.Equal(t, 1, MarkersIn(4, 509))
	assert.Equal(t, 0, MarkersIn(0, 0))
}
