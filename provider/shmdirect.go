package provider

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

// Direct placement on a same-host connection. An RDMA Write whose target
// region the peer has published (verbs/mrpub.go) is placed by the source
// itself with one process_vm_writev: one copy, no FPDU, no wake-up of the
// peer (perftest's write latency test waits for a Write by watching memory,
// so the placement must not wait for the peer's receiver to run). Reads
// stay FPDUs: the peer's receiver answers a Read Request faster than a
// process_vm_readv pins the pages (bench/README.md).
//
// The source applies the target's checks from the published entry, holding
// it while it copies so that deregistration waits for it. Whatever does not
// pass — an STag that is not published or fails a check, a target QP that is
// not in RTS, an earlier message of ours the peer has not processed yet, an
// outstanding Read or Atomic, a process_vm call that fails — takes the FPDU
// path through the ring, where the target's engine decides as over TCP: the
// same completions, Terminates and async events.
//
// Ordering: a direct Write runs only when everything this side sent before
// it has been processed by the peer (auxPlaced) and no Read or Atomic of
// ours is outstanding, so it is placed after all that precedes it and
// before anything that follows it is sent.

// Aux words of a ring, written by its consumer (the target of what the
// producer sends).
const (
	// auxPlaced: the producer's stream position up to which everything
	// has been received and processed.
	auxPlaced = iota
	// auxTarget: auxOpen | the target QP's PD ID while its QP accepts
	// placements (it is in RTS and its access flags grant remote
	// writes), else 0.
	auxTarget
)

const auxOpen = 1 << 32

var selfPid = os.Getpid()

// yamaScope is the kernel's Yama ptrace_scope (0 without Yama).
var yamaScope = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return 0
	}
	switch strings.TrimSpace(string(b)) {
	case "0":
		return 0
	case "1":
		return 1
	}
	return 2
})

// shmDirect is a link's direct-placement state: the peer's published MR
// table and pid; the iovecs belong to the transmit token.
type shmDirect struct {
	pid   int
	table *verbs.PubView
	off   atomic.Bool // a process_vm call was refused: FPDUs only from now
	ops   atomic.Uint64
	liov  [verbs.MaxSGE]unix.Iovec
	riov  [1]unix.RemoteIovec

	auxMu      sync.Mutex // auxClosed, live and the target word against close
	auxClosed  bool
	targetLive bool // between openTarget and closeTarget: retarget may reopen
}

// attachPeer maps the peer's MR table (fd, kept by the caller) for direct
// placement when the peer is a process we can name: credPid from
// SO_PEERCRED, sentPid what it says it is (they differ across pid
// namespaces). Failing that, the link carries FPDUs only.
func (l *shmLink) attachPeer(fd, credPid, sentPid int) {
	if credPid <= 0 || credPid != sentPid {
		Debugf("shm: peer pid %d (says %d): no direct placement", credPid, sentPid)
		return
	}
	v, err := verbs.MapPubTable(fd)
	if err != nil {
		Debugf("shm: peer's MR table: %v: no direct placement", err)
		return
	}
	l.dir.pid, l.dir.table = credPid, v
}

// allowPeer is for Yama's ptrace_scope 1, which lets only a process's
// ancestors (and a process it names) use process_vm_writev on it; the peer
// is usually a sibling. Naming it with PR_SET_PTRACER replaces the
// application's own choice and grants the peer full ptrace rights, so it is
// done only where the user asked (GOIWARP_SHM_PTRACER=1; one process at a
// time: an earlier peer is refused from then on and goes back to FPDUs).
// Otherwise the peer's first placement is refused and it sends its Writes
// through the ring, as FPDUs.
func (l *shmLink) allowPeer(pol *Policy) {
	if l.dir.table == nil || yamaScope() != 1 || l.dir.pid == selfPid {
		return
	}
	if !pol.ShmPtracer {
		Debugf("shm: Yama ptrace_scope 1: peer %d's Writes come through the ring (GOIWARP_SHM_PTRACER=1 lets it place them directly)", l.dir.pid)
		return
	}
	_ = unix.Prctl(unix.PR_SET_PTRACER, uintptr(l.dir.pid), 0, 0, 0)
}

