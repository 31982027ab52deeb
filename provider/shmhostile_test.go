package provider

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A same-host peer that misbehaves at the ring level. The shared memory of
// a same-host connection is mapped read-write by both processes, so a
// buggy or hostile peer can write anything into it: bytes that are not
// FPDUs, impossible positions, wake-up flags, or a stream that never ends.
// The test plays that peer: a raw TCP connection and the initiator's side
// of the shared-memory negotiation (offerShm), then hand-made bytes and
// header words in the rings, against a real goiwarp responder.
type shmPeer struct {
	*hostile          // the goiwarp side (s), the TCP connection, FPDU framing (no CRC)
	l        *shmLink // the peer's view: l.out is what goiwarp reads (ring A), l.in what it writes (ring B)
	stop     chan struct{}
	wg       sync.WaitGroup // the peer's goroutines (flooder, scribbler)
}

// Offsets in a ring's header (shmring's layout: head, tail, sleep flags).
const (
	shmHead   = 0
	shmTail   = 64
	shmRSleep = 128 // the reader asleep
	shmWSleep = 132 // the writer asleep
)

// newShmPeer connects a hand-made peer with rings of ring bytes to a
// goiwarp responder and establishes it (an RTR through the ring).
func newShmPeer(t *testing.T, ring int) *shmPeer {
	pol := DefaultPolicy()
	pol.SHM = ShmOn
	s, c, acc := dialResponder(t, pol)
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	ppol := pol
	ppol.ShmRing = ring
	o := offerShm(&ppol, c, to)
	require.NotNil(t, o, "cannot offer shared memory")
	sendMPARequest(t, c)
	require.NoError(t, <-acc)
	f, _, err := readMPAFrame(c, wire.MPAReply)
	require.NoError(t, err)
	require.False(t, f.Reject)
	l := o.settle(true)
	require.NotNil(t, l, "the peer's rings")
	require.NotNil(t, s.ep.shm, "goiwarp's rings")
	p := &shmPeer{hostile: &hostile{t: t, s: s, conn: c}, l: l, stop: make(chan struct{})}
	t.Cleanup(func() {
		// The peer's goroutines stop before its mapping goes (goiwarp's
		// own mapping is its own: the side's cleanup destroys the QP).
		close(p.stop)
		p.wg.Wait()
		l.close()
	})
	p.put(p.fpdu(&wire.Header{Opcode: wire.OpWrite, Last: true, STag: 1}, nil))
	s.wait(Established, to)
	return p
}

// word is the 64-bit header word at off of ring A (the one goiwarp reads)
// or B (the one it writes).
func (p *shmPeer) word(ringB bool, off int) *atomic.Uint64 {
	base := 0
	if ringB {
		base = len(p.l.mem) / 2
	}
	return (*atomic.Uint64)(unsafe.Pointer(&p.l.mem[base+off]))
}

// flag is the 32-bit sleep flag at off of ring A or B.
func (p *shmPeer) flag(ringB bool, off int) *atomic.Uint32 {
	base := 0
	if ringB {
		base = len(p.l.mem) / 2
	}
	return (*atomic.Uint32)(unsafe.Pointer(&p.l.mem[base+off]))
}

