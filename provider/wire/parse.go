package wire

import "encoding/binary"

// Header is the flat, decoded form of an FPDU's DDP and RDMAP headers, as
// the receive engine needs it. Fields that do not apply to the opcode are
// zero.
type Header struct {
	Opcode Opcode
	Tagged bool
	Last   bool

	// Tagged buffer model (Write, Read Response).
	STag uint32 // Data Sink STag
	TO   uint64 // Data Sink Tagged Offset

	// Untagged buffer model.
	QN             uint32
	MSN            uint32
	MO             uint32
	InvalidateSTag uint32 // RsvdULP[8:39]: Invalidate STag of the Send-with-Invalidate opcodes

	// RDMA Read Request.
	SinkSTag uint32
	SinkTO   uint64
	ReadSize uint32
	SrcSTag  uint32
	SrcTO    uint64

	// RFC 7306 Atomic Request (also uses AtomicReqID in the response).
	AtomicOp    AtomicOp
	AtomicReqID uint32
	RemoteSTag  uint32
	RemoteTO    uint64
	AddSwap     uint64
	AddSwapMask uint64
	Compare     uint64
	CompareMask uint64
	// RFC 7306 Atomic Response: Original Remote Data Value.
	OrigValue uint64

	// RFC 7306 Immediate Data.
	Immediate uint64

	// Terminate control word (the copied headers are the payload; decode
	// them with ParseTerminate).
	Term TermControl

	// HeaderLen is the header length (from the DDP control byte on).
	HeaderLen int
}

// PayloadLen returns the number of payload bytes that follow the header in
// an FPDU whose ULPDU Length is ulpduLen.
func (h *Header) PayloadLen(ulpduLen int) int { return ulpduLen - h.HeaderLen }

// checkControl validates the DDP and RDMAP control bytes and returns the
// opcode's table entry.
func checkControl(ddp, rdmap byte) (OpInfo, error) {
	tagged := ddp&DDPFlagTagged != 0
	if ddp&DDPVersionMask != DDPVersion {
		if tagged {
			return OpInfo{}, ErrDDPVersionTagged
		}
		return OpInfo{}, ErrDDPVersionUntagged
	}
	if rdmap>>6 != RDMAPVersion {
		return OpInfo{}, ErrRDMAPVersion
	}
	info := opTable[rdmap&RDMAPOpcodeMask]
	if !info.Valid {
		return OpInfo{}, ErrRDMAPOpcode
	}
	if info.Tagged != tagged {
		return OpInfo{}, ErrRDMAPTagged
	}
	return info, nil
}

// HeaderLen returns the length of the header that starts at b[0] (the DDP
// control byte, right after the MPA ULPDU Length). It needs only b[0:2];
// it returns ErrShort for less, and an *Error for a bad DDP or RDMAP
// version, a reserved opcode, or a tagged flag that does not match the
// opcode. The engine reads exactly that many bytes, calls ParseHeader, then
// reads the payload straight into its destination.
func HeaderLen(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, ErrShort
	}
	info, err := checkControl(b[0], b[1])
	if err != nil {
		return 0, err
	}
	return info.HeaderLen, nil
}

// ParseHeader decodes the header at the start of b into h. ulpduLen is the
// ULPDU Length of the FPDU (the value of its MPA length field); it must
// cover the header, and equal it for opcodes without payload. ParseHeader
// does not allocate and reads only b[:h.HeaderLen]. On error h is
// partially written.
func ParseHeader(h *Header, b []byte, ulpduLen int) error {
	if len(b) < 2 {
		return ErrShort
	}
	info, err := checkControl(b[0], b[1])
	if err != nil {
		return err
	}
	if len(b) < info.HeaderLen {
		return ErrShort
	}
	if ulpduLen < info.HeaderLen || (info.Exact && ulpduLen != info.HeaderLen) {
		return ErrRDMAPLength
	}
	*h = Header{
		Opcode:    Opcode(b[1] & RDMAPOpcodeMask),
		Tagged:    info.Tagged,
		Last:      b[0]&DDPFlagLast != 0,
		HeaderLen: info.HeaderLen,
	}
	if info.Tagged {
		t := DDPTagged(b[:DDPTaggedHeaderLen])
		h.STag = t.STag()
		h.TO = t.TO()
		return nil
	}
	u := DDPUntagged(b[:DDPUntaggedHeaderLen])
	h.QN = u.QN()
	h.MSN = u.MSN()
	h.MO = u.MO()
	if info.Invalidate {
		h.InvalidateSTag = u.RsvdULP()
	}
	if h.QN != info.QN {
		return ErrDDPInvalidQN
	}
	if !info.Payload || h.Opcode == OpTerminate {
		// Single-segment messages.
		if h.MO != 0 || !h.Last {
			return ErrDDPInvalidMO
		}
	}
	rest := b[DDPUntaggedHeaderLen:info.HeaderLen]
	switch h.Opcode {
	case OpReadRequest:
		r := ReadRequest(rest)
		h.SinkSTag = r.SinkSTag()
		h.SinkTO = r.SinkTO()
		h.ReadSize = r.Size()
		h.SrcSTag = r.SrcSTag()
		h.SrcTO = r.SrcTO()
	case OpTerminate:
		h.Term, _ = ParseTermControl(rest)
	case OpImmediate, OpImmediateSE:
		h.Immediate = binary.BigEndian.Uint64(rest)
	case OpAtomicRequest:
		a := AtomicRequest(rest)
		h.AtomicOp = a.Op()
		h.AtomicReqID = a.ReqID()
		h.RemoteSTag = a.STag()
		h.RemoteTO = a.TO()
		h.AddSwap = a.AddSwap()
		h.AddSwapMask = a.AddSwapMask()
		h.Compare = a.Compare()
		h.CompareMask = a.CompareMask()
	case OpAtomicResponse:
		a := AtomicResponse(rest)
		h.AtomicReqID = a.ReqID()
		h.OrigValue = a.OrigValue()
	}
	return nil
}

