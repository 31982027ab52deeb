package wire

import (
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodedConn is one MPA connection decoded from a capture.
type decodedConn struct {
	req, rep       MPAFields
	reqPD, repPD   []byte
	reqRaw, repRaw []byte
	// opcodes sent by the initiator and the responder, in order.
	initOps, respOps []Opcode
	initHdrs         []Header
	respHdrs         []Header
	fpdus            int
}

// decodeCapture reassembles every TCP connection of a capture and decodes
// its MPA exchange and every FPDU with the package's parsers.
func decodeCapture(t *testing.T, name string) []decodedConn {
	t.Helper()
	flows, err := readPcap(filepath.Join("testdata", "captures", name))
	require.NoError(t, err)
	var inits []*tcpFlow
	for _, f := range flows {
		s, err := f.stream()
		require.NoError(t, err)
		if len(s) >= MPAKeyLen && string(s[:MPAKeyLen]) == MPAKeyRequest {
			inits = append(inits, f)
		}
	}
	sort.Slice(inits, func(i, j int) bool { return inits[i].order < inits[j].order })
	var conns []decodedConn
	for _, fi := range inits {
		fr := flows[fi.peerKey]
		require.NotNil(t, fr, "no reverse flow for %s", fi.key)
		si, _ := fi.stream()
		sr, err := fr.stream()
		require.NoError(t, err)
		var c decodedConn
		var n int
		c.req, c.reqPD, n, err = ParseMPAFrame(si)
		require.NoError(t, err)
		c.reqRaw, si = si[:n], si[n:]
		c.rep, c.repPD, n, err = ParseMPAFrame(sr)
		require.NoError(t, err)
		c.repRaw, sr = sr[:n], sr[n:]
		require.Equal(t, MPARequest, c.req.Kind)
		require.Equal(t, MPAReply, c.rep.Kind)
		require.False(t, c.rep.Reject)
		crc := c.rep.CRC
		require.False(t, c.rep.Markers, "captures have no markers")
		c.initOps, c.initHdrs = decodeFPDUs(t, si, crc)
		c.respOps, c.respHdrs = decodeFPDUs(t, sr, crc)
		c.fpdus = len(c.initOps) + len(c.respOps)
		conns = append(conns, c)
	}
	return conns
}

// decodeFPDUs walks a reassembled full-operation stream FPDU by FPDU the
// way the engine will: length field, HeaderLen on the first two bytes,
// ParseHeader on exactly the header, payload, CRC.
func decodeFPDUs(t *testing.T, s []byte, crc bool) ([]Opcode, []Header) {
	t.Helper()
	var ops []Opcode
	var hdrs []Header
	for len(s) > 0 {
		ulpdu, n, err := CheckFPDU(s, crc)
		require.NoError(t, err, "FPDU %d", len(ops))
		if !crc {
			assert.Equal(t, []byte{0, 0, 0, 0}, s[n-4:n], "CRC field must be zero when CRC is off")
		}
		hl, err := HeaderLen(ulpdu)
		require.NoError(t, err)
		var h Header
		require.NoError(t, ParseHeader(&h, ulpdu[:hl], len(ulpdu)))
		require.Equal(t, hl, h.HeaderLen)
		// Re-encoding the parsed header gives back the same bytes.
		buf := make([]byte, hl)
		m, err := EncodeHeader(buf, &h)
		require.NoError(t, err)
		require.Equal(t, ulpdu[:hl], buf[:m], "re-encode of %v", h.Opcode)
		ops = append(ops, h.Opcode)
		hdrs = append(hdrs, h)
		s = s[n:]
	}
	return ops, hdrs
}

func opSet(ops []Opcode) map[Opcode]bool {
	m := map[Opcode]bool{}
	for _, o := range ops {
		m[o] = true
	}
	return m
}

// siwFrame builds the MPA frame siw sends for the given settings with our encoder.
func siwFrame(kind MPAKind, crc bool, p MPAV2Params) []byte {
	f := MPAFields{Kind: kind, CRC: crc, Enhanced: true, Revision: MPARevision2}
	return AppendMPAFrame(nil, &f, AppendMPAV2PrivateData(nil, p, nil))
}

func TestCaptureRping(t *testing.T) {
	for _, tc := range []struct {
		file string
		crc  bool
		flag byte
	}{
		{"rping-siw.pcap", false, 0x10},
		{"rping-siw-crc.pcap", true, 0x50},
	} {
		t.Run(tc.file, func(t *testing.T) {
			conns := decodeCapture(t, tc.file)
			require.Len(t, conns, 1)
			c := conns[0]
			assert.Equal(t, tc.flag, c.reqRaw[16], "request flags byte")
			assert.Equal(t, tc.flag, c.repRaw[16], "reply flags byte")
			assert.Equal(t, uint8(2), c.req.Revision)
			assert.True(t, c.req.Enhanced)
			assert.Equal(t, tc.crc, c.req.CRC)
			assert.Equal(t, []byte{0x00, 0x01, 0x00, 0x01}, c.reqPD)
			assert.Equal(t, []byte{0x00, 0x01, 0x00, 0x01}, c.repPD)
			p, user, err := SplitMPAV2PrivateData(c.reqPD)
			require.NoError(t, err)
			assert.Empty(t, user)
			assert.Equal(t, MPAV2Params{IRD: 1, ORD: 1}, p)
			// Our encoder reproduces siw's frames byte for byte.
			assert.Equal(t, c.reqRaw, siwFrame(MPARequest, tc.crc, MPAV2Params{IRD: 1, ORD: 1}))
			assert.Equal(t, c.repRaw, siwFrame(MPAReply, tc.crc, MPAV2Params{IRD: 1, ORD: 1}))

			all := opSet(append(append([]Opcode{}, c.initOps...), c.respOps...))
			for _, op := range []Opcode{OpSend, OpReadRequest, OpReadResponse, OpWrite} {
				assert.True(t, all[op], "expected %v in %s", op, tc.file)
			}
			// rping's client (initiator) sends Sends and answers reads; every
			// Read Request is matched by Read Response traffic from the other side.
			for _, h := range append(append([]Header{}, c.initHdrs...), c.respHdrs...) {
				if h.Opcode == OpReadRequest {
					assert.Equal(t, uint32(QNReadRequest), h.QN)
					assert.NotZero(t, h.ReadSize)
				}
			}
		})
	}
}

func TestCaptureP2P(t *testing.T) {
	conns := decodeCapture(t, "rping-siw-p2p.pcap")
	require.Len(t, conns, 1)
	c := conns[0]
	assert.Equal(t, []byte{0x80, 0x01, 0xc0, 0x01}, c.reqPD)
	assert.Equal(t, []byte{0x80, 0x01, 0x80, 0x01}, c.repPD)
	req, _, err := SplitMPAV2PrivateData(c.reqPD)
	require.NoError(t, err)
	assert.Equal(t, MPAV2Params{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true, ReadRTR: true}, req)
	rep, _, err := SplitMPAV2PrivateData(c.repPD)
	require.NoError(t, err)
	assert.Equal(t, MPAV2Params{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true}, rep)
	assert.Equal(t, c.reqRaw, siwFrame(MPARequest, false, req))
	assert.Equal(t, c.repRaw, siwFrame(MPAReply, false, rep))
	// The initiator's first FPDU is the zero-length RDMA Write RTR.
	require.NotEmpty(t, c.initHdrs)
	first := c.initHdrs[0]
	assert.Equal(t, OpWrite, first.Opcode)
	assert.True(t, first.Tagged)
	assert.True(t, first.Last)
	assert.Equal(t, uint32(1), first.STag)
	assert.Equal(t, uint64(0), first.TO)
	assert.Equal(t, DDPTaggedHeaderLen, first.HeaderLen)
	all := opSet(append(append([]Opcode{}, c.initOps...), c.respOps...))
	for _, op := range []Opcode{OpSend, OpReadRequest, OpReadResponse, OpWrite} {
		assert.True(t, all[op], "expected %v", op)
	}
}

func TestCaptureWriteBW(t *testing.T) {
	conns := decodeCapture(t, "ib_write_bw-siw.pcap")
	require.Len(t, conns, 2, "perftest control connection and test connection")
	var writes, sends int
	for _, c := range conns {
		for _, ops := range [][]Opcode{c.initOps, c.respOps} {
			for _, op := range ops {
				switch op {
				case OpWrite:
					writes++
				case OpSend:
					sends++
				}
			}
		}
	}
	assert.NotZero(t, sends)
	assert.NotZero(t, writes)
	// A 4096-byte write is split by siw into MSS-sized DDP segments: the
	// non-last ones carry MaxPayload(1448, 14) bytes.
	var sawFull bool
	for _, c := range conns {
		for i, h := range c.initHdrs {
			if h.Opcode == OpWrite && !h.Last {
				sawFull = true
				if i+1 < len(c.initHdrs) {
					next := c.initHdrs[i+1]
					assert.Equal(t, h.STag, next.STag)
					assert.Equal(t, h.TO+uint64(MaxPayload(1448, DDPTaggedHeaderLen)), next.TO)
				}
			}
		}
	}
	assert.True(t, sawFull, "expected multi-segment writes")
}