// put writes b into the ring goiwarp reads, as fast as goiwarp makes room.
func (p *shmPeer) put(b []byte) {
	deadline := time.Now().Add(to)
	for len(b) > 0 {
		n := p.l.out.Write(b)
		b = b[n:]
		p.l.wroteOut()
		if n == 0 {
			if time.Now().After(deadline) {
				p.t.Fatalf("goiwarp does not read its ring")
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// get fills b from the ring goiwarp writes; false if it stays short until deadline.
func (p *shmPeer) get(b []byte, deadline time.Time) bool {
	for got := 0; got < len(b); {
		n := p.l.in.Read(b[got:])
		got += n
		if n > 0 {
			p.l.readIn()
			continue
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

// next reads goiwarp's next FPDU: its header and its ULPDU; nil if none
// comes within d.
func (p *shmPeer) next(d time.Duration) (*wire.Header, []byte) {
	deadline := time.Now().Add(d)
	var lb [2]byte
	if !p.get(lb[:], deadline) {
		return nil, nil
	}
	b := make([]byte, wire.FPDULen(int(binary.BigEndian.Uint16(lb[:]))))
	copy(b, lb[:])
	if !p.get(b[2:], deadline) {
		return nil, nil
	}
	ulpdu, _, err := wire.CheckFPDU(b, false)
	require.NoError(p.t, err, "goiwarp's FPDU")
	var h wire.Header
	require.NoError(p.t, wire.ParseHeader(&h, ulpdu, len(ulpdu)))
	return &h, ulpdu
}

// terminate reads goiwarp's FPDUs until a Terminate (returned), or nil if
// none comes within d.
func (p *shmPeer) terminate(d time.Duration) *wire.TerminateFields {
	deadline := time.Now().Add(d)
	for {
		h, ulpdu := p.next(time.Until(deadline))
		if h == nil {
			return nil
		}
		if h.Opcode != wire.OpTerminate {
			continue
		}
		tf, err := wire.ParseTerminate(ulpdu[wire.DDPUntaggedHeaderLen:])
		require.NoError(p.t, err)
		return &tf
	}
}

// run runs f on a goroutine of the peer until the test ends.
func (p *shmPeer) run(f func(stop <-chan struct{})) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f(p.stop)
	}()
}

// closedIn requires f to return within d: a hard Close, a destroy.
func closedIn(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// A peer that writes what is not a well-formed FPDU stream into the ring,
// or impossible positions into either ring's header, or stops in the middle
// of an FPDU: goiwarp neither crashes nor touches memory outside its
// buffers, and fails the connection with a Terminate where one can go out
// (the same Terminate as for the bytes over TCP: TestHostilePeer), the QP
// in ERR, work flushed, the async event and Disconnected.
func TestShmHostileRing(t *testing.T) {
	payload := bytes.Repeat([]byte{0x11}, 64)
	send := func(msn uint32) *wire.Header { return &wire.Header{Opcode: wire.OpSend, Last: true, MSN: msn} }
	type env struct {
		p   *shmPeer
		mem *canaryMem // registered, remote read and write
	}
	corrupt := &wire.TermControl{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrLocalCatastrophic, Code: wire.RDMAPCodeLocalCatastrophic}
	cases := []struct {
		name      string
		misbehave func(e *env)
		// postSend: goiwarp has something to transmit (a Send of 100
		// bytes) after the misbehaviour, to meet a corrupt outbound ring;
		// it never leaves and is flushed.
		postSend bool
		term     *wire.TermControl
		async    int
		recvErr  uint32 // status of the posted receive if not flushed
		written  bool   // the bytes legitimately placed data into mem
		// recvWritten: the bytes placed part of a Send into the posted
		// receive before the stream ended (placement is direct; the
		// receive completes with a flush error)
		recvWritten bool
	}{
		// Bytes.
		{name: "garbage", misbehave: func(e *env) {
			e.p.put([]byte("\x00\x10GARBAGE-GARBAGE-GARBAGE-GARBAGE"))
		}, term: &wire.TermControl{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedInvalidVersion},
			async: verbs.EventQPReqErr},
		{name: "mpa-length-shorter-than-header", misbehave: func(e *env) {
			b := e.p.fpdu(send(1), payload)
			binary.BigEndian.PutUint16(b, 6)
			e.p.put(b)
		}, term: &wire.TermControl{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation, Code: wire.RDMAPCodeCatastrophicStream},
			async: verbs.EventQPReqErr},
		{name: "mpa-length-beyond-receive", misbehave: func(e *env) {
			b := e.p.fpdu(send(1), payload)
			binary.BigEndian.PutUint16(b, 60000)
			e.p.put(b)
		}, term: &wire.TermControl{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedTooLong},
			async: verbs.EventQPReqErr, recvErr: verbs.WCLocLenErr},
		{name: "bad-rdmap-version", misbehave: func(e *env) {
			u := make([]byte, wire.DDPUntaggedHeaderLen+len(payload))
			wire.PutUntaggedHeader(u, wire.OpSend, true, 0, 1, 0)
			u[1] &^= 0xc0
			e.p.put(e.p.raw(u))
		}, term: &wire.TermControl{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation, Code: wire.RDMAPCodeInvalidVersion},
			async: verbs.EventQPReqErr},
		{name: "write-beyond-region", misbehave: func(e *env) {
			e.p.put(e.p.fpdu(&wire.Header{Opcode: wire.OpWrite, Last: true, STag: e.mem.mr.STag, TO: e.mem.addr(len(e.mem.reg) - 8)}, payload))
		}, term: &wire.TermControl{Layer: wire.LayerDDP, Type: wire.DDPErrTaggedBuffer, Code: wire.DDPCodeTaggedBaseBounds},
			async: verbs.EventQPAccessErr},
		// Positions of the ring goiwarp reads (its producer is the peer).
		{name: "tail-far-beyond-head", misbehave: func(e *env) {
			tail := e.p.word(false, shmTail)
			tail.Store(tail.Load() + 16*uint64(e.p.l.out.Cap()))
			signalEv(e.p.l.outData)
		}, term: corrupt, async: verbs.EventQPFatal},
		{name: "tail-one-beyond-full", misbehave: func(e *env) {
			tail := e.p.word(false, shmTail)
			tail.Store(e.p.word(false, shmHead).Load() + uint64(e.p.l.out.Cap()) + 1)
			signalEv(e.p.l.outData)
		}, term: corrupt, async: verbs.EventQPFatal},
		{name: "tail-backwards", misbehave: func(e *env) {
			// Half a Send, then the tail goes back behind what goiwarp read.
			b := e.p.fpdu(send(1), payload)
			e.p.put(b[:40])
			require.Eventually(e.p.t, func() bool { return e.p.l.out.Buffered() == 0 }, to, time.Millisecond)
			tail := e.p.word(false, shmTail)
			tail.Store(tail.Load() - 20)
			signalEv(e.p.l.outData)
		}, term: corrupt, async: verbs.EventQPFatal, recvWritten: true},
		{name: "head-moved-by-peer", misbehave: func(e *env) {
			// goiwarp's own consumer position, scribbled by the peer.
			head := e.p.word(false, shmHead)
			head.Store(head.Load() + 1000)
			signalEv(e.p.l.outData)
		}, term: corrupt, async: verbs.EventQPFatal},
		// Positions of the ring goiwarp writes (its consumer is the peer):
		// no room ever, which goiwarp must not wait for.
		{name: "out-head-beyond-tail", postSend: true, misbehave: func(e *env) {
			e.p.word(true, shmHead).Store(e.p.word(true, shmTail).Load() + 4096)
		}, async: -1},
		{name: "out-head-backwards", postSend: true, misbehave: func(e *env) {
			e.p.word(true, shmHead).Store(e.p.word(true, shmTail).Load() - uint64(e.p.l.in.Cap()) - 1)
		}, async: -1},
		{name: "out-tail-moved-by-peer", postSend: true, misbehave: func(e *env) {
			// goiwarp's own producer position, scribbled by the peer.
			e.p.word(true, shmTail).Store(1 << 50)
		}, async: -1},
		// An FPDU that announces more than ever comes; the peer then
		// closes its TCP socket.
		{name: "truncated-then-close", misbehave: func(e *env) {
			b := e.p.fpdu(&wire.Header{Opcode: wire.OpWrite, Last: true, STag: e.mem.mr.STag, TO: e.mem.addr(0)}, payload)
			e.p.put(b[:40])
			require.NoError(e.p.t, e.p.conn.Close())
		}, async: -1, written: true},
		{name: "truncated-send-then-close", misbehave: func(e *env) {
			b := e.p.fpdu(send(1), payload)
			e.p.put(b[:30])
			require.NoError(e.p.t, e.p.conn.Close())
		}, async: -1, recvWritten: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newShmPeer(t, minShmRing)
			s := p.s
			e := &env{p: p, mem: newCanary(t, s.pd, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)}
			recvBuf := newCanary(t, s.pd, 0)
			s.postRecv(rqe(77, verbs.SGE{Addr: recvBuf.addr(0), Length: 100, LKey: recvBuf.mr.STag}))
			sendBuf := newCanary(t, s.pd, 0)
			tc.misbehave(e)
			if tc.postSend {
				s.postSend(sqe(4, verbs.WRSend, verbs.SendSignaled, verbs.SGE{Addr: sendBuf.addr(0), Length: 100, LKey: sendBuf.mr.STag}))
			}
			if tc.term != nil {
				tf := p.terminate(10 * time.Second)
				require.NotNil(t, tf, "no Terminate")
				require.Equal(t, *tc.term, wire.TermControl{Layer: tf.Layer, Type: tf.Type, Code: tf.Code}, "%+v", tf.TermControl)
			}
			s.wait(Disconnected, 10*time.Second)
			require.Equal(t, verbs.QPSErr, s.qp.State())
			if tc.postSend {
				c := pollCQ(t, s.scq, to)
				require.EqualValues(t, 4, c.WRID)
				require.EqualValues(t, verbs.WCWRFlushErr, c.Status, "a Send into a ring without room")
			}
			c := pollCQ(t, s.rcq, to)
			require.EqualValues(t, 77, c.WRID)
			if tc.recvErr != 0 {
				require.EqualValues(t, tc.recvErr, c.Status)
			} else {
				require.EqualValues(t, verbs.WCWRFlushErr, c.Status)
			}
			requireNewWorkFlushed(t, s, sendBuf, recvBuf, tc.async)
			e.mem.check(t, tc.written)
			recvBuf.check(t, tc.recvWritten)
			sendBuf.check(t, false)
			closedIn(t, 5*time.Second, "hard Close", func() { s.ep.Close(false) })
		})
	}
}

// A peer that floods the ring goiwarp reads (valid Writes that are always
// there: the peer moves its tail on as fast as goiwarp reads, so
// goiwarp's reader never finds the ring empty) and never reads its own
// ring (goiwarp's transmitter, with four 1 MiB Writes to send, finds no
// room). Closing its TCP socket must still end the
// connection: goiwarp reads no more than what was in the ring at the FIN,
// reports Disconnected, and its transmitter gives up (the Writes complete
// flushed). Destroying the QP instead returns at once.
func TestShmHostileFlood(t *testing.T) {
	for _, tc := range []struct {
		name     string
		closeTCP bool // the peer closes its socket; else goiwarp's QP is destroyed
	}{{"peer-closes", true}, {"qp-destroyed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newShmPeer(t, minShmRing)
			s := p.s
			mem := newCanary(t, s.pd, verbs.AccessRemoteWrite)
			// A ring full of 64-byte Writes; then the peer only moves
			// the tail on by what goiwarp consumed, a ring ahead of it:
			// the data is always there (the positions are never corrupt).
			f := p.fpdu(&wire.Header{Opcode: wire.OpWrite, Last: true, STag: mem.mr.STag, TO: mem.addr(0)}, bytes.Repeat([]byte{0x33}, 44))
			require.Len(t, f, 64)
			p.put(bytes.Repeat(f, p.l.out.Cap()/len(f)))
			head, tail := p.word(false, shmHead), p.word(false, shmTail)
			var flooded atomic.Uint64
			p.run(func(stop <-chan struct{}) {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if h := head.Load(); tail.Load() != h+uint64(p.l.out.Cap()) {
						tail.Store(h + uint64(p.l.out.Cap()))
						p.l.wroteOut()
						flooded.Store(h)
					} else {
						runtime.Gosched()
					}
				}
			})
			src, smr := s.mem(1<<20, 0)
			for i := range 4 {
				w := sqe(uint64(10+i), verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, 0, 1<<20))
				w.RKey, w.RemoteAddr = 0x1234, 0
				s.postSend(w)
			}
			// goiwarp filled the peer's ring, and takes the flood.
			require.Eventually(t, func() bool {
				return p.l.in.Free() == 0 && flooded.Load() > 4*uint64(p.l.out.Cap())
			}, to, time.Millisecond)
			require.Equal(t, verbs.QPSRTS, s.qp.State())
			if tc.closeTCP {
				require.NoError(t, p.conn.Close())
				s.wait(Disconnected, 10*time.Second)
				require.Equal(t, verbs.QPSErr, s.qp.State())
				for i := range 4 {
					flushed(t, s.scq, uint64(10+i))
				}
			} else {
				closedIn(t, 5*time.Second, "hard Close", func() { s.ep.Close(false) })
				s.wait(Disconnected, to)
			}
			closedIn(t, 5*time.Second, "hard Close", func() { s.ep.Close(false) })
			mem.check(t, true)
		})
	}
}

// A peer that stops in the middle of an FPDU whose header announced more
// payload, and keeps its socket open: as over TCP, goiwarp waits for the
// rest (a slow peer is not an error), and destroying the QP ends the wait
// at once.
func TestShmHostileStall(t *testing.T) {
	p := newShmPeer(t, minShmRing)
	s := p.s
	buf := newCanary(t, s.pd, 0)
	s.postRecv(rqe(1, verbs.SGE{Addr: buf.addr(0), Length: 100, LKey: buf.mr.STag}))
	b := p.fpdu(&wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}, bytes.Repeat([]byte{0x44}, 80))
	p.put(b[:30])
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, verbs.QPSRTS, s.qp.State())
	require.True(t, cqEmpty(s.rcq))
	closedIn(t, 5*time.Second, "hard Close", func() { s.ep.Close(false) })
	s.wait(Disconnected, to)
	buf.check(t, true)
}

