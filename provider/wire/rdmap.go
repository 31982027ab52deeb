package wire

import (
	"encoding/binary"
	"strconv"
)

// Opcode is the 4-bit RDMAP opcode (RFC 5040, RFC 7306).
type Opcode uint8

// RDMAP opcodes.
const (
	OpWrite                  Opcode = 0x0 // RDMA Write
	OpReadRequest            Opcode = 0x1 // RDMA Read Request
	OpReadResponse           Opcode = 0x2 // RDMA Read Response
	OpSend                   Opcode = 0x3 // Send
	OpSendInv                Opcode = 0x4 // Send with Invalidate
	OpSendSE                 Opcode = 0x5 // Send with Solicited Event
	OpSendSEInv              Opcode = 0x6 // Send with Solicited Event and Invalidate
	OpTerminate              Opcode = 0x7 // Terminate
	OpImmediate              Opcode = 0x8 // RFC 7306 Immediate Data
	OpImmediateSE            Opcode = 0x9 // RFC 7306 Immediate Data with Solicited Event
	OpAtomicRequest          Opcode = 0xa // RFC 7306 Atomic Request
	OpAtomicResponse         Opcode = 0xb // RFC 7306 Atomic Response
	NumOpcodes                      = 16  // size of the opcode space
	ImmediateDataLen                = 8   // RFC 7306 Immediate Data payload
	ReadRequestLen                  = 28  // RDMA Read Request header after the DDP header
	AtomicRequestLen                = 52  // Atomic Request header after the DDP header
	AtomicResponseLen               = 12  // Atomic Response header after the DDP header
	TermControlLen                  = 4   // Terminate control word
	maxTerminateCopiedHdrLen        = 2 + DDPUntaggedHeaderLen + ReadRequestLen
)

// OpInfo describes one opcode; see Opcode.Info.
type OpInfo struct {
	Name string
	// Valid is false for reserved opcodes.
	Valid bool
	// Tagged is the DDP buffer model the opcode must use.
	Tagged bool
	// QN is the DDP queue number of an untagged opcode.
	QN uint32
	// HeaderLen is the DDP + RDMAP header length (from the DDP control
	// byte, after the MPA ULPDU Length): the bytes the receiver must read
	// before it can place data. It includes the Read Request, Atomic and
	// Terminate control headers and the 8 Immediate Data bytes.
	HeaderLen int
	// Payload is true when data placed into a buffer follows the header.
	// For Terminate, the copied erroneous headers follow (see ParseTerminate).
	Payload bool
	// Exact is true when the ULPDU must be exactly HeaderLen long.
	Exact bool
	// Invalidate is true when RsvdULP carries the Invalidate STag.
	Invalidate bool
	// Solicited is true for the solicited-event variants.
	Solicited bool
}

// opTable is indexed by opcode. It is never written.
var opTable = [NumOpcodes]OpInfo{
	OpWrite:          {Name: "RDMA Write", Valid: true, Tagged: true, HeaderLen: DDPTaggedHeaderLen, Payload: true},
	OpReadRequest:    {Name: "RDMA Read Request", Valid: true, QN: QNReadRequest, HeaderLen: DDPUntaggedHeaderLen + ReadRequestLen, Exact: true},
	OpReadResponse:   {Name: "RDMA Read Response", Valid: true, Tagged: true, HeaderLen: DDPTaggedHeaderLen, Payload: true},
	OpSend:           {Name: "Send", Valid: true, QN: QNSend, HeaderLen: DDPUntaggedHeaderLen, Payload: true},
	OpSendInv:        {Name: "Send with Invalidate", Valid: true, QN: QNSend, HeaderLen: DDPUntaggedHeaderLen, Payload: true, Invalidate: true},
	OpSendSE:         {Name: "Send with SE", Valid: true, QN: QNSend, HeaderLen: DDPUntaggedHeaderLen, Payload: true, Solicited: true},
	OpSendSEInv:      {Name: "Send with SE and Invalidate", Valid: true, QN: QNSend, HeaderLen: DDPUntaggedHeaderLen, Payload: true, Invalidate: true, Solicited: true},
	OpTerminate:      {Name: "Terminate", Valid: true, QN: QNTerminate, HeaderLen: DDPUntaggedHeaderLen + TermControlLen, Payload: true},
	OpImmediate:      {Name: "Immediate Data", Valid: true, QN: QNSend, HeaderLen: DDPUntaggedHeaderLen + ImmediateDataLen, Exact: true},
	OpImmediateSE:    {Name: "Immediate Data with SE", Valid: true, QN: QNSend, HeaderLen: DDPUntaggedHeaderLen + ImmediateDataLen, Exact: true, Solicited: true},
	OpAtomicRequest:  {Name: "Atomic Request", Valid: true, QN: QNAtomicRequest, HeaderLen: DDPUntaggedHeaderLen + AtomicRequestLen, Exact: true},
	OpAtomicResponse: {Name: "Atomic Response", Valid: true, QN: QNAtomicResponse, HeaderLen: DDPUntaggedHeaderLen + AtomicResponseLen, Exact: true},
}

