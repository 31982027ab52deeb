package verbs

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The published MR table lets a same-host peer (provider, shm) place an RDMA
// Write into our memory and read an RDMA Read's source itself, with
// process_vm_writev/readv, after checking what the engine here would check
// (STag valid, PD, access, bounds). It is a memfd the peer maps: one
// 64-byte entry per slot, slot = STag mod PubSlots. An MR whose STag could
// not get a slot of its own is not published: accesses to it take the FPDU
// path, as does every access whose check fails here, so that the target's
// engine reports the error exactly as over TCP.
//
// An entry's state word holds a valid bit and the pid of the one peer
// process accessing the region right now. Deregistration (and
// invalidation, re-registration) clears the valid bit and then waits until
// no peer holds the entry, or the holder died: after that no peer touches
// the region. A second peer that finds the entry held takes the FPDU path.
const (
	PubSlots    = 1 << 14
	PubEntryLen = 64
	PubTableLen = PubSlots * PubEntryLen

	pubValid   = 1 << 63
	pubPidMask = 1<<32 - 1
)

// Entry layout.
const (
	pubOffState  = 0  // uint64: pubValid | holder pid
	pubOffSTag   = 8  // uint32
	pubOffPD     = 12 // uint32: PD.ID
	pubOffAccess = 16 // uint32
	pubOffIOVA   = 24 // uint64
	pubOffLength = 32 // uint64
	pubOffAddr   = 40 // uint64: the region's address in the owner's memory
)

const pubSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// pub is this process's table, made on first use (PubTableFD) and kept for
// the life of the process.
var pub struct {
	once sync.Once
	fd   int
	err  error
	// mem is read under an MR's lock, not the table's: atomic.
	mem atomic.Pointer[[]byte]
}

var nextPDID atomic.Uint32

func newPDID() uint32 { return nextPDID.Add(1) }

// PubSlot is the table slot of stag.
func PubSlot(stag uint32) int { return int(stag % PubSlots) }

// PubTableFD returns the fd of this process's published MR table (to pass
// to a peer), making it and publishing every live region the first time.
func PubTableFD() (int, error) {
	pub.once.Do(func() {
		fd, err := unix.MemfdCreate("goiwarp-mr", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			pub.err = err
			return
		}
		err = unix.Ftruncate(fd, PubTableLen)
		if err == nil {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, pubSeals)
		}
		var mem []byte
		if err == nil {
			mem, err = unix.Mmap(fd, 0, PubTableLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		}
		if err != nil {
			unix.Close(fd)
			pub.err = err
			return
		}
		mrTable.Lock()
		pub.fd = fd
		pub.mem.Store(&mem)
		for _, mr := range mrTable.m {
			mr.mu.Lock()
			if !mr.dead && !mr.invalid {
				mr.publishLocked()
			}
			mr.mu.Unlock()
		}
		mrTable.Unlock()
	})
	return pub.fd, pub.err
}

func pubEntry(mem []byte, slot int) unsafe.Pointer {
	return unsafe.Pointer(&mem[slot*PubEntryLen])
}

func pubState(p unsafe.Pointer) *atomic.Uint64 { return (*atomic.Uint64)(p) }

func pubU32(p unsafe.Pointer, off uintptr) *uint32 { return (*uint32)(unsafe.Add(p, off)) }

func pubU64(p unsafe.Pointer, off uintptr) *uint64 { return (*uint64)(unsafe.Add(p, off)) }

// publishLocked writes mr's entry and makes it valid (mr.mu held; the
// table exists). The fields are written while the entry is invalid and
// unheld, so a peer that sees it valid sees them whole.
func (mr *MR) publishLocked() {
	mem := pub.mem.Load()
	if !mr.pubSlot || mem == nil {
		return
	}
	p := pubEntry(*mem, PubSlot(mr.STag))
	*pubU32(p, pubOffSTag) = mr.STag
	*pubU32(p, pubOffPD) = mr.PD.ID
	*pubU32(p, pubOffAccess) = uint32(mr.Access)
	*pubU64(p, pubOffIOVA) = mr.IOVA
	*pubU64(p, pubOffLength) = mr.Length
	*pubU64(p, pubOffAddr) = uint64(mr.Addr)
	pubState(p).Store(pubValid)
}

// revokeLocked makes mr's entry invalid and waits until no peer holds it
// (mr.mu held).
func (mr *MR) revokeLocked() {
	mem := pub.mem.Load()
	if !mr.pubSlot || mem == nil {
		return
	}
	st := pubState(pubEntry(*mem, PubSlot(mr.STag)))
	st.And(^uint64(pubValid))
	var until time.Time
	for spins := 0; ; spins++ {
		w := st.Load()
		pid := int(w & pubPidMask)
		if pid == 0 {
			return
		}
		if spins < 100 {
			continue
		}
		// The holder is in one process_vm_* call; one that died (or a
		// scribbled pid of no process) holds nothing, and a live pid
		// that holds on for seconds is a peer that scribbled on the table
		// (a same-user peer can write our memory anyway: this guards
		// against bugs, not attacks).
		if until.IsZero() {
			until = time.Now().Add(pubHoldMax)
		}
		if unix.Kill(pid, 0) == unix.ESRCH || time.Now().After(until) {
			st.CompareAndSwap(w, w&^pubPidMask)
			continue
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// pubHoldMax bounds the wait for a peer holding an entry.
const pubHoldMax = 5 * time.Second

// PubView is a peer's published MR table, mapped here.
type PubView struct {
	mem []byte
}

// MapPubTable maps a peer's table from fd (which the caller keeps or closes).
func MapPubTable(fd int) (*PubView, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&pubSeals != pubSeals {
		return nil, errors.New("MR table not sealed")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size != PubTableLen {
		return nil, errors.New("MR table of the wrong size")
	}
	mem, err := unix.Mmap(fd, 0, PubTableLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &PubView{mem: mem}, nil
}

// Unmap drops the mapping; nothing may hold an entry of it.
func (v *PubView) Unmap() { _ = unix.Munmap(v.mem) }

// PubHold is an entry held by Acquire; Release it when the access is done.
type PubHold struct {
	st *atomic.Uint64
}

// Acquire holds the entry of stag for process self when the peer's region
// grants access to [addr, addr+length) of its IOVA space to a QP of PD pd,
// and returns where that range is in the peer's memory. ok is false when
// any check fails or another process holds the entry: the caller takes
// the FPDU path then. The entry is the peer's memory: every field is
// read once and checked, whatever it holds.
func (v *PubView) Acquire(self int, stag, pd uint32, addr, length uint64, access int) (remote uint64, h PubHold, ok bool) {
	p := pubEntry(v.mem, PubSlot(stag))
	st := pubState(p)
	w := st.Load()
	if w != pubValid || !st.CompareAndSwap(w, w|uint64(self)&pubPidMask) {
		return 0, PubHold{}, false
	}
	h = PubHold{st: st}
	iova, n := *pubU64(p, pubOffIOVA), *pubU64(p, pubOffLength)
	acc := int(*pubU32(p, pubOffAccess))
	switch {
	case *pubU32(p, pubOffSTag) != stag, *pubU32(p, pubOffPD) != pd, acc&access != access,
		addr < iova || length > n || addr-iova > n-length:
		h.Release()
		return 0, PubHold{}, false
	}
	base := *pubU64(p, pubOffAddr)
	if base+(addr-iova)+length < base {
		h.Release()
		return 0, PubHold{}, false
	}
	return base + (addr - iova), h, true
}

// Release ends the access.
func (h PubHold) Release() { h.st.And(^uint64(pubPidMask)) }
