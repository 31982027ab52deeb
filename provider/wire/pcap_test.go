package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
)

// A minimal pcap reader and TCP stream reassembler for the capture tests.

type tcpSegment struct {
	seq     uint32
	syn     bool
	payload []byte
}

// tcpFlow is one direction of a TCP connection.
type tcpFlow struct {
	key      string // "src:port>dst:port"
	peerKey  string // the reverse direction
	order    int    // index of the first packet seen
	isn      uint32
	haveSYN  bool
	segments []tcpSegment
}

// readPcap returns the TCP flows of a classic pcap file.
func readPcap(path string) (map[string]*tcpFlow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) < 24 {
		return nil, errors.New("short pcap header")
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(data) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("not a classic pcap file (magic %x)", data[:4])
	}
	linkType := bo.Uint32(data[20:]) & 0x0fffffff
	flows := map[string]*tcpFlow{}
	off := 24
	for n := 0; off+16 <= len(data); n++ {
		incl := int(bo.Uint32(data[off+8:]))
		off += 16
		if off+incl > len(data) {
			return nil, errors.New("truncated pcap record")
		}
		pkt := data[off : off+incl]
		off += incl
		ip, ok := linkPayload(linkType, pkt)
		if !ok {
			continue
		}
		src, dst, tcp, ok := ipPayload(ip)
		if !ok || len(tcp) < 20 {
			continue
		}
		hl := int(tcp[12]>>4) * 4
		if hl < 20 || hl > len(tcp) {
			continue
		}
		sp := binary.BigEndian.Uint16(tcp[0:])
		dp := binary.BigEndian.Uint16(tcp[2:])
		key := fmt.Sprintf("%s:%d>%s:%d", src, sp, dst, dp)
		f := flows[key]
		if f == nil {
			f = &tcpFlow{key: key, peerKey: fmt.Sprintf("%s:%d>%s:%d", dst, dp, src, sp), order: n}
			flows[key] = f
		}
		seq := binary.BigEndian.Uint32(tcp[4:])
		syn := tcp[13]&0x02 != 0
		if syn {
			f.isn = seq + 1
			f.haveSYN = true
		}
		if p := tcp[hl:]; len(p) > 0 {
			f.segments = append(f.segments, tcpSegment{seq: seq, payload: p})
		}
	}
	return flows, nil
}

// linkPayload strips the link-layer header.
func linkPayload(linkType uint32, pkt []byte) ([]byte, bool) {
	switch linkType {
	case 1: // Ethernet
		if len(pkt) < 14 {
			return nil, false
		}
		et := binary.BigEndian.Uint16(pkt[12:])
		p := pkt[14:]
		for et == 0x8100 || et == 0x88a8 {
			if len(p) < 4 {
				return nil, false
			}
			et = binary.BigEndian.Uint16(p[2:])
			p = p[4:]
		}
		return p, et == 0x0800 || et == 0x86dd
	case 113: // Linux SLL
		if len(pkt) < 16 {
			return nil, false
		}
		return pkt[16:], true
	case 276: // Linux SLL2
		if len(pkt) < 20 {
			return nil, false
		}
		return pkt[20:], true
	case 0, 108: // BSD loopback / OpenBSD loop
		if len(pkt) < 4 {
			return nil, false
		}
		return pkt[4:], true
	case 101, 12, 14: // raw IP
		return pkt, true
	}
	return nil, false
}

// ipPayload returns the addresses and TCP header+payload of an IPv4/IPv6 packet.
func ipPayload(p []byte) (src, dst string, tcp []byte, ok bool) {
	if len(p) < 1 {
		return "", "", nil, false
	}
	switch p[0] >> 4 {
	case 4:
		if len(p) < 20 {
			return "", "", nil, false
		}
		ihl := int(p[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(p[2:]))
		if p[9] != 6 || ihl < 20 || total > len(p) || ihl > total {
			return "", "", nil, false
		}
		return fmt.Sprintf("%d.%d.%d.%d", p[12], p[13], p[14], p[15]),
			fmt.Sprintf("%d.%d.%d.%d", p[16], p[17], p[18], p[19]), p[ihl:total], true
	case 6:
		if len(p) < 40 {
			return "", "", nil, false
		}
		plen := int(binary.BigEndian.Uint16(p[4:]))
		if p[6] != 6 || 40+plen > len(p) {
			return "", "", nil, false
		}
		return fmt.Sprintf("[%x]", p[8:24]), fmt.Sprintf("[%x]", p[24:40]), p[40 : 40+plen], true
	}
	return "", "", nil, false
}

// stream reassembles the flow's payload in sequence order, dropping
// retransmitted bytes. It fails on a hole.
func (f *tcpFlow) stream() ([]byte, error) {
	if len(f.segments) == 0 {
		return nil, nil
	}
	base := f.segments[0].seq
	if f.haveSYN {
		base = f.isn
	}
	segs := append([]tcpSegment(nil), f.segments...)
	sort.SliceStable(segs, func(i, j int) bool { return segs[i].seq-base < segs[j].seq-base })
	var out []byte
	for _, s := range segs {
		rel := int(s.seq - base)
		if rel > len(out) {
			return nil, fmt.Errorf("%s: hole at stream offset %d", f.key, len(out))
		}
		if end := rel + len(s.payload); end > len(out) {
			out = append(out, s.payload[len(out)-rel:]...)
		}
	}
	return out, nil
}
