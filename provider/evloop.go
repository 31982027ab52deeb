package provider

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The event loops: a few goroutines (twice as many as CPUs), each waiting
// in an epoll set of its own over its share of the established TCP
// connections, serve what no application thread is driving
// (docs/design.md, "Progress engine").
//
// The sockets leave Go's netpoller once the MPA exchange is over, and a
// loop reads every connection that is ready in one turn on one thread,
// where the netpoller woke a goroutine per connection. While application
// threads poll a connection, its SO_RCVLOWAT is raised (rxState.muted): what
// they read as it comes wakes no thread, and a backlog they leave (a poller
// that lost its core) wakes the loop.
//
// The loop places arrivals itself rather than waking a goroutine per
// connection, and its goroutine waits for the epoll set in the netpoller
// (the set's own fd is pollable) rather than in a blocking epoll_wait: a
// wake-up is then one thread leaving the netpoller's epoll_wait and running
// the loop, as it was for a connection's goroutine. A goroutine blocked in
// epoll_wait holds its thread in a system call, and each wake-up then
// meant handing a P over between threads: an event-driven ping-pong
// (qperf rc_lat) took 6-9 us longer a round trip on the 2-vCPU test
// machine, fio's Sends at depth 1 half the rate.

type evLoop struct {
	epfd int
	ep   *os.File // epfd, in the netpoller
	mu   sync.RWMutex
	byID map[uint32]*sock
	next uint32
	// solo is the set's socket while it holds exactly one (under mu).
	// The loop then skips epoll_wait on the set while no transmitter
	// waits for a writability edge: a wake-up of the set can only be that
	// socket's, and the read that follows tells what arrived. On the
	// 2-vCPU test machine a system call costs 10-15 us, and a ping-pong
	// no poller reads (qperf rc_rdma_write_poll_lat, fio's RDMA Reads)
	// paid it once a message. The set's ready list is left as it is then:
	// epoll wakes the set's watchers on every event whether or not the
	// socket is on that list already.
	solo atomic.Pointer[sock]
}

// soloLocked updates solo after a socket came or went (mu held).
func (l *evLoop) soloLocked() {
	l.solo.Store(nil)
	if len(l.byID) == 1 {
		for _, s := range l.byID {
			l.solo.Store(s)
		}
	}
}

// The loops: two per CPU the runtime schedules on (GOMAXPROCS at the first
// connection), each connection in one of them, taken in turn. A loop reads
// its ready connections one after another on one thread, and a busy turn
// is mostly a readv copying into the application's memory; with several
// streams at once (ib_write_bw -q 4, whose receiver places every Write on
// a loop) one loop per CPU held the receive side to 0.8x the goroutine
// per connection it replaced, two per CPU to par. More loops than that
// cost a many-QP sender more wake-ups (64 QPs: 0.9x at four per CPU).
var theLoops struct {
	mu   sync.Mutex
	ls   []*evLoop
	next int
}

// loop returns the event loop for a new connection, started on first use;
// a start that failed (no descriptor left) is tried again by the next
// connection.
func loop() (*evLoop, error) {
	theLoops.mu.Lock()
	defer theLoops.mu.Unlock()
	if theLoops.ls == nil {
		theLoops.ls = make([]*evLoop, 2*runtime.GOMAXPROCS(0))
	}
	i := theLoops.next % len(theLoops.ls)
	if l := theLoops.ls[i]; l != nil {
		theLoops.next++
		return l, nil
	}
	// Not counted on until it started: a failed start is tried again here.
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	l := &evLoop{epfd: fd, ep: os.NewFile(uintptr(fd), "goiwarp-epoll"), byID: make(map[uint32]*sock)}
	rc, err := l.ep.SyscallConn()
	if err != nil {
		l.ep.Close()
		return nil, err
	}
	theLoops.ls[i] = l
	theLoops.next++
	go l.run(rc)
	return l, nil
}

func (l *evLoop) run(rc syscall.RawConn) {
	evs := make([]unix.EpollEvent, 128)
	for {
		err := rc.Read(func(uintptr) bool {
			if s := l.solo.Load(); s != nil && !s.awaitEdge.Load() {
				// The set's only socket: the set's fd turned readable
				// for it, and what it holds is a read away.
				s.dispatch(unix.EPOLLIN | unix.EPOLLOUT)
				return false
			}
			for {
				n, err := unix.EpollWait(l.epfd, evs, 0)
				if err == unix.EINTR {
					continue
				}
				if err != nil || n == 0 {
					return false
				}
				l.dispatch(evs[:n])
				if n < len(evs) {
					// The set's ready list is empty now; what becomes
					// ready next makes the set's fd readable again.
					return false
				}
			}
		})
		if err != nil {
			Errorf("event loop: %v", err)
			time.Sleep(time.Millisecond)
		}
	}
}

func (l *evLoop) dispatch(evs []unix.EpollEvent) {
	for i := range evs {
		l.mu.RLock()
		s := l.byID[uint32(evs[i].Fd)]
		l.mu.RUnlock()
		if s != nil {
			s.dispatch(evs[i].Events)
		}
	}
}