// openTarget tells the peer whether our QP (of PD pd) accepts placements:
// only when its access flags grant remote writes, else the peer sends
// FPDUs and our receive path refuses them with a Terminate.
func (l *shmLink) openTarget(pd uint32, writable bool) {
	l.dir.auxMu.Lock()
	if !l.dir.auxClosed {
		l.in.Aux(auxTarget).Store(targetWord(pd, writable))
		l.dir.targetLive = true
	}
	l.dir.auxMu.Unlock()
}

func targetWord(pd uint32, writable bool) uint64 {
	if !writable {
		return 0
	}
	return auxOpen | uint64(pd)
}

// retarget follows a change of the QP's access flags in RTS; a target
// already closed (the QP is leaving RTS) stays closed.
func (l *shmLink) retarget(pd uint32, writable bool) {
	l.dir.auxMu.Lock()
	if !l.dir.auxClosed && l.dir.targetLive {
		l.in.Aux(auxTarget).Store(targetWord(pd, writable))
	}
	l.dir.auxMu.Unlock()
}

// AccessChanged implements verbs.AccessWatcher: a QP whose remote rights
// change while connected opens or closes direct placement to match.
func (e *Endpoint) AccessChanged() {
	if e.shm != nil && e.pd != nil {
		e.shm.retarget(e.pd.ID, e.qp.Allows(verbs.AccessRemoteWrite))
	}
}

// closeTarget withdraws that, before the QP leaves RTS; any time, even
// after close.
func (l *shmLink) closeTarget() {
	l.dir.auxMu.Lock()
	if !l.dir.auxClosed && l.mem != nil {
		l.in.Aux(auxTarget).Store(0)
	}
	l.dir.targetLive = false
	l.dir.auxMu.Unlock()
}

// placed publishes that our receiver processed the peer's stream up to pos.
func (l *shmLink) placed(pos uint64) { l.in.Aux(auxPlaced).Store(pos) }

// directTarget is the target QP's PD when a direct Write may run now:
// the peer processed all we sent and accepts placements.
func (l *shmLink) directTarget() (uint32, bool) {
	// tcpDone: the peer may be gone, and its pid with it (the kernel
	// resets a dying process's connections before its pid can be reused).
	if l.dir.table == nil || l.dir.off.Load() || l.tcpDone.Load() {
		return 0, false
	}
	t := l.out.Aux(auxTarget).Load()
	if t&auxOpen == 0 || l.out.Aux(auxPlaced).Load() != l.out.Produced() {
		return 0, false
	}
	return uint32(t), true
}

// writeDirect places data (total bytes) at the peer's stag/to; false when
// the caller must send the Write as FPDUs.
func (l *shmLink) writeDirect(stag uint32, to uint64, data [][]byte, total int) bool {
	pd, ok := l.directTarget()
	if !ok || total == 0 || len(data) > len(l.dir.liov) {
		return false
	}
	remote, h, ok := l.dir.table.Acquire(selfPid, stag, pd, to, uint64(total), verbs.AccessRemoteWrite)
	if !ok {
		return false
	}
	defer h.Release()
	for i, b := range data {
		l.dir.liov[i] = unix.Iovec{Base: &b[0]}
		l.dir.liov[i].SetLen(len(b))
	}
	l.dir.riov[0] = unix.RemoteIovec{Base: uintptr(remote), Len: total}
	n, err := unix.ProcessVMWritev(l.dir.pid, l.dir.liov[:len(data)], l.dir.riov[:], 0)
	return l.directDone(n, total, err)
}

// directDone judges a process_vm call. A fault (memory unmapped on either
// side, a region the peer registered over a hole) or a short copy is left
// to the FPDU path, which redoes the whole operation and reports the fault
// where the engine would; a refusal turns direct placement off for good.
func (l *shmLink) directDone(n, want int, err error) bool {
	switch err {
	case nil:
		if n == want {
			l.dir.ops.Add(1)
			return true
		}
	case unix.EFAULT, unix.EINTR:
	default:
		if !l.dir.off.Swap(true) {
			Debugf("shm: process_vm to pid %d: %v; direct placement off", l.dir.pid, err)
		}
	}
	return false
}

// closeDirect ends direct placement with the link.
func (l *shmLink) closeDirect() {
	l.dir.auxMu.Lock()
	l.dir.auxClosed = true
	l.dir.auxMu.Unlock()
	if l.dir.table != nil {
		l.dir.table.Unmap()
		l.dir.table = nil
	}
}
