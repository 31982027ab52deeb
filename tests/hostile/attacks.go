package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
)

// target is the server under attack.
type target struct {
	r     *runner
	addr  string
	legit func() error // a legitimate client's complete run
}

// attack is one hostile connection (or two) and the answer it must get:
// want is the Terminate the server must send (RFC 5040/5041/5044 layer,
// error type and code), or nil when it must close without one.
type attack struct {
	name string
	why  string // the rule behind want
	run  func(t *target) (outcome, error)
	want *wire.TermControl
	// unchecked: the attacker itself ends the connection (a reset), so
	// there is no answer to read; only survival is checked.
	unchecked bool
	// mayLose: the server must close, but its Terminate may be lost: it
	// bounds how long it writes to a peer that does not read.
	mayLose bool
}

func term(l wire.Layer, t wire.ErrorType, c wire.ErrorCode) *wire.TermControl {
	return &wire.TermControl{Layer: l, Type: t, Code: c}
}

// check compares what the server did with what a is owed.
func (a *attack) check(o outcome) error {
	switch {
	case a.unchecked:
		return nil
	case o.err != nil:
		return o.err
	case a.want == nil && o.term != nil:
		return fmt.Errorf("unexpected %s", o)
	case a.want == nil && !o.closed:
		return errors.New("connection not closed")
	case a.want == nil:
		return nil
	case o.term == nil && a.mayLose && o.closed:
		return nil
	case o.term == nil:
		return fmt.Errorf("no Terminate (%s)", o)
	case o.term.Layer != a.want.Layer || o.term.Type != a.want.Type || o.term.Code != a.want.Code:
		return fmt.Errorf("got %s, want %v/%d/0x%02x", o, a.want.Layer, a.want.Type, a.want.Code)
	case !o.closed:
		return errors.New("Terminate but the connection stayed open")
	}
	return nil
}

func (a *attack) expected() string {
	switch {
	case a.unchecked:
		return "(no answer readable)"
	case a.want == nil:
		return "close, no Terminate"
	case a.mayLose:
		return fmt.Sprintf("close (Terminate %v/%d/0x%02x if it gets out)", a.want.Layer, a.want.Type, a.want.Code)
	}
	return fmt.Sprintf("Terminate %v/%d/0x%02x", a.want.Layer, a.want.Type, a.want.Code)
}

const answerWait = 10 * time.Second

// overrunPause: how long ird-overrun leaves the server to parse its
// requests while their responses cannot go out.
const overrunPause = 300 * time.Millisecond

// preMPA sends frame instead of a correct MPA request, keeps the
// connection open without sending more, and expects the server to close
// it without accepting: no bytes, or an MPA reply with R set.
func preMPA(frame []byte) func(t *target) (outcome, error) {
	return func(t *target) (outcome, error) {
		c, err := dial(t.addr, 0)
		if err != nil {
			return outcome{}, err
		}
		defer c.Close()
		if _, err := c.Write(frame); err != nil && !isReset(err) {
			return outcome{}, err
		}
		b, err := closedRaw(c, t.r.mpaTimeout+answerWait)
		if err != nil {
			return outcome{err: fmt.Errorf("server did not close: %w", err)}, nil
		}
		if len(b) > 0 {
			f, perr := wire.ParseMPAHeader(b)
			if perr != nil || f.Kind != wire.MPAReply || !f.Reject {
				return outcome{err: fmt.Errorf("server answered % x", b[:min(len(b), 24)])}, nil
			}
		}
		return outcome{closed: true}, nil
	}
}

// mpaFrame encodes an MPA frame with the wire encoder.
func mpaFrame(f wire.MPAFields, pd []byte) []byte { return wire.AppendMPAFrame(nil, &f, pd) }

func v2pd() []byte { return wire.AppendMPAV2PrivateData(nil, wire.MPAV2Params{IRD: 16, ORD: 16}, nil) }

