package provider

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/goiwarp/goiwarp/verbs"
)

// Receive side: one goroutine per connected QP reads FPDUs (length, header,
// payload, pad, CRC) and places payload straight from the socket into
// registered memory; headers go through a small buffer. Completions are
// written from this goroutine, after the FPDU's CRC was checked.

// rxReader is the MPA stream: buffered header reads, direct payload reads,
// marker removal and CRC summing.
type rxReader struct {
	c      *net.TCPConn
	buf    []byte
	r, w   int
	crcOn  bool
	crc    uint32
	mk     bool
	pos    uint64 // stream position, counted from the first FPDU
	fstart uint64
}

const rxBufSize = 4096

func (rd *rxReader) raw(dst []byte) error {
	for len(dst) > 0 {
		if rd.r < rd.w {
			k := copy(dst, rd.buf[rd.r:rd.w])
			rd.r += k
			dst = dst[k:]
			continue
		}
		if len(dst) >= 512 {
			n, err := rd.c.Read(dst)
			dst = dst[n:]
			if err != nil && len(dst) > 0 {
				return err
			}
			continue
		}
		n, err := rd.c.Read(rd.buf)
		rd.r, rd.w = 0, n
		if n == 0 && err != nil {
			return err
		}
	}
	return nil
}

// read reads FPDU bytes (not the CRC field) into dst, removing markers.
func (rd *rxReader) read(dst []byte) error {
	for len(dst) > 0 {
		k := len(dst)
		if rd.mk {
			if rd.pos%512 == 0 {
				if err := rd.marker(); err != nil {
					return err
				}
			}
			k = min(k, int(512-rd.pos%512))
		}
		if err := rd.raw(dst[:k]); err != nil {
			return err
		}
		if rd.crcOn {
			rd.crc = wire.CRC32cUpdate(rd.crc, dst[:k])
		}
		rd.pos += uint64(k)
		dst = dst[k:]
	}
	return nil
}

var errMarker = errors.New("marker")

func (rd *rxReader) marker() error {
	var m [4]byte
	if err := rd.raw(m[:]); err != nil {
		return err
	}
	if rd.crcOn {
		rd.crc = wire.CRC32cUpdate(rd.crc, m[:])
	}
	if uint64(binary.BigEndian.Uint16(m[2:])) != rd.pos-rd.fstart {
		return wire.ErrMPAMarker
	}
	rd.pos += 4
	return nil
}

// rxMsg is the untagged message being received into an RQE.
type rxMsg struct {
	active bool
	rqe    verbs.RQE
	spans  [verbs.MaxSGE]verbs.Span
	pinned [verbs.MaxSGE]bool
	cap    int
	placed int
	msn    uint32
}

func (m *rxMsg) release() {
	for i := range m.spans {
		if m.pinned[i] {
			m.spans[i].Release()
			m.pinned[i] = false
		}
	}
	m.active = false
}

type rxAct uint8

const (
	actNone rxAct = iota
	actRecvDone
	actReadDone
	actAtomicDone
	actTerminate
)

type rxState struct {
	e    *Endpoint
	rd   rxReader
	hdr  [2 + wire.DDPUntaggedHeaderLen + wire.AtomicRequestLen]byte
	h    wire.Header
	ulen int
	msn  [5]uint32 // expected MSN per untagged queue
	cur  rxMsg

	act        rxAct
	recvCQE    verbs.CQE
	solicited  bool
	writeBytes uint32 // placed by Writes since the last Immediate Data
	atomicMSN  uint32
	termBody   [64]byte
	termLen    int
	termCtrl   wire.TermControl
}

func (e *Endpoint) startRX() {
	rx := &rxState{e: e, msn: [5]uint32{1, 1, 1, 1, 1}, atomicMSN: 1}
	rx.rd = rxReader{c: e.c, buf: make([]byte, rxBufSize), crcOn: e.neg.crc, mk: e.neg.mkRx}
	go rx.loop()
}

