package wire

import "encoding/binary"

// Terminate message body (RFC 5040), after the untagged DDP
// header (QN 2, L=1, MO 0):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Layer | EType |  Error Code   |M|D|R|        Reserved         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   DDP Segment Length (if M/D) |  Terminated DDP Header (if D) ~
//	~                 Terminated RDMA Header (if R)                 ~
//
// M: the DDP Segment Length is valid; D: the DDP header (14 bytes tagged,
// 18 untagged, by its T bit) is copied; R: the RDMAP header is copied — for
// an RDMA Read Request that is the 28-byte Read Request header after the
// DDP header, for other opcodes the RDMAP control already sits inside the
// DDP copy. Linux siw sets all three and copies the erroneous FPDU from
// its ULPDU Length field on, which is exactly this layout.
const (
	TermFlagM = 0x80 // in byte 2: DDP Segment Length valid
	TermFlagD = 0x40 // in byte 2: DDP header included
	TermFlagR = 0x20 // in byte 2: RDMAP header included

	// MaxTerminateLen is the longest Terminate body this package writes:
	// control word, segment length, untagged DDP and Read Request headers.
	MaxTerminateLen = TermControlLen + maxTerminateCopiedHdrLen
)

// TermControl is the Terminate control word.
type TermControl struct {
	Layer   Layer
	Type    ErrorType
	Code    ErrorCode
	M, D, R bool
}

// Put writes the control word into b[:4] (reserved bits zero).
func (c TermControl) Put(b []byte) {
	_ = b[3]
	b[0] = byte(c.Layer)<<4 | byte(c.Type)&0x0f
	b[1] = byte(c.Code)
	var f byte
	if c.M {
		f |= TermFlagM
	}
	if c.D {
		f |= TermFlagD
	}
	if c.R {
		f |= TermFlagR
	}
	b[2] = f
	b[3] = 0
}

// ParseTermControl decodes the control word at the start of b.
func ParseTermControl(b []byte) (TermControl, error) {
	if len(b) < TermControlLen {
		return TermControl{}, ErrShort
	}
	return TermControl{
		Layer: Layer(b[0] >> 4),
		Type:  ErrorType(b[0] & 0x0f),
		Code:  ErrorCode(b[1]),
		M:     b[2]&TermFlagM != 0,
		D:     b[2]&TermFlagD != 0,
		R:     b[2]&TermFlagR != 0,
	}, nil
}

// TerminateFields is a decoded Terminate body.
type TerminateFields struct {
	TermControl
	// DDPSegLen is the DDP Segment Length of the erroneous segment
	// (present when M or D is set; meaningful when M is set).
	DDPSegLen uint16
	// DDPHeader is the copied DDP header (a sub-slice), nil unless D.
	DDPHeader []byte
	// RDMAHeader is the copied Read Request header (a sub-slice), nil
	// unless R is set and the copied DDP header is a Read Request.
	RDMAHeader []byte
	// Len is the number of bytes the body occupies.
	Len int
}

// terminateCopyLens returns how many bytes of copied DDP and RDMA header a
// Terminate carries for the given erroneous DDP header start.
func terminateCopyLens(c TermControl, ddp []byte) (ddpLen, rdmaLen int, ok bool) {
	if !c.D {
		return 0, 0, true
	}
	if len(ddp) < 2 {
		return 0, 0, false
	}
	if ddp[0]&DDPFlagTagged != 0 {
		return DDPTaggedHeaderLen, 0, true
	}
	if c.R && Opcode(ddp[1]&RDMAPOpcodeMask) == OpReadRequest {
		return DDPUntaggedHeaderLen, ReadRequestLen, true
	}
	return DDPUntaggedHeaderLen, 0, true
}

// ParseTerminate decodes a Terminate body starting at the control word
// (after the 18-byte untagged DDP header). It does not allocate; the
// returned header slices alias b. Bytes after f.Len are not examined.
func ParseTerminate(b []byte) (f TerminateFields, err error) {
	c, err := ParseTermControl(b)
	if err != nil {
		return f, ErrTerminateFormat
	}
	f.TermControl = c
	n := TermControlLen
	if c.M || c.D {
		if len(b) < n+2 {
			return TerminateFields{}, ErrTerminateFormat
		}
		f.DDPSegLen = binary.BigEndian.Uint16(b[n:])
		n += 2
	}
	dl, rl, ok := terminateCopyLens(c, b[n:])
	if !ok || len(b) < n+dl+rl {
		return TerminateFields{}, ErrTerminateFormat
	}
	if c.D {
		f.DDPHeader = b[n : n+dl]
		n += dl
	}
	if rl > 0 {
		f.RDMAHeader = b[n : n+rl]
		n += rl
	}
	f.Len = n
	return f, nil
}

// EncodeTerminate writes a Terminate body (control word and copies) into
// b and returns its length. hdr is the erroneous segment from its DDP
// control byte on (as received, header bytes only are copied) and segLen
// its DDP Segment Length. With c.D the DDP header is copied from hdr; with
// c.R and a Read Request, the Read Request header is copied too.
func EncodeTerminate(b []byte, c TermControl, segLen uint16, hdr []byte) (int, error) {
	dl, rl, ok := terminateCopyLens(c, hdr)
	if !ok || len(hdr) < dl+rl {
		return 0, ErrShort
	}
	n := TermControlLen
	if c.M || c.D {
		n += 2
	}
	total := n + dl + rl
	if len(b) < total {
		return 0, ErrShort
	}
	c.Put(b)
	if c.M || c.D {
		binary.BigEndian.PutUint16(b[TermControlLen:], segLen)
	}
	copy(b[n:total], hdr[:dl+rl])
	return total, nil
}