// Info returns the table entry of op (Valid is false for reserved opcodes).
func (op Opcode) Info() OpInfo {
	if int(op) >= NumOpcodes {
		return OpInfo{}
	}
	return opTable[op]
}

// String returns the RFC name of op.
func (op Opcode) String() string {
	if int(op) < NumOpcodes && opTable[op].Valid {
		return opTable[op].Name
	}
	return "Opcode(" + strconv.Itoa(int(op)) + ")"
}

// RDMA Read Request header (RFC 5040), after the untagged DDP header.
//
//	| Data Sink STag (32) | Data Sink Tagged Offset (64) | RDMA Read Message Size (32) |
//	| Data Source STag (32) | Data Source Tagged Offset (64) |
const (
	rrSinkSTagOff = 0
	rrSinkTOOff   = 4
	rrSizeOff     = 12
	rrSrcSTagOff  = 16
	rrSrcTOOff    = 20
)

// ReadRequestFields are the fields of an RDMA Read Request header.
type ReadRequestFields struct {
	SinkSTag uint32
	SinkTO   uint64
	Size     uint32
	SrcSTag  uint32
	SrcTO    uint64
}

// ReadRequest is the RDMA Read Request header (ReadRequestLen bytes).
type ReadRequest []byte

// SinkSTag returns the Data Sink STag.
func (r ReadRequest) SinkSTag() uint32 { return binary.BigEndian.Uint32(r[rrSinkSTagOff:]) }

// SinkTO returns the Data Sink Tagged Offset.
func (r ReadRequest) SinkTO() uint64 { return binary.BigEndian.Uint64(r[rrSinkTOOff:]) }

// Size returns the RDMA Read Message Size.
func (r ReadRequest) Size() uint32 { return binary.BigEndian.Uint32(r[rrSizeOff:]) }

// SrcSTag returns the Data Source STag.
func (r ReadRequest) SrcSTag() uint32 { return binary.BigEndian.Uint32(r[rrSrcSTagOff:]) }

// SrcTO returns the Data Source Tagged Offset.
func (r ReadRequest) SrcTO() uint64 { return binary.BigEndian.Uint64(r[rrSrcTOOff:]) }

// Encode writes f.
func (r ReadRequest) Encode(f *ReadRequestFields) {
	_ = r[ReadRequestLen-1]
	binary.BigEndian.PutUint32(r[rrSinkSTagOff:], f.SinkSTag)
	binary.BigEndian.PutUint64(r[rrSinkTOOff:], f.SinkTO)
	binary.BigEndian.PutUint32(r[rrSizeOff:], f.Size)
	binary.BigEndian.PutUint32(r[rrSrcSTagOff:], f.SrcSTag)
	binary.BigEndian.PutUint64(r[rrSrcTOOff:], f.SrcTO)
}

// AtomicOp is the RFC 7306 atomic operation code (AOpCode).
type AtomicOp uint8

// Atomic operations (RFC 7306).
const (
	AtomicFetchAdd AtomicOp = 0 // FetchAdd: add Add Data (masked by Add Mask)
	AtomicSwap     AtomicOp = 1 // Swap: replace with Swap Data (masked)
	AtomicCmpSwap  AtomicOp = 2 // CmpSwap: swap if Compare Data matches (masked)
	atomicOpMask            = 0x0f
)

