package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
)

// peer is the attacker's end of one TCP connection to the server: it
// speaks MPA and frames FPDUs with provider/wire, but sends whatever the
// attack asks for.
type peer struct {
	c   *net.TCPConn
	crc bool // CRC negotiated
	ird uint16
	// msn is the next MSN of our Sends (QN 0) and Read Requests (QN 1).
	msn [2]uint32
}

// dial opens a TCP connection; rcvBuf > 0 shrinks our receive buffer
// before the handshake so that a peer that stops reading fills up fast.
func dial(addr string, rcvBuf int) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if rcvBuf > 0 {
		d.Control = rcvBufControl(rcvBuf)
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// mpaRequest is a well-formed revision 2 request with the IRD/ORD header.
func mpaRequest(crc bool, ird, ord uint16) []byte {
	f := wire.MPAFields{Kind: wire.MPARequest, CRC: crc, Enhanced: true, Revision: wire.MPARevision2}
	pd := wire.AppendMPAV2PrivateData(nil, wire.MPAV2Params{IRD: ird, ORD: ord}, nil)
	return wire.AppendMPAFrame(nil, &f, pd)
}

// connect runs a correct MPA exchange as initiator and returns the peer;
// the server's first FPDU is up to the caller (it is established once ours
// arrives).
func connect(addr string, crc bool, rcvBuf int) (*peer, error) {
	c, err := dial(addr, rcvBuf)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(mpaRequest(crc, 16, 16)); err != nil {
		c.Close()
		return nil, err
	}
	var hdr [wire.MPAHeaderLen]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("MPA reply: %w", err)
	}
	f, err := wire.ParseMPAHeader(hdr[:])
	if err == nil && (f.Kind != wire.MPAReply || f.Reject) {
		err = fmt.Errorf("MPA reply %+v", f)
	}
	pd := make([]byte, f.PrivateDataLen)
	if err == nil {
		_, err = io.ReadFull(c, pd)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	p := &peer{c: c, crc: f.CRC, ird: 1, msn: [2]uint32{1, 1}}
	if f.Enhanced {
		v2, _, err := wire.SplitMPAV2PrivateData(pd)
		if err != nil {
			c.Close()
			return nil, err
		}
		p.ird = v2.IRD
	}
	if crc && !p.crc {
		c.Close()
		return nil, errors.New("server did not accept CRC")
	}
	_ = c.SetDeadline(time.Time{})
	return p, nil
}

// frame builds one FPDU around ulpdu (CRC when negotiated).
func (p *peer) frame(ulpdu []byte) []byte {
	b := make([]byte, wire.FPDULen(len(ulpdu)))
	copy(b[wire.MPALenSize:], ulpdu)
	n, err := wire.FinishFPDU(b, len(ulpdu), p.crc)
	if err != nil {
		panic(err) // our own frames are at most MaxULPDULen
	}
	return b[:n]
}

// fpdu builds one FPDU for header h and payload.
func (p *peer) fpdu(h *wire.Header, payload []byte) []byte {
	u := make([]byte, h.Opcode.Info().HeaderLen+len(payload))
	n, err := wire.EncodeHeader(u, h)
	if err != nil {
		panic(err)
	}
	copy(u[n:], payload)
	return p.frame(u[:n+len(payload)])
}

// send builds the next Send (MSN in sequence).
func (p *peer) send(payload []byte) []byte {
	b := p.fpdu(&wire.Header{Opcode: wire.OpSend, Last: true, MSN: p.msn[wire.QNSend]}, payload)
	p.msn[wire.QNSend]++
	return b
}

// readReq builds the next RDMA Read Request (MSN in sequence).
func (p *peer) readReq(sinkSTag uint32, srcSTag uint32, srcTO uint64, size uint32) []byte {
	b := p.fpdu(&wire.Header{Opcode: wire.OpReadRequest, Last: true, MSN: p.msn[wire.QNReadRequest],
		SinkSTag: sinkSTag, ReadSize: size, SrcSTag: srcSTag, SrcTO: srcTO}, nil)
	p.msn[wire.QNReadRequest]++
	return b
}

func (p *peer) write(b []byte) error {
	_ = p.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := p.c.Write(b)
	return err
}

// rxFPDU is one FPDU received from the server.
type rxFPDU struct {
	h       wire.Header
	ulpdu   []byte
	payload []byte // after the header (for a Terminate: the copied headers)
}

// next reads one FPDU (the CRC checked when negotiated) before deadline.
// io.EOF (or a reset) means the server closed.
func (p *peer) next(deadline time.Time) (*rxFPDU, error) {
	_ = p.c.SetReadDeadline(deadline)
	var l [wire.MPALenSize]byte
	if _, err := io.ReadFull(p.c, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, wire.FPDULen(int(binary.BigEndian.Uint16(l[:]))))
	copy(b, l[:])
	if _, err := io.ReadFull(p.c, b[len(l):]); err != nil {
		return nil, err
	}
	ulpdu, _, err := wire.CheckFPDU(b, p.crc)
	if err != nil {
		return nil, fmt.Errorf("server's FPDU: %w", err)
	}
	r := &rxFPDU{ulpdu: ulpdu}
	if err := wire.ParseHeader(&r.h, ulpdu, len(ulpdu)); err != nil {
		return nil, fmt.Errorf("server's FPDU header: %w", err)
	}
	r.payload = ulpdu[r.h.HeaderLen:]
	return r, nil
}

// until reads FPDUs until one with opcode op arrives.
func (p *peer) until(op wire.Opcode, d time.Duration) (*rxFPDU, error) {
	dl := time.Now().Add(d)
	for {
		r, err := p.next(dl)
		if err != nil {
			return nil, fmt.Errorf("waiting for %v: %w", op, err)
		}
		if r.h.Opcode == op {
			return r, nil
		}
	}
}

// outcome is how the server ended a connection we attacked.
type outcome struct {
	term   *wire.TerminateFields // the Terminate it sent, if any
	closed bool                  // it closed (FIN or RST) within the deadline
	err    error                 // anything else: a malformed FPDU, a timeout
}

func (o outcome) String() string {
	switch {
	case o.err != nil:
		return "error: " + o.err.Error()
	case o.term != nil:
		return fmt.Sprintf("Terminate %v/%d/0x%02x, closed=%v", o.term.Layer, o.term.Type, o.term.Code, o.closed)
	case o.closed:
		return "closed, no Terminate"
	}
	return "open"
}

// finish reads what the server sends until it closes: FPDUs other than a
// Terminate are skipped (Read Responses queued before the error), and
// nothing but the close may follow a Terminate.
func (p *peer) finish(d time.Duration) outcome {
	dl := time.Now().Add(d)
	var o outcome
	for {
		r, err := p.next(dl)
		if isClosed(err) {
			o.closed = true
			return o
		}
		if err != nil {
			o.err = err
			return o
		}
		if o.term != nil {
			o.err = fmt.Errorf("%v after the Terminate", r.h.Opcode)
			return o
		}
		if r.h.Opcode == wire.OpTerminate {
			tf, err := wire.ParseTerminate(r.ulpdu[wire.DDPUntaggedHeaderLen:])
			if err != nil {
				o.err = err
				return o
			}
			o.term = &tf
		}
	}
}

// isClosed reports an orderly close or a reset by the server.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err)
}

// closedRaw reads raw bytes until the server closes, for connections that
// never got past MPA: it returns what the server sent first.
func closedRaw(c *net.TCPConn, d time.Duration) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	if isReset(err) {
		err = nil
	}
	return b, err
}

// reset closes c with a TCP RST (SO_LINGER 0).
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	c.Close()
}
