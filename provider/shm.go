package provider

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/goiwarp/provider/shmring"
	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

// Same-host connections. When both ends of a connection are goiwarp
// processes of one user on one kernel and network namespace, the FPDU
// stream of each direction goes through a ring in shared memory instead of
// the TCP socket: the same bytes the engine frames and parses (so every
// check, Terminate, ordering and completion rule stays the engine's), minus
// two kernel copies and the syscalls. The TCP connection stays open as the
// liveness and teardown channel (FIN, reset, a peer that dies).
//
// Nothing of this is on the wire: the MPA exchange with any peer is the
// standard one. The negotiation runs beside it, over an abstract AF_UNIX
// socket (per network namespace) whose name both ends derive from the boot
// id and the TCP 4-tuple:
//
//  1. the initiator listens on the name before it writes its MPA request;
//  2. the responder, having read the request, connects (a non-goiwarp
//     initiator has no listener: ECONNREFUSED at once) and passes its TCP
//     socket (SCM_RIGHTS); the initiator checks that it is the other end of
//     its own connection and that the peer runs as its user (SO_PEERCRED);
//  3. the initiator sends a sealed memfd holding the two rings and the four
//     eventfds that wake a sleeping reader or writer of either ring;
//     both messages also carry the sender's pid and its published MR table
//     (verbs/mrpub.go), for direct placement (shmdirect.go);
//  4. the responder maps them and commits (one byte) before its MPA reply;
//     the initiator uses the rings only if that commit came and the reply
//     was an accept.
//
// Any failure leaves both ends on TCP. GOIWARP_SHM=1 makes it an error.

var errShmUnavailable = errors.New("goiwarp: GOIWARP_SHM=1 and no shared-memory path to the peer")

// errShmStalled: the peer's ring stayed full while the connection failed.
var errShmStalled = errors.New("goiwarp: peer stopped reading its ring")

// Messages of the negotiation (one byte each, fds beside).
const (
	shmMsgSocket = 'S' // responder → initiator: its TCP socket
	shmMsgMemory = 'M' // initiator → responder: memfd and eventfds
	shmMsgCommit = 'C' // responder → initiator: rings mapped, use them
)

// shmLink is one end's view of a connection's shared memory.
type shmLink struct {
	mem     []byte
	out, in *shmring.Ring
	// Eventfds: outData and inRoom are signalled (the peer waits on
	// them), inData and outRoom waited on (inData is also signalled by
	// this end to wake its own receiver).
	outData, inRoom int
	inData, outRoom *os.File
	inDataFd        int

	polls     atomic.Uint64 // pollers' visits: the RX goroutine naps while they come
	pollReads atomic.Uint64 // pollers' visits that found data
	tcpDone   atomic.Bool   // the TCP stream ended (FIN, reset, error, deadline)
	watchDone chan struct{}
	// Eventfd read buffers, of the RX and the TX goroutine: a fresh one
	// per wait would be an allocation per wait.
	dataBuf, roomBuf []byte

	dir shmDirect // direct placement (shmdirect.go)
}

// Order of the four eventfds in the memory message: ring A runs from the
// initiator to the responder, ring B back.
const (
	evAData = iota
	evARoom
	evBData
	evBRoom
	nEv
)

// bootID is the kernel's boot id: two processes that read the same one run
// on one kernel.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// shmName is the abstract socket name of the connection whose initiator
// end is ini and responder end resp ("@": abstract, for package net).
func shmName(ini, resp net.Addr) (string, error) {
	id := bootID()
	if id == "" {
		return "", errors.New("no boot id")
	}
	h := sha256.Sum256([]byte(id + "|" + ini.String() + "|" + resp.String()))
	return "@goiwarp-shm/" + hex.EncodeToString(h[:16]), nil
}

// shmOffer is the initiator's side of a negotiation in progress.
type shmOffer struct {
	ln   *net.UnixListener
	done chan *shmLink
}

