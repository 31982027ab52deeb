package provider

import (
	"encoding/hex"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// siw's MPA frames (captures/siw, see TestMPAFramesMatchSiw): requests and
// replies of the default, CRC and P2P settings, and siw's P2P RTR FPDU.
var (
	siwReqs = []string{
		"4d504120494420526571204672616d651002000400010001",
		"4d504120494420526571204672616d655002000400010001",
		"4d504120494420526571204672616d65100200048001c001",
	}
	siwReps = []string{
		"4d504120494420526570204672616d651002000400010001",
		"4d504120494420526570204672616d655002000400010001",
		"4d504120494420526570204672616d651002000480018001",
	}
	siwRTR = "000ec14000000001000000000000000000000000"
)

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// fuzzPolicy bounds every wait of the engine.
func fuzzPolicy() Policy {
	p := DefaultPolicy()
	p.Timeout = 300 * time.Millisecond
	return p
}

// One listener per fuzzing process; each input's request goes to the
// channel of the connection that sent it, by remote port.
type fuzzListener struct {
	ln   *Listener
	mu   sync.Mutex
	reqs map[int]chan *Request
}

var (
	fuzzLnOnce sync.Once
	fuzzLn     *fuzzListener
)

func getFuzzListener(t testing.TB) *fuzzListener {
	fuzzLnOnce.Do(func() {
		tl, err := netListen()
		if err != nil {
			panic(err)
		}
		fl := &fuzzListener{reqs: map[int]chan *Request{}}
		fl.ln = listenPolicy(tl, func(r *Request) {
			fl.mu.Lock()
			ch := fl.reqs[r.Remote.Port]
			fl.mu.Unlock()
			if ch == nil {
				_ = r.Reject(nil)
				return
			}
			ch <- r
		}, fuzzPolicy())
		fuzzLn = fl
	})
	return fuzzLn
}

// runResponder sends b to our listener as the initiator would (MPA request
// and whatever follows), half-closes, and accepts the request (if it was
// valid) into a fresh QP. It fails when the engine neither closes the
// stream nor finishes within a bound.
func runResponder(t *testing.T, b []byte) {
	fl := getFuzzListener(t)
	c, err := net.DialTCP("tcp", nil, fl.ln.Addr())
	require.NoError(t, err)
	defer c.Close()
	port := c.LocalAddr().(*net.TCPAddr).Port
	ch := make(chan *Request, 1)
	fl.mu.Lock()
	fl.reqs[port] = ch
	fl.mu.Unlock()
	defer func() { fl.mu.Lock(); delete(fl.reqs, port); fl.mu.Unlock() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write(b)
	_ = c.CloseWrite()
	// The engine's answer (a reply, FPDUs, Terminate) is drained in the
	// background: EOF means the engine closed.
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, c); close(eof) }()
	var s *side
	var mem *canaryMem
	select {
	case r := <-ch:
		s = newSide(t)
		mem = newCanary(t, s.pd, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		for i := 0; i < 4; i++ {
			s.postRecv(rqe(uint64(i), verbs.SGE{Addr: mem.addr(i * 1024), Length: 1024, LKey: mem.mr.STag}))
		}
		if _, err := r.Accept(s.qp, ConnParams{IRD: 2, ORD: 2}, s.cb); err != nil {
			s = nil
		}
	case <-eof:
	case <-time.After(3 * time.Second):
		t.Fatal("listener neither handed out the request nor closed")
	}
	select {
	case <-eof:
	case <-time.After(5 * time.Second):
		t.Fatal("engine did not close the stream")
	}
	if s != nil {
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-s.events:
				if ev.Type == Established {
					continue
				}
			case <-deadline:
				t.Fatal("no Disconnected after the peer closed")
			}
			break
		}
		mem.check(t, true)
	}
}

