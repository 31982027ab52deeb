package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cat concatenates byte slices (test helper for annotated vectors).
func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

var (
	keyReq = []byte("MPA ID Req Frame")
	keyRep = []byte("MPA ID Rep Frame")
)

func TestMPAFrameGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields MPAFields
		pd     []byte
		wire   []byte
	}{
		{
			name:   "siw request rev 2, CRC, IRD/ORD 1/1 (RFC 6581)",
			fields: MPAFields{Kind: MPARequest, CRC: true, Enhanced: true, Revision: 2},
			pd:     []byte{0x00, 0x01, 0x00, 0x01},
			wire: cat(keyReq,
				[]byte{0x50},                    // M=0 C=1 R=0 H=1 Res=0
				[]byte{0x02},                    // Rev
				[]byte{0x00, 0x04},              // PD_Length
				[]byte{0x00, 0x01, 0x00, 0x01}), // IRD=1, ORD=1
		},
		{
			name:   "rev 1 reply with markers and CRC, no private data (RFC 5044)",
			fields: MPAFields{Kind: MPAReply, Markers: true, CRC: true, Revision: 1},
			wire: cat(keyRep,
				[]byte{0xc0},        // M=1 C=1
				[]byte{0x01},        // Rev
				[]byte{0x00, 0x00}), // PD_Length
		},
		{
			name:   "reject reply with private data",
			fields: MPAFields{Kind: MPAReply, Reject: true, Enhanced: true, Revision: 2},
			pd:     []byte("no"),
			wire: cat(keyRep,
				[]byte{0x30},       // R=1 H=1
				[]byte{0x02},       // Rev
				[]byte{0x00, 0x02}, // PD_Length
				[]byte("no")),
		},
		{
			name:   "siw GSO experiment bit in Res",
			fields: MPAFields{Kind: MPARequest, Enhanced: true, Res: 0x08, Revision: 2},
			wire:   cat(keyReq, []byte{0x18, 0x02, 0x00, 0x00}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := make([]byte, 64)
			n, err := EncodeMPAFrame(buf, &tc.fields, tc.pd)
			require.NoError(t, err)
			assert.Equal(t, tc.wire, buf[:n])
			assert.Equal(t, tc.wire, AppendMPAFrame(nil, &tc.fields, tc.pd))
			assert.Equal(t, len(tc.wire), MPAFrameLen(len(tc.pd)))

			f, pd, m, err := ParseMPAFrame(tc.wire)
			require.NoError(t, err)
			want := tc.fields
			want.PrivateDataLen = uint16(len(tc.pd))
			assert.Equal(t, want, f)
			assert.Equal(t, len(tc.wire), m)
			assert.Equal(t, string(tc.pd), string(pd))

			h := MPAHeader(tc.wire[:MPAHeaderLen])
			assert.NoError(t, h.Check())
			assert.Equal(t, tc.fields.Kind, h.Kind())
			assert.Equal(t, tc.fields.Markers, h.Markers())
			assert.Equal(t, tc.fields.CRC, h.CRC())
			assert.Equal(t, tc.fields.Reject, h.Reject())
			assert.Equal(t, tc.fields.Enhanced, h.Enhanced())
			assert.Equal(t, tc.fields.Revision, h.Revision())
			assert.Equal(t, tc.wire[16], h.Flags())
			assert.Equal(t, tc.wire[:16], h.Key())

			// Every truncated prefix is rejected as short.
			for i := 0; i < len(tc.wire); i++ {
				_, _, _, err := ParseMPAFrame(tc.wire[:i])
				assert.ErrorIs(t, err, ErrShort, "prefix %d", i)
			}
		})
	}
}