// offerShm starts the initiator's side on c, unless the policy says no;
// settle ends it.
func offerShm(pol *Policy, c *net.TCPConn, timeout time.Duration) *shmOffer {
	if pol.SHM == ShmOff {
		return nil
	}
	name, err := shmName(c.LocalAddr(), c.RemoteAddr())
	if err == nil {
		var ln *net.UnixListener
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err == nil {
			o := &shmOffer{ln: ln, done: make(chan *shmLink, 1)}
			go func() {
				l, err := o.serve(c, pol.ShmRing, time.Now().Add(timeout))
				if err != nil {
					Debugf("shm %v -> %v: %v; staying on TCP", c.LocalAddr(), c.RemoteAddr(), err)
				} else if !pol.ShmDirect {
					l.dir.off.Store(true)
				} else {
					l.allowPeer(pol)
				}
				o.done <- l
			}()
			return o
		}
	}
	Debugf("shm %v -> %v: cannot offer: %v; staying on TCP", c.LocalAddr(), c.RemoteAddr(), err)
	return nil
}

// settle ends the negotiation once the MPA reply is in: the link when the
// peer committed and accepted is true, else nil. A committing responder
// sent its commit before its reply, so the link is at most a local
// receive away; a peer that never connected never will (the listener
// closes).
func (o *shmOffer) settle(accepted bool) *shmLink {
	o.ln.Close()
	l := <-o.done
	if l != nil && !accepted {
		l.close()
		l = nil
	}
	return l
}

func (o *shmOffer) serve(c *net.TCPConn, ring int, deadline time.Time) (*shmLink, error) {
	_ = o.ln.SetDeadline(deadline)
	uc, err := o.ln.AcceptUnix()
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			err = errors.New("the peer did not connect (not goiwarp, another host or namespace, or GOIWARP_SHM=0)")
		}
		return nil, err
	}
	defer uc.Close()
	_ = uc.SetDeadline(deadline)
	peerPid, err := samePeerUser(uc)
	if err != nil {
		return nil, err
	}
	table, err := verbs.PubTableFD()
	if err != nil {
		return nil, err
	}
	fds, sentPid, err := recvFds(uc, shmMsgSocket, 2)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fds[1])
	err = checkOtherEnd(fds[0], c)
	unix.Close(fds[0])
	if err != nil {
		return nil, err
	}
	memfd, evs, err := newShmMemory(ring)
	if err != nil {
		return nil, err
	}
	l, err := mapShm(memfd, evs, true)
	rights := unix.UnixRights(append(append([]int{memfd}, evs[:]...), table)...)
	if err == nil {
		_, _, err = uc.WriteMsgUnix(shmMsg(shmMsgMemory), rights, nil)
	}
	unix.Close(memfd)
	if err == nil {
		var b [1]byte
		if _, err = uc.Read(b[:]); err == nil && b[0] != shmMsgCommit {
			err = fmt.Errorf("bad commit byte %#x", b[0])
		}
	}
	if err != nil {
		if l != nil {
			l.close()
		} else {
			closeFds(evs[:])
		}
		return nil, err
	}
	l.attachPeer(fds[1], peerPid, sentPid)
	return l, nil
}

// answerShm is the responder's side, between the MPA request and the
// reply: the link, or nil (with the reason logged) to stay on TCP.
func answerShm(pol *Policy, c *net.TCPConn) *shmLink {
	if pol.SHM == ShmOff {
		return nil
	}
	l, err := answer(c, time.Now().Add(pol.Timeout))
	if err != nil {
		Debugf("shm %v <- %v: %v; staying on TCP", c.LocalAddr(), c.RemoteAddr(), err)
	} else if !pol.ShmDirect {
		l.dir.off.Store(true)
	} else {
		l.allowPeer(pol)
	}
	return l
}