func (rx *rxState) loop() {
	e := rx.e
	defer close(e.rxDone)
	for !e.dead.Load() {
		ti, err := rx.fpdu()
		if err == nil {
			continue
		}
		if ti != nil {
			e.failEv(ti, err, asyncFor(ti.ctrl))
		} else if rx.act == actTerminate {
			e.failEv(nil, err, rx.termAsync())
		} else {
			// EOF, reset, or a local error: the stream is over.
			e.fail(nil, nil)
		}
		break
	}
	rx.cleanup()
	// Wait for the peer's FIN (bounded by fail's read deadline), then close.
	c := e.c
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.Copy(io.Discard, c)
	c.Close()
}

func (rx *rxState) cleanup() {
	rx.cur.release()
	t := &rx.e.tx
	t.mu.Lock()
	ord := t.ord
	t.ord = nil
	t.mu.Unlock()
	for _, o := range ord {
		o.span.Release()
	}
}

func asyncFor(c wire.TermControl) int {
	switch {
	case c.Layer == wire.LayerRDMAP && c.Type == wire.RDMAPErrRemoteProtection,
		c.Layer == wire.LayerDDP && c.Type == wire.DDPErrTaggedBuffer:
		return verbs.EventQPAccessErr
	case c.Layer == wire.LayerDDP && c.Type == wire.DDPErrUntaggedBuffer,
		c.Layer == wire.LayerRDMAP && c.Type == wire.RDMAPErrRemoteOperation:
		return verbs.EventQPReqErr
	}
	return verbs.EventQPFatal
}

// termFor builds the Terminate for a protocol error in the current FPDU.
func (rx *rxState) termFor(err *wire.Error, hdrLen int) (*termInfo, error) {
	hl := min(hdrLen, len(rx.hdr)-2)
	return &termInfo{ctrl: err.Terminate(), segLen: uint16(rx.ulen),
		hdr: append([]byte(nil), rx.hdr[2:2+hl]...)}, err
}

// fpdu reads and processes one FPDU. A protocol error returns the
// Terminate to send.
func (rx *rxState) fpdu() (*termInfo, error) {
	rd := &rx.rd
	e := rx.e
	rd.fstart = rd.pos
	rd.crc = 0
	rx.act = actNone
	hb := rx.hdr[:]
	if err := rd.read(hb[:4]); err != nil {
		if err == wire.ErrMPAMarker {
			return rx.termFor(wire.ErrMPAMarker, 0)
		}
		return nil, err
	}
	rx.ulen = int(binary.BigEndian.Uint16(hb))
	hl, err := wire.HeaderLen(hb[2:4])
	if err != nil {
		return rx.termFor(wire.AsError(err), 2)
	}
	if rx.ulen < hl {
		return rx.termFor(wire.ErrRDMAPLength, 2)
	}
	if err := rd.read(hb[4 : 2+hl]); err != nil {
		if err == wire.ErrMPAMarker {
			return rx.termFor(wire.ErrMPAMarker, hl)
		}
		return nil, err
	}
	h := &rx.h
	if err := wire.ParseHeader(h, hb[2:2+hl], rx.ulen); err != nil {
		return rx.termFor(wire.AsError(err), hl)
	}
	n := rx.ulen - hl
	if werr, err := rx.dispatch(n); werr != nil {
		return rx.termFor(werr, hl)
	} else if err != nil {
		if err == wire.ErrMPAMarker {
			return rx.termFor(wire.ErrMPAMarker, hl)
		}
		return nil, err
	}
	// Trailer: pad, a marker that may precede the CRC, the CRC.
	var tr [8]byte
	pad := (4 - (2+rx.ulen)&3) & 3
	if err := rd.read(tr[:pad]); err != nil {
		return nil, err
	}
	if rd.mk && rd.pos%512 == 0 {
		if err := rd.marker(); err != nil {
			return rx.termFor(wire.ErrMPAMarker, hl)
		}
	}
	if err := rd.raw(tr[4:8]); err != nil {
		return nil, err
	}
	rd.pos += 4
	if rd.crcOn && binary.BigEndian.Uint32(tr[4:]) != rd.crc {
		return rx.termFor(wire.ErrMPACRC, hl)
	}
	if e.awaitRTR.Load() {
		e.established()
	}
	return nil, rx.commit()
}