func TestMPAHeaderErrors(t *testing.T) {
	good := cat(keyReq, []byte{0x10, 0x02, 0x00, 0x04})
	mod := func(i int, v byte) []byte {
		b := append([]byte(nil), good...)
		b[i] = v
		return b
	}
	pdLen := func(n uint16) []byte {
		b := append([]byte(nil), good...)
		b[18], b[19] = byte(n>>8), byte(n)
		return b
	}
	for _, tc := range []struct {
		name string
		in   []byte
		err  error
	}{
		{"bad key", mod(4, 'X'), ErrMPABadKey},
		{"lower-case key", cat([]byte("mpa id req frame"), good[16:]), ErrMPABadKey},
		{"revision 0", mod(17, 0), ErrMPABadRevision},
		{"revision 3", mod(17, 3), ErrMPABadRevision},
		{"private data 513", pdLen(513), ErrMPAPrivateData},
		{"private data 0xffff", pdLen(0xffff), ErrMPAPrivateData},
		{"short", good[:19], ErrShort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMPAHeader(tc.in)
			assert.ErrorIs(t, err, tc.err)
			if e := AsError(err); e != nil {
				assert.Equal(t, LayerLLP, e.Layer)
				assert.Equal(t, LLPErrMPA, e.Type)
			}
		})
	}
	f, err := ParseMPAHeader(pdLen(512))
	require.NoError(t, err)
	assert.Equal(t, uint16(512), f.PrivateDataLen)

	_, err = EncodeMPAFrame(make([]byte, 10), &MPAFields{}, nil)
	assert.ErrorIs(t, err, ErrShort)
	_, err = EncodeMPAFrame(make([]byte, 1<<17), &MPAFields{}, make([]byte, 1<<16))
	assert.ErrorIs(t, err, ErrMPAPrivateData)
}

func TestMPAV2Params(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    MPAV2Params
		wire []byte
	}{
		{"siw default IRD 1 ORD 1", MPAV2Params{IRD: 1, ORD: 1}, []byte{0x00, 0x01, 0x00, 0x01}},
		{"p2p offer: write+read RTR", MPAV2Params{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true, ReadRTR: true}, []byte{0x80, 0x01, 0xc0, 0x01}},
		{"p2p answer: write RTR", MPAV2Params{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true}, []byte{0x80, 0x01, 0x80, 0x01}},
		{"send RTR, max values", MPAV2Params{IRD: 0x3fff, ORD: 0x3fff, PeerToPeer: true, SendRTR: true}, []byte{0xff, 0xff, 0x3f, 0xff}},
		{"read RTR only", MPAV2Params{IRD: 16, ORD: 128, ReadRTR: true}, []byte{0x00, 0x10, 0x40, 0x80}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b [4]byte
			tc.p.Put(b[:])
			assert.Equal(t, tc.wire, b[:])
			p, err := ParseMPAV2Params(tc.wire)
			require.NoError(t, err)
			assert.Equal(t, tc.p, p)

			pd := AppendMPAV2PrivateData(nil, tc.p, []byte("user"))
			assert.Equal(t, cat(tc.wire, []byte("user")), pd)
			p2, user, err := SplitMPAV2PrivateData(pd)
			require.NoError(t, err)
			assert.Equal(t, tc.p, p2)
			assert.Equal(t, "user", string(user))
			for i := 0; i < 4; i++ {
				_, _, err := SplitMPAV2PrivateData(tc.wire[:i])
				assert.Error(t, err)
			}
		})
	}
	// Values wider than 14 bits are masked, never spill into the flags.
	var b [4]byte
	MPAV2Params{IRD: 0xffff, ORD: 0x4001}.Put(b[:])
	assert.Equal(t, []byte{0x3f, 0xff, 0x00, 0x01}, b[:])
}

func TestMPAV1IRDORD(t *testing.T) {
	wire := []byte{
		0x00, 0x00, 0x00, 0x10, // IRD = 16
		0x00, 0x00, 0x00, 0x08, // ORD = 8
		'h', 'i',
	}
	pd := AppendMPAV1PrivateData(nil, 16, 8, []byte("hi"))
	assert.Equal(t, wire, pd)
	ird, ord, user, err := SplitMPAV1PrivateData(wire)
	require.NoError(t, err)
	assert.Equal(t, uint32(16), ird)
	assert.Equal(t, uint32(8), ord)
	assert.Equal(t, "hi", string(user))
	for i := 0; i < MPAV1IRDORDLen; i++ {
		_, _, _, err := SplitMPAV1PrivateData(wire[:i])
		assert.ErrorIs(t, err, ErrMPAPrivateData)
	}
}
