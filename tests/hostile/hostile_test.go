package main

import (
	"errors"
	"io"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/stretchr/testify/require"
)

// termFPDU frames a Terminate with the wire encoders, as a server sends it.
func termFPDU(p *peer, c wire.TermControl) []byte {
	body := make([]byte, wire.MaxTerminateLen)
	n, err := wire.EncodeTerminate(body, c, 0, nil)
	if err != nil {
		panic(err)
	}
	return p.fpdu(&wire.Header{Opcode: wire.OpTerminate, Last: true, Term: c}, body[wire.TermControlLen:n])
}

// TestFinish runs peer.finish against a fake server that sends a scripted
// byte stream and closes.
func TestFinish(t *testing.T) {
	crcErr := wire.TermControl{Layer: wire.LayerLLP, Type: wire.LLPErrMPA, Code: wire.MPACodeCRC}
	cases := []struct {
		name    string
		crc     bool
		script  func(p *peer) []byte
		term    *wire.TermControl
		closed  bool
		wantErr bool
	}{
		{name: "terminate-then-close", script: func(p *peer) []byte { return termFPDU(p, crcErr) },
			term: &crcErr, closed: true},
		{name: "responses-then-terminate", crc: true, script: func(p *peer) []byte {
			rr := p.fpdu(&wire.Header{Opcode: wire.OpReadResponse, Last: true, STag: 7}, make([]byte, 64))
			return append(append(rr, rr...), termFPDU(p, crcErr)...)
		}, term: &crcErr, closed: true},
		{name: "close-only", script: func(*peer) []byte { return nil }, closed: true},
		{name: "truncated-fpdu-then-close", script: func(p *peer) []byte {
			b := p.send(make([]byte, 100))
			return b[:40]
		}, closed: true},
		{name: "send-after-terminate", script: func(p *peer) []byte {
			return append(termFPDU(p, crcErr), p.send([]byte("x"))...)
		}, wantErr: true},
		{name: "bad-crc-from-server", crc: true, script: func(p *peer) []byte {
			b := termFPDU(p, crcErr)
			b[len(b)-1] ^= 1
			return b
		}, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			require.NoError(t, err)
			defer ln.Close()
			srv := &peer{crc: tc.crc, msn: [2]uint32{1, 1}}
			go func() {
				c, err := ln.AcceptTCP()
				if err != nil {
					return
				}
				_, _ = c.Write(tc.script(srv))
				c.Close()
			}()
			c, err := dial(ln.Addr().String(), 0)
			require.NoError(t, err)
			defer c.Close()
			p := &peer{c: c, crc: tc.crc}
			o := p.finish(5 * time.Second)
			if tc.wantErr {
				require.Error(t, o.err)
				return
			}
			require.NoError(t, o.err)
			require.Equal(t, tc.closed, o.closed)
			if tc.term == nil {
				require.Nil(t, o.term)
				return
			}
			require.NotNil(t, o.term)
			require.Equal(t, *tc.term, o.term.TermControl)
		})
	}
}

func TestCheck(t *testing.T) {
	want := term(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedInvalidSTag)
	got := func(c *wire.TermControl) *wire.TerminateFields { return &wire.TerminateFields{TermControl: *c} }
	other := term(wire.LayerDDP, wire.DDPErrTaggedBuffer, wire.DDPCodeTaggedBaseBounds)
	cases := []struct {
		name string
		a    attack
		o    outcome
		ok   bool
	}{
		{name: "right-terminate", a: attack{want: want}, o: outcome{term: got(want), closed: true}, ok: true},
		{name: "wrong-code", a: attack{want: want}, o: outcome{term: got(other), closed: true}},
		{name: "terminate-left-open", a: attack{want: want}, o: outcome{term: got(want)}},
		{name: "no-terminate", a: attack{want: want}, o: outcome{closed: true}},
		{name: "lost-terminate-allowed", a: attack{want: want, mayLose: true}, o: outcome{closed: true}, ok: true},
		{name: "lost-but-wrong", a: attack{want: want, mayLose: true}, o: outcome{term: got(other), closed: true}},
		{name: "close-expected", a: attack{}, o: outcome{closed: true}, ok: true},
		{name: "terminate-instead-of-close", a: attack{}, o: outcome{term: got(want), closed: true}},
		{name: "still-open", a: attack{}, o: outcome{}},
		{name: "read-error", a: attack{want: want}, o: outcome{err: io.ErrUnexpectedEOF}},
		{name: "unchecked", a: attack{unchecked: true}, o: outcome{}, ok: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.a.check(tc.o)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// The MPA attacks' frames are what they claim: the wire parser refuses
// each one for the intended reason.
func TestPreMPAFrames(t *testing.T) {
	cases := []struct {
		name  string
		frame []byte
		want  error
	}{
		{name: "bad-key", frame: mpaFrame(wire.MPAFields{Kind: wire.MPAReply, Enhanced: true, Revision: 2}, v2pd())},
		{name: "bad-revision", frame: mpaFrame(wire.MPAFields{Kind: wire.MPARequest, Revision: 3}, nil), want: wire.ErrMPABadRevision},
		{name: "pd-too-long", frame: mpaFrame(wire.MPAFields{Kind: wire.MPARequest, Revision: 1}, make([]byte, 600)), want: wire.ErrMPAPrivateData},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := wire.ParseMPAHeader(tc.frame)
			if tc.want == nil {
				require.NoError(t, err)
				require.NotEqual(t, wire.MPARequest, f.Kind)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
	_, _, err := wire.SplitMPAV2PrivateData([]byte{0, 1})
	require.Error(t, err, "a 2-byte IRD/ORD header")
}

func TestTeardownRace(t *testing.T) {
	e255 := exec.Command("sh", "-c", "exit 255").Run()
	e1 := exec.Command("sh", "-c", "exit 1").Run()
	cases := []struct {
		name string
		err  error
		out  string
		want bool
	}{
		{name: "race", err: e255, out: "rdma_get_cm_event: Bad file descriptor\n", want: true},
		{name: "other-255", err: e255, out: "cma event RDMA_CM_EVENT_REJECTED\n"},
		{name: "exit-1", err: e1, out: "rdma_get_cm_event: Bad file descriptor\n"},
		{name: "not-exit", err: errors.New("timed out"), out: "rdma_get_cm_event: Bad file descriptor\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, rpingTeardownRace(tc.err, tc.out))
		})
	}
}

func TestCalibrationFailed(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"Correlation coefficient r^2: 0.7815 < 0.9\nCan't produce a report\n", true},
		{" #bytes #iterations BW peak[MB/sec]\n 4096 200 0.00 1.00 0.000244\n", false},
		{"Correlation coefficient r^2: 0.95\n", false},
	} {
		require.Equal(t, tc.want, calibrationFailed.MatchString(tc.out), tc.out)
	}
}