// commit runs what the FPDU completed, once its CRC was checked.
func (rx *rxState) commit() error {
	e := rx.e
	switch rx.act {
	case actRecvDone:
		rqe := rx.cur.rqe
		rx.cur.release()
		e.completeRecv(&rqe, rx.recvCQE, rx.solicited)
	case actReadDone, actAtomicDone:
		t := &e.tx
		t.mu.Lock()
		o := t.ord[0]
		t.ord[0] = nil
		t.ord = t.ord[1:]
		t.mu.Unlock()
		o.span.Release()
		if !o.rtr {
			e.completeSend(o.idx, verbs.WCSuccess, o.placed)
		}
		t.wake()
	case actTerminate:
		return rx.gotTerminate()
	}
	return nil
}

func taggedErr(err error) *wire.Error {
	mk := func(l wire.Layer, t wire.ErrorType, c wire.ErrorCode, r string) *wire.Error {
		return &wire.Error{Layer: l, Type: t, Code: c, Reason: r}
	}
	switch err {
	case verbs.ErrInvalidSTag:
		return mk(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedInvalidSTag, "invalid STag")
	case verbs.ErrBounds:
		return mk(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedBaseBounds, "base or bounds violation")
	case verbs.ErrWrongPD:
		return mk(wire.LayerRDMAP, wire.RDMAPErrRemoteProtection, wire.RDMAPCodeSTagNotAssociated, "STag not associated")
	}
	return mk(wire.LayerRDMAP, wire.RDMAPErrRemoteProtection, wire.RDMAPCodeAccessRights, "access rights violation")
}

// rdmapProt maps an access error on a Read Request or Atomic Request source.
func rdmapProt(err error) *wire.Error {
	c := wire.RDMAPCodeAccessRights
	switch err {
	case verbs.ErrInvalidSTag:
		c = wire.RDMAPCodeInvalidSTag
	case verbs.ErrBounds:
		c = wire.RDMAPCodeBaseBounds
	case verbs.ErrWrongPD:
		c = wire.RDMAPCodeSTagNotAssociated
	}
	return &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteProtection, Code: c, Reason: err.Error()}
}

var (
	errNoBuffer  = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedNoBuffer, Reason: "no receive buffer posted"}
	errMSN       = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedMSNRange, Reason: "MSN out of range"}
	errMO        = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedInvalidMO, Reason: "unexpected MO"}
	errTooLong   = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedTooLong, Reason: "message too long for the receive buffer"}
	errUnexpOp   = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation, Code: wire.RDMAPCodeUnexpectedOpcode, Reason: "unexpected opcode"}
	errLocalCat  = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrLocalCatastrophic, Code: wire.RDMAPCodeLocalCatastrophic, Reason: "local protection error on a receive buffer"}
	errIRD       = &wire.Error{Layer: wire.LayerDDP, Type: wire.DDPErrUntaggedBuffer, Code: wire.DDPCodeUntaggedMSNRange, Reason: "IRD exceeded"}
	errMisalign  = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteProtection, Code: wire.RDMAPCodeBaseBounds, Reason: "atomic target not 8-byte aligned"}
	errTermShort = &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation, Code: wire.RDMAPCodeCatastrophicStream, Reason: "terminate too long"}
)

