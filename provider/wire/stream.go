package wire

import "encoding/binary"

// Stream is one direction of an MPA connection in full operation, framed or
// parsed piece by piece: it knows the stream offset (where markers go) and
// the CRC of the FPDU in progress. The engine frames straight from registered
// memory and places straight into it, so it never holds an FPDU in one
// buffer; it drives a Stream with the pieces as they come. AppendFPDU and
// NextFPDU do the same for a whole FPDU in memory, for tests and tools: the
// code the fuzzers run is the code the engine runs.
//
// An FPDU is, in stream order: the ULPDU Length, the ULPDU, zero pad to a
// multiple of 4, and the CRC field, with a marker wherever the stream offset
// is a multiple of MarkerInterval (markers on). The CRC covers every octet of
// the FPDU before the CRC field, its markers included.
type Stream struct {
	CRC     bool // FPDUs carry a CRC32c; else the field is zero and not checked
	Markers bool // a marker every MarkerInterval octets of the stream

	pos uint64 // stream offset of the next octet
	hdr uint64 // stream offset of the current FPDU's ULPDU Length field
	crc uint32 // CRC32c of the current FPDU so far
}

// NewStream returns a stream whose next octet is at offset pos (0 for the
// first octet after the MPA request or reply).
func NewStream(crc, markers bool, pos uint64) Stream {
	return Stream{CRC: crc, Markers: markers, pos: pos}
}

// Pos returns the stream offset of the next octet.
func (s *Stream) Pos() uint64 { return s.pos }

// Begin starts an FPDU at the current offset. A marker due there goes in
// front of the ULPDU Length field.
func (s *Stream) Begin() {
	s.crc = 0
	s.hdr = s.pos
	if s.MarkerDue() {
		s.hdr += MarkerLen
	}
}

// MarkerDue reports whether a marker goes at the current offset.
func (s *Stream) MarkerDue() bool { return s.Markers && NextMarker(s.pos) == 0 }

// Room returns how many of the next n octets of the FPDU go before the next
// marker: n when none falls among them, 0 when one is due now.
func (s *Stream) Room(n int) int {
	if !s.Markers {
		return n
	}
	return min(n, NextMarker(s.pos))
}

// markerPtr is the FPDUPTR of a marker at the current offset: the distance
// back to the ULPDU Length field, 0 for a marker just in front of it.
func (s *Stream) markerPtr() int {
	if s.pos > s.hdr {
		return int(s.pos - s.hdr)
	}
	return 0
}

// PutMarker writes the marker due at the current offset into b[:MarkerLen].
func (s *Stream) PutMarker(b []byte) {
	b[0], b[1] = 0, 0
	binary.BigEndian.PutUint16(b[2:], uint16(s.markerPtr()))
	s.Sum(b[:MarkerLen])
}

// CheckMarker checks the marker received at the current offset.
func (s *Stream) CheckMarker(b []byte) error {
	if int(binary.BigEndian.Uint16(b[2:MarkerLen])) != s.markerPtr() {
		return ErrMPAMarker
	}
	s.Sum(b[:MarkerLen])
	return nil
}

// Sum takes octets of the FPDU before its CRC field (no marker due among
// them: see Room) into the CRC and the offset.
func (s *Stream) Sum(b []byte) {
	if s.CRC {
		s.crc = CRC32cUpdate(s.crc, b)
	}
	s.pos += uint64(len(b))
}

// PutTrailer writes the FPDU's CRC field into b[:MPACRCSize] (zero when CRC
// is off), which ends the FPDU. A marker due before it goes first.
func (s *Stream) PutTrailer(b []byte) {
	var c uint32
	if s.CRC {
		c = s.crc
	}
	PutCRC(b, c)
	s.pos += MPACRCSize
}

// CheckTrailer ends the FPDU with the CRC field received in b.
func (s *Stream) CheckTrailer(b []byte) error {
	s.pos += MPACRCSize
	if s.CRC && GetCRC(b) != s.crc {
		return ErrMPACRC
	}
	return nil
}

// AppendFPDU frames ulpdu as one FPDU at the current offset and appends its
// stream octets (markers included) to dst.
func (s *Stream) AppendFPDU(dst, ulpdu []byte) ([]byte, error) {
	if len(ulpdu) > MaxULPDULen {
		return dst, ErrMPALength
	}
	var l, zero, m [4]byte
	PutULPDULen(l[:], len(ulpdu))
	s.Begin()
	dst = s.appendPiece(dst, l[:MPALenSize])
	dst = s.appendPiece(dst, ulpdu)
	dst = s.appendPiece(dst, zero[:PadLen(len(ulpdu))])
	if s.MarkerDue() {
		s.PutMarker(m[:])
		dst = append(dst, m[:]...)
	}
	s.PutTrailer(m[:])
	return append(dst, m[:]...), nil
}

func (s *Stream) appendPiece(dst, b []byte) []byte {
	for len(b) > 0 {
		if s.MarkerDue() {
			var m [MarkerLen]byte
			s.PutMarker(m[:])
			dst = append(dst, m[:]...)
			continue
		}
		k := s.Room(len(b))
		s.Sum(b[:k])
		dst = append(dst, b[:k]...)
		b = b[k:]
	}
	return dst
}

// NextFPDU parses the FPDU at the start of b, stream octets as received at
// the current offset: it checks its markers and CRC, appends its ULPDU to dst
// and returns that ULPDU and the octets of b the FPDU took. On an error the
// stream is left as it was: ErrShort when b ends before the FPDU does.
func (s *Stream) NextFPDU(dst, b []byte) (ulpdu []byte, n int, err error) {
	saved := *s
	defer func() {
		if err != nil {
			*s = saved
		}
	}()
	s.Begin()
	var l [MPALenSize]byte
	if _, err = s.take(l[:0], b, &n, MPALenSize); err != nil {
		return nil, 0, err
	}
	ulen := ULPDULen(l[:])
	start := len(dst)
	if dst, err = s.take(dst, b, &n, ulen); err != nil {
		return nil, 0, err
	}
	var pad [4]byte
	if _, err = s.take(pad[:0], b, &n, PadLen(ulen)); err != nil {
		return nil, 0, err
	}
	if len(b)-n < MPACRCSize {
		return nil, 0, ErrShort
	}
	if err = s.CheckTrailer(b[n : n+MPACRCSize]); err != nil {
		return nil, 0, err
	}
	return dst[start:], n + MPACRCSize, nil
}

// take appends the next want octets of the FPDU from b[*r:] to dst,
// checking and skipping the markers among them and one due right after
// them (it is still the FPDU's: take is never asked for the CRC field).
func (s *Stream) take(dst, b []byte, r *int, want int) ([]byte, error) {
	for {
		if s.MarkerDue() {
			if len(b)-*r < MarkerLen {
				return dst, ErrShort
			}
			if err := s.CheckMarker(b[*r:]); err != nil {
				return dst, err
			}
			*r += MarkerLen
		}
		if want == 0 {
			return dst, nil
		}
		k := s.Room(want)
		if len(b)-*r < k {
			return dst, ErrShort
		}
		s.Sum(b[*r : *r+k])
		dst = append(dst, b[*r:*r+k]...)
		*r += k
		want -= k
	}
}
