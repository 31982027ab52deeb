package wire

import "encoding/binary"

// DDP segment headers (RFC 5041) with the RDMAP control byte
// (RFC 5040) in the first byte of RsvdULP.
//
// Tagged (14 bytes):
//
//	|T|L| Rsvd  |DV |RV |R| Opcode|          Data Sink STag ...
//	|        ... STag               |   Data Sink Tagged Offset (64) ...
//
// Untagged (18 bytes):
//
//	|T|L| Rsvd  |DV |RV |R| Opcode|   RsvdULP[8:39] (32 bits) ...
//	| ... | Queue Number (32) | Message Sequence Number (32) | Message Offset (32) |
const (
	DDPTaggedHeaderLen   = 14 // tagged DDP header incl. RDMAP control byte
	DDPUntaggedHeaderLen = 18 // untagged DDP header incl. RDMAP control and RsvdULP

	DDPFlagTagged   = 0x80 // T
	DDPFlagLast     = 0x40 // L
	DDPReservedMask = 0x3c // reserved bits of the DDP control byte
	DDPVersionMask  = 0x03 // DV
	DDPVersion      = 1    // the only DDP version

	RDMAPVersionMask  = 0xc0 // RV, top two bits of the RDMAP control byte
	RDMAPReservedMask = 0x30 // reserved bits of the RDMAP control byte
	RDMAPOpcodeMask   = 0x0f // opcode
	RDMAPVersion      = 1    // the only RDMAP version

	ddpCtrlOffset   = 0
	rdmapCtrlOffset = 1
	taggedSTagOff   = 2
	taggedTOOff     = 6
	untagRsvdOff    = 2
	untagQNOff      = 6
	untagMSNOff     = 10
	untagMOOff      = 14
)

// DDP queue numbers (RFC 5040, RFC 7306). The two atomic queue numbers
// follow RFC 7306's table of RDMA message definitions (requests on 3,
// responses on 4).
const (
	QNSend           = 0 // Send, Send with Invalidate/SE, Immediate Data
	QNReadRequest    = 1 // RDMA Read Request
	QNTerminate      = 2 // Terminate
	QNAtomicRequest  = 3 // RFC 7306 Atomic Request
	QNAtomicResponse = 4 // RFC 7306 Atomic Response
)

// ddpControl builds the DDP control byte.
func ddpControl(tagged, last bool) byte {
	b := byte(DDPVersion)
	if tagged {
		b |= DDPFlagTagged
	}
	if last {
		b |= DDPFlagLast
	}
	return b
}

// rdmapControl builds the RDMAP control byte.
func rdmapControl(op Opcode) byte {
	return RDMAPVersion<<6 | byte(op)&RDMAPOpcodeMask
}

// DDPTaggedFields are the fields of a tagged DDP segment header.
type DDPTaggedFields struct {
	Last   bool
	Opcode Opcode
	STag   uint32
	TO     uint64
}

// DDPTagged is a tagged DDP segment header (DDPTaggedHeaderLen bytes).
type DDPTagged []byte

// Tagged reports the T bit (set for a well-formed tagged header).
func (h DDPTagged) Tagged() bool { return h[ddpCtrlOffset]&DDPFlagTagged != 0 }

// Last reports the L bit.
func (h DDPTagged) Last() bool { return h[ddpCtrlOffset]&DDPFlagLast != 0 }

// Version returns DV.
func (h DDPTagged) Version() uint8 { return h[ddpCtrlOffset] & DDPVersionMask }

// RDMAPVersion returns RV.
func (h DDPTagged) RDMAPVersion() uint8 { return h[rdmapCtrlOffset] >> 6 }

// Opcode returns the RDMAP opcode.
func (h DDPTagged) Opcode() Opcode { return Opcode(h[rdmapCtrlOffset] & RDMAPOpcodeMask) }

// STag returns the Data Sink STag.
func (h DDPTagged) STag() uint32 { return binary.BigEndian.Uint32(h[taggedSTagOff:]) }

// TO returns the Data Sink Tagged Offset.
func (h DDPTagged) TO() uint64 { return binary.BigEndian.Uint64(h[taggedTOOff:]) }

