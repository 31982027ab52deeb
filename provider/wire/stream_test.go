package wire

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// referenceFPDU builds an FPDU the slow way, octet by octet, straight from
// RFC 5044's rules: length, ULPDU, zero pad; a marker at every stream offset
// that is a multiple of 512 before the CRC field, whose FPDUPTR counts back
// to the ULPDU Length field (0 for a marker just in front of it); a CRC32c
// over all of it, markers included. It is the oracle for Stream.
func referenceFPDU(ulpdu []byte, pos uint64, crc, markers bool) []byte {
	bare := make([]byte, 2, 2+len(ulpdu)+3)
	binary.BigEndian.PutUint16(bare, uint16(len(ulpdu)))
	bare = append(bare, ulpdu...)
	for len(bare)%4 != 0 {
		bare = append(bare, 0)
	}
	hdr := pos
	if markers && pos%512 == 0 {
		hdr += 4
	}
	var out []byte
	mark := func() {
		for markers && pos%512 == 0 {
			ptr := uint64(0)
			if pos > hdr {
				ptr = pos - hdr
			}
			out = append(out, 0, 0, byte(ptr>>8), byte(ptr))
			pos += 4
		}
	}
	for _, b := range bare {
		mark()
		out = append(out, b)
		pos++
	}
	mark()
	var c [4]byte
	if crc {
		binary.LittleEndian.PutUint32(c[:], CRC32c(out))
	}
	return append(out, c[:]...)
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

// frameInPieces frames ulpdu the way the engine does: the header and the
// payload as separate pieces, the payload cut every cut octets.
func frameInPieces(s *Stream, ulpdu []byte, cut int) []byte {
	var out []byte
	put := func(b []byte) {
		for len(b) > 0 {
			if s.MarkerDue() {
				var m [MarkerLen]byte
				s.PutMarker(m[:])
				out = append(out, m[:]...)
				continue
			}
			k := s.Room(min(len(b), cut))
			s.Sum(b[:k])
			out = append(out, b[:k]...)
			b = b[k:]
		}
	}
	var l [2]byte
	PutULPDULen(l[:], len(ulpdu))
	s.Begin()
	put(l[:])
	put(ulpdu)
	put(make([]byte, PadLen(len(ulpdu))))
	var tr [8]byte
	n := 0
	if s.MarkerDue() {
		s.PutMarker(tr[:])
		n = MarkerLen
	}
	s.PutTrailer(tr[n:])
	return append(out, tr[:n+MPACRCSize]...)
}

func TestStreamMatchesReference(t *testing.T) {
	for _, size := range []int{0, 1, 2, 3, 34, 506, 510, 1020, 1442, 4096, 9000} {
		for pos := uint64(0); pos < 2*MarkerInterval; pos += 4 {
			for _, mode := range []struct{ crc, markers bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
				p := pos + 1<<32 // offsets past 4 GiB behave the same
				ulpdu := pattern(size)
				want := referenceFPDU(ulpdu, p, mode.crc, mode.markers)

				tx := NewStream(mode.crc, mode.markers, p)
				got, err := tx.AppendFPDU(nil, ulpdu)
				require.NoError(t, err)
				require.Equal(t, want, got, "size %d pos %d %+v", size, pos, mode)
				require.Equal(t, p+uint64(len(want)), tx.Pos())
				if !mode.markers {
					require.Equal(t, FPDULen(size), len(got))
				} else {
					require.Equal(t, MarkedLen(p, FPDULen(size)), len(got))
				}

				pieces := NewStream(mode.crc, mode.markers, p)
				require.Equal(t, want, frameInPieces(&pieces, ulpdu, 1+size%97))

				rx := NewStream(mode.crc, mode.markers, p)
				back, n, err := rx.NextFPDU(nil, append(got, 0xaa))
				require.NoError(t, err)
				require.Equal(t, len(got), n)
				require.Equal(t, string(ulpdu), string(back))
				require.Equal(t, tx.Pos(), rx.Pos())
			}
		}
	}
}

func TestStreamGolden(t *testing.T) {
	// The Send of rping-siw-crc.pcap, framed again: the same octets.
	s := NewStream(true, false, 0)
	got, err := s.AppendFPDU(nil, siwSendFPDU[2:36])
	require.NoError(t, err)
	assert.Equal(t, siwSendFPDU, got)

	// Markers, no CRC: a 40-octet FPDU at offsets around a marker.
	fp := cat(siwSendFPDU[:36], []byte{0, 0, 0, 0})
	for _, tc := range []struct {
		name string
		pos  uint64
		wire []byte
	}{
		{"first FPDU starts with a marker, FPDUPTR 0", 0, cat([]byte{0, 0, 0x00, 0x00}, fp)},
		{"marker 12 bytes into the FPDU", 500, cat(fp[:12], []byte{0, 0, 0x00, 0x0c}, fp[12:])},
		{"marker 32 bytes in", 480, cat(fp[:32], []byte{0, 0, 0x00, 0x20}, fp[32:])},
		{"FPDU ends on the marker position: no marker", 472, fp},
		{"marker before the CRC", 1024 - 36, cat(fp[:36], []byte{0, 0, 0x00, 0x24}, fp[36:])},
		{"no marker", 4, fp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(false, true, tc.pos)
			got, err := s.AppendFPDU(nil, fp[2:36])
			require.NoError(t, err)
			assert.Equal(t, tc.wire, got)
		})
	}

	// A long FPDU spanning three markers: FPDUPTRs 0, 508, 1020, counted
	// from the ULPDU Length field that follows the first marker.
	s = NewStream(false, true, 0)
	wire, err := s.AppendFPDU(nil, make([]byte, 1094))
	require.NoError(t, err)
	require.Len(t, wire, 1112)
	assert.Equal(t, []byte{0, 0, 0, 0}, wire[0:4])
	assert.Equal(t, []byte{0, 0, 0x01, 0xfc}, wire[512:516])
	assert.Equal(t, []byte{0, 0, 0x03, 0xfc}, wire[1024:1028])
}

