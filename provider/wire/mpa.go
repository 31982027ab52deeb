package wire

import (
	"encoding/binary"
)

// MPA request/reply frame (RFC 5044, RFC 6581).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Key (16 bytes)                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|M|C|R|H|  Res  |     Rev       |          PD_Length            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~                  Private Data (PD_Length bytes)               ~
const (
	MPAKeyLen         = 16  // length of the key
	MPAHeaderLen      = 20  // key + flags + revision + PD_Length
	MPAMaxPrivateData = 512 // largest PD_Length accepted on receive (RFC 5044)

	mpaFlagsOffset = 16
	mpaRevOffset   = 17
	mpaPDLenOffset = 18
)

// MPA frame keys.
const (
	MPAKeyRequest = "MPA ID Req Frame" // key of the MPA request frame
	MPAKeyReply   = "MPA ID Rep Frame" // key of the MPA reply frame
)

// MPA flag bits in the byte after the key.
const (
	MPAFlagMarkers  = 0x80 // M: markers wanted/used
	MPAFlagCRC      = 0x40 // C: CRC wanted/used
	MPAFlagReject   = 0x20 // R: the responder rejects the connection (reply only)
	MPAFlagEnhanced = 0x10 // H: RFC 6581 enhanced connection establishment (first Res bit)
	MPAFlagsRes     = 0x0f // remaining reserved bits (siw uses 0x08 for its GSO experiment)
)

// MPA revisions.
const (
	MPARevision1 = 1 // RFC 5044
	MPARevision2 = 2 // RFC 6581 enhanced connection establishment
)

// MPAKind says whether an MPA frame is a request or a reply.
type MPAKind uint8

// MPA frame kinds.
const (
	MPARequest MPAKind = iota + 1 // "MPA ID Req Frame"
	MPAReply                      // "MPA ID Rep Frame"
)

// MPAFields are the fields of an MPA request/reply header.
type MPAFields struct {
	Kind           MPAKind
	Markers        bool  // M
	CRC            bool  // C
	Reject         bool  // R
	Enhanced       bool  // H (RFC 6581)
	Res            uint8 // the low four reserved bits, sent as given
	Revision       uint8
	PrivateDataLen uint16
}

// MPAHeader is the 20-byte MPA request/reply header.
type MPAHeader []byte

// Key returns the 16-byte key.
func (h MPAHeader) Key() []byte { return h[:MPAKeyLen] }

// Kind returns MPARequest or MPAReply according to the key, or 0.
func (h MPAHeader) Kind() MPAKind {
	switch string(h[:MPAKeyLen]) {
	case MPAKeyRequest:
		return MPARequest
	case MPAKeyReply:
		return MPAReply
	}
	return 0
}

// Flags returns the flag byte (M, C, R, H, Res).
func (h MPAHeader) Flags() uint8 { return h[mpaFlagsOffset] }

// Markers reports the M bit.
func (h MPAHeader) Markers() bool { return h[mpaFlagsOffset]&MPAFlagMarkers != 0 }

// CRC reports the C bit.
func (h MPAHeader) CRC() bool { return h[mpaFlagsOffset]&MPAFlagCRC != 0 }

// Reject reports the R bit.
func (h MPAHeader) Reject() bool { return h[mpaFlagsOffset]&MPAFlagReject != 0 }

// Enhanced reports the RFC 6581 H bit.
func (h MPAHeader) Enhanced() bool { return h[mpaFlagsOffset]&MPAFlagEnhanced != 0 }

// Revision returns the Rev field.
func (h MPAHeader) Revision() uint8 { return h[mpaRevOffset] }

// PrivateDataLen returns PD_Length.
func (h MPAHeader) PrivateDataLen() uint16 {
	return binary.BigEndian.Uint16(h[mpaPDLenOffset:])
}

// Fields decodes the header without checking it.
func (h MPAHeader) Fields() MPAFields {
	f := h[mpaFlagsOffset]
	return MPAFields{
		Kind:           h.Kind(),
		Markers:        f&MPAFlagMarkers != 0,
		CRC:            f&MPAFlagCRC != 0,
		Reject:         f&MPAFlagReject != 0,
		Enhanced:       f&MPAFlagEnhanced != 0,
		Res:            f & MPAFlagsRes,
		Revision:       h[mpaRevOffset],
		PrivateDataLen: h.PrivateDataLen(),
	}
}