func answer(c *net.TCPConn, deadline time.Time) (*shmLink, error) {
	name, err := shmName(c.RemoteAddr(), c.LocalAddr())
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Deadline: deadline}
	nc, err := d.Dial("unix", name)
	if err != nil {
		return nil, fmt.Errorf("no offer: %w", err)
	}
	uc := nc.(*net.UnixConn)
	defer uc.Close()
	_ = uc.SetDeadline(deadline)
	peerPid, err := samePeerUser(uc)
	if err != nil {
		return nil, err
	}
	table, err := verbs.PubTableFD()
	if err != nil {
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var werr error
	if err := rc.Control(func(fd uintptr) {
		_, _, werr = uc.WriteMsgUnix(shmMsg(shmMsgSocket), unix.UnixRights(int(fd), table), nil)
	}); err != nil {
		return nil, err
	}
	if werr != nil {
		return nil, werr
	}
	fds, sentPid, err := recvFds(uc, shmMsgMemory, 1+nEv+1)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fds[1+nEv])
	var evs [nEv]int
	copy(evs[:], fds[1:])
	l, err := mapShm(fds[0], evs, false)
	unix.Close(fds[0])
	if err != nil {
		closeFds(evs[:])
		return nil, err
	}
	if _, err := uc.Write([]byte{shmMsgCommit}); err != nil {
		l.close()
		return nil, err
	}
	l.attachPeer(fds[1+nEv], peerPid, sentPid)
	return l, nil
}

// samePeerUser checks that the process at the other end of uc runs as our
// user, and returns its pid (0 when it is not in our pid namespace).
func samePeerUser(uc *net.UnixConn) (int, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	if int(cred.Uid) != os.Getuid() {
		return 0, fmt.Errorf("peer runs as uid %d, we as %d", cred.Uid, os.Getuid())
	}
	return int(cred.Pid), nil
}

// checkOtherEnd checks that fd is the peer's end of c: its local address is
// c's remote one and the other way round.
func checkOtherEnd(fd int, c *net.TCPConn) error {
	sa, err1 := unix.Getsockname(fd)
	pa, err2 := unix.Getpeername(fd)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("passed socket: %w", err)
	}
	if !sameAddr(sa, c.RemoteAddr().(*net.TCPAddr)) || !sameAddr(pa, c.LocalAddr().(*net.TCPAddr)) {
		return errors.New("the passed socket is not the other end of our connection")
	}
	return nil
}

func sameAddr(sa unix.Sockaddr, a *net.TCPAddr) bool {
	switch s := sa.(type) {
	case *unix.SockaddrInet4:
		return s.Port == a.Port && net.IP(s.Addr[:]).Equal(a.IP)
	case *unix.SockaddrInet6:
		return s.Port == a.Port && net.IP(s.Addr[:]).Equal(a.IP)
	}
	return false
}

// shmMsg is a negotiation message: its kind and the sender's pid (as it
// sees itself: the direct path needs it to be the pid SO_PEERCRED gives).
func shmMsg(kind byte) []byte {
	b := []byte{kind, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], uint32(os.Getpid()))
	return b
}