var preMPAAttacks = []*attack{
	{name: "garbage-instead-of-mpa", why: "RFC 5044: not an MPA request; no stream, so no Terminate",
		run: preMPA(bytes.Repeat([]byte("\xa5GARBAGE"), 8))},
	{name: "mpa-bad-key", why: "RFC 5044: the key must be the request key",
		run: preMPA(mpaFrame(wire.MPAFields{Kind: wire.MPAReply, Enhanced: true, Revision: 2}, v2pd()))},
	{name: "mpa-bad-revision", why: "RFC 5044, RFC 6581: revisions 1 and 2 only",
		run: preMPA(mpaFrame(wire.MPAFields{Kind: wire.MPARequest, Enhanced: true, Revision: 3}, v2pd()))},
	{name: "mpa-pd-length-over-512", why: "RFC 5044: PD_Length at most 512",
		run: preMPA(mpaFrame(wire.MPAFields{Kind: wire.MPARequest, Revision: 1}, make([]byte, 600)))},
	{name: "mpa-pd-truncated-stall", why: "PD_Length promises 100 bytes, 10 come: the MPA timeout ends it",
		run: preMPA(func() []byte {
			b := mpaFrame(wire.MPAFields{Kind: wire.MPARequest, Enhanced: true, Revision: 2}, make([]byte, 100))
			return b[:wire.MPAHeaderLen+10]
		}())},
	{name: "mpa-v2-short-irdord", why: "RFC 6581: H set needs the 4-byte IRD/ORD header",
		run: preMPA(mpaFrame(wire.MPAFields{Kind: wire.MPARequest, Enhanced: true, Revision: 2}, []byte{0, 1}))},
}

// rpingInfo is rping's struct rping_rdma_info (buf, rkey, size; big
// endian), which its client Sends to advertise a buffer. The server answers
// with an RDMA Read of it: the Read Request names the server's own rdma_buf
// (registered for remote read and write) as Data Sink — a valid STag and
// address of the server that we learn without its cooperation.
func rpingInfo(stag uint32, addr uint64, size uint32) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b[0:], addr)
	binary.BigEndian.PutUint32(b[8:], stag)
	binary.BigEndian.PutUint32(b[12:], size)
	return b
}

// Our fake buffer: the server's Read Requests point at it; nothing answers.
const (
	ourSTag = 0x00abcd01
	ourAddr = 0x1000
)

// learned is the server's rping buffer as its Read Request revealed it.
type learned struct {
	stag uint32
	to   uint64
}

// learn connects (rcvBuf as in dial) and makes the rping server reveal its
// buffer.
func learn(t *target, rcvBuf int) (*peer, learned, error) {
	p, err := connect(t.addr, false, rcvBuf)
	if err != nil {
		return nil, learned{}, err
	}
	if err := p.write(p.send(rpingInfo(ourSTag, ourAddr, 64))); err != nil {
		p.c.Close()
		return nil, learned{}, err
	}
	rr, err := p.until(wire.OpReadRequest, answerWait)
	if err != nil {
		p.c.Close()
		return nil, learned{}, err
	}
	return p, learned{stag: rr.h.SinkSTag, to: rr.h.SinkTO}, nil
}

// afterMPA connects (CRC as asked), sends what build returns, and reads
// the server's answer.
func afterMPA(crc bool, build func(p *peer) []byte) func(t *target) (outcome, error) {
	return func(t *target) (outcome, error) {
		p, err := connect(t.addr, crc, 0)
		if err != nil {
			return outcome{}, err
		}
		defer p.c.Close()
		if err := p.write(build(p)); err != nil && !isReset(err) {
			return outcome{}, err
		}
		return p.finish(answerWait), nil
	}
}

// onLearned is afterMPA on a connection that first learned the server's
// buffer.
func onLearned(build func(p *peer, l learned) []byte) func(t *target) (outcome, error) {
	return func(t *target) (outcome, error) {
		p, l, err := learn(t, 0)
		if err != nil {
			return outcome{}, err
		}
		defer p.c.Close()
		if err := p.write(build(p, l)); err != nil && !isReset(err) {
			return outcome{}, err
		}
		return p.finish(answerWait), nil
	}
}

func write(p *peer, stag uint32, to uint64, n int) []byte {
	return p.fpdu(&wire.Header{Opcode: wire.OpWrite, Last: true, STag: stag, TO: to}, make([]byte, n))
}

// Attacks that need an established RDMA stream, against any server.
var invalidSTagAttack = &attack{name: "write-invalid-stag", why: "RFC 5041: tagged buffer error, invalid STag",
	run:  afterMPA(false, func(p *peer) []byte { return write(p, 0x5a5a5a00, 0, 16) }),
	want: term(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedInvalidSTag)}

var sendTooLongAttack = &attack{name: "send-longer-than-receive", why: "RFC 5041: untagged buffer error, message too long",
	run:  afterMPA(false, func(p *peer) []byte { return p.send(make([]byte, 4000)) }),
	want: term(wire.LayerDDP, wire.DDPErrUntaggedBuffer, wire.DDPCodeUntaggedTooLong)}

