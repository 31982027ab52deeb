package provider

import (
	"net"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/stretchr/testify/require"
)

// Programs pair the QPs of both sides by the order of their connection
// requests (perftest -R -q N exchanges buffers by index): the listener hands
// requests over in accept order, and Connect returns once its TCP handshake
// is done, so that accept order is the order of the Connect calls.

func TestListenerKeepsAcceptOrder(t *testing.T) {
	cases := []struct {
		name string
		// writes: which accepted connection sends its MPA request, in turn
		writes []int
		want   []int // the order cb sees the connections in
	}{
		{"in order", []int{0, 1, 2}, []int{0, 1, 2}},
		{"reversed", []int{2, 1, 0}, []int{0, 1, 2}},
		// The first never speaks: the others go on after orderWait.
		{"first stalls", []int{1, 2}, []int{1, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := netListen()
			require.NoError(t, err)
			got := make(chan string, 3) // the requests' remote addresses
			ln := listenPolicy(tl, func(r *Request) {
				got <- r.Remote.String()
				_ = r.Reject(nil)
			}, DefaultPolicy())
			t.Cleanup(ln.Close)
			var conns []*net.TCPConn
			for range 3 {
				c, err := net.DialTCP("tcp", nil, ln.Addr())
				require.NoError(t, err)
				t.Cleanup(func() { c.Close() })
				conns = append(conns, c)
			}
			// Let the listener accept all three before any request.
			time.Sleep(50 * time.Millisecond)
			for _, i := range tc.writes {
				sendMPARequest(t, conns[i])
				time.Sleep(20 * time.Millisecond)
			}
			for _, want := range tc.want {
				select {
				case remote := <-got:
					require.Equal(t, conns[want].LocalAddr().String(), remote)
				case <-time.After(to):
					t.Fatalf("no request %d", want)
				}
			}
		})
	}
}

func TestConnectKeepsCallOrder(t *testing.T) {
	tl, err := netListen()
	require.NoError(t, err)
	defer tl.Close()
	pol := DefaultPolicy()
	pol.SHM = ShmOff
	const n = 8
	for i := range n {
		c := newSide(t)
		_, err := connectPolicy(c.qp, nil, tl.Addr().(*net.TCPAddr), ConnParams{PrivateData: []byte{byte(i)}}, to, c.cb, &pol)
		require.NoError(t, err)
	}
	for i := range n {
		raw, err := tl.AcceptTCP()
		require.NoError(t, err)
		_ = raw.SetDeadline(time.Now().Add(to))
		f, pd, err := readMPAFrame(raw, wire.MPARequest)
		require.NoError(t, err)
		_, _, user, err := splitPrivateData(f, pd, &pol)
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, user, "accepted connection %d", i)
		raw.Close()
	}
}