// dispatch handles the payload of the current FPDU (n bytes). It returns a
// protocol error (Terminate) or an I/O error.
func (rx *rxState) dispatch(n int) (*wire.Error, error) {
	e := rx.e
	h := &rx.h
	rd := &rx.rd
	switch h.Opcode {
	case wire.OpWrite:
		if n == 0 {
			return nil, nil // zero-length Write (the P2P RTR among them): nothing to check
		}
		sp, err := verbs.Access(e.pd, h.STag, h.TO, uint64(n), verbs.AccessRemoteWrite)
		if err != nil {
			return taggedErr(err), nil
		}
		err = rd.read(sp.Buf)
		sp.Release()
		rx.writeBytes += uint32(n)
		return nil, err

	case wire.OpReadResponse:
		t := &e.tx
		if t.rtrRead && n == 0 && h.Last {
			t.rtrRead = false // the answer to our zero-length Read RTR
			return nil, nil
		}
		t.mu.Lock()
		var o *ordEntry
		if len(t.ord) > 0 {
			o = t.ord[0]
		}
		t.mu.Unlock()
		if o == nil || o.atomic {
			return errUnexpOp, nil
		}
		if n > 0 && h.STag != o.sinkSTag {
			return taggedErr(verbs.ErrInvalidSTag), nil
		}
		if n > 0 && (h.TO < o.sinkTO || h.TO-o.sinkTO != uint64(o.placed) || uint64(o.placed)+uint64(n) > uint64(o.length)) {
			return taggedErr(verbs.ErrBounds), nil
		}
		if n > 0 {
			if err := rd.read(o.span.Buf[o.placed : int(o.placed)+n]); err != nil {
				return nil, err
			}
			o.placed += uint32(n)
		}
		if h.Last {
			rx.act = actReadDone
		}
		return nil, nil

	case wire.OpSend, wire.OpSendInv, wire.OpSendSE, wire.OpSendSEInv:
		return rx.untagged(n)

	case wire.OpImmediate, wire.OpImmediateSE:
		if h.MSN != rx.msn[wire.QNSend] || rx.cur.active {
			return errMSN, nil
		}
		rqe, ok := e.qp.TakeRecv()
		if !ok {
			return errNoBuffer, nil
		}
		rx.msn[wire.QNSend]++
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], h.Immediate)
		rx.cur = rxMsg{active: true, rqe: rqe}
		rx.recvCQE = verbs.CQE{Status: verbs.WCSuccess, Opcode: verbs.WCOpRecvRDMAWImm, ByteLen: rx.writeBytes,
			ImmInv: binary.NativeEndian.Uint32(b[:4]), WCFlags: verbs.WCWithImm}
		rx.writeBytes = 0
		rx.solicited = h.Opcode == wire.OpImmediateSE
		rx.act = actRecvDone
		return nil, nil

	case wire.OpReadRequest:
		if h.MSN != rx.msn[wire.QNReadRequest] {
			return errMSN, nil
		}
		rx.msn[wire.QNReadRequest]++
		t := &e.tx
		t.mu.Lock()
		full := t.irdInUse >= max(int(e.neg.ird), 1)
		if !full {
			t.irdInUse++
		}
		t.mu.Unlock()
		if full {
			return errIRD, nil
		}
		m := &txMsg{kind: kindReadResp, h: wire.Header{Opcode: wire.OpReadResponse, STag: h.SinkSTag},
			baseTO: h.SinkTO, total: int(h.ReadSize)}
		if h.ReadSize > 0 {
			sp, err := verbs.Access(e.pd, h.SrcSTag, h.SrcTO, uint64(h.ReadSize), verbs.AccessRemoteRead)
			if err != nil {
				t.mu.Lock()
				t.irdInUse--
				t.mu.Unlock()
				return rdmapProt(err), nil
			}
			m.spans = []verbs.Span{sp}
			m.data = [][]byte{sp.Buf}
		}
		t.queueInternal(m)
		return nil, nil

	case wire.OpAtomicRequest:
		if h.MSN != rx.msn[wire.QNAtomicRequest] {
			return errMSN, nil
		}
		rx.msn[wire.QNAtomicRequest]++
		t := &e.tx
		t.mu.Lock()
		full := t.irdInUse >= max(int(e.neg.ird), 1)
		if !full {
			t.irdInUse++
		}
		t.mu.Unlock()
		if full {
			return errIRD, nil
		}
		release := func() { t.mu.Lock(); t.irdInUse--; t.mu.Unlock() }
		sp, err := verbs.Access(e.pd, h.RemoteSTag, h.RemoteTO, 8, verbs.AccessRemoteAtomic)
		if err != nil {
			release()
			return rdmapProt(err), nil
		}
		p := unsafe.Pointer(&sp.Buf[0])
		if uintptr(p)%8 != 0 {
			sp.Release()
			release()
			return errMisalign, nil
		}
		orig := doAtomic((*uint64)(p), h)
		sp.Release()
		m := &txMsg{kind: kindAtomicResp, h: wire.Header{Opcode: wire.OpAtomicResponse, Last: true,
			MSN: rx.atomicMSN, AtomicReqID: h.AtomicReqID, OrigValue: orig}}
		rx.atomicMSN++
		t.queueInternal(m)
		return nil, nil

	case wire.OpAtomicResponse:
		t := &e.tx
		t.mu.Lock()
		var o *ordEntry
		if len(t.ord) > 0 {
			o = t.ord[0]
		}
		t.mu.Unlock()
		if o == nil || !o.atomic || o.reqID != h.AtomicReqID {
			return errUnexpOp, nil
		}
		binary.NativeEndian.PutUint64(o.span.Buf[:8], h.OrigValue)
		o.placed = 8
		rx.act = actAtomicDone
		return nil, nil

	case wire.OpTerminate:
		if n > len(rx.termBody)-wire.TermControlLen {
			return errTermShort, nil
		}
		binary.BigEndian.PutUint32(rx.termBody[:4], 0)
		h.Term.Put(rx.termBody[:4])
		if err := rd.read(rx.termBody[4 : 4+n]); err != nil {
			return nil, err
		}
		rx.termLen = 4 + n
		rx.act = actTerminate
		return nil, nil
	}
	return errUnexpOp, nil
}