// sock is an established connection's socket once it left the netpoller:
// a non-blocking fd in the loop's epoll set, edge-triggered.
type sock struct {
	fd   int
	id   uint32
	loop *evLoop

	// life guards fd against close while it is used (Control).
	life   sync.RWMutex
	closed bool

	// onReadable and onWritable run on the loop.
	onReadable func()
	onWritable func()
	registered bool
	// awaitEdge: the transmitter found the socket full and no writability
	// edge came since (txState.blockFull); cleared by the loop.
	awaitEdge atomic.Bool

	// wseq counts writability edges: a transmitter that found the socket
	// full reads it before its write and after it marked itself blocked,
	// so that an edge between the two is not lost (txState.resumeSock).
	wseq atomic.Uint32
	// wexpired: fail's bound on a transmitter waiting for a peer that does
	// not read (what a write deadline was on the net.Conn).
	wexpired atomic.Bool
}

var errSockClosed = net.ErrClosed

// newSock takes c's socket out of the netpoller: a duplicate of its fd
// outlives c, which is closed.
func newSock(c *net.TCPConn) (*sock, error) {
	l, err := loop()
	if err != nil {
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd := -1
	cerr := rc.Control(func(fd uintptr) {
		nfd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, err
	}
	c.Close()
	s := &sock{fd: nfd, loop: l}
	return s, nil
}

// serve puts the socket into the loop's epoll set with its handlers.
func (s *sock) serve(onReadable, onWritable func()) error {
	s.onReadable, s.onWritable = onReadable, onWritable
	l := s.loop
	l.mu.Lock()
	l.next++
	for l.byID[l.next] != nil || l.next == 0 {
		l.next++
	}
	s.id = l.next
	l.byID[s.id] = s
	l.soloLocked()
	l.mu.Unlock()
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return errSockClosed
	}
	ev := unix.EpollEvent{Events: interest(true), Fd: int32(s.id)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
		return err
	}
	s.registered = true
	return nil
}

// hearReads sets whether the loop hears the socket's arrivals: not while
// it is lent to a thread that waits for them itself (waiter.go). Writability
// stays: the transmitter waits for its edge. A change reports what is
// ready now, so data that came meanwhile wakes the loop when it hears
// again.
func (s *sock) hearReads(on bool) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed || !s.registered {
		return errSockClosed // not served yet, or closed
	}
	ev := unix.EpollEvent{Events: interest(on), Fd: int32(s.id)}
	return unix.EpollCtl(s.loop.epfd, unix.EPOLL_CTL_MOD, s.fd, &ev)
}

// interest is what a served socket's registration asks of epoll:
// edge-triggered writability, and arrivals unless the socket is lent.
func interest(reads bool) uint32 {
	ev := uint32(unix.EPOLLOUT | unix.EPOLLET)
	if reads {
		ev |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	return ev
}

func (s *sock) dispatch(ev uint32) {
	if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		s.awaitEdge.Store(false)
		s.wseq.Add(1)
		s.onWritable()
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		s.onReadable()
	}
}

// Control runs fn with the fd, which stays open meanwhile.
func (s *sock) Control(fn func(fd uintptr)) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return errSockClosed
	}
	fn(uintptr(s.fd))
	return nil
}

// shutdown ends the stream in one direction or both; ending reception
// reports the socket readable (end of file) to the loop.
func (s *sock) shutdown(how int) {
	_ = s.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), how) })
}

// writeAll writes b, waiting for room at most until deadline: the frames of
// the connection's set-up (the MPA reply, RTR) on an empty socket.
func (s *sock) writeAll(b []byte, deadline time.Time) error {
	for len(b) > 0 {
		var n int
		var err error
		if cerr := s.Control(func(fd uintptr) { n, err = unix.SendmsgN(int(fd), b, nil, nil, unix.MSG_NOSIGNAL) }); cerr != nil {
			return cerr
		}
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			left := time.Until(deadline)
			if left <= 0 {
				return errors.New("write timed out")
			}
			s.waitFor(unix.POLLOUT, left)
		case err != nil:
			return err
		default:
			b = b[n:]
		}
	}
	return nil
}

// waitFor waits in poll(2) for events on the fd, at most d.
func (s *sock) waitFor(events int16, d time.Duration) bool {
	var got bool
	_ = s.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, _ := unix.Poll(pfd, int(max(d.Milliseconds(), 1)))
		got = n > 0
	})
	return got
}

// drain reads and discards until the peer's end of stream, at most d.
func (s *sock) drain(d time.Duration) {
	deadline := time.Now().Add(d)
	var buf [4096]byte
	for {
		var n int
		var err error
		if s.Control(func(fd uintptr) { n, err = unix.Read(int(fd), buf[:]) }) != nil {
			return
		}
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			left := time.Until(deadline)
			if left <= 0 {
				return
			}
			s.waitFor(unix.POLLIN, left)
		case err != nil || n == 0:
			return
		}
	}
}

// close takes the socket out of the loop and closes it once no Control
// runs.
func (s *sock) close() {
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		return
	}
	s.closed = true
	if s.registered {
		_ = unix.EpollCtl(s.loop.epfd, unix.EPOLL_CTL_DEL, s.fd, nil)
	}
	unix.Close(s.fd)
	s.life.Unlock()
	l := s.loop
	l.mu.Lock()
	if l.byID[s.id] == s {
		delete(l.byID, s.id)
		l.soloLocked()
	}
	l.mu.Unlock()
}
