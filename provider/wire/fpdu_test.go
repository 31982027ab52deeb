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

func TestMarkerPositions(t *testing.T) {
	assert.Equal(t, 0, NextMarker(1024))
	assert.Equal(t, 12, NextMarker(500))
	assert.Equal(t, 0, MarkersIn(4, 508))
	assert.Equal(t, 1, MarkersIn(4, 509))
	assert.Equal(t, 0, MarkersIn(0, 0))
	assert.Equal(t, 3, MarkersIn(0, 1112))
	assert.Equal(t, 1112, MarkedLen(0, 1100))
}