// Encode writes f into the header (which must be MPAHeaderLen long). A Kind
// other than MPAReply writes the request key.
func (h MPAHeader) Encode(f *MPAFields) {
	if f.Kind == MPAReply {
		copy(h, MPAKeyReply)
	} else {
		copy(h, MPAKeyRequest)
	}
	var b uint8
	if f.Markers {
		b |= MPAFlagMarkers
	}
	if f.CRC {
		b |= MPAFlagCRC
	}
	if f.Reject {
		b |= MPAFlagReject
	}
	if f.Enhanced {
		b |= MPAFlagEnhanced
	}
	b |= f.Res & MPAFlagsRes
	h[mpaFlagsOffset] = b
	h[mpaRevOffset] = f.Revision
	binary.BigEndian.PutUint16(h[mpaPDLenOffset:], f.PrivateDataLen)
}

// Check validates a received header: known key, revision 1 or 2, and
// PD_Length at most MPAMaxPrivateData.
func (h MPAHeader) Check() error {
	if len(h) < MPAHeaderLen {
		return ErrShort
	}
	if h.Kind() == 0 {
		return ErrMPABadKey
	}
	if r := h.Revision(); r != MPARevision1 && r != MPARevision2 {
		return ErrMPABadRevision
	}
	if h.PrivateDataLen() > MPAMaxPrivateData {
		return ErrMPAPrivateData
	}
	return nil
}

// ParseMPAHeader checks the 20-byte header at the start of b and returns its
// fields. The private data (f.PrivateDataLen bytes) follows in the stream.
func ParseMPAHeader(b []byte) (MPAFields, error) {
	if len(b) < MPAHeaderLen {
		return MPAFields{}, ErrShort
	}
	h := MPAHeader(b[:MPAHeaderLen])
	if err := h.Check(); err != nil {
		return MPAFields{}, err
	}
	return h.Fields(), nil
}

// ParseMPAFrame parses a complete request/reply frame (header plus private
// data) from the start of b. It returns the fields, the private data (a
// sub-slice of b) and the frame length.
func ParseMPAFrame(b []byte) (f MPAFields, pd []byte, n int, err error) {
	f, err = ParseMPAHeader(b)
	if err != nil {
		return MPAFields{}, nil, 0, err
	}
	n = MPAHeaderLen + int(f.PrivateDataLen)
	if len(b) < n {
		return MPAFields{}, nil, 0, ErrShort
	}
	return f, b[MPAHeaderLen:n], n, nil
}

// MPAFrameLen returns the length of a frame carrying pdLen private data bytes.
func MPAFrameLen(pdLen int) int { return MPAHeaderLen + pdLen }

// EncodeMPAFrame writes a full request/reply/reject frame into dst: the
// header (with PD_Length set to len(pd)) followed by pd. It returns the
// number of bytes written, or ErrShort if dst is too small, or
// ErrMPAPrivateData if pd is longer than 65535.
func EncodeMPAFrame(dst []byte, f *MPAFields, pd []byte) (int, error) {
	if len(pd) > 0xffff {
		return 0, ErrMPAPrivateData
	}
	n := MPAHeaderLen + len(pd)
	if len(dst) < n {
		return 0, ErrShort
	}
	g := *f
	g.PrivateDataLen = uint16(len(pd))
	MPAHeader(dst[:MPAHeaderLen]).Encode(&g)
	copy(dst[MPAHeaderLen:], pd)
	return n, nil
}

// AppendMPAFrame appends a full request/reply/reject frame to dst (see
// EncodeMPAFrame). Private data longer than 65535 bytes is truncated.
func AppendMPAFrame(dst []byte, f *MPAFields, pd []byte) []byte {
	if len(pd) > 0xffff {
		pd = pd[:0xffff]
	}
	start := len(dst)
	dst = append(dst, make([]byte, MPAHeaderLen)...)
	g := *f
	g.PrivateDataLen = uint16(len(pd))
	MPAHeader(dst[start:]).Encode(&g)
	return append(dst, pd...)
}

// MPA v2 (RFC 6581) IRD/ORD header, the first four bytes of the private data
// when the H bit is set.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|B|         IRD               |C|D|          ORD              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A: peer-to-peer, B: zero-length Send RTR, C: zero-length RDMA Write RTR,
// D: zero-length RDMA Read RTR.
const (
	MPAV2ParamsLen  = 4      // length of the IRD/ORD header
	MPAV2PeerToPeer = 0x8000 // in the IRD word
	MPAV2SendRTR    = 0x4000 // in the IRD word: zero-length Send as RTR
	MPAV2WriteRTR   = 0x8000 // in the ORD word: zero-length RDMA Write as RTR
	MPAV2ReadRTR    = 0x4000 // in the ORD word: zero-length RDMA Read as RTR
	MPAV2IRDORDMask = 0x3fff // IRD and ORD are 14-bit values
)

