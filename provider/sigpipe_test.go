package provider

import (
	"net"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A write into a connection that can no longer carry data (EPIPE) must not
// raise SIGPIPE: in an application that left SIGPIPE at its default, that
// signal kills the process. Both writers are covered: the MPA exchange
// (writeFrame) and the FPDU path (txState.writeFD).
func TestEPIPERaisesNoSIGPIPE(t *testing.T) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGPIPE)
	defer signal.Stop(sigs)

	shutWrite := func(ep *Endpoint) {
		rc, err := ep.c.SyscallConn()
		require.NoError(t, err)
		require.NoError(t, rc.Control(func(fd uintptr) {
			require.NoError(t, unix.Shutdown(int(fd), unix.SHUT_WR))
		}))
	}

	t.Run("mpa", func(t *testing.T) {
		ln, err := netListen()
		require.NoError(t, err)
		defer ln.Close()
		c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.CloseWrite())
		require.ErrorIs(t, writeFrame(c, []byte("x")), unix.EPIPE)
	})
	t.Run("fpdu", func(t *testing.T) {
		p := connectPair(t, pairOpts{})
		b, mr := p.cli.mem(4096, 0)
		shutWrite(p.cli.ep)
		p.cli.postSend(sqe(7, verbs.WRSend, verbs.SendSignaled, sge(mr, b, 0, 64)))
		c := pollCQ(t, p.cli.scq, 5*time.Second)
		require.Equal(t, uint64(7), c.WRID)
		require.NotEqual(t, verbs.WCSuccess, c.Status)
	})
	select {
	case s := <-sigs:
		t.Fatalf("received %v", s)
	default:
	}
}
