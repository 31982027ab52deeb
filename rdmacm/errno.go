package rdmacm

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// asErrno finds the errno inside err (syscall errors, net.OpError, os.SyscallError).
func asErrno(err error, en *unix.Errno) bool {
	var se syscall.Errno
	if errors.As(err, &se) {
		*en = unix.Errno(se)
		return true
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		*en = unix.ETIMEDOUT
		return true
	}
	return false
}
