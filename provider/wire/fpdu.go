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

// FinishFPDU completes an FPDU in place: b[2:2+ulpduLen] holds the ULPDU;
// FinishFPDU writes the length field, zero pad and the CRC trailer (the
// CRC32c of everything before it when crc is set, else zero) and returns
// the FPDU length.
func FinishFPDU(b []byte, ulpduLen int, crc bool) (int, error) {
	if ulpduLen < 0 || ulpduLen > MaxULPDULen {
		return 0, ErrMPALength
	}
	n := FPDULen(ulpduLen)
	if len(b) < n {
		return 0, ErrShort
	}
	PutULPDULen(b, ulpduLen)
	end := MPALenSize + ulpduLen
	clear(b[end : n-MPACRCSize])
	var c uint32
	if crc {
		c = CRC32c(b[:n-MPACRCSize])
	}
	PutCRC(b[n-MPACRCSize:], c)
	return n, nil
}

// CheckFPDU parses the FPDU (without markers) at the start of b: it returns
// the ULPDU (a sub-slice) and the FPDU length. With crc set it verifies the
// CRC trailer and returns ErrMPACRC on mismatch. It returns ErrShort when
// b ends before the FPDU does.
func CheckFPDU(b []byte, crc bool) (ulpdu []byte, n int, err error) {
	if len(b) < MPALenSize {
		return nil, 0, ErrShort
	}
	l := ULPDULen(b)
	n = FPDULen(l)
	if len(b) < n {
		return nil, 0, ErrShort
	}
	if crc && CRC32c(b[:n-MPACRCSize]) != GetCRC(b[n-MPACRCSize:]) {
		return nil, 0, ErrMPACRC
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

// putMarker writes one marker with the given FPDUPTR.
func putMarker(b []byte, ptr int) {
	b[0], b[1] = 0, 0
	binary.BigEndian.PutUint16(b[2:], uint16(ptr))
}

// InsertMarkers copies the FPDU fpdu (built without markers) to dst,
// inserting markers for its stream offset pos, and returns the number of
// bytes written (MarkedLen(pos, len(fpdu))). dst must not overlap fpdu.
func InsertMarkers(dst, fpdu []byte, pos uint64) (int, error) {
	need := MarkedLen(pos, len(fpdu))
	if len(dst) < need {
		return 0, ErrShort
	}
	w, r := 0, 0
	hdr := pos // stream offset of the ULPDU Length field
	if len(fpdu) > 0 && NextMarker(pos) == 0 {
		hdr = pos + MarkerLen
	}
	for r < len(fpdu) {
		if NextMarker(pos) == 0 {
			ptr := 0
			if pos > hdr {
				ptr = int(pos - hdr)
			}
			putMarker(dst[w:], ptr)
			w += MarkerLen
			pos += MarkerLen
		}
		take := min(len(fpdu)-r, NextMarker(pos+1)+1)
		copy(dst[w:], fpdu[r:r+take])
		w += take
		r += take
		pos += uint64(take)
	}
	return w, nil
}

// StripMarkers removes the markers from one FPDU as received (wire holds
// exactly the FPDU's stream octets, starting at stream offset pos) and
// writes the bare FPDU to dst, returning its length. Every marker's
// FPDUPTR is checked; a mismatch, or a marker after the FPDU's last byte
// (it would belong to the next FPDU), returns ErrMPAMarker. dst may be
// wire[:0] to strip in place.
func StripMarkers(dst, wire []byte, pos uint64) (int, error) {
	dst = dst[:cap(dst)]
	start := pos
	hdr := pos
	if len(wire) > 0 && NextMarker(pos) == 0 {
		hdr = pos + MarkerLen
	}
	w, r := 0, 0
	for r < len(wire) {
		if NextMarker(pos) == 0 {
			if len(wire)-r < MarkerLen {
				return 0, ErrShort
			}
			ptr := int(binary.BigEndian.Uint16(wire[r+2:]))
			want := 0
			if pos > hdr {
				want = int(pos - hdr)
			}
			if ptr != want {
				return 0, ErrMPAMarker
			}
			r += MarkerLen
			pos += MarkerLen
			continue
		}
		take := min(len(wire)-r, NextMarker(pos+1)+1)
		if len(dst) < w+take {
			return 0, ErrShort
		}
		copy(dst[w:w+take], wire[r:r+take])
		w += take
		r += take
		pos += uint64(take)
	}
	if MarkedLen(start, w) != len(wire) {
		// A marker after the last FPDU byte belongs to the next FPDU.
		return 0, ErrMPAMarker
	}
	return w, nil
}
