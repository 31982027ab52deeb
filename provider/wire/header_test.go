package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// headerVectors are DDP/RDMAP headers worked out from the RFC figures
// (bytes from the DDP control byte on). Where payload follows, ulpdu is
// larger than the header.
var headerVectors = []struct {
	name  string
	wire  []byte
	ulpdu int
	want  Header
}{
	{
		name: "RDMA Write, tagged (RFC 5040, RFC 5041)",
		wire: cat(
			[]byte{0xc1},                   // DDP control: T=1 L=1 Rsvd=0 DV=1
			[]byte{0x40},                   // RDMAP control: RV=1 Rsvd=0 Opcode=0 (Write)
			[]byte{0x00, 0x00, 0x00, 0x01}, // Data Sink STag
			[]byte{0, 0, 0, 0, 0, 0, 0, 0}, // Data Sink Tagged Offset
		),
		ulpdu: 14,
		want:  Header{Opcode: OpWrite, Tagged: true, Last: true, STag: 1, HeaderLen: 14},
	},
	{
		name: "RDMA Read Response, tagged, not last",
		wire: cat(
			[]byte{0x81},                   // T=1 L=0 DV=1
			[]byte{0x42},                   // RV=1 Opcode=2
			[]byte{0x4a, 0x5e, 0xb1, 0x00}, // Data Sink STag
			[]byte{0x00, 0x00, 0x55, 0x6d, 0xe7, 0x0d, 0xa5, 0x50}, // Data Sink TO
		),
		ulpdu: 14 + 1428,
		want:  Header{Opcode: OpReadResponse, Tagged: true, STag: 0x4a5eb100, TO: 0x0000556de70da550, HeaderLen: 14},
	},
	{
		name: "Send, untagged (RFC 5040)",
		wire: cat(
			[]byte{0x41},                   // T=0 L=1 DV=1
			[]byte{0x43},                   // RV=1 Opcode=3 (Send)
			[]byte{0x00, 0x00, 0x00, 0x00}, // RsvdULP[8:39]
			[]byte{0x00, 0x00, 0x00, 0x00}, // QN = 0
			[]byte{0x00, 0x00, 0x00, 0x01}, // MSN = 1
			[]byte{0x00, 0x00, 0x00, 0x00}, // MO = 0
		),
		ulpdu: 18 + 16,
		want:  Header{Opcode: OpSend, Last: true, MSN: 1, HeaderLen: 18},
	},
	{
		name: "Send with SE and Invalidate, middle segment",
		wire: cat(
			[]byte{0x01},                   // T=0 L=0 DV=1
			[]byte{0x46},                   // RV=1 Opcode=6
			[]byte{0x12, 0x34, 0x56, 0x78}, // Invalidate STag
			[]byte{0x00, 0x00, 0x00, 0x00}, // QN = 0
			[]byte{0x00, 0x00, 0x00, 0x07}, // MSN = 7
			[]byte{0x00, 0x00, 0x10, 0x00}, // MO = 4096
		),
		ulpdu: 18 + 100,
		want:  Header{Opcode: OpSendSEInv, MSN: 7, MO: 4096, InvalidateSTag: 0x12345678, HeaderLen: 18},
	},
	{
		name: "RDMA Read Request (RFC 5040), as siw sent it",
		wire: cat(
			[]byte{0x41},                                           // T=0 L=1 DV=1
			[]byte{0x41},                                           // RV=1 Opcode=1
			[]byte{0x00, 0x00, 0x00, 0x00},                         // RsvdULP
			[]byte{0x00, 0x00, 0x00, 0x01},                         // QN = 1
			[]byte{0x00, 0x00, 0x00, 0x01},                         // MSN = 1
			[]byte{0x00, 0x00, 0x00, 0x00},                         // MO = 0
			[]byte{0x4a, 0x5e, 0xb1, 0x00},                         // Data Sink STag
			[]byte{0x00, 0x00, 0x55, 0x6d, 0xe7, 0x0d, 0xa5, 0x50}, // Data Sink TO
			[]byte{0x00, 0x00, 0x00, 0x40},                         // RDMA Read Message Size = 64
			[]byte{0x4d, 0x44, 0x32, 0x00},                         // Data Source STag
			[]byte{0x00, 0x00, 0x56, 0x53, 0xc1, 0xee, 0x23, 0x70}, // Data Source TO
		),
		ulpdu: 46,
		want: Header{Opcode: OpReadRequest, Last: true, QN: 1, MSN: 1, HeaderLen: 46,
			SinkSTag: 0x4a5eb100, SinkTO: 0x0000556de70da550, ReadSize: 64,
			SrcSTag: 0x4d443200, SrcTO: 0x00005653c1ee2370},
	},
	{
		name: "Terminate (RFC 5040): DDP untagged invalid QN, M D R",
		wire: cat(
			[]byte{0x41},                   // T=0 L=1 DV=1
			[]byte{0x47},                   // RV=1 Opcode=7
			[]byte{0x00, 0x00, 0x00, 0x00}, // RsvdULP
			[]byte{0x00, 0x00, 0x00, 0x02}, // QN = 2
			[]byte{0x00, 0x00, 0x00, 0x01}, // MSN = 1
			[]byte{0x00, 0x00, 0x00, 0x00}, // MO = 0
			[]byte{0x12},                   // Layer=1 (DDP) EType=2 (untagged buffer)
			[]byte{0x01},                   // Error Code = invalid QN
			[]byte{0xe0, 0x00},             // M=1 D=1 R=1 Reserved
		),
		ulpdu: 22 + 20,
		want: Header{Opcode: OpTerminate, Last: true, QN: 2, MSN: 1, HeaderLen: 22,
			Term: TermControl{Layer: LayerDDP, Type: DDPErrUntaggedBuffer, Code: DDPCodeUntaggedInvalidQN, M: true, D: true, R: true}},
	},
	{
		name: "Immediate Data with SE (RFC 7306)",
		wire: cat(
			[]byte{0x41},                                           // T=0 L=1 DV=1
			[]byte{0x49},                                           // RV=1 Opcode=9
			[]byte{0x00, 0x00, 0x00, 0x00},                         // RsvdULP
			[]byte{0x00, 0x00, 0x00, 0x00},                         // QN = 0
			[]byte{0x00, 0x00, 0x00, 0x05},                         // MSN = 5
			[]byte{0x00, 0x00, 0x00, 0x00},                         // MO = 0
			[]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}, // Immediate Data
		),
		ulpdu: 26,
		want:  Header{Opcode: OpImmediateSE, Last: true, MSN: 5, Immediate: 0x0102030405060708, HeaderLen: 26},
	},
	{
		name: "Atomic Request CmpSwap (RFC 7306)",
		wire: cat(
			[]byte{0x41},                                           // T=0 L=1 DV=1
			[]byte{0x4a},                                           // RV=1 Opcode=10
			[]byte{0x00, 0x00, 0x00, 0x00},                         // RsvdULP
			[]byte{0x00, 0x00, 0x00, 0x03},                         // QN = 3
			[]byte{0x00, 0x00, 0x00, 0x02},                         // MSN = 2
			[]byte{0x00, 0x00, 0x00, 0x00},                         // MO = 0
			[]byte{0x00, 0x00, 0x00, 0x02},                         // Reserved, AOpCode = 2 (CmpSwap)
			[]byte{0xde, 0xad, 0xbe, 0xef},                         // Request Identifier
			[]byte{0x00, 0x00, 0x22, 0x00},                         // Remote STag
			[]byte{0, 0, 0, 0, 0, 0, 0x10, 0x08},                   // Remote Tagged Offset
			[]byte{0, 0, 0, 0, 0, 0, 0, 0x2a},                      // Swap Data
			[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // Swap Mask
			[]byte{0, 0, 0, 0, 0, 0, 0, 0x07},                      // Compare Data
			[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // Compare Mask
		),
		ulpdu: 70,
		want: Header{Opcode: OpAtomicRequest, Last: true, QN: 3, MSN: 2, HeaderLen: 70,
			AtomicOp: AtomicCmpSwap, AtomicReqID: 0xdeadbeef, RemoteSTag: 0x2200, RemoteTO: 0x1008,
			AddSwap: 42, AddSwapMask: ^uint64(0), Compare: 7, CompareMask: ^uint64(0)},
	},
	{
		name: "Atomic Response (RFC 7306)",
		wire: cat(
			[]byte{0x41},                      // T=0 L=1 DV=1
			[]byte{0x4b},                      // RV=1 Opcode=11
			[]byte{0x00, 0x00, 0x00, 0x00},    // RsvdULP
			[]byte{0x00, 0x00, 0x00, 0x04},    // QN = 4
			[]byte{0x00, 0x00, 0x00, 0x02},    // MSN = 2
			[]byte{0x00, 0x00, 0x00, 0x00},    // MO = 0
			[]byte{0xde, 0xad, 0xbe, 0xef},    // Original Request Identifier
			[]byte{0, 0, 0, 0, 0, 0, 0, 0x07}, // Original Remote Data Value
		),
		ulpdu: 30,
		want:  Header{Opcode: OpAtomicResponse, Last: true, QN: 4, MSN: 2, HeaderLen: 30, AtomicReqID: 0xdeadbeef, OrigValue: 7},
	},
}

func TestHeaderGolden(t *testing.T) {
	for _, tc := range headerVectors {
		t.Run(tc.name, func(t *testing.T) {
			require.Len(t, tc.wire, tc.want.HeaderLen)
			n, err := HeaderLen(tc.wire)
			require.NoError(t, err)
			assert.Equal(t, len(tc.wire), n)
			assert.Equal(t, n, tc.want.Opcode.Info().HeaderLen)

			var h Header
			require.NoError(t, ParseHeader(&h, tc.wire, tc.ulpdu))
			assert.Equal(t, tc.want, h)
			assert.Equal(t, tc.ulpdu-n, h.PayloadLen(tc.ulpdu))

			buf := make([]byte, 128)
			m, err := EncodeHeader(buf, &tc.want)
			require.NoError(t, err)
			assert.Equal(t, tc.wire, buf[:m])

			// Every truncated prefix is rejected.
			for i := 0; i < len(tc.wire); i++ {
				err := ParseHeader(&h, tc.wire[:i], tc.ulpdu)
				assert.ErrorIs(t, err, ErrShort, "prefix %d", i)
				if i < 2 {
					_, err = HeaderLen(tc.wire[:i])
					assert.ErrorIs(t, err, ErrShort)
				}
				_, err = EncodeHeader(buf[:i], &tc.want)
				assert.ErrorIs(t, err, ErrShort)
			}
			// A ULPDU shorter than the header is an error.
			assert.ErrorIs(t, ParseHeader(&h, tc.wire, n-1), ErrRDMAPLength)
		})
	}
}

func TestTypedHeaders(t *testing.T) {
	w := headerVectors[1].wire
	tg := DDPTagged(w)
	assert.True(t, tg.Tagged())
	assert.False(t, tg.Last())
	assert.Equal(t, uint8(1), tg.Version())
	assert.Equal(t, uint8(1), tg.RDMAPVersion())
	assert.Equal(t, OpReadResponse, tg.Opcode())

	u := DDPUntagged(headerVectors[3].wire)
	assert.False(t, u.Tagged())
	assert.False(t, u.Last())
	assert.Equal(t, uint8(1), u.Version())
	assert.Equal(t, uint8(1), u.RDMAPVersion())
	assert.Equal(t, OpSendSEInv, u.Opcode())
	assert.Equal(t, uint32(0x12345678), u.RsvdULP())
	assert.Equal(t, uint32(0), u.QN())
	assert.Equal(t, uint32(7), u.MSN())
	assert.Equal(t, uint32(4096), u.MO())

	assert.NoError(t, tg.Check())
	assert.NoError(t, u.Check())
	assert.ErrorIs(t, DDPTagged(headerVectors[2].wire[:14]).Check(), ErrRDMAPTagged)
	assert.ErrorIs(t, DDPUntagged(headerVectors[4].wire[:17]).Check(), ErrShort)
	assert.ErrorIs(t, DDPTagged(headerVectors[0].wire[:13]).Check(), ErrShort)
	assert.ErrorIs(t, DDPUntagged(cat([]byte{0x41, 0x41}, headerVectors[2].wire[2:])).Check(), ErrDDPInvalidQN)
	assert.ErrorIs(t, DDPUntagged(cat([]byte{0x42, 0x43}, headerVectors[2].wire[2:])).Check(), ErrDDPVersionUntagged)

	b := make([]byte, 18)
	assert.Equal(t, 14, PutTaggedHeader(b, OpWrite, true, 1, 0))
	assert.Equal(t, headerVectors[0].wire, b[:14])
	assert.Equal(t, 18, PutUntaggedHeader(b, OpSend, true, 0, 1, 0))
	assert.Equal(t, headerVectors[2].wire, b)

	rr := ReadRequest(headerVectors[4].wire[18:])
	assert.Equal(t, uint32(0x4a5eb100), rr.SinkSTag())
	assert.Equal(t, uint64(0x0000556de70da550), rr.SinkTO())
	assert.Equal(t, uint32(64), rr.Size())
	assert.Equal(t, uint32(0x4d443200), rr.SrcSTag())
	assert.Equal(t, uint64(0x00005653c1ee2370), rr.SrcTO())

	ar := AtomicRequest(headerVectors[7].wire[18:])
	assert.Equal(t, AtomicCmpSwap, ar.Op())
	assert.Equal(t, uint32(0xdeadbeef), ar.ReqID())
	assert.Equal(t, uint32(0x2200), ar.STag())
	assert.Equal(t, uint64(0x1008), ar.TO())
	assert.Equal(t, uint64(42), ar.AddSwap())
	assert.Equal(t, ^uint64(0), ar.AddSwapMask())
	assert.Equal(t, uint64(7), ar.Compare())
	assert.Equal(t, ^uint64(0), ar.CompareMask())

	resp := AtomicResponse(headerVectors[8].wire[18:])
	assert.Equal(t, uint32(0xdeadbeef), resp.ReqID())
	assert.Equal(t, uint64(7), resp.OrigValue())
}

func TestOpcodeTable(t *testing.T) {
	for op := Opcode(0); op < NumOpcodes; op++ {
		info := op.Info()
		if op > OpAtomicResponse {
			assert.False(t, info.Valid, "%d", op)
			assert.Equal(t, "Opcode("+string(rune('0'+op/10))+string(rune('0'+op%10))+")", op.String())
			continue
		}
		assert.True(t, info.Valid)
		assert.Equal(t, info.Name, op.String())
		if info.Tagged {
			assert.Equal(t, DDPTaggedHeaderLen, info.HeaderLen)
		} else {
			assert.GreaterOrEqual(t, info.HeaderLen, DDPUntaggedHeaderLen)
		}
	}
	assert.False(t, Opcode(200).Info().Valid)
	assert.Equal(t, uint32(QNReadRequest), OpReadRequest.Info().QN)
	assert.Equal(t, uint32(QNTerminate), OpTerminate.Info().QN)
	assert.Equal(t, uint32(QNAtomicRequest), OpAtomicRequest.Info().QN)
	assert.Equal(t, uint32(QNAtomicResponse), OpAtomicResponse.Info().QN)
	assert.True(t, OpSendInv.Info().Invalidate)
	assert.True(t, OpSendSE.Info().Solicited)
	_, err := EncodeHeader(make([]byte, 64), &Header{Opcode: 0xc})
	assert.ErrorIs(t, err, ErrRDMAPOpcode)
}

func TestParseHeaderErrors(t *testing.T) {
	send := headerVectors[2].wire
	rreq := headerVectors[4].wire
	write := headerVectors[0].wire
	with := func(src []byte, i int, v byte) []byte {
		b := append([]byte(nil), src...)
		b[i] = v
		return b
	}
	for _, tc := range []struct {
		name  string
		in    []byte
		ulpdu int
		err   *Error
	}{
		{"DDP version 0 untagged", with(send, 0, 0x40), 18, ErrDDPVersionUntagged},
		{"DDP version 2 tagged", with(write, 0, 0xc2), 14, ErrDDPVersionTagged},
		{"RDMAP version 0", with(send, 1, 0x03), 18, ErrRDMAPVersion},
		{"RDMAP version 2", with(send, 1, 0x83), 18, ErrRDMAPVersion},
		{"reserved opcode 0xc", with(send, 1, 0x4c), 18, ErrRDMAPOpcode},
		{"reserved opcode 0xf", with(write, 1, 0x4f), 14, ErrRDMAPOpcode},
		{"Send marked tagged", with(send, 0, 0xc1), 18, ErrRDMAPTagged},
		{"Write marked untagged", with(cat(write, make([]byte, 4)), 0, 0x41), 18, ErrRDMAPTagged},
		{"Send on queue 1", with(send, 9, 1), 18, ErrDDPInvalidQN},
		{"Read Request on queue 0", with(rreq, 9, 0), 46, ErrDDPInvalidQN},
		{"Read Request with MO", with(rreq, 17, 4), 46, ErrDDPInvalidMO},
		{"Read Request not last", with(rreq, 0, 0x01), 46, ErrDDPInvalidMO},
		{"Read Request with payload", rreq, 50, ErrRDMAPLength},
		{"ULPDU shorter than header", send, 17, ErrRDMAPLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Header
			err := ParseHeader(&h, tc.in, tc.ulpdu)
			require.ErrorIs(t, err, tc.err)
			e := AsError(err)
			require.NotNil(t, e)
			assert.Equal(t, tc.err.Terminate(), e.Terminate())
			assert.NotEmpty(t, e.Error())
		})
	}
	// HeaderLen reports the control-byte errors too.
	_, err := HeaderLen([]byte{0x41, 0x4d})
	assert.ErrorIs(t, err, ErrRDMAPOpcode)
	assert.Nil(t, AsError(ErrShort))
}

func TestParseHeaderAllocs(t *testing.T) {
	var h Header
	buf := make([]byte, 128)
	for _, tc := range headerVectors {
		allocs := testing.AllocsPerRun(100, func() {
			_ = ParseHeader(&h, tc.wire, tc.ulpdu)
			_, _ = EncodeHeader(buf, &tc.want)
			_, _ = HeaderLen(tc.wire)
		})
		assert.Zero(t, allocs, tc.name)
	}
}
