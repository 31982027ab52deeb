package provider

import (
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Counters are the statistics of one device (giw_<ifname>), shared by every
// endpoint whose QP belongs to it: plain atomics, cheap enough for the data
// path. All methods are safe on a nil *Counters (endpoints of tests without a
// device), where they do nothing.
//
// Who counts what:
//
//	AddTx(fpdus, bytes)  the transmitter, per FPDU framed / bytes written to
//	                     the socket (MPA framing, markers and CRC included)
//	AddRx(fpdus, bytes)  the receiver, per FPDU accepted (CRC checked) and
//	                     its bytes on the wire
//	TermSent / TermRecv  a Terminate written to / read from the stream
//	connections          counted when an endpoint reaches RTS (Endpoint.start)
//
// Retransmits are the kernel's: TCP_INFO tcpi_total_retrans, summed over the
// device's live connections when Snapshot samples them; a connection that
// ended contributes the value of its last sample.
type Counters struct {
	txFPDUs, txBytes atomic.Uint64
	rxFPDUs, rxBytes atomic.Uint64
	termTx, termRx   atomic.Uint64
	conns            atomic.Uint64 // connections established, total
	active           atomic.Int64  // connections live now

	mu       sync.Mutex
	live     map[*Endpoint]uint64 // last sampled tcpi_total_retrans
	retrDone uint64               // retransmits of ended connections
}

// CounterSnapshot is a copy of a device's counters.
type CounterSnapshot struct {
	Device            string
	TxFPDUs, TxBytes  uint64
	RxFPDUs, RxBytes  uint64
	TerminatesSent    uint64
	TerminatesRecv    uint64
	Retransmits       uint64
	Connections       uint64 // established since the process started
	ActiveConnections uint64 // live now
}

var (
	countersMu sync.Mutex
	counters   = map[string]*Counters{}
)

// DeviceCounters returns the counters of device name, creating them.
func DeviceCounters(name string) *Counters {
	countersMu.Lock()
	defer countersMu.Unlock()
	c := counters[name]
	if c == nil {
		c = &Counters{live: map[*Endpoint]uint64{}}
		counters[name] = c
	}
	return c
}

// AllCounters snapshots the counters of every device that had an endpoint,
// sorted by device name.
func AllCounters() []CounterSnapshot {
	countersMu.Lock()
	names := make([]string, 0, len(counters))
	for n := range counters {
		names = append(names, n)
	}
	countersMu.Unlock()
	sort.Strings(names)
	out := make([]CounterSnapshot, 0, len(names))
	for _, n := range names {
		out = append(out, DeviceCounters(n).Snapshot(n))
	}
	return out
}

// AddTx counts FPDUs framed and bytes written by the transmitter.
func (c *Counters) AddTx(fpdus, bytes uint64) {
	if c == nil {
		return
	}
	if fpdus != 0 {
		c.txFPDUs.Add(fpdus)
	}
	if bytes != 0 {
		c.txBytes.Add(bytes)
	}
}

// AddRx counts FPDUs and bytes the receiver accepted.
func (c *Counters) AddRx(fpdus, bytes uint64) {
	if c == nil {
		return
	}
	if fpdus != 0 {
		c.rxFPDUs.Add(fpdus)
	}
	if bytes != 0 {
		c.rxBytes.Add(bytes)
	}
}

// TermSent counts a Terminate message written to the stream.
func (c *Counters) TermSent() {
	if c != nil {
		c.termTx.Add(1)
	}
}

// TermRecv counts a Terminate message received.
func (c *Counters) TermRecv() {
	if c != nil {
		c.termRx.Add(1)
	}
}

// connUp registers an endpoint that reached RTS.
func (c *Counters) connUp(e *Endpoint) {
	if c == nil {
		return
	}
	c.conns.Add(1)
	c.active.Add(1)
	c.mu.Lock()
	c.live[e] = 0
	c.mu.Unlock()
}

// connDown unregisters it (once), keeping its retransmits.
func (c *Counters) connDown(e *Endpoint) {
	if c == nil {
		return
	}
	r, ok := e.sampleRetrans()
	c.mu.Lock()
	last, live := c.live[e]
	if live {
		if ok && r > last {
			last = r
		}
		c.retrDone += last
		delete(c.live, e)
	}
	c.mu.Unlock()
	if live {
		c.active.Add(-1)
	}
}

// connFailed undoes connUp for an endpoint that never reached RTS.
func (c *Counters) connFailed(e *Endpoint) {
	c.connDown(e)
	c.conns.Add(^uint64(0))
}

// Snapshot copies the counters, sampling the live connections' TCP
// retransmits.
func (c *Counters) Snapshot(device string) CounterSnapshot {
	s := CounterSnapshot{Device: device}
	if c == nil {
		return s
	}
	c.mu.Lock()
	eps := make([]*Endpoint, 0, len(c.live))
	for e := range c.live {
		eps = append(eps, e)
	}
	c.mu.Unlock()
	samples := make(map[*Endpoint]uint64, len(eps))
	for _, e := range eps {
		if r, ok := e.sampleRetrans(); ok {
			samples[e] = r
		}
	}
	c.mu.Lock()
	retr := c.retrDone
	for e, last := range c.live {
		if r, ok := samples[e]; ok && r > last {
			last = r
			c.live[e] = r
		}
		retr += last
	}
	c.mu.Unlock()
	s.TxFPDUs, s.TxBytes = c.txFPDUs.Load(), c.txBytes.Load()
	s.RxFPDUs, s.RxBytes = c.rxFPDUs.Load(), c.rxBytes.Load()
	s.TerminatesSent, s.TerminatesRecv = c.termTx.Load(), c.termRx.Load()
	s.Retransmits = retr
	s.Connections = c.conns.Load()
	s.ActiveConnections = uint64(max(c.active.Load(), 0))
	return s
}

// sampleRetrans reads tcpi_total_retrans of the endpoint's socket.
func (e *Endpoint) sampleRetrans() (uint64, bool) {
	e.mu.Lock()
	rc := e.rc
	e.mu.Unlock()
	if rc == nil {
		return 0, false
	}
	var v uint64
	ok := false
	_ = rc.Control(func(fd uintptr) {
		if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			v, ok = uint64(ti.Total_retrans), true
		}
	})
	return v, ok
}
