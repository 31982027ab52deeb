// Package shmring is a single-producer single-consumer byte ring in memory
// shared between two processes: the stream of one direction of a same-host
// goiwarp connection. It does no I/O and knows nothing of the bytes it
// carries; waking a sleeping peer is the caller's (the flags below say
// when one asked to be woken, so the fast path costs no syscall).
package shmring

import (
	"errors"
	"sync/atomic"
	"unsafe"
)

// Layout of a ring in its memory: a header of three cache lines (the
// consumer's position, the producer's, the sleep flags), so that producer
// and consumer never write the same line, then the data.
const (
	line     = 64
	offHead  = 0        // bytes consumed, ever (consumer writes)
	offTail  = line     // bytes produced, ever (producer writes)
	offFlags = 2 * line // reader asleep, writer asleep
	offAux   = 3 * line // the consumer's words for the producer (Aux)
	// HeaderLen is the room the header takes in front of the data.
	HeaderLen = 4096
)

// ErrLayout: the memory given to New is not a header and a power-of-two data area.
var ErrLayout = errors.New("shmring: memory is not a header plus a power-of-two data area")

// Ring is one process's view of a ring. A Ring value is used by one side,
// producer or consumer; each side's methods are for one goroutine at a time.
type Ring struct {
	head, tail *atomic.Uint64
	rsleep     *atomic.Uint32
	wsleep     *atomic.Uint32
	aux        *[AuxWords]atomic.Uint64
	data       []byte
	mask       uint64
}

// Size is the memory a ring with dataLen bytes of data takes.
func Size(dataLen int) int { return HeaderLen + dataLen }

// New views mem (Size(n) bytes, n a power of two, 8-byte aligned; zeroed
// when the ring is new) as a ring.
func New(mem []byte) (*Ring, error) {
	n := len(mem) - HeaderLen
	if n <= 0 || n&(n-1) != 0 || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, ErrLayout
	}
	p := unsafe.Pointer(&mem[0])
	return &Ring{
		head:   (*atomic.Uint64)(unsafe.Add(p, offHead)),
		tail:   (*atomic.Uint64)(unsafe.Add(p, offTail)),
		rsleep: (*atomic.Uint32)(unsafe.Add(p, offFlags)),
		wsleep: (*atomic.Uint32)(unsafe.Add(p, offFlags+4)),
		aux:    (*[AuxWords]atomic.Uint64)(unsafe.Add(p, offAux)),
		data:   mem[HeaderLen:],
		mask:   uint64(n - 1),
	}, nil
}

// Cap is the data capacity.
func (r *Ring) Cap() int { return len(r.data) }

// Buffered is what the consumer may read now. A corrupt header (a peer
// that scribbled on it) reads as at most Cap bytes.
func (r *Ring) Buffered() int {
	return int(min(r.tail.Load()-r.head.Load(), uint64(len(r.data))))
}

// Produced is the count of bytes the producer has written, ever.
func (r *Ring) Produced() uint64 { return r.tail.Load() }

// AuxWords is the number of Aux words.
const AuxWords = 8

// Aux is word i of a cache line the consumer writes and the producer
// reads, for the caller's own use (the ring gives it no meaning).
func (r *Ring) Aux(i int) *atomic.Uint64 { return &r.aux[i] }

// Corrupt reports a header no honest pair of producer and consumer can
// leave: the producer's position behind the consumer's, or more than Cap
// ahead of it. Either side may ask: its own position is stable and the
// other's only moves towards it (the producer's up to Cap ahead of a
// consumer position it read), so a true answer is the peer's doing (it
// scribbled on the shared memory), never a race. Read and Write stay
// within the data area regardless (a corrupt header reads nothing and has
// no room), but neither makes sense of it: the caller should give the ring
// up.
func (r *Ring) Corrupt() bool {
	h := r.head.Load()
	return r.tail.Load()-h > uint64(len(r.data))
}

// Free is what the producer may write now.
func (r *Ring) Free() int { return len(r.data) - r.Buffered() }

// Write copies as much of p as fits and publishes it; it returns the count.
func (r *Ring) Write(p []byte) int {
	t := r.tail.Load()
	n := min(len(p), len(r.data)-int(min(t-r.head.Load(), uint64(len(r.data)))))
	if n == 0 {
		return 0
	}
	o := int(t & r.mask)
	k := copy(r.data[o:], p[:n])
	copy(r.data, p[k:n])
	r.tail.Store(t + uint64(n))
	return n
}

// Read copies up to len(p) buffered bytes into p and frees their room; it
// returns the count. A header that is corrupt when Read looks (the one
// look it takes at the tail) reads nothing: a consumer that asks Corrupt
// when Read returns 0 never takes stale bytes for data, whenever the peer
// scribbles.
func (r *Ring) Read(p []byte) int {
	h := r.head.Load()
	buffered := r.tail.Load() - h
	if buffered > uint64(len(r.data)) {
		return 0
	}
	n := min(len(p), int(buffered))
	if n == 0 {
		return 0
	}
	o := int(h & r.mask)
	k := copy(p[:n], r.data[o:])
	copy(p[k:n], r.data)
	r.head.Store(h + uint64(n))
	return n
}

// Sleep is the consumer's announcement that it is about to block for data.
// It reports whether it may: false when data arrived meanwhile (the flag is
// cleared again then). A producer that publishes after the flag is set sees
// it (WakeReader), since both sides use sequentially consistent atomics.
func (r *Ring) Sleep() bool {
	r.rsleep.Store(1)
	if r.Buffered() > 0 {
		r.rsleep.Store(0)
		return false
	}
	return true
}

// WakeReader is for the producer after a write: true once per Sleep, when
// the consumer must be signalled.
func (r *Ring) WakeReader() bool {
	return r.rsleep.Load() != 0 && r.rsleep.Swap(0) != 0
}

// SleepWriter is the producer's Sleep: it is about to block for want bytes
// of room; false when they are free already.
func (r *Ring) SleepWriter(want int) bool {
	r.wsleep.Store(1)
	if r.Free() >= min(want, len(r.data)) {
		r.wsleep.Store(0)
		return false
	}
	return true
}

// WakeWriter is for the consumer after a read: true once per SleepWriter.
func (r *Ring) WakeWriter() bool {
	return r.wsleep.Load() != 0 && r.wsleep.Swap(0) != 0
}
