package verbs

import (
	"encoding/binary"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestABILayout(t *testing.T) {
	// The sizes and offsets capi/giw_ring.h asserts on the C side.
	assert.EqualValues(t, 176, unsafe.Sizeof(SQE{}))
	assert.EqualValues(t, 48, unsafe.Offsetof(SQE{}.SGE))
	assert.EqualValues(t, 144, unsafe.Sizeof(RQE{}))
	assert.EqualValues(t, 40, unsafe.Sizeof(CQE{}))
	assert.EqualValues(t, ringHdrSize, unsafe.Sizeof(ringHdr{}))
	assert.EqualValues(t, 64, unsafe.Offsetof(ringHdr{}.Cons))
	assert.EqualValues(t, 128, unsafe.Offsetof(ringHdr{}.Size))
	assert.EqualValues(t, 136, unsafe.Offsetof(ringHdr{}.Doorbell))
}

func TestRingSizing(t *testing.T) {
	for _, tc := range []struct {
		ask, want int
		fail      bool
	}{{1, 1, false}, {3, 4, false}, {64, 64, false}, {65, 128, false}, {0, 0, true}, {maxRingEntries + 1, 0, true}} {
		r, err := newRing(tc.ask, 40)
		if tc.fail {
			assert.Error(t, err, "ask %d", tc.ask)
			continue
		}
		require.NoError(t, err)
		assert.EqualValues(t, tc.want, r.Size())
		assert.EqualValues(t, tc.want, r.hdr.Size)
		r.free()
	}
}

func TestFilterDevices(t *testing.T) {
	devs := []*Device{{Name: "giw_lo", Ifname: "lo"}, {Name: "giw_eth0", Ifname: "eth0"}}
	for _, tc := range []struct {
		filter string
		want   []string
	}{{"", []string{"giw_lo", "giw_eth0"}}, {"lo", []string{"giw_lo"}}, {"giw_eth0, lo", []string{"giw_lo", "giw_eth0"}}, {"nope", nil}} {
		var got []string
		for _, d := range filterDevices(append([]*Device(nil), devs...), tc.filter) {
			got = append(got, d.Name)
		}
		assert.Equal(t, tc.want, got, tc.filter)
	}
}

func TestDevicesHaveLoopback(t *testing.T) {
	t.Setenv("GOIWARP_DEVICES", "")
	devs := Devices()
	lo := DeviceForIP(devs, net.ParseIP("127.0.0.1"))
	require.NotNil(t, lo)
	assert.Equal(t, "giw_lo", lo.Name)
	assert.NotZero(t, lo.GUID)
	g := lo.GID()
	assert.Equal(t, lo.MAC[:], g[:6])
}

// buffer returns mmap'd memory, which is what C callers register.
func buffer(t *testing.T, n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func openCtx(t *testing.T) *Context {
	c, err := Open(&Device{Name: "giw_test"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestMRAccess(t *testing.T) {
	c := openCtx(t)
	pd, other := c.AllocPD(), c.AllocPD()
	buf := buffer(t, 4096)
	mr, err := pd.RegMR(addr(buf), 4096, 0x10000, AccessLocalWrite|AccessRemoteWrite)
	require.NoError(t, err)
	defer mr.Dereg()

	for _, tc := range []struct {
		name   string
		pd     *PD
		stag   uint32
		addr   uint64
		length uint64
		access int
		err    error
	}{
		{"whole region", pd, mr.STag, 0x10000, 4096, AccessRemoteWrite, nil},
		{"tail byte", pd, mr.STag, 0x10fff, 1, AccessRemoteWrite, nil},
		{"zero length at end", pd, mr.STag, 0x11000, 0, AccessRemoteWrite, nil},
		{"past end", pd, mr.STag, 0x10fff, 2, AccessRemoteWrite, ErrBounds},
		{"below base", pd, mr.STag, 0xffff, 1, AccessRemoteWrite, ErrBounds},
		{"wrap around", pd, mr.STag, 0x10001, ^uint64(0), AccessRemoteWrite, ErrBounds},
		{"no remote read", pd, mr.STag, 0x10000, 8, AccessRemoteRead, ErrAccess},
		{"other pd", other, mr.STag, 0x10000, 8, AccessRemoteWrite, ErrWrongPD},
		{"bad stag", pd, mr.STag ^ 0x5a5a5a5a, 0x10000, 8, 0, ErrInvalidSTag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Access(tc.pd, tc.stag, tc.addr, tc.length, tc.access)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Len(t, s.Buf, int(tc.length))
			s.Release()
		})
	}
}

func TestRegMRFlags(t *testing.T) {
	c := openCtx(t)
	pd := c.AllocPD()
	buf := buffer(t, 64)
	_, err := pd.RegMR(addr(buf), 64, uint64(addr(buf)), AccessRemoteWrite)
	assert.ErrorIs(t, err, unix.EINVAL, "remote write needs local write")
	_, err = pd.RegMR(addr(buf), 64, uint64(addr(buf)), AccessRemoteAtomic)
	assert.ErrorIs(t, err, unix.EINVAL, "remote atomic needs local write")
	mr, err := pd.RegMR(addr(buf), 64, uint64(addr(buf)), AccessRemoteRead)
	require.NoError(t, err)
	mr.Dereg()
	_, err = Access(pd, mr.STag, uint64(addr(buf)), 1, AccessRemoteRead)
	assert.ErrorIs(t, err, ErrInvalidSTag, "deregistered")
}

// lowMapped maps two pages at the lowest address a process may map
// (vm.mmap_min_addr): the page below can never be mapped, so it is a hole
// no other thread can fill between the test's steps.
func lowMapped(t *testing.T) (base uintptr, pg int) {
	pg = unix.Getpagesize()
	base = uintptr(pg)
	if b, err := os.ReadFile("/proc/sys/vm/mmap_min_addr"); err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && uintptr(v) > base {
			base = (uintptr(v) + uintptr(pg) - 1) &^ uintptr(pg-1)
		}
	}
	p, _, errno := unix.Syscall6(unix.SYS_MMAP, base, uintptr(2*pg), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	require.Zero(t, errno)
	require.Equal(t, base, p)
	t.Cleanup(func() { _, _, _ = unix.Syscall(unix.SYS_MUNMAP, p, uintptr(2*pg), 0) })
	return base, pg
}

func TestRegMRUnmapped(t *testing.T) {
	c := openCtx(t)
	pd := c.AllocPD()
	base, pg := lowMapped(t)
	none, err := unix.Mmap(-1, 0, pg, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(none) })
	for _, tc := range []struct {
		name   string
		addr   uintptr
		length uint64
		err    error
	}{
		{"mapped pages", base, uint64(2 * pg), nil},
		{"unaligned inside a page", base + 100, 200, nil},
		{"one byte below", base - 1, 2, unix.EFAULT},
		{"the page below and the mapping", base - uintptr(pg), uint64(3 * pg), unix.EFAULT},
		{"NULL", 0, 64, unix.EFAULT},
		{"address wraps", ^uintptr(0) - 8, 64, unix.EINVAL},
		// Protection is the engine's business (a fault there is a QP error).
		{"PROT_NONE", addr(none), uint64(pg), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr, err := pd.RegMR(tc.addr, tc.length, uint64(tc.addr), AccessLocalWrite)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
				assert.Nil(t, mr)
				return
			}
			require.NoError(t, err)
			mr.Dereg()
		})
	}
}

func TestReregMRUnmapped(t *testing.T) {
	c := openCtx(t)
	pd := c.AllocPD()
	base, pg := lowMapped(t)
	mr, err := pd.RegMR(base, uint64(pg), uint64(base), AccessLocalWrite)
	require.NoError(t, err)
	defer mr.Dereg()
	const reregTrans = 1
	err = mr.Rereg(nil, base-uintptr(pg), uint64(2*pg), uint64(base), AccessLocalWrite, reregTrans)
	require.ErrorIs(t, err, unix.EFAULT)
	assert.Equal(t, base, mr.Addr, "a refused rereg leaves the translation")
	assert.EqualValues(t, pg, mr.Length)
	require.NoError(t, mr.Rereg(nil, base+uintptr(pg), uint64(pg), uint64(base), AccessLocalWrite, reregTrans))
	assert.Equal(t, base+uintptr(pg), mr.Addr)
}

func BenchmarkRegMR1GiB(b *testing.B) {
	c, err := Open(&Device{Name: "giw_lo", Ifname: "lo"})
	require.NoError(b, err)
	defer c.Close()
	pd := c.AllocPD()
	const n = 1 << 30
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	require.NoError(b, err)
	defer func() { _ = unix.Munmap(m) }()
	for b.Loop() {
		mr, err := pd.RegMR(uintptr(unsafe.Pointer(&m[0])), n, 0, AccessLocalWrite)
		if err != nil {
			b.Fatal(err)
		}
		mr.Dereg()
	}
}

func TestDeregWaitsForPlacement(t *testing.T) {
	c := openCtx(t)
	pd := c.AllocPD()
	buf := buffer(t, 64)
	mr, err := pd.RegMR(addr(buf), 64, 0, AccessLocalWrite)
	require.NoError(t, err)
	s, err := Access(pd, mr.STag, 0, 64, AccessLocalWrite)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { mr.Dereg(); close(done) }()
	select {
	case <-done:
		t.Fatal("Dereg returned while a placement was in flight")
	default:
	}
	s.Release()
	<-done
}

type fixture struct {
	ctx *Context
	pd  *PD
	cq  *CQ
	ch  *CompChannel
	qp  *QP
}

func newFixture(t *testing.T, cqe int, sigAll bool) *fixture {
	c := openCtx(t)
	ch, err := NewCompChannel()
	require.NoError(t, err)
	t.Cleanup(ch.Close)
	cq, err := c.CreateCQ(cqe, ch, 0xc0)
	require.NoError(t, err)
	t.Cleanup(cq.Destroy)
	pd := c.AllocPD()
	qp, err := c.CreateQP(QPInit{PD: pd, SendCQ: cq, RecvCQ: cq, Caps: QPCaps{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}, SigAll: sigAll, Cookie: 0x9a})
	require.NoError(t, err)
	t.Cleanup(func() { qp.Destroy(); qp.FreeRings() })
	return &fixture{c, pd, cq, ch, qp}
}

func (f *fixture) postSend(wrid uint64, op uint8, flags uint8) {
	r := f.qp.SQ
	p := r.prod()
	*(*SQE)(r.entry(p)) = SQE{WRID: wrid, Opcode: op, Flags: flags}
	r.setProd(p + 1)
}

func (f *fixture) postRecv(wrid uint64) {
	r := f.qp.RQ
	p := r.prod()
	*(*RQE)(r.entry(p)) = RQE{WRID: wrid}
	r.setProd(p + 1)
}

func (f *fixture) poll() []CQE {
	r := f.cq.Ring
	var out []CQE
	for c := r.cons(); c != r.prod(); c++ {
		out = append(out, *(*CQE)(r.entry(c)))
		r.setCons(c + 1)
	}
	return out
}

func toInit(t *testing.T, qp *QP) {
	require.NoError(t, qp.Modify(QPAttr{State: QPSInit, PortNum: 1, AccessFlags: AccessRemoteWrite}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags))
}

func TestQPTransitions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		path  []QPState
		fails bool
	}{
		{"init again", []QPState{QPSInit}, false},
		{"reset to init", []QPState{QPSReset, QPSInit}, false},
		{"init to rtr", []QPState{QPSInit, QPSRTR}, false},
		{"rts needs a connection", []QPState{QPSInit, QPSRTR, QPSRTS}, true},
		{"reset to rtr", []QPState{QPSReset, QPSRTR}, true},
		{"error from anywhere", []QPState{QPSInit, QPSErr}, false},
		{"error back to reset", []QPState{QPSErr, QPSReset, QPSInit}, false},
		{"sqd needs rts", []QPState{QPSInit, QPSSQD}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 16, false)
			var err error
			for _, s := range tc.path {
				mask := QPAttrState
				if s == QPSInit {
					mask |= QPAttrPort | QPAttrPKeyIndex | QPAttrAccessFlags
				}
				if err = f.qp.Modify(QPAttr{State: s, PortNum: 1}, mask); err != nil {
					break
				}
				assert.Equal(t, s, f.qp.State())
			}
			if tc.fails {
				assert.Error(t, err)
			} else {
				assert.NoError(t, err)
			}
		})
	}
	t.Run("created in init without remote rights", func(t *testing.T) {
		f := newFixture(t, 16, false)
		assert.Equal(t, QPSInit, f.qp.State())
		for _, a := range []int{AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic} {
			assert.False(t, f.qp.Allows(a))
		}
		require.NoError(t, f.qp.Modify(QPAttr{AccessFlags: AccessRemoteWrite}, QPAttrAccessFlags))
		assert.True(t, f.qp.Allows(AccessRemoteWrite))
		assert.False(t, f.qp.Allows(AccessRemoteWrite|AccessRemoteRead))
	})
	t.Run("reset to init needs port and access", func(t *testing.T) {
		f := newFixture(t, 16, false)
		require.NoError(t, f.qp.Modify(QPAttr{State: QPSReset}, QPAttrState))
		assert.ErrorIs(t, f.qp.Modify(QPAttr{State: QPSInit, PortNum: 1}, QPAttrState|QPAttrPort), unix.EINVAL)
		assert.NoError(t, f.qp.Modify(QPAttr{State: QPSInit, PortNum: 1}, QPAttrState|QPAttrPort|QPAttrAccessFlags))
	})
	t.Run("ord above the device limit", func(t *testing.T) {
		f := newFixture(t, 16, false)
		assert.ErrorIs(t, f.qp.Modify(QPAttr{ORD: MaxORD + 1}, QPAttrMaxQPRdAtomic), unix.EINVAL)
	})
}