func doAtomic(p *uint64, h *wire.Header) uint64 {
	switch h.AtomicOp {
	case wire.AtomicFetchAdd:
		return atomic.AddUint64(p, h.AddSwap) - h.AddSwap
	case wire.AtomicCmpSwap, wire.AtomicSwap:
		for {
			old := atomic.LoadUint64(p)
			if h.AtomicOp == wire.AtomicCmpSwap && (old^h.Compare)&h.CompareMask != 0 {
				return old
			}
			nv := old&^h.AddSwapMask | h.AddSwap&h.AddSwapMask
			if atomic.CompareAndSwapUint64(p, old, nv) {
				return old
			}
		}
	}
	return atomic.LoadUint64(p)
}

// untagged places a segment of a Send into the current receive buffer.
func (rx *rxState) untagged(n int) (*wire.Error, error) {
	e := rx.e
	h := &rx.h
	cur := &rx.cur
	if h.MO == 0 {
		if cur.active || h.MSN != rx.msn[wire.QNSend] {
			return errMSN, nil
		}
		if e.awaitRTR.Load() && e.neg.rtr == rtrSend && n == 0 && h.Last {
			rx.msn[wire.QNSend]++ // the zero-length Send RTR
			return nil, nil
		}
		rqe, ok := e.qp.TakeRecv()
		if !ok {
			return errNoBuffer, nil
		}
		*cur = rxMsg{active: true, rqe: rqe, msn: h.MSN}
		for _, s := range rqe.SGEs() {
			cur.cap += int(s.Length)
		}
	} else if !cur.active || h.MSN != cur.msn {
		return errMSN, nil
	} else if int(h.MO) != cur.placed {
		return errMO, nil
	}
	if cur.placed+n > cur.cap {
		rqe := cur.rqe
		cur.release()
		e.completeRecv(&rqe, verbs.CQE{Status: verbs.WCLocLenErr, Opcode: verbs.WCOpRecv}, false)
		return errTooLong, nil
	}
	// Scatter into the SGEs, pinning each on first use.
	off := cur.placed
	left := n
	base := 0
	for i, s := range cur.rqe.SGEs() {
		l := int(s.Length)
		if left == 0 {
			break
		}
		if off >= base+l {
			base += l
			continue
		}
		if !cur.pinned[i] {
			sp, err := verbs.LocalAccess(e.pd, s, true)
			if err != nil {
				rqe := cur.rqe
				cur.release()
				e.completeRecv(&rqe, verbs.CQE{Status: verbs.WCLocProtErr, Opcode: verbs.WCOpRecv}, false)
				return errLocalCat, nil
			}
			cur.spans[i], cur.pinned[i] = sp, true
		}
		o := off - base
		k := min(l-o, left)
		if err := rx.rd.read(cur.spans[i].Buf[o : o+k]); err != nil {
			return nil, err
		}
		off += k
		left -= k
		base += l
	}
	cur.placed = off
	if h.Last {
		rx.msn[wire.QNSend]++
		c := verbs.CQE{Status: verbs.WCSuccess, Opcode: verbs.WCOpRecv, ByteLen: uint32(cur.placed)}
		if h.Opcode == wire.OpSendInv || h.Opcode == wire.OpSendSEInv {
			c.ImmInv = h.InvalidateSTag
			c.WCFlags = verbs.WCWithInv
			if err := verbs.InvalidateSTag(e.pd, h.InvalidateSTag); err != nil {
				return &wire.Error{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation,
					Code: wire.RDMAPCodeCannotInvalidate, Reason: "STag cannot be invalidated"}, nil
			}
		}
		rx.recvCQE = c
		rx.solicited = h.Opcode == wire.OpSendSE || h.Opcode == wire.OpSendSEInv
		rx.act = actRecvDone
	}
	return nil, nil
}

