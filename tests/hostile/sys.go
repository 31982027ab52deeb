package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// rcvBufControl sets SO_RCVBUF on the socket before it connects (the
// window scale is fixed by the SYN, so later is too late).
func rcvBufControl(n int) func(network, address string, c syscall.RawConn) error {
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, n)
		})
		if err != nil {
			return err
		}
		return serr
	}
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET)
}

// wmemMax is the most a TCP socket may buffer for sending (tcp_wmem's
// third field).
func wmemMax() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if n, err := strconv.Atoi(f[2]); err == nil {
				return n
			}
		}
	}
	return 4 << 20
}