func TestSendRetiresInOrder(t *testing.T) {
	f := newFixture(t, 16, false)
	f.postSend(1, WRRDMARead, SendSignaled)
	f.postSend(2, WRRDMAWrite, 0) // unsignaled: no CQE
	f.postSend(3, WRSend, SendSignaled)
	var idx [3]uint32
	for i := range idx {
		_, n, ok := f.qp.NextSend()
		require.True(t, ok)
		idx[i] = n
	}
	_, _, ok := f.qp.NextSend()
	assert.False(t, ok)
	f.qp.CompleteSend(idx[2], WCSuccess, 10)
	f.qp.CompleteSend(idx[1], WCSuccess, 20)
	assert.Empty(t, f.poll(), "the read before them is not done")
	f.qp.CompleteSend(idx[0], WCSuccess, 30)
	got := f.poll()
	require.Len(t, got, 2)
	assert.Equal(t, CQE{WRID: 1, Opcode: WCOpRDMARead, ByteLen: 30, QPNum: f.qp.Num}, got[0])
	assert.Equal(t, CQE{WRID: 3, Opcode: WCOpSend, ByteLen: 10, QPNum: f.qp.Num}, got[1])
	assert.EqualValues(t, 3, f.qp.SQ.cons())
}

func TestErrorFlushesEverything(t *testing.T) {
	f := newFixture(t, 16, false)
	toInit(t, f.qp)
	f.postRecv(10)
	f.postRecv(11)
	f.postSend(1, WRSend, 0)
	f.postSend(2, WRRDMAWrite, SendSignaled)
	require.NoError(t, f.qp.Modify(QPAttr{State: QPSErr}, QPAttrState))
	got := f.poll()
	require.Len(t, got, 4)
	for i, w := range []uint64{1, 2, 10, 11} {
		assert.Equal(t, w, got[i].WRID)
		assert.EqualValues(t, WCWRFlushErr, got[i].Status)
	}
	assert.EqualValues(t, WCOpRecv, got[2].Opcode)

	// Work posted in ERR is flushed by the doorbell.
	f.postSend(3, WRSend, 0)
	require.True(t, f.qp.TakeTx())
	f.qp.Doorbell()
	f.postRecv(12)
	f.qp.PostRecvDoorbell()
	got = f.poll()
	require.Len(t, got, 2)
	assert.EqualValues(t, 3, got[0].WRID)
	assert.EqualValues(t, 12, got[1].WRID)
}

