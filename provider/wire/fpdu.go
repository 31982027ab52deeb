package wire

import (
	"encoding/binary"
)

// FPDU framing (RFC 5044):
//
//	| ULPDU Length (16) | ULPDU ... | PAD (0-3) | CRC (32) |
//
// The ULPDU Length counts the ULPDU only. PAD makes length field, ULPDU and
// PAD a multiple of four. The CRC field is always present; it is zero when
// CRC was not negotiated.
const (
	MPALenSize     = 2      // the ULPDU Length field
	MPACRCSize     = 4      // the CRC trailer
	MaxULPDULen    = 0xffff // largest ULPDU Length
	MarkerInterval = 512    // markers sit every 512 octets of the stream
	MarkerLen      = 4      // Reserved (16) + FPDUPTR (16)
)

// PadLen returns the number of pad bytes after a ULPDU of ulpduLen bytes.
func PadLen(ulpduLen int) int { return -(ulpduLen + MPALenSize) & 3 }

// FPDULen returns the length of an FPDU (without markers) carrying a ULPDU
// of ulpduLen bytes: length field, ULPDU, pad and CRC.
func FPDULen(ulpduLen int) int {
	return MPALenSize + ulpduLen + PadLen(ulpduLen) + MPACRCSize
}

// MULPDU returns the largest ULPDU that fits an FPDU into one TCP segment
// of emss bytes (RFC 5044):
//
//	markers: MULPDU = EMSS - (6 + 4*ceil(EMSS/512) + EMSS mod 4)
//	none:    MULPDU = EMSS - (6 + EMSS mod 4)
//
// The result is 0 when emss is too small.
func MULPDU(emss int, markers bool) int {
	m := emss - (MPALenSize + MPACRCSize + emss%4)
	if markers {
		m -= MarkerLen * ((emss + MarkerInterval - 1) / MarkerInterval)
	}
	if m < 0 {
		return 0
	}
	return m
}

// MaxPayload returns how many payload bytes follow a header of headerLen
// bytes (DDP control byte on) in an FPDU that fills one TCP segment of mss
// bytes, without markers, rounded down to a multiple of four. This is how
// siw sizes FPDUs (payload = segment - length field - header - CRC; siw's
// c_tx->tcp_seglen is the MSS) whenever the MSS is a multiple of four.
func MaxPayload(mss, headerLen int) int {
	p := (mss - MPALenSize - headerLen - MPACRCSize) &^ 3
	if p < 0 {
		return 0
	}
	return p
}

// PutULPDULen writes the ULPDU Length field into b[:2].
func PutULPDULen(b []byte, ulpduLen int) { binary.BigEndian.PutUint16(b, uint16(ulpduLen)) }

// ULPDULen reads the ULPDU Length field from b[:2].
func ULPDULen(b []byte) int { return int(binary.BigEndian.Uint16(b)) }

// PutCRC writes the CRC trailer. The CRC32c value goes on the wire least
// significant byte first, as in iSCSI (RFC 3720 appendix B.4) and as Linux
// siw sends it: the CRC of the bytes 00 22 41 43 ... 00 40 is 0xf456229f
// and travels as 9f 22 56 f4.
func PutCRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// GetCRC reads the CRC trailer written by PutCRC.
func GetCRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// FinishFPDU completes an FPDU without markers in place: b[2:2+ulpduLen]
// holds the ULPDU; FinishFPDU writes the length field, zero pad and the CRC
// field (the CRC32c of everything before it when crc is set, else zero) and
// returns the FPDU length. (Stream frames with markers.)
func FinishFPDU(b []byte, ulpduLen int, crc bool) (int, error) {
	if ulpduLen < 0 || ulpduLen > MaxULPDULen {
		return 0, ErrMPALength
	}
	n := FPDULen(ulpduLen)
	if len(b) < n {
		return 0, ErrShort
	}
	s := Stream{CRC: crc}
	s.Begin()
	PutULPDULen(b, ulpduLen)
	clear(b[MPALenSize+ulpduLen : n-MPACRCSize])
	s.Sum(b[:n-MPACRCSize])
	s.PutTrailer(b[n-MPACRCSize:])
	return n, nil
}

// CheckFPDU parses the FPDU (without markers) at the start of b: it returns
// the ULPDU (a sub-slice) and the FPDU length. With crc set it verifies the
// CRC field and returns ErrMPACRC on mismatch. It returns ErrShort when b
// ends before the FPDU does. (Stream parses with markers.)
func CheckFPDU(b []byte, crc bool) (ulpdu []byte, n int, err error) {
	if len(b) < MPALenSize {
		return nil, 0, ErrShort
	}
	l := ULPDULen(b)
	n = FPDULen(l)
	if len(b) < n {
		return nil, 0, ErrShort
	}
	s := Stream{CRC: crc}
	s.Begin()
	s.Sum(b[:n-MPACRCSize])
	if err := s.CheckTrailer(b[n-MPACRCSize : n]); err != nil {
		return nil, 0, err
	}
	return b[MPALenSize : MPALenSize+l], n, nil
}

// Markers (RFC 5044). Stream offsets count the octets one side
// sends after its MPA request/reply frame (the first octet of the first
// FPDU is offset 0). A marker sits at every offset that is a multiple of
// 512, so the first FPDU starts with one. A marker is
//
//	| Reserved (16) | FPDUPTR (16) |
//
// where FPDUPTR is the distance in stream octets from the FPDU's ULPDU
// Length field back to the marker. A marker that falls exactly at the
// start of an FPDU goes in front of its ULPDU Length field and has FPDUPTR
// 0. A marker never splits a field because FPDUs and markers are 4-aligned.

// NextMarker returns the distance from stream offset pos to the next marker
// position (0 when pos is one).
func NextMarker(pos uint64) int {
	return int(-pos & (MarkerInterval - 1))
}

// MarkedLen returns the number of stream octets an FPDU of n bytes (as
// built without markers) occupies when it starts at stream offset pos and
// markers are inserted.
func MarkedLen(pos uint64, n int) int {
	w := 0
	for n > 0 {
		if NextMarker(pos) == 0 {
			w += MarkerLen
			pos += MarkerLen
		}
		take := min(n, NextMarker(pos+1)+1)
		w += take
		pos += uint64(take)
		n -= take
	}
	return w
}

// MarkersIn returns how many marker positions fall in the stream octets
// [pos, pos+n).
func MarkersIn(pos uint64, n int) int {
	if n <= 0 {
		return 0
	}
	first := uint64(NextMarker(pos))
	if first >= uint64(n) {
		return 0
	}
	return int((uint64(n)-first-1)/MarkerInterval) + 1
}