// A peer that scribbles on the sleep flags of both rings all the time
// (clears the ones goiwarp sets before it sleeps, sets the others) costs
// goiwarp wake-ups, never data or a hang: its transmitter, never woken by
// the peer's reads, finds the room by itself; its receiver, never woken by
// the peer's writes, gets what the peer wrote no later than the peer's FIN.
func TestShmHostileSleepFlags(t *testing.T) {
	p := newShmPeer(t, minShmRing)
	s := p.s
	p.run(func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			p.flag(false, shmRSleep).Store(0) // goiwarp's receiver
			p.flag(false, shmWSleep).Store(0xffffffff)
			p.flag(true, shmRSleep).Store(0xffffffff)
			p.flag(true, shmWSleep).Store(0) // goiwarp's transmitter
			runtime.Gosched()
		}
	})
	// goiwarp → peer: a Write of four rings.
	src, smr := s.mem(4*minShmRing, 0)
	fill(src, 7)
	w := sqe(1, verbs.WRRDMAWrite, verbs.SendSignaled, sge(smr, src, 0, len(src)))
	w.RKey, w.RemoteAddr = 0x1234, 0
	s.postSend(w)
	var got []byte
	for len(got) < len(src) {
		h, u := p.next(to)
		require.NotNil(t, h, "after %d bytes", len(got))
		require.Equal(t, wire.OpWrite, h.Opcode)
		hl, err := wire.HeaderLen(u[:2])
		require.NoError(t, err)
		got = append(got, u[hl:]...)
	}
	require.True(t, bytes.Equal(src, got), "the Write's bytes")
	c := pollCQ(t, s.scq, to)
	require.EqualValues(t, 1, c.WRID)
	require.EqualValues(t, verbs.WCSuccess, c.Status)
	// peer → goiwarp: a Send, then the FIN.
	buf := newCanary(t, s.pd, 0)
	s.postRecv(rqe(2, verbs.SGE{Addr: buf.addr(0), Length: 100, LKey: buf.mr.STag}))
	p.put(p.fpdu(&wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}, []byte("scribbled")))
	require.NoError(t, p.conn.Close())
	c = pollCQ(t, s.rcq, to)
	require.EqualValues(t, 2, c.WRID)
	require.EqualValues(t, verbs.WCSuccess, c.Status)
	require.EqualValues(t, 9, c.ByteLen)
	require.Equal(t, "scribbled", string(buf.reg[:9]))
	s.wait(Disconnected, to)
	closedIn(t, 5*time.Second, "hard Close", func() { s.ep.Close(false) })
	buf.check(t, true)
}