func TestTxToken(t *testing.T) {
	f := newFixture(t, 16, false)
	require.True(t, f.qp.TakeTx())
	assert.False(t, f.qp.TakeTx(), "only one owner")
	assert.False(t, f.qp.ReleaseTx(), "nothing pending")
	f.postSend(1, WRSend, 0)
	require.True(t, f.qp.TakeTx())
	assert.True(t, f.qp.ReleaseTx(), "pending work: the releaser keeps transmitting")
	assert.False(t, f.qp.TakeTx())
}

func readRecord(t *testing.T, fd, n int) []byte {
	require.NoError(t, unix.SetNonblock(fd, true))
	b := make([]byte, n)
	got, err := unix.Read(fd, b)
	require.NoError(t, err)
	require.Equal(t, n, got)
	return b
}

// Poster reads what post_send left in the send ring: the CPU, stored
// plus one so that a ring never posted to reads unknown.
func TestPoster(t *testing.T) {
	f := newFixture(t, 8, false)
	cpu, posts := f.qp.Poster()
	assert.Equal(t, -1, cpu, "no post yet")
	assert.Zero(t, posts)
	f.postSend(1, WRSend, 0)
	f.qp.SQ.hdr.PostCPU = 3 + 1
	cpu, posts = f.qp.Poster()
	assert.Equal(t, 3, cpu)
	assert.EqualValues(t, 1, posts)
}

