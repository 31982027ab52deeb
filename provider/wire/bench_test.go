package wire

import "testing"

func BenchmarkParseHeaderTagged(b *testing.B) {
	v := headerVectors[1]
	var h Header
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseHeader(&h, v.wire, v.ulpdu); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseHeaderReadRequest(b *testing.B) {
	v := headerVectors[4]
	var h Header
	b.ReportAllocs()
	for b.Loop() {
		if err := ParseHeader(&h, v.wire, v.ulpdu); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeHeaderSend(b *testing.B) {
	h := headerVectors[2].want
	buf := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeHeader(buf, &h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCRC32c64K(b *testing.B) {
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		_ = CRC32c(buf)
	}
}

func BenchmarkStreamNextFPDU9000Markers(b *testing.B) {
	tx := NewStream(true, true, 100)
	wire, err := tx.AppendFPDU(nil, make([]byte, 9000))
	if err != nil {
		b.Fatal(err)
	}
	out := make([]byte, 0, 9000)
	b.SetBytes(int64(len(wire)))
	b.ReportAllocs()
	for b.Loop() {
		rx := NewStream(true, true, 100)
		if _, _, err := rx.NextFPDU(out, wire); err != nil {
			b.Fatal(err)
		}
	}
}
