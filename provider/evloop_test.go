package provider

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// loopPair is a TCP connection whose accepting side is a sock served by
// the event loop, counting the loop's calls.
type loopPair struct {
	s                  *sock
	peer               *net.TCPConn
	readable, writable atomic.Int32
}

func newLoopPair(t *testing.T) *loopPair {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	peer, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	t.Cleanup(func() { peer.Close() })
	c, err := ln.AcceptTCP()
	require.NoError(t, err)
	s, err := newSock(c)
	require.NoError(t, err)
	t.Cleanup(s.close)
	p := &loopPair{s: s, peer: peer}
	require.NoError(t, s.serve(func() { p.readable.Add(1) }, func() { p.writable.Add(1) }))
	return p
}

// mark sets the socket's SO_RCVLOWAT, as muting does. Raising it, it lets
// the wake-ups of the set-up pass (a loop whose set holds one socket reports
// every wake-up as readable: evLoop.solo) and counts from zero.
func (p *loopPair) mark(t *testing.T, n int) {
	require.NoError(t, p.s.Control(func(fd uintptr) {
		require.NoError(t, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n))
	}))
	if n > 1 {
		time.Sleep(20 * time.Millisecond)
		p.readable.Store(0)
	}
}

func (p *loopPair) queued(t *testing.T) int {
	var n int
	require.NoError(t, p.s.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }))
	return n
}

// What the engine relies on: an arrival wakes the loop; while the socket is
// muted (its SO_RCVLOWAT raised) only a backlog past the mark does, and
// lowering the mark reports what queued meanwhile; room after a full socket
// is an edge of its own.
func TestEventLoopInterest(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, p *loopPair)
	}{
		{"arrival wakes a readable socket", func(t *testing.T, p *loopPair) {
			_, err := p.peer.Write([]byte("x"))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return p.readable.Load() > 0 }, 5*time.Second, time.Millisecond)
		}},
		{"muted: arrival wakes nobody, unmuting reports it", func(t *testing.T, p *loopPair) {
			p.mark(t, mutedLowat)
			for range 50 {
				_, err := p.peer.Write([]byte("x"))
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { return p.queued(t) == 50 }, 5*time.Second, time.Millisecond)
			time.Sleep(20 * time.Millisecond)
			require.Zero(t, p.readable.Load(), "a muted socket woke the loop")
			p.mark(t, 1)
			require.Eventually(t, func() bool { return p.readable.Load() > 0 }, 5*time.Second, time.Millisecond,
				"what queued while muted was not reported")
		}},
		{"muted: a backlog past the mark wakes the loop", func(t *testing.T, p *loopPair) {
			p.mark(t, mutedLowat)
			_, err := p.peer.Write(make([]byte, 2*mutedLowat))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return p.readable.Load() > 0 }, 5*time.Second, time.Millisecond)
		}},
		{"room after a full socket", func(t *testing.T, p *loopPair) {
			seq := p.s.wseq.Load()
			buf := make([]byte, 1<<20)
			var err error
			for err == nil {
				require.NoError(t, p.s.Control(func(fd uintptr) { _, err = unix.Write(int(fd), buf) }))
			}
			require.Equal(t, unix.EAGAIN, err)
			base := p.s.wseq.Load()
			go func() {
				rd := make([]byte, 1<<20)
				for {
					if _, err := p.peer.Read(rd); err != nil {
						return
					}
				}
			}()
			require.Eventually(t, func() bool { return p.s.wseq.Load() > base }, 5*time.Second, time.Millisecond)
			require.Greater(t, p.writable.Load(), int32(0))
			require.Greater(t, p.s.wseq.Load(), seq)
		}},
		{"peer's end of stream wakes a muted socket", func(t *testing.T, p *loopPair) {
			p.mark(t, mutedLowat)
			require.NoError(t, p.peer.CloseWrite())
			require.Eventually(t, func() bool { return p.readable.Load() > 0 }, 5*time.Second, time.Millisecond)
		}},
		{"shutdown wakes a muted socket", func(t *testing.T, p *loopPair) {
			p.mark(t, mutedLowat)
			p.s.shutdown(unix.SHUT_RDWR)
			require.Eventually(t, func() bool { return p.readable.Load() > 0 }, 5*time.Second, time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newLoopPair(t)) })
	}
}

// A closed sock leaves the loop and refuses its fd to later users.
func TestEventLoopClose(t *testing.T) {
	p := newLoopPair(t)
	l := p.s.loop
	p.s.close()
	l.mu.RLock()
	_, there := l.byID[p.s.id]
	l.mu.RUnlock()
	require.False(t, there)
	require.ErrorIs(t, p.s.Control(func(uintptr) { t.Fatal("fd used after close") }), net.ErrClosed)
	p.s.close() // idempotent
}

// Connections are dealt to the loops in turn: two in a row never share one.
func TestConnectionsDealtToLoops(t *testing.T) {
	a, b := newLoopPair(t), newLoopPair(t)
	require.NotSame(t, a.s.loop, b.s.loop)
}