var protocolAttacks = []*attack{
	{name: "bad-crc", why: "RFC 5044: CRC negotiated, CRC error",
		run: afterMPA(true, func(p *peer) []byte {
			b := p.send(rpingInfo(ourSTag, ourAddr, 64))
			b[len(b)-1] ^= 0xff
			return b
		}), want: term(wire.LayerLLP, wire.LLPErrMPA, wire.MPACodeCRC)},
	invalidSTagAttack,
	sendTooLongAttack,
	{name: "send-msn-gap", why: "RFC 5041: untagged buffer error, MSN range not valid",
		run: afterMPA(false, func(p *peer) []byte {
			return p.fpdu(&wire.Header{Opcode: wire.OpSend, Last: true, MSN: 5}, rpingInfo(ourSTag, ourAddr, 64))
		}), want: term(wire.LayerDDP, wire.DDPErrUntaggedBuffer, wire.DDPCodeUntaggedMSNRange)},
	{name: "read-request-wrong-msn", why: "RFC 5041: untagged buffer error on QN 1, MSN range not valid",
		run: afterMPA(false, func(p *peer) []byte {
			p.msn[wire.QNReadRequest] = 9
			return p.readReq(ourSTag, 0x1234, 0, 16)
		}), want: term(wire.LayerDDP, wire.DDPErrUntaggedBuffer, wire.DDPCodeUntaggedMSNRange)},
	{name: "send-wrong-qn", why: "RFC 5041: untagged buffer error, invalid QN",
		run: afterMPA(false, func(p *peer) []byte {
			u := make([]byte, wire.DDPUntaggedHeaderLen+16)
			wire.DDPUntagged(u).Encode(&wire.DDPUntaggedFields{Last: true, Opcode: wire.OpSend, QN: 3, MSN: 1})
			return p.frame(u)
		}), want: term(wire.LayerDDP, wire.DDPErrUntaggedBuffer, wire.DDPCodeUntaggedInvalidQN)},
	{name: "terminate-flood", why: "RFC 5040: a Terminate is not answered with a Terminate",
		run: afterMPA(false, func(p *peer) []byte {
			t := p.fpdu(&wire.Header{Opcode: wire.OpTerminate, Last: true,
				Term: wire.TermControl{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation, Code: wire.RDMAPCodeUnspecified}}, nil)
			return bytes.Repeat(t, 2000)
		})},
}

// rpingAttacks need rping's buffer advertisement (learn).
var rpingAttacks = []*attack{
	{name: "write-out-of-bounds", why: "RFC 5041: tagged buffer error, base or bounds violation",
		run:  onLearned(func(p *peer, l learned) []byte { return write(p, l.stag, l.to+1<<20, 64) }),
		want: term(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedBaseBounds)},
	{name: "write-below-base", why: "RFC 5041: tagged buffer error, base or bounds violation",
		run:  onLearned(func(p *peer, l learned) []byte { return write(p, l.stag, l.to-16, 64) }),
		want: term(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedBaseBounds)},
	{name: "read-out-of-bounds", why: "RFC 5040: Read Request source out of bounds, remote protection error, base or bounds",
		run: readOutOfBounds, want: term(wire.LayerRDMAP, wire.RDMAPErrRemoteProtection, wire.RDMAPCodeBaseBounds)},
	{name: "write-other-pd", why: "RFC 5041: tagged buffer error, STag not associated with the stream (other PD)",
		run: otherPD, want: term(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedSTagNotAssociated)},
	// mayLose: we read at once, but through a 4 KiB window; on a loaded
	// machine that can be slower than the server's bound on writing to a
	// peer that does not read, and it closes before the Terminate is out
	// (seen once in five CI runs as "closed, no Terminate"). A Terminate
	// that does come must still be this one.
	{name: "ird-overrun", why: "RFC 5040, RFC 5041: more Read Requests outstanding than IRD, untagged QN 1 MSN range (as siw)",
		run: irdOverrun(false), want: term(wire.LayerDDP, wire.DDPErrUntaggedBuffer, wire.DDPCodeUntaggedMSNRange), mayLose: true},
	{name: "peer-stops-reading", why: "responses block on a peer that reads nothing; a legit client meanwhile; the server gives up on the stuck stream",
		run: irdOverrun(true), want: term(wire.LayerDDP, wire.DDPErrUntaggedBuffer, wire.DDPCodeUntaggedMSNRange), mayLose: true},
	{name: "write-flood-concurrent", why: "64 MiB of valid Writes, nothing read; a legit client meanwhile",
		run: writeFlood, unchecked: true},
	{name: "reset-mid-fpdu", why: "half an FPDU, then TCP RST",
		run: resetMidFPDU, unchecked: true},
}