// MPAV2Params is the RFC 6581 IRD/ORD header.
type MPAV2Params struct {
	IRD, ORD   uint16 // 14-bit values
	PeerToPeer bool
	SendRTR    bool // zero-length Send
	WriteRTR   bool // zero-length RDMA Write
	ReadRTR    bool // zero-length RDMA Read
}

// Put writes p into b[:4]. IRD and ORD are masked to 14 bits.
func (p MPAV2Params) Put(b []byte) {
	ird := p.IRD & MPAV2IRDORDMask
	ord := p.ORD & MPAV2IRDORDMask
	if p.PeerToPeer {
		ird |= MPAV2PeerToPeer
	}
	if p.SendRTR {
		ird |= MPAV2SendRTR
	}
	if p.WriteRTR {
		ord |= MPAV2WriteRTR
	}
	if p.ReadRTR {
		ord |= MPAV2ReadRTR
	}
	binary.BigEndian.PutUint16(b[0:], ird)
	binary.BigEndian.PutUint16(b[2:], ord)
}

// ParseMPAV2Params decodes the IRD/ORD header at the start of b.
func ParseMPAV2Params(b []byte) (MPAV2Params, error) {
	if len(b) < MPAV2ParamsLen {
		return MPAV2Params{}, ErrShort
	}
	ird := binary.BigEndian.Uint16(b[0:])
	ord := binary.BigEndian.Uint16(b[2:])
	return MPAV2Params{
		IRD:        ird & MPAV2IRDORDMask,
		ORD:        ord & MPAV2IRDORDMask,
		PeerToPeer: ird&MPAV2PeerToPeer != 0,
		SendRTR:    ird&MPAV2SendRTR != 0,
		WriteRTR:   ord&MPAV2WriteRTR != 0,
		ReadRTR:    ord&MPAV2ReadRTR != 0,
	}, nil
}

// SplitMPAV2PrivateData splits the private data of an enhanced (H bit)
// frame into the IRD/ORD header and the user's private data (a sub-slice).
func SplitMPAV2PrivateData(pd []byte) (MPAV2Params, []byte, error) {
	p, err := ParseMPAV2Params(pd)
	if err != nil {
		return MPAV2Params{}, nil, ErrMPAPrivateData
	}
	return p, pd[MPAV2ParamsLen:], nil
}

// AppendMPAV2PrivateData appends the IRD/ORD header and then user to dst.
func AppendMPAV2PrivateData(dst []byte, p MPAV2Params, user []byte) []byte {
	var b [MPAV2ParamsLen]byte
	p.Put(b[:])
	dst = append(dst, b[:]...)
	return append(dst, user...)
}

// MPA v1 IRD/ORD private data convention of [MS-SMBD] (SMB Direct)
// appendix A: with MPA revision 1 a peer that negotiates IRD/ORD (Windows,
// Chelsio T4/T5 in that mode) puts two 32-bit big-endian words, IRD then
// ORD, in front of the private data. There are no RTR flag bits. The layout
// follows siw's struct mpa_v1_smbd_data.
const MPAV1IRDORDLen = 8

// PutMPAV1IRDORD writes the 8-byte MPA v1 IRD/ORD prefix into b.
func PutMPAV1IRDORD(b []byte, ird, ord uint32) {
	binary.BigEndian.PutUint32(b[0:], ird)
	binary.BigEndian.PutUint32(b[4:], ord)
}

// SplitMPAV1PrivateData splits MPA v1 private data that follows the [MS-SMBD]
// convention into IRD, ORD and the remaining user data (a sub-slice).
func SplitMPAV1PrivateData(pd []byte) (ird, ord uint32, user []byte, err error) {
	if len(pd) < MPAV1IRDORDLen {
		return 0, 0, nil, ErrMPAPrivateData
	}
	return binary.BigEndian.Uint32(pd[0:]), binary.BigEndian.Uint32(pd[4:]), pd[MPAV1IRDORDLen:], nil
}

// AppendMPAV1PrivateData appends the 8-byte MPA v1 IRD/ORD prefix and user.
func AppendMPAV1PrivateData(dst []byte, ird, ord uint32, user []byte) []byte {
	var b [MPAV1IRDORDLen]byte
	PutMPAV1IRDORD(b[:], ird, ord)
	dst = append(dst, b[:]...)
	return append(dst, user...)
}