func TestStreamErrors(t *testing.T) {
	tx := NewStream(true, true, 500)
	wire, err := tx.AppendFPDU(nil, siwSendFPDU[2:36])
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		at   int // octet to flip, or -1
		cut  int // length to keep, or -1
		want error
	}{
		{"bad FPDUPTR", 15, -1, ErrMPAMarker},
		{"bad payload", 20, -1, ErrMPACRC},
		{"bad CRC", len(wire) - 1, -1, ErrMPACRC},
		{"marker cut short", -1, 14, ErrShort},
		{"CRC cut short", -1, len(wire) - 1, ErrShort},
		{"nothing", -1, 0, ErrShort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), wire...)
			if tc.at >= 0 {
				b[tc.at] ^= 0x10
			}
			if tc.cut >= 0 {
				b = b[:tc.cut]
			}
			rx := NewStream(true, true, 500)
			_, _, err := rx.NextFPDU(nil, b)
			assert.ErrorIs(t, err, tc.want)
			assert.Equal(t, uint64(500), rx.Pos(), "a failed parse leaves the stream as it was")
		})
	}
	_, err = tx.AppendFPDU(nil, make([]byte, MaxULPDULen+1))
	assert.ErrorIs(t, err, ErrMPALength)

	rx := NewStream(true, true, 500)
	out := make([]byte, 0, 64)
	assert.Zero(t, testing.AllocsPerRun(50, func() {
		rx = NewStream(true, true, 500)
		_, _, _ = rx.NextFPDU(out, wire)
	}))
}

// FuzzStreamRoundTrip frames FPDUs cut from data (whole, and in pieces as
// the engine does) and parses them back in one buffer: the same octets as
// the reference, the same ULPDUs back, a corrupted octet never accepted with
// CRC on.
func FuzzStreamRoundTrip(f *testing.F) {
	f.Add(siwSendFPDU, uint64(0), true, true, uint8(7))
	f.Add(make([]byte, 1500), uint64(508), false, true, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, pos uint64, crc, markers bool, cut uint8) {
		pos &^= 3
		data = data[:min(len(data), 8<<10)] // the reference is octet by octet
		tx := NewStream(crc, markers, pos)
		pieces := NewStream(crc, markers, pos)
		var wire []byte
		var ulpdus [][]byte
		for rest := data; ; {
			n := min(len(rest), 1+int(cut)*13)
			u := rest[:n]
			var err error
			start := len(wire)
			wire, err = tx.AppendFPDU(wire, u)
			if err != nil {
				t.Fatal(err)
			}
			if string(wire[start:]) != string(referenceFPDU(u, pos+uint64(start), crc, markers)) {
				t.Fatalf("FPDU at %d differs from the reference", start)
			}
			if string(frameInPieces(&pieces, u, 1+int(cut))) != string(wire[start:]) {
				t.Fatalf("FPDU at %d framed in pieces differs", start)
			}
			ulpdus = append(ulpdus, u)
			rest = rest[n:]
			if len(rest) == 0 {
				break
			}
		}
		rx := NewStream(crc, markers, pos)
		r := 0
		for i, u := range ulpdus {
			got, n, err := rx.NextFPDU(nil, wire[r:])
			if err != nil || string(got) != string(u) {
				t.Fatalf("FPDU %d: %v", i, err)
			}
			r += n
		}
		if r != len(wire) || rx.Pos() != tx.Pos() {
			t.Fatalf("parsed %d of %d octets", r, len(wire))
		}
		if crc && len(wire) > 0 {
			bad := append([]byte(nil), wire...)
			bad[int(cut)%len(bad)] ^= 1
			rx := NewStream(crc, markers, pos)
			for r := 0; r < len(bad); {
				_, n, err := rx.NextFPDU(nil, bad[r:])
				if err != nil {
					return
				}
				r += n
			}
			t.Fatal("a corrupted stream parsed")
		}
	})
}

// FuzzStreamParse feeds arbitrary octets to the parser: no panic, and what
// it accepts frames back to the same octets (but for markers' reserved
// halves and, without CRC, the CRC field and pad, which are not checked).
func FuzzStreamParse(f *testing.F) {
	st := NewStream(true, true, 500)
	w, _ := st.AppendFPDU(nil, siwSendFPDU[2:36])
	f.Add(w, uint64(500), true, true)
	f.Add(siwSendFPDU, uint64(0), true, false)
	f.Fuzz(func(t *testing.T, b []byte, pos uint64, crc, markers bool) {
		pos &^= 3
		rx := NewStream(crc, markers, pos)
		u, n, err := rx.NextFPDU(nil, b)
		if err != nil {
			if rx.Pos() != pos {
				t.Fatal("a failed parse moved the stream")
			}
			return
		}
		if n > len(b) || rx.Pos() != pos+uint64(n) {
			t.Fatalf("took %d of %d octets", n, len(b))
		}
		again := referenceFPDU(u, pos, crc, markers)
		if len(again) != n {
			t.Fatalf("re-framed to %d octets, parsed %d", len(again), n)
		}
		if crc && !markers && string(again) != string(b[:n]) {
			t.Fatal("re-framed octets differ")
		}
	})
}
