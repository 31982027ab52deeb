package verbs

import (
	"crypto/sha256"
	"encoding/binary"
	"net"
	"os"
	"slices"
	"strings"
)

// Device is one software RNIC, bound to a network interface.
type Device struct {
	Name     string // giw_<ifname>
	Ifname   string
	Index    int
	MAC      [6]byte
	GUID     uint64 // EUI-64 from the MAC, as siw derives it
	MTU      int
	Addrs    []net.IP
	VendorID uint32
	PartID   uint32
}

// Vendor and part ids. perftest picks code paths by these; an unknown vendor
// gets the classic post-send path and no inline data. 0x626d74 is the id
// Linux siw reports ("bmt"), and 0 is its part id: peers and tools treat us as
// they treat siw.
const (
	VendorID = 0x626d74
	PartID   = 0
)

// Devices lists one device per interface that has an IP address, giw_lo
// always, narrowed by GOIWARP_DEVICES (comma-separated interface or device names).
func Devices() []*Device {
	ifs, _ := net.Interfaces()
	var devs []*Device
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		var ips []net.IP
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ips = append(ips, ipn.IP)
			}
		}
		isLo := ifc.Flags&net.FlagLoopback != 0
		if len(ips) == 0 && !isLo {
			continue
		}
		devs = append(devs, newDevice(ifc, ips, isLo))
	}
	if !slices.ContainsFunc(devs, func(d *Device) bool { return d.Ifname == "lo" }) {
		devs = append(devs, newDevice(net.Interface{Name: "lo", MTU: 65536, Flags: net.FlagLoopback},
			[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, true))
	}
	return filterDevices(devs, os.Getenv("GOIWARP_DEVICES"))
}

func filterDevices(devs []*Device, filter string) []*Device {
	if strings.TrimSpace(filter) == "" {
		return devs
	}
	want := map[string]bool{}
	for _, f := range strings.Split(filter, ",") {
		want[strings.TrimSpace(f)] = true
	}
	return slices.DeleteFunc(devs, func(d *Device) bool { return !want[d.Name] && !want[d.Ifname] })
}

func newDevice(ifc net.Interface, ips []net.IP, loopback bool) *Device {
	d := &Device{Name: "giw_" + ifc.Name, Ifname: ifc.Name, Index: ifc.Index, MTU: ifc.MTU,
		Addrs: ips, VendorID: VendorID, PartID: PartID}
	copy(d.MAC[:], ifc.HardwareAddr)
	if loopback || d.MAC == [6]byte{} {
		// No hardware address: derive a stable, locally administered one from
		// the host and interface names so the GID stays unique and repeatable.
		host, _ := os.Hostname()
		sum := sha256.Sum256([]byte(host + "/" + ifc.Name))
		copy(d.MAC[:], sum[:6])
		d.MAC[0] = d.MAC[0]&0xfe | 0x02
	}
	var eui [8]byte
	copy(eui[:3], d.MAC[:3])
	eui[3], eui[4] = 0xff, 0xfe
	copy(eui[5:], d.MAC[3:])
	eui[0] ^= 0x02
	d.GUID = binary.BigEndian.Uint64(eui[:])
	return d
}

// GID is the port GID: the MAC in the first six bytes, as siw reports it.
func (d *Device) GID() [16]byte {
	var g [16]byte
	copy(g[:], d.MAC[:])
	return g
}

// HasAddr reports whether ip is one of the device's interface addresses.
func (d *Device) HasAddr(ip net.IP) bool {
	return slices.ContainsFunc(d.Addrs, func(a net.IP) bool { return a.Equal(ip) })
}

// DeviceForIP maps an IP address to the device of its interface; loopback
// addresses map to giw_lo.
func DeviceForIP(devs []*Device, ip net.IP) *Device {
	for _, d := range devs {
		if d.HasAddr(ip) {
			return d
		}
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		for _, d := range devs {
			if d.Ifname == "lo" {
				return d
			}
		}
		if len(devs) > 0 {
			return devs[0]
		}
	}
	return nil
}

// MaxGIDs bounds a device's GID table: entry 0 and up to MaxGIDs-1 addresses.
const MaxGIDs = 16

// GIDs is the port's GID table. Entry 0 is the MAC-based GID siw reports
// (what the CM path has always shown); then one entry per IP address of the
// interface in the forms RoCE v2 uses: IPv4 first, as IPv4-mapped IPv6
// (::ffff:a.b.c.d), then IPv6 as is, each in the order the kernel lists
// them. Programs that connect without a CM exchange one of these and hand
// it back as ah_attr.grh.dgid; the address entries are what makes a GID
// routable (see GIDAddr).
func (d *Device) GIDs() [][16]byte {
	t := [][16]byte{d.GID()}
	for _, v4 := range []bool{true, false} {
		for _, ip := range d.Addrs {
			if (ip.To4() != nil) != v4 || len(t) == MaxGIDs {
				continue
			}
			var g [16]byte
			copy(g[:], ip.To16())
			t = append(t, g)
		}
	}
	return t
}

// GIDAddr is the IP address a GID names: an IPv4-mapped GID is the IPv4
// address, any other GID in an IP form (not entry 0's MAC form) the IPv6
// address. ok is false for the MAC form and the zero GID.
func GIDAddr(g [16]byte) (ip net.IP, ok bool) {
	if g == [16]byte{} {
		return nil, false
	}
	ip = net.IP(g[:])
	if v4 := ip.To4(); v4 != nil {
		return v4, true
	}
	// The MAC form has the MAC in bytes 0-5 and zeros after: no IPv6
	// address of a host looks like that (it would be in a reserved or
	// multicast block with a zero interface id).
	if [10]byte(g[6:]) == [10]byte{} {
		return nil, false
	}
	return ip, true
}

// LID is the port's LID: the low 16 bits of the interface's first IPv4
// address (0 without one). InfiniBand LIDs are addresses within a subnet;
// so is this, within the address's /16. Programs that exchange only LIDs
// (qperf without -cm1, ibv_rc_pingpong without -g) reach a peer in the
// same /16 with it: see LIDAddr.
func (d *Device) LID() uint16 {
	if ip := d.IPv4(); ip != nil {
		return uint16(ip[2])<<8 | uint16(ip[3])
	}
	return 0
}

// LIDAddr is the IPv4 address a peer's LID names, seen from d: d's first
// IPv4 address with its low 16 bits replaced. ok is false for LID 0 or a
// device without an IPv4 address.
func (d *Device) LIDAddr(lid uint16) (net.IP, bool) {
	ip := d.IPv4()
	if ip == nil || lid == 0 {
		return nil, false
	}
	return net.IPv4(ip[0], ip[1], byte(lid>>8), byte(lid)).To4(), true
}

// IPv4 is the interface's first IPv4 address, nil without one.
func (d *Device) IPv4() net.IP {
	for _, a := range d.Addrs {
		if v4 := a.To4(); v4 != nil {
			return v4
		}
	}
	return nil
}