// readOutOfBounds first reads 16 valid bytes of the learned buffer (the
// STag is real), then asks for bytes 1 MiB past it.
func readOutOfBounds(t *target) (outcome, error) {
	p, l, err := learn(t, 0)
	if err != nil {
		return outcome{}, err
	}
	defer p.c.Close()
	const sink = 0x00beef01
	if err := p.write(p.readReq(sink, l.stag, l.to, 16)); err != nil {
		return outcome{}, err
	}
	rr, err := p.until(wire.OpReadResponse, answerWait)
	if err != nil {
		return outcome{}, fmt.Errorf("in-bounds read: %w", err)
	}
	if rr.h.STag != sink || len(rr.payload) != 16 {
		return outcome{}, fmt.Errorf("in-bounds read answered %+v", rr.h)
	}
	if err := p.write(p.readReq(sink, l.stag, l.to+1<<20, 16)); err != nil {
		return outcome{}, err
	}
	return p.finish(answerWait), nil
}

// otherPD uses connection A's buffer on connection B: rping -P serves each
// connection with its own PD, so A's STag is valid in the process but not
// for B's stream.
func otherPD(t *target) (outcome, error) {
	a, la, err := learn(t, 0)
	if err != nil {
		return outcome{}, err
	}
	defer reset(a.c)
	b, lb, err := learn(t, 0)
	if err != nil {
		return outcome{}, err
	}
	defer b.c.Close()
	if la.stag == lb.stag {
		return outcome{}, fmt.Errorf("both connections got STag %#x", la.stag)
	}
	if err := b.write(write(b, la.stag, la.to, 16)); err != nil {
		return outcome{}, err
	}
	return b.finish(answerWait), nil
}

// irdOverrun shrinks its receive window, then sends so many 64 KiB Read
// Requests that the responses cannot all fit in the server's send buffer
// (its most, tcp_wmem) and our receive buffer: while we do not read, the
// server's transmit blocks with more requests outstanding than IRD. With
// stall, a legitimate client runs while this connection is stuck and only
// then do we read; else we read after a short pause and the Terminate must
// come behind the Read Responses. (Reading at once let a server whose
// receive path was descheduled for a while answer every request as it
// parsed it, never over IRD, and keep the connection: a 10 s timeout, in
// about 1 run in 25 under load.)
func irdOverrun(stall bool) func(t *target) (outcome, error) {
	return func(t *target) (outcome, error) {
		const rcvBuf = 4096
		p, l, err := learn(t, rcvBuf)
		if err != nil {
			return outcome{}, err
		}
		defer p.c.Close()
		size := t.r.rpingSize
		n := int(p.ird) + (wmemMax()+4*rcvBuf)/size + 4
		var out []byte
		for range n {
			out = append(out, p.readReq(ourSTag+1, l.stag, l.to, uint32(size))...)
		}
		if err := p.write(out); err != nil {
			return outcome{}, err
		}
		if stall {
			if err := t.legit(); err != nil {
				return outcome{}, fmt.Errorf("legit client while a peer stops reading: %w", err)
			}
		} else {
			time.Sleep(overrunPause)
		}
		return p.finish(answerWait), nil
	}
}

// writeFlood sends 64 MiB of valid Writes into the learned buffer while a
// legitimate client runs, then proves the stream is still in order with a
// Read.
func writeFlood(t *target) (outcome, error) {
	p, l, err := learn(t, 4096)
	if err != nil {
		return outcome{}, err
	}
	defer p.c.Close()
	legit := make(chan error, 1)
	go func() { legit <- t.legit() }()
	chunk := min(t.r.rpingSize, 32<<10)
	w := write(p, l.stag, l.to, chunk)
	batch := bytes.Repeat(w, 64)
	for sent := 0; sent < 64<<20; sent += 64 * chunk {
		if err := p.write(batch); err != nil {
			return outcome{}, err
		}
	}
	if err := <-legit; err != nil {
		return outcome{}, fmt.Errorf("legit client during the flood: %w", err)
	}
	if err := p.write(p.readReq(ourSTag+2, l.stag, l.to, 16)); err != nil {
		return outcome{}, err
	}
	if _, err := p.until(wire.OpReadResponse, answerWait); err != nil {
		return outcome{}, fmt.Errorf("read after the flood: %w", err)
	}
	return outcome{}, nil
}

// resetMidFPDU sends the header and part of the payload of a valid Write,
// then resets the connection.
func resetMidFPDU(t *target) (outcome, error) {
	p, l, err := learn(t, 0)
	if err != nil {
		return outcome{}, err
	}
	w := write(p, l.stag, l.to, min(t.r.rpingSize, 32<<10))
	err = p.write(w[:len(w)/2])
	reset(p.c)
	return outcome{}, err
}
