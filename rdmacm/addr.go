package rdmacm

import (
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/goiwarp/goiwarp/verbs"
)

func sockaddrOf(a *net.TCPAddr) unix.Sockaddr {
	if isV4(a) {
		sa := &unix.SockaddrInet4{Port: a.Port}
		copy(sa.Addr[:], a.IP.To4())
		return sa
	}
	sa := &unix.SockaddrInet6{Port: a.Port}
	copy(sa.Addr[:], a.IP.To16())
	if a.Zone != "" {
		if ifc, err := net.InterfaceByName(a.Zone); err == nil {
			sa.ZoneId = uint32(ifc.Index)
		}
	}
	return sa
}

func tcpAddrOf(sa unix.Sockaddr) *net.TCPAddr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IPv4(sa.Addr[0], sa.Addr[1], sa.Addr[2], sa.Addr[3]).To4(), Port: sa.Port}
	case *unix.SockaddrInet6:
		ip := make(net.IP, net.IPv6len)
		copy(ip, sa.Addr[:])
		a := &net.TCPAddr{IP: ip, Port: sa.Port}
		if sa.ZoneId != 0 {
			if ifc, err := net.InterfaceByIndex(int(sa.ZoneId)); err == nil {
				a.Zone = ifc.Name
			}
		}
		return a
	}
	return nil
}

// isV4: addresses are kept in their family's length (4 or 16 bytes), so an
// IPv4-mapped IPv6 address stays IPv6.
func isV4(a *net.TCPAddr) bool { return len(a.IP) == net.IPv4len || a.IP == nil }

// bindSocket creates the TCP socket a bound id owns: SO_REUSEADDR, as the
// kernel's iWARP CM binds (so a listener may take a port that still carries
// established connections), and EADDRINUSE when a listener holds the port.
func bindSocket(a *net.TCPAddr, afonly int, tos int) (int, *net.TCPAddr, error) {
	dom := unix.AF_INET6
	if isV4(a) {
		dom = unix.AF_INET
	}
	fd, err := unix.Socket(dom, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP)
	if err != nil {
		return -1, nil, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if dom == unix.AF_INET6 && afonly >= 0 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, afonly)
	}
	if tos >= 0 {
		if dom == unix.AF_INET {
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, tos)
		} else {
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos)
		}
	}
	if err := unix.Bind(fd, sockaddrOf(a)); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, tcpAddrOf(sa), nil
}

// listenOn turns the bound socket into a *net.TCPListener with backlog.
func listenOn(fd, backlog int) (*net.TCPListener, error) {
	if err := unix.Listen(fd, backlog); err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "rdmacm-listen")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	return ln.(*net.TCPListener), nil
}

// sourceFor picks the local address the kernel would route dst from.
func sourceFor(dst *net.TCPAddr) (net.IP, error) {
	if dst.IP.IsLoopback() {
		return dst.IP, nil
	}
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: dst.IP, Port: max(dst.Port, 9), Zone: dst.Zone})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}

// deviceFor maps a local IP to its device name ("" when none).
func deviceFor(ip net.IP) string {
	if ip == nil || ip.IsUnspecified() {
		return ""
	}
	if d := verbs.DeviceForIP(verbs.Devices(), ip); d != nil {
		return d.Name
	}
	return ""
}

func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var en unix.Errno
	if asErrno(err, &en) {
		return en
	}
	return unix.EIO
}