// Encode writes f with T=1, DV=1 and RV=1.
func (h DDPTagged) Encode(f *DDPTaggedFields) {
	_ = h[DDPTaggedHeaderLen-1]
	h[ddpCtrlOffset] = ddpControl(true, f.Last)
	h[rdmapCtrlOffset] = rdmapControl(f.Opcode)
	binary.BigEndian.PutUint32(h[taggedSTagOff:], f.STag)
	binary.BigEndian.PutUint64(h[taggedTOOff:], f.TO)
}

// DDPUntaggedFields are the fields of an untagged DDP segment header.
type DDPUntaggedFields struct {
	Last    bool
	Opcode  Opcode
	RsvdULP uint32 // RsvdULP[8:39]: the Invalidate STag for Send with Invalidate, else 0
	QN      uint32
	MSN     uint32
	MO      uint32
}

// DDPUntagged is an untagged DDP segment header (DDPUntaggedHeaderLen bytes).
type DDPUntagged []byte

// Tagged reports the T bit (clear for a well-formed untagged header).
func (h DDPUntagged) Tagged() bool { return h[ddpCtrlOffset]&DDPFlagTagged != 0 }

// Last reports the L bit.
func (h DDPUntagged) Last() bool { return h[ddpCtrlOffset]&DDPFlagLast != 0 }

// Version returns DV.
func (h DDPUntagged) Version() uint8 { return h[ddpCtrlOffset] & DDPVersionMask }

// RDMAPVersion returns RV.
func (h DDPUntagged) RDMAPVersion() uint8 { return h[rdmapCtrlOffset] >> 6 }

// Opcode returns the RDMAP opcode.
func (h DDPUntagged) Opcode() Opcode { return Opcode(h[rdmapCtrlOffset] & RDMAPOpcodeMask) }

// RsvdULP returns RsvdULP[8:39] (the Invalidate STag of Send with Invalidate).
func (h DDPUntagged) RsvdULP() uint32 { return binary.BigEndian.Uint32(h[untagRsvdOff:]) }

// QN returns the queue number.
func (h DDPUntagged) QN() uint32 { return binary.BigEndian.Uint32(h[untagQNOff:]) }

// MSN returns the message sequence number.
func (h DDPUntagged) MSN() uint32 { return binary.BigEndian.Uint32(h[untagMSNOff:]) }

// MO returns the message offset.
func (h DDPUntagged) MO() uint32 { return binary.BigEndian.Uint32(h[untagMOOff:]) }

// Encode writes f with T=0, DV=1 and RV=1.
func (h DDPUntagged) Encode(f *DDPUntaggedFields) {
	_ = h[DDPUntaggedHeaderLen-1]
	h[ddpCtrlOffset] = ddpControl(false, f.Last)
	h[rdmapCtrlOffset] = rdmapControl(f.Opcode)
	binary.BigEndian.PutUint32(h[untagRsvdOff:], f.RsvdULP)
	binary.BigEndian.PutUint32(h[untagQNOff:], f.QN)
	binary.BigEndian.PutUint32(h[untagMSNOff:], f.MSN)
	binary.BigEndian.PutUint32(h[untagMOOff:], f.MO)
}

// Check validates the header's control bytes as a receiver must: DDP and
// RDMAP versions 1, a defined opcode, and a tagged opcode.
func (h DDPTagged) Check() error {
	if len(h) < DDPTaggedHeaderLen {
		return ErrShort
	}
	if _, err := checkControl(h[ddpCtrlOffset], h[rdmapCtrlOffset]); err != nil {
		return err
	}
	if !h.Tagged() {
		return ErrRDMAPTagged
	}
	return nil
}

// Check validates the header's control bytes as a receiver must: DDP and
// RDMAP versions 1, a defined opcode, an untagged opcode, and the queue
// number that opcode uses.
func (h DDPUntagged) Check() error {
	if len(h) < DDPUntaggedHeaderLen {
		return ErrShort
	}
	info, err := checkControl(h[ddpCtrlOffset], h[rdmapCtrlOffset])
	if err != nil {
		return err
	}
	if h.Tagged() {
		return ErrRDMAPTagged
	}
	if h.QN() != info.QN {
		return ErrDDPInvalidQN
	}
	return nil
}
