package provider

import (
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// How the application breaks a registered buffer.
type breakHow int

const (
	viaMunmap breakHow = iota
	viaProtNone
)

func (h breakHow) String() string { return [...]string{"munmap", "PROT_NONE"}[h] }

// lowArea is where brokenMem maps: far below where mmap(2) places new
// mappings (top-down), so a range it unmaps stays a hole for the test
// instead of being reused by the next mapping of the process (which the
// engine would then write into).
const lowArea = 16 << 20

// brokenMem maps n bytes, registers them in s's PD and returns the buffer
// and a function that breaks it the way h says. The mapping is handled
// through raw calls: after munmap nobody may unmap it again.
func brokenMem(t *testing.T, s *side, n int, access int, h breakHow) ([]byte, *verbs.MR, func(off, n int)) {
	var a uintptr
	for try := uintptr(lowArea); a == 0; try += uintptr(n) {
		r, _, errno := unix.Syscall6(unix.SYS_MMAP, try, uintptr(n), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
		if errno == 0 {
			a = r
		} else {
			require.ErrorIs(t, errno, unix.EEXIST)
		}
	}
	p := unsafe.Add(unsafe.Pointer(nil), a)
	b := unsafe.Slice((*byte)(p), n)
	mr, err := s.pd.RegMR(a, uint64(n), uint64(a), access|verbs.AccessLocalWrite)
	require.NoError(t, err)
	unmapped := false
	brk := func(off, k int) {
		q := unsafe.Add(p, off)
		if h == viaMunmap {
			require.NoError(t, unix.MunmapPtr(q, uintptr(k)))
			unmapped = true
			return
		}
		_, _, errno := unix.Syscall(unix.SYS_MPROTECT, uintptr(q), uintptr(k), unix.PROT_NONE)
		require.Zero(t, errno)
	}
	t.Cleanup(func() {
		mr.Dereg()
		if !unmapped {
			_ = unix.MunmapPtr(p, uintptr(n))
		}
	})
	return b, mr, brk
}

// A peer's Write, Send, Read or Atomic that meets memory the application
// unmapped or protected after registering it: the target's QP goes to ERR
// with QP_FATAL (a receive it was filling completes LOC_PROT_ERR), the
// initiator gets a Terminate (its Read/Atomic completes in error, its QP
// gets QP_FATAL), and the process lives on.
func TestRemoteAccessToBrokenMemory(t *testing.T) {
	cases := []struct {
		name string
		op   uint8
		n    int
	}{
		{"write-8", verbs.WRRDMAWrite, 8},          // copied from the carry-over buffer: a Go fault
		{"write-64k", verbs.WRRDMAWrite, 64 << 10}, // readv straight into it: EFAULT
		{"send-8", verbs.WRSend, 8},                // placed into a receive buffer
		{"send-64k", verbs.WRSend, 64 << 10},       // idem, readv
		{"read-8", verbs.WRRDMARead, 8},            // the responder probes the source
		{"read-64k", verbs.WRRDMARead, 64 << 10},   // idem, 16 pages
		{"atomic", verbs.WRAtomicFetchAdd, 8},      // memSafe around the atomic
		{"cmpswap", verbs.WRAtomicCmpSwp, 8},       // idem
	}
	for _, how := range []breakHow{viaMunmap, viaProtNone} {
		for _, tc := range cases {
			t.Run(how.String()+"/"+tc.name, func(t *testing.T) {
				p := connectPair(t, pairOpts{})
				c, s := p.cli, p.srv
				src, smr := c.mem(64<<10, 0)
				dst, dmr, brk := brokenMem(t, s, 64<<10, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic, how)
				c.postRecv(rqe(50))
				if tc.op == verbs.WRSend {
					s.postRecv(rqe(60, sge(dmr, dst, 0, tc.n)))
				}
				brk(0, len(dst))
				w := sqe(1, tc.op, verbs.SendSignaled, sge(smr, src, 0, tc.n))
				w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 0)
				c.postSend(w)
				e := pollCQ(t, c.scq, to)
				require.EqualValues(t, 1, e.WRID)
				switch tc.op {
				case verbs.WRSend, verbs.WRRDMAWrite:
					// Done once on the socket, unless the Terminate overtook that.
					require.Contains(t, []uint32{verbs.WCSuccess, verbs.WCWRFlushErr}, e.Status)
				default:
					require.EqualValues(t, verbs.WCGeneralErr, e.Status, "a Terminate for a local catastrophic error")
				}
				if tc.op == verbs.WRSend {
					r := pollCQ(t, s.rcq, to)
					require.EqualValues(t, 60, r.WRID)
					require.EqualValues(t, verbs.WCLocProtErr, r.Status)
				}
				s.wait(Disconnected, to)
				c.wait(Disconnected, to)
				require.Equal(t, verbs.QPSErr, s.qp.State())
				require.Equal(t, verbs.QPSErr, c.qp.State())
				require.Equal(t, verbs.EventQPFatal, asyncEvent(t, s.ctx, to), "target")
				require.Equal(t, verbs.EventQPFatal, asyncEvent(t, c.ctx, to), "initiator, from the Terminate")
				flushed(t, c.rcq, 50)
			})
		}
	}
}

// A local work request whose memory the application unmapped or
// protected: a Send or Write source, a Read or Atomic sink. The request
// completes with LOC_PROT_ERR and the QP goes to ERR with QP_FATAL.
func TestLocalAccessToBrokenMemory(t *testing.T) {
	cases := []struct {
		name string
		op   uint8
		n    int
	}{
		{"send-8", verbs.WRSend, 8},                // probed in post_send
		{"send-64k", verbs.WRSend, 64 << 10},       // idem, every page
		{"write-8", verbs.WRRDMAWrite, 8},          // idem
		{"write-64k", verbs.WRRDMAWrite, 64 << 10}, // idem
		{"read-8", verbs.WRRDMARead, 8},            // the Read Response's placement faults
		{"read-64k", verbs.WRRDMARead, 64 << 10},   // readv: EFAULT
		{"atomic", verbs.WRAtomicFetchAdd, 8},      // the Atomic Response's store faults
	}
	for _, how := range []breakHow{viaMunmap, viaProtNone} {
		for _, tc := range cases {
			t.Run(how.String()+"/"+tc.name, func(t *testing.T) {
				p := connectPair(t, pairOpts{})
				c, s := p.cli, p.srv
				src, smr, brk := brokenMem(t, c, 64<<10, 0, how)
				dst, dmr := s.mem(64<<10, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
				s.postRecv(rqe(60, sge(dmr, dst, 0, len(dst))))
				c.postRecv(rqe(50))
				brk(0, len(src))
				w := sqe(1, tc.op, verbs.SendSignaled, sge(smr, src, 0, tc.n))
				w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 0)
				c.postSend(w)
				localFaultEnds(t, c, s)
				flushed(t, s.rcq, 60)
				// Work posted afterwards is flushed.
				c.postSend(sqe(2, verbs.WRSend, verbs.SendSignaled))
				flushed(t, c.scq, 2)
			})
		}
	}
}

// Memory unmapped between the probe and the framing (another thread of
// the application) is the transmitter's backstop: with CRC the CRC loop
// faults (recovered in runOnce), without it sendmsg returns EFAULT. Either
// way the Write completes LOC_PROT_ERR, the QP goes to ERR with QP_FATAL
// and the peer sees the stream end.
func TestTransmitFaultAfterProbe(t *testing.T) {
	for _, crc := range []bool{false, true} {
		for _, how := range []breakHow{viaMunmap, viaProtNone} {
			name := how.String() + "/crc-off"
			if crc {
				name = how.String() + "/crc-on"
			}
			t.Run(name, func(t *testing.T) {
				pol := DefaultPolicy()
				pol.CRC = crc
				pol.ShmDirect = false // the Write goes in batches, also on one host
				p := connectPair(t, pairOpts{cliPol: pol, srvPol: pol})
				c, s := p.cli, p.srv
				const n = 4 << 20 // more than one batch (batchBytes)
				src, smr, brk := brokenMem(t, c, n, 0, how)
				dst, dmr := s.mem(n, verbs.AccessRemoteWrite)
				c.postRecv(rqe(50))
				// After the first sendmsg, the second half goes: it was
				// probed, and is framed (and written) in later batches.
				var once sync.Once
				testAfterWrite = func(e *Endpoint) {
					if e == c.ep {
						once.Do(func() { brk(n/2, n/2) })
					}
				}
				t.Cleanup(func() { testAfterWrite = nil })
				w := sqe(1, verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, 0, n))
				w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 0)
				c.postSend(w)
				localFaultEnds(t, c, s)
			})
		}
	}
}