// FuzzMPARequest feeds arbitrary bytes as the peer's MPA request (and
// whatever follows it) to our listener/acceptor path.
func FuzzMPARequest(f *testing.F) {
	for _, r := range siwReqs {
		f.Add(unhex(r))
	}
	f.Add(append(unhex(siwReqs[2]), unhex(siwRTR)...))
	f.Add(wire.AppendMPAFrame(nil, &wire.MPAFields{Kind: wire.MPARequest, Revision: 1}, []byte("hello")))
	f.Add(unhex(siwReqs[0])[:10])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			return
		}
		runResponder(t, b)
	})
}

// FuzzFPDUStream runs a valid MPA exchange (siw's request, with or without
// CRC) and then feeds arbitrary bytes as the FPDU stream. Guard pages around
// a registered region must stay untouched.
func FuzzFPDUStream(f *testing.F) {
	send := func(crc bool, hd *wire.Header, payload []byte) []byte {
		b := make([]byte, 2+wire.DDPUntaggedHeaderLen+wire.AtomicRequestLen+len(payload)+8)
		hl, _ := wire.EncodeHeader(b[2:], hd)
		copy(b[2+hl:], payload)
		n, _ := wire.FinishFPDU(b, hl+len(payload), crc)
		return b[:n]
	}
	f.Add(false, send(false, &wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}, []byte("hello")))
	f.Add(true, send(true, &wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}, []byte("hello")))
	f.Add(false, append(send(false, &wire.Header{Opcode: wire.OpWrite, Last: true, STag: 1}, nil),
		send(false, &wire.Header{Opcode: wire.OpReadRequest, Last: true, MSN: 1, SinkSTag: 5, ReadSize: 16, SrcSTag: 7}, nil)...))
	f.Add(false, send(false, &wire.Header{Opcode: wire.OpSend, Last: false, MSN: 1}, make([]byte, 1500)))
	f.Add(false, send(false, &wire.Header{Opcode: wire.OpAtomicRequest, Last: true, MSN: 1, AtomicOp: wire.AtomicFetchAdd}, nil))
	f.Add(false, send(false, &wire.Header{Opcode: wire.OpTerminate, Last: true}, make([]byte, 20)))
	f.Add(false, []byte("\x00\x10GARBAGE-GARBAGE-GARBAGE"))
	f.Fuzz(func(t *testing.T, crc bool, b []byte) {
		if len(b) > 8192 {
			return
		}
		req := unhex(siwReqs[0])
		if crc {
			req = unhex(siwReqs[1])
		}
		runResponder(t, append(req, b...))
	})
}

// FuzzMPAReply feeds arbitrary bytes as the responder's MPA reply (and what
// follows) to our initiator path.
func FuzzMPAReply(f *testing.F) {
	for _, r := range siwReps {
		f.Add(unhex(r))
	}
	f.Add(wire.AppendMPAFrame(nil, &wire.MPAFields{Kind: wire.MPAReply, Reject: true, Revision: 2, Enhanced: true},
		wire.AppendMPAV2PrivateData(nil, wire.MPAV2Params{}, []byte("no"))))
	f.Add(unhex(siwReps[0])[:7])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			return
		}
		tl, err := netListen()
		require.NoError(t, err)
		defer tl.Close()
		go func() {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			hdr := make([]byte, wire.MPAHeaderLen)
			if _, err := io.ReadFull(c, hdr); err != nil {
				return
			}
			fl, err := wire.ParseMPAHeader(hdr)
			if err != nil {
				return
			}
			if _, err := io.ReadFull(c, make([]byte, fl.PrivateDataLen)); err != nil {
				return
			}
			_, _ = c.Write(b)
			_ = c.(*net.TCPConn).CloseWrite()
			_, _ = io.Copy(io.Discard, c)
		}()
		s := newSide(t)
		pol := fuzzPolicy()
		_, err = connectPolicy(s.qp, nil, tl.Addr().(*net.TCPAddr), ConnParams{IRD: 2, ORD: 2}, 300*time.Millisecond, s.cb, &pol)
		require.NoError(t, err)
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-s.events:
				if ev.Type == Established {
					continue
				}
				return
			case <-deadline:
				t.Fatal("no terminal event from the initiator")
			}
		}
	})
}