// EncodeHeader writes the header for h.Opcode into b (from the DDP control
// byte on; the caller puts the ULPDU Length in front) and returns its
// length. The queue number comes from the opcode table, h.QN is ignored.
// It does not allocate. It returns ErrRDMAPOpcode for a reserved opcode and
// ErrShort if b is too small.
func EncodeHeader(b []byte, h *Header) (int, error) {
	info := h.Opcode.Info()
	if !info.Valid {
		return 0, ErrRDMAPOpcode
	}
	if len(b) < info.HeaderLen {
		return 0, ErrShort
	}
	if info.Tagged {
		DDPTagged(b[:DDPTaggedHeaderLen]).Encode(&DDPTaggedFields{
			Last: h.Last, Opcode: h.Opcode, STag: h.STag, TO: h.TO,
		})
		return info.HeaderLen, nil
	}
	f := DDPUntaggedFields{Last: h.Last, Opcode: h.Opcode, QN: info.QN, MSN: h.MSN, MO: h.MO}
	if info.Invalidate {
		f.RsvdULP = h.InvalidateSTag
	}
	DDPUntagged(b[:DDPUntaggedHeaderLen]).Encode(&f)
	rest := b[DDPUntaggedHeaderLen:info.HeaderLen]
	switch h.Opcode {
	case OpReadRequest:
		ReadRequest(rest).Encode(&ReadRequestFields{
			SinkSTag: h.SinkSTag, SinkTO: h.SinkTO, Size: h.ReadSize, SrcSTag: h.SrcSTag, SrcTO: h.SrcTO,
		})
	case OpTerminate:
		h.Term.Put(rest)
	case OpImmediate, OpImmediateSE:
		binary.BigEndian.PutUint64(rest, h.Immediate)
	case OpAtomicRequest:
		AtomicRequest(rest).Encode(&AtomicRequestFields{
			Op: h.AtomicOp, ReqID: h.AtomicReqID, STag: h.RemoteSTag, TO: h.RemoteTO,
			AddSwap: h.AddSwap, AddSwapMask: h.AddSwapMask, Compare: h.Compare, CompareMask: h.CompareMask,
		})
	case OpAtomicResponse:
		AtomicResponse(rest).Encode(h.AtomicReqID, h.OrigValue)
	}
	return info.HeaderLen, nil
}

// PutTaggedHeader writes a tagged header (Write or Read Response) into b
// and returns DDPTaggedHeaderLen. It panics if b is too short.
func PutTaggedHeader(b []byte, op Opcode, last bool, stag uint32, to uint64) int {
	DDPTagged(b[:DDPTaggedHeaderLen]).Encode(&DDPTaggedFields{Last: last, Opcode: op, STag: stag, TO: to})
	return DDPTaggedHeaderLen
}

// PutUntaggedHeader writes an untagged DDP header for op (queue number from
// the opcode table) into b and returns DDPUntaggedHeaderLen. rsvdULP is
// the Invalidate STag for the invalidate opcodes, else 0. It panics if b
// is too short.
func PutUntaggedHeader(b []byte, op Opcode, last bool, rsvdULP, msn, mo uint32) int {
	DDPUntagged(b[:DDPUntaggedHeaderLen]).Encode(&DDPUntaggedFields{
		Last: last, Opcode: op, RsvdULP: rsvdULP, QN: op.Info().QN, MSN: msn, MO: mo,
	})
	return DDPUntaggedHeaderLen
}