// A Write whose payload arrives after its header was parsed goes from the
// socket straight into the unmapped target (readv: EFAULT, no Go fault).
// The peer gets the Terminate: RDMAP local catastrophic error, with the
// Write's header.
func TestPlacementEFAULT(t *testing.T) {
	h := newHostile(t, false, 4)
	s := h.s
	dst, mr, brk := brokenMem(t, s, 64<<10, verbs.AccessRemoteWrite, viaMunmap)
	brk(0, len(dst))
	f := h.fpdu(&wire.Header{Opcode: wire.OpWrite, Last: true, STag: mr.STag, TO: addr(dst, 0)}, make([]byte, 4096))
	const hdr = 2 + wire.DDPTaggedHeaderLen
	h.send(f[:hdr])
	rx := s.ep.rx.Load()
	require.Eventually(t, func() bool {
		rx.tok.Lock()
		defer rx.tok.Unlock()
		return rx.phase == phPay
	}, to, time.Millisecond, "the header is parsed and the payload awaited")
	h.send(f[hdr:])
	tf := h.terminate()
	require.NotNil(t, tf)
	require.Equal(t, wire.LayerRDMAP, tf.Layer)
	require.Equal(t, wire.RDMAPErrLocalCatastrophic, tf.Type)
	require.Equal(t, f[2:hdr], tf.DDPHeader[:wire.DDPTaggedHeaderLen], "the offending header")
	s.wait(Disconnected, to)
	require.Equal(t, verbs.QPSErr, s.qp.State())
	require.Equal(t, verbs.EventQPFatal, asyncEvent(t, s.ctx, to))
}