// Atomic Request header (RFC 7306), after the untagged DDP header.
//
//	| Reserved (28) | AOpCode (4) | Request Identifier (32) | Remote STag (32) |
//	| Remote Tagged Offset (64) | Add or Swap Data (64) | Add or Swap Mask (64) |
//	| Compare Data (64) | Compare Mask (64) |
const (
	arOpOff        = 0
	arReqIDOff     = 4
	arSTagOff      = 8
	arTOOff        = 12
	arAddSwapOff   = 20
	arAddSwapMOff  = 28
	arCompareOff   = 36
	arCompareMOff  = 44
	arespReqIDOff  = 0
	arespOrigValOf = 4
)

// AtomicRequestFields are the fields of an Atomic Request header.
type AtomicRequestFields struct {
	Op          AtomicOp
	ReqID       uint32
	STag        uint32 // remote STag
	TO          uint64 // remote tagged offset
	AddSwap     uint64 // Add or Swap Data
	AddSwapMask uint64 // Add or Swap Mask
	Compare     uint64 // Compare Data (CmpSwap)
	CompareMask uint64 // Compare Mask (CmpSwap)
}

// AtomicRequest is the Atomic Request header (AtomicRequestLen bytes).
type AtomicRequest []byte

// Op returns AOpCode.
func (a AtomicRequest) Op() AtomicOp { return AtomicOp(a[arOpOff+3] & atomicOpMask) }

// ReqID returns the Request Identifier.
func (a AtomicRequest) ReqID() uint32 { return binary.BigEndian.Uint32(a[arReqIDOff:]) }

// STag returns the Remote STag.
func (a AtomicRequest) STag() uint32 { return binary.BigEndian.Uint32(a[arSTagOff:]) }

// TO returns the Remote Tagged Offset.
func (a AtomicRequest) TO() uint64 { return binary.BigEndian.Uint64(a[arTOOff:]) }

// AddSwap returns Add or Swap Data.
func (a AtomicRequest) AddSwap() uint64 { return binary.BigEndian.Uint64(a[arAddSwapOff:]) }

// AddSwapMask returns Add or Swap Mask.
func (a AtomicRequest) AddSwapMask() uint64 { return binary.BigEndian.Uint64(a[arAddSwapMOff:]) }

// Compare returns Compare Data.
func (a AtomicRequest) Compare() uint64 { return binary.BigEndian.Uint64(a[arCompareOff:]) }

// CompareMask returns Compare Mask.
func (a AtomicRequest) CompareMask() uint64 { return binary.BigEndian.Uint64(a[arCompareMOff:]) }

// Encode writes f (reserved bits zero).
func (a AtomicRequest) Encode(f *AtomicRequestFields) {
	_ = a[AtomicRequestLen-1]
	binary.BigEndian.PutUint32(a[arOpOff:], uint32(f.Op&atomicOpMask))
	binary.BigEndian.PutUint32(a[arReqIDOff:], f.ReqID)
	binary.BigEndian.PutUint32(a[arSTagOff:], f.STag)
	binary.BigEndian.PutUint64(a[arTOOff:], f.TO)
	binary.BigEndian.PutUint64(a[arAddSwapOff:], f.AddSwap)
	binary.BigEndian.PutUint64(a[arAddSwapMOff:], f.AddSwapMask)
	binary.BigEndian.PutUint64(a[arCompareOff:], f.Compare)
	binary.BigEndian.PutUint64(a[arCompareMOff:], f.CompareMask)
}

// AtomicResponse is the Atomic Response header (AtomicResponseLen bytes):
// Original Request Identifier (32) and Original Remote Data Value (64).
type AtomicResponse []byte

// ReqID returns the Original Request Identifier.
func (a AtomicResponse) ReqID() uint32 { return binary.BigEndian.Uint32(a[arespReqIDOff:]) }

// OrigValue returns the Original Remote Data Value.
func (a AtomicResponse) OrigValue() uint64 { return binary.BigEndian.Uint64(a[arespOrigValOf:]) }

// Encode writes the response fields.
func (a AtomicResponse) Encode(reqID uint32, orig uint64) {
	_ = a[AtomicResponseLen-1]
	binary.BigEndian.PutUint32(a[arespReqIDOff:], reqID)
	binary.BigEndian.PutUint64(a[arespOrigValOf:], orig)
}
