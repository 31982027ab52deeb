package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var terminateVectors = []struct {
	name   string
	ctrl   TermControl
	segLen uint16
	hdr    []byte // erroneous segment from its DDP control byte
	wire   []byte
	ddp    int // copied DDP header length
	rdma   int // copied RDMA header length
}{
	{
		name:   "RDMAP remote protection, invalid STag, Read Request copied (M D R)",
		ctrl:   TermControl{Layer: LayerRDMAP, Type: RDMAPErrRemoteProtection, Code: RDMAPCodeInvalidSTag, M: true, D: true, R: true},
		segLen: 46,
		hdr:    headerVectors[4].wire,
		wire: cat(
			[]byte{0x01},          // Layer=0 (RDMAP) EType=1 (remote protection)
			[]byte{0x00},          // Error Code = invalid STag
			[]byte{0xe0, 0x00},    // M D R, Reserved
			[]byte{0x00, 0x2e},    // DDP Segment Length = 46
			headerVectors[4].wire, // Terminated DDP Header (18) + Terminated RDMA Header (28)
		),
		ddp: 18, rdma: 28,
	},
	{
		name:   "DDP tagged base/bounds, Write header copied (M D)",
		ctrl:   TermControl{Layer: LayerDDP, Type: DDPErrTaggedBuffer, Code: DDPCodeTaggedBaseBounds, M: true, D: true},
		segLen: 1442,
		hdr:    cat(headerVectors[1].wire, []byte{1, 2, 3, 4}), // payload is not copied
		wire: cat(
			[]byte{0x11},       // Layer=1 (DDP) EType=1 (tagged buffer)
			[]byte{0x01},       // Error Code = base or bounds violation
			[]byte{0xc0, 0x00}, // M D
			[]byte{0x05, 0xa2}, // DDP Segment Length = 1442
			headerVectors[1].wire,
		),
		ddp: 14,
	},
	{
		name:   "RDMAP unexpected opcode on a Send, R without Read Request",
		ctrl:   TermControl{Layer: LayerRDMAP, Type: RDMAPErrRemoteOperation, Code: RDMAPCodeUnexpectedOpcode, M: true, D: true, R: true},
		segLen: 34,
		hdr:    headerVectors[2].wire,
		wire: cat(
			[]byte{0x02},       // Layer=0 EType=2 (remote operation)
			[]byte{0x06},       // unexpected opcode
			[]byte{0xe0, 0x00}, // M D R
			[]byte{0x00, 0x22}, // DDP Segment Length = 34
			headerVectors[2].wire,
		),
		ddp: 18,
	},
	{
		name: "MPA CRC error, nothing copied",
		ctrl: TermControl{Layer: LayerLLP, Type: LLPErrMPA, Code: MPACodeCRC},
		wire: []byte{
			0x20,       // Layer=2 (LLP) EType=0 (MPA)
			0x02,       // CRC error
			0x00, 0x00, // no M D R
		},
	},
}

func TestTerminateGolden(t *testing.T) {
	for _, tc := range terminateVectors {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, MaxTerminateLen)
			n, err := EncodeTerminate(buf, tc.ctrl, tc.segLen, tc.hdr)
			require.NoError(t, err)
			assert.Equal(t, tc.wire, buf[:n])

			f, err := ParseTerminate(tc.wire)
			require.NoError(t, err)
			assert.Equal(t, tc.ctrl, f.TermControl)
			assert.Equal(t, len(tc.wire), f.Len)
			if tc.ctrl.M {
				assert.Equal(t, tc.segLen, f.DDPSegLen)
			}
			assert.Len(t, f.DDPHeader, tc.ddp)
			assert.Len(t, f.RDMAHeader, tc.rdma)
			if tc.ddp > 0 {
				assert.Equal(t, tc.hdr[:tc.ddp], f.DDPHeader)
			}
			// Trailing bytes are ignored.
			f2, err := ParseTerminate(cat(tc.wire, []byte{9, 9, 9}))
			require.NoError(t, err)
			assert.Equal(t, f.Len, f2.Len)

			for i := 0; i < len(tc.wire); i++ {
				_, err := ParseTerminate(tc.wire[:i])
				assert.ErrorIs(t, err, ErrTerminateFormat, "prefix %d", i)
				_, err = EncodeTerminate(buf[:i], tc.ctrl, tc.segLen, tc.hdr)
				assert.ErrorIs(t, err, ErrShort)
			}
			assert.Zero(t, testing.AllocsPerRun(50, func() { _, _ = ParseTerminate(tc.wire) }))
		})
	}
	// The Error values carry the right terminate triple.
	assert.Equal(t, TermControl{Layer: LayerLLP, Type: LLPErrMPA, Code: MPACodeCRC}, ErrMPACRC.Terminate())
	assert.Equal(t, TermControl{Layer: LayerDDP, Type: DDPErrUntaggedBuffer, Code: DDPCodeUntaggedInvalidQN}, ErrDDPInvalidQN.Terminate())
	// D with a header too short to copy.
	_, err := EncodeTerminate(make([]byte, 64), TermControl{D: true}, 0, []byte{0x41})
	assert.ErrorIs(t, err, ErrShort)
}

// TestTerminateFPDU builds a whole Terminate FPDU with the transmit
// helpers and parses it back with the receive parser.
func TestTerminateFPDU(t *testing.T) {
	tc := terminateVectors[0]
	buf := make([]byte, 256)
	h := Header{Opcode: OpTerminate, Last: true, MSN: 1, Term: tc.ctrl}
	hl, err := EncodeHeader(buf[MPALenSize:], &h)
	require.NoError(t, err)
	require.Equal(t, 22, hl)
	// The control word is part of the header; the copies follow it.
	bl, err := EncodeTerminate(buf[MPALenSize+DDPUntaggedHeaderLen:], tc.ctrl, tc.segLen, tc.hdr)
	require.NoError(t, err)
	ulpduLen := DDPUntaggedHeaderLen + bl
	n, err := FinishFPDU(buf, ulpduLen, true)
	require.NoError(t, err)

	ulpdu, m, err := CheckFPDU(buf[:n], true)
	require.NoError(t, err)
	assert.Equal(t, n, m)
	var got Header
	require.NoError(t, ParseHeader(&got, ulpdu, len(ulpdu)))
	assert.Equal(t, OpTerminate, got.Opcode)
	assert.Equal(t, tc.ctrl, got.Term)
	f, err := ParseTerminate(ulpdu[DDPUntaggedHeaderLen:])
	require.NoError(t, err)
	assert.Equal(t, tc.hdr[:18], f.DDPHeader)
	assert.Equal(t, tc.hdr[18:46], f.RDMAHeader)
}

func TestLayerString(t *testing.T) {
	assert.Equal(t, "RDMAP", LayerRDMAP.String())
	assert.Equal(t, "DDP", LayerDDP.String())
	assert.Equal(t, "LLP", LayerLLP.String())
	assert.Equal(t, "Layer(9)", Layer(9).String())
}