func TestCQNotify(t *testing.T) {
	f := newFixture(t, 16, false)
	// Not armed: no event.
	f.cq.Push(&CQE{WRID: 1}, false)
	atomicStore(&f.cq.Ring.hdr.Notify, notifySolicited)
	f.cq.Push(&CQE{WRID: 2}, false)
	require.NoError(t, unix.SetNonblock(f.ch.FD(), true))
	_, err := unix.Read(f.ch.FD(), make([]byte, 8))
	assert.ErrorIs(t, err, unix.EAGAIN, "unsolicited completion fired a solicited-only arm")
	f.cq.Push(&CQE{WRID: 3}, true)
	rec := readRecord(t, f.ch.FD(), 8)
	assert.EqualValues(t, 0xc0, binary.NativeEndian.Uint64(rec))
	assert.EqualValues(t, notifyNone, f.cq.Ring.hdr.Notify, "one shot")
}

// Push reads the ring's notify word under the lock Resize swaps the ring
// under (run with -race).
func TestCQPushDuringResize(t *testing.T) {
	f := newFixture(t, 4, false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 4; i++ {
			f.cq.Push(&CQE{WRID: uint64(i)}, true)
		}
	}()
	require.NoError(t, f.cq.Resize(64))
	<-done
	assert.EqualValues(t, 4, f.cq.Ring.prod()-f.cq.Ring.cons())
}

