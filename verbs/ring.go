package verbs

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring is a header plus a power-of-two array of fixed-size entries in mmap'd
// memory, shared with the C driver: one side produces, the other consumes.
type Ring struct {
	mem  []byte
	hdr  *ringHdr
	mask uint32
	esz  uintptr
}

// maxRingEntries bounds a ring so a C caller cannot make us map gigabytes:
// MaxCQE entries of a CQE (40 B) are 40 MiB of address space, whose pages
// are touched only as completions are written.
const maxRingEntries = MaxCQE

func newRing(entries int, entrySize uintptr) (*Ring, error) {
	if entries < 1 || entries > maxRingEntries {
		return nil, fmt.Errorf("ring of %d entries: %w", entries, unix.EINVAL)
	}
	n := uint32(1) << bits.Len32(uint32(entries-1))
	size := ringHdrSize + int(n)*int(entrySize)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	r := &Ring{mem: mem, hdr: (*ringHdr)(unsafe.Pointer(&mem[0])), mask: n - 1, esz: entrySize}
	r.hdr.Size = n
	r.hdr.EntrySize = uint32(entrySize)
	return r, nil
}

// Base is the address of the ring header, handed to the C driver.
func (r *Ring) Base() unsafe.Pointer { return unsafe.Pointer(r.hdr) }

// Size is the number of entries.
func (r *Ring) Size() uint32 { return r.mask + 1 }

func (r *Ring) entry(i uint32) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(r.hdr), ringHdrSize+uintptr(i&r.mask)*r.esz)
}

func (r *Ring) prod() uint32     { return atomic.LoadUint32(&r.hdr.Prod) }
func (r *Ring) cons() uint32     { return atomic.LoadUint32(&r.hdr.Cons) }
func (r *Ring) setProd(v uint32) { atomic.StoreUint32(&r.hdr.Prod, v) }
func (r *Ring) setCons(v uint32) { atomic.StoreUint32(&r.hdr.Cons, v) }

func (r *Ring) free() {
	if r != nil && r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}
