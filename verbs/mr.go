package verbs

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PD is a protection domain.
type PD struct {
	Ctx *Context
	ID  uint32 // unique in the process: a same-host peer checks it (mrpub.go)
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() *PD { return &PD{Ctx: c, ID: newPDID()} }

// MR is a registered memory region. Its STag serves as both lkey and rkey.
type MR struct {
	PD     *PD
	Addr   uintptr // start of the region in this process
	Length uint64
	IOVA   uint64 // the address remote peers and SGEs use for Addr
	STag   uint32
	Access int

	// inflight counts placements into the region; Dereg waits for zero.
	mu       sync.Mutex
	inflight int
	dead     bool
	invalid  bool // invalidated (Send with Invalidate, Local Invalidate)
	idle     *sync.Cond
	pubSlot  bool // owns its slot of the published table (mrpub.go)
}

// The process-wide STag table: STags are unique among all devices, so a peer
// naming an STag of another PD is caught by the PD check, not by luck.
var mrTable = struct {
	sync.RWMutex
	m     map[uint32]*MR
	slots [PubSlots]bool // published-table slots owned by a region
}{m: map[uint32]*MR{}}

// stagTries: how many random STags RegMR draws looking for one whose
// published-table slot is free before it takes one without a slot.
const stagTries = 8

// Errors of memory access checks, mapped by the engine to completion
// statuses and Terminate codes.
var (
	ErrInvalidSTag = errors.New("invalid STag")
	ErrWrongPD     = errors.New("STag not associated with the protection domain")
	ErrAccess      = errors.New("access rights violation")
	ErrBounds      = errors.New("base or bounds violation")
)

// checkMapped fails with EFAULT unless every page of [addr, addr+length) is
// mapped, as the kernel's pinning of a user MR does (ibv_reg_mr(3)).
// msync(MS_ASYNC) starts no I/O (Linux >= 2.6.19) and walks the mappings
// that cover the range, failing with ENOMEM at a hole: its cost grows with
// the number of mappings, not pages (~0.3 µs for 4 KiB and for 1 GiB, where
// mincore(2) takes ~300 µs). Protection is not checked (a PROT_NONE range
// passes): the engine turns a fault on such memory into a QP error.
func checkMapped(addr uintptr, length uint64) error {
	if length == 0 {
		return nil
	}
	if uint64(addr)+length < uint64(addr) {
		return unix.EINVAL
	}
	pg := uintptr(unix.Getpagesize())
	start := addr &^ (pg - 1)
	_, _, errno := unix.Syscall(unix.SYS_MSYNC, start, uintptr(length)+addr-start, unix.MS_ASYNC)
	switch errno {
	case 0:
		return nil
	case unix.ENOMEM:
		return unix.EFAULT
	}
	return errno
}

// RegMR registers [addr, addr+length) to be addressed as iova. The range
// must be mapped (EFAULT otherwise).
func (pd *PD) RegMR(addr uintptr, length, iova uint64, access int) (*MR, error) {
	if length > MaxMRSize || iova+length < iova {
		return nil, unix.EINVAL
	}
	if err := checkMapped(addr, length); err != nil {
		return nil, err
	}
	// Remote write or atomic access requires local write (ibv_reg_mr(3)).
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, unix.EINVAL
	}
	mr := &MR{PD: pd, Addr: addr, Length: length, IOVA: iova, Access: access}
	mr.idle = sync.NewCond(&mr.mu)
	mrTable.Lock()
	defer mrTable.Unlock()
	if len(mrTable.m) >= MaxMR {
		return nil, unix.ENOMEM
	}
	for try := 0; ; try++ {
		var b [4]byte
		_, _ = rand.Read(b[:])
		s := binary.BigEndian.Uint32(b[:])
		if _, taken := mrTable.m[s]; s == 0 || taken {
			continue
		}
		if free := !mrTable.slots[PubSlot(s)]; free || try >= stagTries {
			mr.STag, mr.pubSlot = s, free
			break
		}
	}
	mrTable.m[mr.STag] = mr
	if mr.pubSlot {
		mrTable.slots[PubSlot(mr.STag)] = true
		mr.mu.Lock()
		mr.publishLocked()
		mr.mu.Unlock()
	}
	return mr, nil
}

