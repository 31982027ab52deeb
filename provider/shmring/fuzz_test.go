package shmring

import (
	"bytes"
	"testing"
)

// FuzzRing interleaves writes and reads of sizes taken from the input
// against a model (a bounded byte queue).
func FuzzRing(f *testing.F) {
	f.Add([]byte{10, 3, 200, 7, 64, 64, 1, 255})
	f.Add([]byte{0, 0, 63, 1, 128, 129})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const n = 64
		r := newRing(t, n)
		var model []byte
		var seq byte
		for _, op := range ops {
			size := int(op & 0x7f)
			if op&0x80 == 0 {
				p := make([]byte, size)
				for i := range p {
					p[i] = seq
					seq++
				}
				w := r.Write(p)
				if want := min(size, n-len(model)); w != want {
					t.Fatalf("write %d: wrote %d, want %d", size, w, want)
				}
				model = append(model, p[:w]...)
				seq -= byte(size - w)
			} else {
				p := make([]byte, size)
				got := r.Read(p)
				want := min(size, len(model))
				if got != want || !bytes.Equal(p[:got], model[:want]) {
					t.Fatalf("read %d: got %d bytes %x, want %x", size, got, p[:got], model[:want])
				}
				model = model[want:]
			}
			if r.Buffered() != len(model) || r.Free() != n-len(model) {
				t.Fatalf("buffered %d free %d, model %d", r.Buffered(), r.Free(), len(model))
			}
		}
	})
}