// termStatus maps a received Terminate to the status of the affected WQE.
func termStatus(c wire.TermControl) uint32 {
	switch {
	case c.Layer == wire.LayerRDMAP && c.Type == wire.RDMAPErrRemoteProtection,
		c.Layer == wire.LayerDDP && c.Type == wire.DDPErrTaggedBuffer:
		return verbs.WCRemAccessErr
	case c.Layer == wire.LayerDDP && c.Type == wire.DDPErrUntaggedBuffer:
		return verbs.WCRemInvReqErr
	case c.Layer == wire.LayerRDMAP && c.Type == wire.RDMAPErrRemoteOperation:
		return verbs.WCRemOpErr
	}
	return verbs.WCGeneralErr
}

type termError struct{ f wire.TerminateFields }

func (t *termError) Error() string {
	return "goiwarp: peer sent Terminate (layer " + t.f.Layer.String() + ")"
}

// gotTerminate completes the affected request and takes the QP down.
func (rx *rxState) gotTerminate() error {
	e := rx.e
	f, err := wire.ParseTerminate(rx.termBody[:rx.termLen])
	if err != nil {
		f = wire.TerminateFields{TermControl: wire.TermControl{Layer: wire.LayerRDMAP, Type: wire.RDMAPErrRemoteOperation}}
	}
	t := &e.tx
	t.mu.Lock()
	var o *ordEntry
	if len(t.ord) > 0 {
		o = t.ord[0]
		t.ord = t.ord[1:]
	}
	t.mu.Unlock()
	if o != nil {
		o.span.Release()
		if !o.rtr {
			e.completeSend(o.idx, termStatus(f.TermControl), 0)
		}
	}
	rx.termCtrl = f.TermControl
	return &termError{f}
}

func (rx *rxState) termAsync() int {
	if termStatus(rx.termCtrl) == verbs.WCRemAccessErr {
		return verbs.EventQPAccessErr
	}
	return verbs.EventQPFatal
}