// Rereg changes the translation and access of a region in place.
func (mr *MR) Rereg(pd *PD, addr uintptr, length, iova uint64, access int, flags int) error {
	const (
		reregTrans  = 1
		reregPD     = 2
		reregAccess = 4
	)
	if flags&reregAccess != 0 && access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return unix.EINVAL
	}
	if flags&reregTrans != 0 {
		if length > MaxMRSize || iova+length < iova {
			return unix.EINVAL
		}
		if err := checkMapped(addr, length); err != nil {
			return err
		}
	}
	mr.quiesce()
	defer mr.resume()
	if flags&reregTrans != 0 {
		mr.Addr, mr.Length, mr.IOVA = addr, length, iova
	}
	if flags&reregPD != 0 && pd != nil {
		mr.PD = pd
	}
	if flags&reregAccess != 0 {
		mr.Access = access
	}
	return nil
}

// Dereg removes the region from the STag table and waits until no placement
// into it is in flight.
func (mr *MR) Dereg() {
	mr.quiesce()
	mrTable.Lock()
	defer mrTable.Unlock()
	if mrTable.m[mr.STag] != mr {
		return // deregistered before
	}
	delete(mrTable.m, mr.STag)
	mr.mu.Lock()
	if mr.pubSlot {
		mrTable.slots[PubSlot(mr.STag)] = false
		mr.pubSlot = false // the slot may be another region's from now
	}
	mr.mu.Unlock()
}

// quiesce refuses new placements into the region (dead), also by
// same-host peers, and waits for those in flight; resume lets them in
// again (Rereg).
func (mr *MR) quiesce() {
	mr.mu.Lock()
	mr.dead = true
	mr.revokeLocked()
	for mr.inflight > 0 {
		mr.idle.Wait()
	}
	mr.mu.Unlock()
}

func (mr *MR) resume() {
	mr.mu.Lock()
	mr.dead = false
	if !mr.invalid {
		mr.publishLocked()
	}
	mr.mu.Unlock()
}

// Span is a checked, pinned window of a memory region. Release it when the
// placement is done so deregistration can proceed.
type Span struct {
	mr  *MR
	Buf []byte
}

// Release ends the access that produced the span.
func (s Span) Release() {
	if s.mr == nil {
		return
	}
	s.mr.mu.Lock()
	s.mr.inflight--
	if s.mr.inflight == 0 {
		s.mr.idle.Broadcast()
	}
	s.mr.mu.Unlock()
}

// Access looks up stag for the protection domain pd and checks that
// [addr, addr+length) lies in the region and that the region grants access.
// addr is in the region's IOVA space. On success the region is pinned until
// the returned span is released.
func Access(pd *PD, stag uint32, addr, length uint64, access int) (Span, error) {
	mrTable.RLock()
	mr := mrTable.m[stag]
	mrTable.RUnlock()
	if mr == nil {
		return Span{}, ErrInvalidSTag
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	switch {
	case mr.dead || mr.invalid:
		return Span{}, ErrInvalidSTag
	case mr.PD != pd:
		return Span{}, ErrWrongPD
	case mr.Access&access != access:
		return Span{}, ErrAccess
	case addr < mr.IOVA || length > mr.Length || addr-mr.IOVA > mr.Length-length:
		return Span{}, ErrBounds
	}
	mr.inflight++
	var buf []byte
	if length > 0 {
		buf = unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), mr.Addr+uintptr(addr-mr.IOVA))), int(length))
	}
	return Span{mr: mr, Buf: buf}, nil
}

// LocalAccess checks a local SGE: lkey must name a region of pd that covers
// it; AccessLocalWrite is required when the engine writes into it.
func LocalAccess(pd *PD, sge SGE, write bool) (Span, error) {
	acc := 0
	if write {
		acc = AccessLocalWrite
	}
	return Access(pd, sge.LKey, sge.Addr, uint64(sge.Length), acc)
}

// InvalidateSTag invalidates stag, which must name a region of pd: further
// accesses through it fail with ErrInvalidSTag (Send with Invalidate,
// Local Invalidate).
func InvalidateSTag(pd *PD, stag uint32) error {
	mrTable.RLock()
	mr := mrTable.m[stag]
	mrTable.RUnlock()
	if mr == nil {
		return ErrInvalidSTag
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.PD != pd {
		return ErrWrongPD
	}
	mr.invalid = true
	mr.revokeLocked()
	return nil
}