// The shared-memory reader, once the TCP stream ended, reads what the ring
// held then and no more (a peer, or its ring, that goes on producing does
// not keep the stream alive), and a ring whose positions are impossible is
// an error, not data. Deterministic where TestShmHostileFlood and
// TestShmHostileRing depend on timing.
func TestShmReaderBounds(t *testing.T) {
	memfd, evs, err := newShmMemory(minShmRing)
	require.NoError(t, err)
	var evs2 [nEv]int
	for i, fd := range evs {
		evs2[i], err = unix.Dup(fd)
		require.NoError(t, err)
	}
	peer, err := mapShm(memfd, evs, true)
	require.NoError(t, err)
	t.Cleanup(peer.close)
	ours, err := mapShm(memfd, evs2, false)
	require.NoError(t, err)
	t.Cleanup(ours.close)
	unix.Close(memfd)
	rd := rxReader{shm: ours, buf: make([]byte, rxBufSize)}
	p := make([]byte, 3*minShmRing)

	require.Equal(t, 100, peer.out.Write(make([]byte, 100)))
	n, err := rd.sys(p)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	_, err = rd.sys(p)
	require.ErrorIs(t, err, errAgain)

	// The FIN with 300 bytes in the ring; the peer writes on.
	require.Equal(t, 300, peer.out.Write(make([]byte, 300)))
	ours.tcpDone.Store(true)
	n, err = rd.sys(p[:200])
	require.NoError(t, err)
	require.Equal(t, 200, n)
	require.Equal(t, 1000, peer.out.Write(make([]byte, 1000)))
	n, err = rd.sys(p)
	require.NoError(t, err)
	require.Equal(t, 100, n, "read beyond what the ring held at the FIN")
	_, err = rd.sys(p)
	require.ErrorIs(t, err, errAgain)
	require.Equal(t, 1000, ours.in.Buffered())

	// Impossible positions.
	for _, tc := range []struct {
		name string
		set  func()
	}{
		{"tail-far-ahead", func() { setWord(ours.mem, shmTail, 1<<40) }},
		{"tail-behind-head", func() { setWord(ours.mem, shmTail, 5) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.set()
			rd := rxReader{shm: ours, buf: make([]byte, rxBufSize)}
			_, err := rd.sys(p)
			require.ErrorIs(t, err, errShmCorrupt)
		})
	}
}

// setWord stores v into the 64-bit header word at off of ring A of mem.
func setWord(mem []byte, off int, v uint64) {
	(*atomic.Uint64)(unsafe.Pointer(&mem[off])).Store(v)
}