// A poller's turn at the socket (Progress, on an application thread in
// capi) recovers a fault on its own goroutine: SetPanicOnFault is per
// goroutine and set by the entry point, then put back.
func TestFaultInCallerGoroutine(t *testing.T) {
	h := newHostile(t, false, 4)
	s := h.s
	dst, mr, brk := brokenMem(t, s, 4096, verbs.AccessRemoteWrite, viaProtNone)
	brk(0, len(dst))
	rx := s.ep.rx.Load()
	// Hold the RX token as Progress does, so that only this goroutine
	// reads the socket, and pump until the stream ends.
	rx.tok.Lock()
	h.send(h.fpdu(&wire.Header{Opcode: wire.OpWrite, Last: true, STag: mr.STag, TO: addr(dst, 0)}, []byte("12345678")))
	deadline := time.Now().Add(to)
	for !rx.ended && time.Now().Before(deadline) {
		require.NoError(t, s.ep.rc.Control(rx.ctl))
	}
	ended := rx.ended
	rx.tok.Unlock()
	require.True(t, ended, "the receive machine stopped at the fault")
	require.False(t, debug.SetPanicOnFault(false), "the caller's setting is put back")
	tf := h.terminate()
	require.NotNil(t, tf)
	require.Equal(t, wire.RDMAPErrLocalCatastrophic, tf.Type)
	s.wait(Disconnected, to)
	require.Equal(t, verbs.EventQPFatal, asyncEvent(t, s.ctx, to))
}

// The fast-path cost of the fault handling: the guard every entry point
// (pump, runOnce) pays once per call, and the probe of a post_send SGE.
func BenchmarkMemGuard(b *testing.B) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // as the entry points do
	b.Run("call", func(b *testing.B) {                       // the same call without the guard
		for b.Loop() {
			plainCall(func() {})
		}
	})
	b.Run("guard", func(b *testing.B) { // an entry point's
		for b.Loop() {
			guarded(func() {})
		}
	})
	for _, n := range []int{2, 64 << 10} {
		buf, err := unix.Mmap(-1, 0, max(n, pageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		require.NoError(b, err)
		b.Run("probe-"+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				probe(buf[:n])
			}
		})
		require.NoError(b, unix.Munmap(buf))
	}
}

//go:noinline
func plainCall(f func()) { f() }

//go:noinline
func guarded(f func()) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	memSafe(f)
}

// localFaultEnds checks how a fault on c's own memory ends the connection:
// work request 1 completes LOC_PROT_ERR, both sides are disconnected, c's QP
// is in ERR with QP_FATAL, and c's posted receive (wr_id 50) is flushed.
func localFaultEnds(t *testing.T, c, s *side) {
	t.Helper()
	e := pollCQ(t, c.scq, to)
	require.EqualValues(t, 1, e.WRID)
	require.EqualValues(t, verbs.WCLocProtErr, e.Status)
	c.wait(Disconnected, to)
	s.wait(Disconnected, to)
	require.Equal(t, verbs.QPSErr, c.qp.State())
	require.Equal(t, verbs.EventQPFatal, asyncEvent(t, c.ctx, to))
	flushed(t, c.rcq, 50)
}
