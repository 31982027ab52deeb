package shmring

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzRing interleaves writes and reads of sizes taken from the input
// against a model (a bounded byte queue). A non-empty scribble is a peer
// that overwrote the header with those bytes after the operations: from
// then on the ring must report Corrupt when the positions are impossible,
// and Read and Write must stay within Cap and the data area.
func FuzzRing(f *testing.F) {
	f.Add([]byte{10, 3, 200, 7, 64, 64, 1, 255}, []byte{})
	f.Add([]byte{0, 0, 63, 1, 128, 129}, []byte{})
	f.Add([]byte{10, 3}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{64}, []byte{0x40, 0, 0, 0, 0, 0, 0, 0, 0x10})
	f.Fuzz(func(t *testing.T, ops, scribble []byte) {
		const n = 64
		r := newRing(t, n)
		var model []byte
		var seq byte
		defer func() {
			if len(scribble) > 0 {
				scribbled(t, r, scribble)
			}
		}()
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

// scribbled overwrites the head and tail with the bytes of s (head's 8
// first, the tail's next; missing ones keep their value) and runs reads
// and writes on the result.
func scribbled(t *testing.T, r *Ring, s []byte) {
	var h, tl [8]byte
	binary.LittleEndian.PutUint64(h[:], r.head.Load())
	binary.LittleEndian.PutUint64(tl[:], r.tail.Load())
	copy(h[:], s)
	if len(s) > 8 {
		copy(tl[:], s[8:])
	}
	head, tail := binary.LittleEndian.Uint64(h[:]), binary.LittleEndian.Uint64(tl[:])
	r.head.Store(head)
	r.tail.Store(tail)
	n := uint64(r.Cap())
	if want := tail-head > n; r.Corrupt() != want {
		t.Fatalf("head %d tail %d: Corrupt %v", head, tail, !want)
	}
	if b := r.Buffered(); b < 0 || b > r.Cap() {
		t.Fatalf("buffered %d", b)
	}
	p := make([]byte, 3*n)
	if got := r.Read(p); got > r.Cap() || tail-head > n && got > 0 {
		t.Fatalf("read %d of a %d-byte ring with head %d tail %d", got, n, head, tail)
	}
	c := r.Corrupt()
	if w := r.Write(p); w > r.Cap() || c && w > 0 {
		t.Fatalf("wrote %d into a ring with head %d tail %d (corrupt %v)", w, r.head.Load(), tail, c)
	}
}