// recvFds reads message kind with exactly n fds; it returns them and the
// sender's pid.
func recvFds(uc *net.UnixConn, kind byte, n int) ([]int, int, error) {
	var b [5]byte
	oob := make([]byte, unix.CmsgSpace(4*(nEv+2)))
	bn, oobn, _, _, err := uc.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, 0, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, 0, err
	}
	var fds []int
	for i := range msgs {
		f, err := unix.ParseUnixRights(&msgs[i])
		if err == nil {
			fds = append(fds, f...)
		}
	}
	if bn != len(b) || b[0] != kind || len(fds) != n {
		closeFds(fds)
		return nil, 0, fmt.Errorf("unexpected message %#x with %d fds", b[0], len(fds))
	}
	return fds, int(binary.LittleEndian.Uint32(b[1:])), nil
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// newShmMemory makes the memfd of two rings of ring bytes each, sealed so
// that the peer can neither shrink it under our mapping nor grow it, and
// the eventfds.
func newShmMemory(ring int) (memfd int, evs [nEv]int, err error) {
	memfd, err = unix.MemfdCreate("goiwarp-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, evs, err
	}
	err = unix.Ftruncate(memfd, int64(2*shmring.Size(ring)))
	if err == nil {
		_, err = unix.FcntlInt(uintptr(memfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	}
	for i := 0; err == nil && i < nEv; i++ {
		evs[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			closeFds(evs[:i])
		}
	}
	if err != nil {
		unix.Close(memfd)
		return -1, evs, err
	}
	return memfd, evs, nil
}

const shmSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// mapShm maps memfd and takes the eventfds (closed with the link, or by the
// caller on error): the initiator writes ring A and reads ring B.
func mapShm(memfd int, evs [nEv]int, initiator bool) (*shmLink, error) {
	seals, err := unix.FcntlInt(uintptr(memfd), unix.F_GET_SEALS, 0)
	if err != nil || seals&shmSeals != shmSeals {
		return nil, errors.New("memory not sealed")
	}
	var st unix.Stat_t
	if err := unix.Fstat(memfd, &st); err != nil {
		return nil, err
	}
	ring := int(st.Size)/2 - shmring.HeaderLen
	if st.Size%2 != 0 || ring < minShmRing || ring > maxShmRing || ring&(ring-1) != 0 {
		return nil, fmt.Errorf("bad shared memory size %d", st.Size)
	}
	mem, err := unix.Mmap(memfd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	half := shmring.Size(ring)
	a, _ := shmring.New(mem[:half])
	b, _ := shmring.New(mem[half:])
	l := &shmLink{mem: mem, watchDone: make(chan struct{}), dataBuf: make([]byte, 8), roomBuf: make([]byte, 8)}
	inData, outRoom := evs[evBData], evs[evARoom]
	if initiator {
		l.out, l.in = a, b
		l.outData, l.inRoom = evs[evAData], evs[evBRoom]
	} else {
		l.out, l.in = b, a
		l.outData, l.inRoom = evs[evBData], evs[evARoom]
		inData, outRoom = evs[evAData], evs[evBRoom]
	}
	for _, fd := range []int{inData, outRoom} {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Munmap(mem)
			return nil, err
		}
	}
	l.inDataFd = inData
	// Pollable files: the goroutines that wait on them park on the netpoller.
	l.inData, l.outRoom = os.NewFile(uintptr(inData), "goiwarp-shm-data"), os.NewFile(uintptr(outRoom), "goiwarp-shm-room")
	return l, nil
}

// close unmaps the rings and closes the eventfds; nothing may use the link
// any more.
func (l *shmLink) close() {
	l.closeDirect()
	_ = unix.Munmap(l.mem)
	l.mem = nil
	l.inData.Close()
	l.outRoom.Close()
	unix.Close(l.outData)
	unix.Close(l.inRoom)
}

var evOne = [8]byte{1}

func signalEv(fd int) { _, _ = unix.Write(fd, evOne[:]) }

// wroteOut wakes the peer's receiver if it sleeps.
func (l *shmLink) wroteOut() {
	if l.out.WakeReader() {
		signalEv(l.outData)
	}
}

// readIn wakes the peer's transmitter if it waits for room.
func (l *shmLink) readIn() {
	if l.in.WakeWriter() {
		signalEv(l.inRoom)
	}
}

// kick wakes this end's own receiver.
func (l *shmLink) kick() { signalEv(l.inDataFd) }

// waitData blocks until the peer wrote into a ring we said we sleep on, or
// kick.
func (l *shmLink) waitData() { _, _ = l.inData.Read(l.dataBuf) }

// nap waits for d or a kick, whichever comes first, without asking the peer
// to signal its writes.
func (l *shmLink) nap(d time.Duration) {
	_ = l.inData.SetReadDeadline(time.Now().Add(d))
	_, _ = l.inData.Read(l.dataBuf)
	_ = l.inData.SetReadDeadline(time.Time{})
}

// waitRoom waits for room in the outbound ring; false when the endpoint
// went away, or failed and the peer has not read for a second.
func (l *shmLink) waitRoom(e *Endpoint) bool {
	var since time.Time
	for {
		if !l.out.SleepWriter(1) {
			return true
		}
		if l.out.Corrupt() {
			return false // the peer scribbled on the positions: no room ever
		}
		_ = l.outRoom.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, _ = l.outRoom.Read(l.roomBuf)
		if e.gone.Load() {
			return false
		}
		if e.failed() {
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > time.Second {
				return false
			}
		}
	}
}

// watch reads the TCP stream, which carries nothing more once the rings
// are in use, until it ends, and wakes the receiver then.
func (l *shmLink) watch(c *net.TCPConn) {
	defer close(l.watchDone)
	var b [64]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			break
		}
	}
	l.tcpDone.Store(true)
	l.kick()
}