func TestCQOverflowRaisesAsyncEvent(t *testing.T) {
	f := newFixture(t, 2, false)
	assert.True(t, f.cq.Push(&CQE{}, false))
	assert.True(t, f.cq.Push(&CQE{}, false))
	assert.False(t, f.cq.Push(&CQE{}, false))
	rec := readRecord(t, f.ctx.AsyncFD(), AsyncEventSize)
	assert.EqualValues(t, EventCQErr, binary.NativeEndian.Uint32(rec))
	assert.EqualValues(t, 0xc0, binary.NativeEndian.Uint64(rec[8:]))
}

func TestSRQLimit(t *testing.T) {
	c := openCtx(t)
	pd := c.AllocPD()
	srq, err := c.CreateSRQ(pd, 4, 1, 0, 0x5e)
	require.NoError(t, err)
	defer srq.Destroy()
	require.NoError(t, srq.Modify(0, 2, SRQAttrLimit))
	assert.Error(t, srq.Modify(8, 0, SRQAttrMaxWR))
	for i := range 3 {
		p := srq.Ring.prod()
		*(*RQE)(srq.Ring.entry(p)) = RQE{WRID: uint64(i)}
		srq.Ring.setProd(p + 1)
	}
	e, ok := srq.take()
	require.True(t, ok)
	assert.EqualValues(t, 0, e.WRID)
	assert.EqualValues(t, 2, srq.Limit(), "2 left: not below the limit")
	_, ok = srq.take()
	require.True(t, ok)
	assert.EqualValues(t, 0, srq.Limit(), "fired and disarmed")
	rec := readRecord(t, c.AsyncFD(), AsyncEventSize)
	assert.EqualValues(t, EventSRQLimitReached, binary.NativeEndian.Uint32(rec))
}
