package provider

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// Run-time policy of the MPA exchange, read from the environment once per
// Connect/Listen/AttachSocket (tests pass a Policy directly).
//
//	GOIWARP_MPA_REV       MPA revision we send: 1 or 2 (default 2, RFC 6581
//	                      enhanced establishment with the IRD/ORD header, as siw).
//	GOIWARP_MPA_CRC       0 = do not ask for CRC, but use it when the peer asks
//	                      (RFC 5044: CRC is on if either side sets C) — default,
//	                      as siw's default; 1 = ask for CRC (set C);
//	                      2 = strict: ask for CRC and refuse a peer that does
//	                      not set C.
//	GOIWARP_MPA_MARKERS   0 (default) or 1: ask the peer to insert markers in
//	                      what it sends us (the M bit is per direction: we
//	                      insert markers only when the peer's M bit is set).
//	GOIWARP_P2P           0 (default) or 1: peer-to-peer mode (RFC 6581): the
//	                      initiator offers RTR types, the responder echoes the
//	                      one chosen, the initiator sends it as its first FPDU.
//	GOIWARP_RTR           RTR types the initiator offers in P2P mode, a comma
//	                      list of write, read, send (default "write,read", as
//	                      siw offers); the responder picks write, then read,
//	                      then send among those offered.
//	GOIWARP_MPA_V1_IRDORD 0 (default) or 1: with MPA revision 1, put the 8-byte
//	                      IRD/ORD prefix of the SMB Direct convention in front
//	                      of the private data and expect it from the peer.
//	GOIWARP_MPA_TIMEOUT   bound on the MPA exchange, a Go duration or seconds
//	                      (default 10s).
//	GOIWARP_MPA_PDMAX     most private-data bytes we send in total, MPA v2
//	                      header included (default 256, what siw and cxgb4
//	                      accept; at most 512).
//	GOIWARP_RNR_TIMEOUT   how long the receive path waits for a receive to be
//	                      posted when a Send (or Immediate Data) arrives and
//	                      none is (it stops reading the socket meanwhile: TCP
//	                      back-pressure); a Go duration or seconds (default
//	                      1s). 0: Terminate at once, as siw does.
//	GOIWARP_CONNECT_RETRY how long a connect whose TCP connection is refused
//	                      (nobody listens yet) tries again before it reports
//	                      REJECTED; a Go duration or seconds (default 1s).
//	                      0: report at once, as the kernel's iWARP CM does.
//	                      A connection the peer accepts and then closes or
//	                      resets before any byte of its MPA reply counts as
//	                      refused too.
//	GOIWARP_RESPONDER_HOLD without P2P, how long the responder keeps what the
//	                      application posts off the wire after its MPA reply
//	                      unless the initiator's first FPDU comes first; a Go
//	                      duration or seconds (default 100ms). 0: none.
//	GOIWARP_SHM           auto (default), 0 or 1: when both ends are goiwarp
//	                      processes of one user on one kernel and network
//	                      namespace, move the connection's FPDUs through
//	                      shared memory (shm.go); the MPA exchange on the
//	                      wire is unchanged. auto falls back to TCP silently
//	                      (a debug line says why), 0 never offers it, 1
//	                      fails a connection that cannot have it.
//	GOIWARP_SHM_RING      bytes of each direction's ring, a power of two
//	                      from 64 KiB to 256 MiB (default 4 MiB); the
//	                      initiator's value counts.
//	GOIWARP_SHM_DIRECT    1 (default) or 0: on a same-host connection, place
//	                      a lone small RDMA Write with process_vm_writev
//	                      (shmdirect.go); 0 sends it through the rings as an
//	                      FPDU.
//	GOIWARP_SHM_PTRACER   0 (default) or 1: where Yama's ptrace_scope is 1,
//	                      name a same-host peer as this process's ptracer
//	                      (PR_SET_PTRACER) so that it may place Writes
//	                      directly; it replaces the application's own
//	                      setting and grants the peer ptrace rights.
//	GOIWARP_PIN_RX        0 (default) or 1: let the receive thread of a
//	                      ping-pong take the poster's CPU out of its own
//	                      affinity (offcpu.go).
//	GOIWARP_RX_SPIN       how long the receive path goes on reading its
//	                      socket (or same-host ring) without blocking after
//	                      it found data no poller asked for, one connection
//	                      per process at a time (rxspin.go), and how long a
//	                      thread about to sleep on TCP connections for their
//	                      events looks first (waiter.go); a Go duration or
//	                      seconds (default 0: never spin).
//	GOIWARP_POLL_LEASE    how long the event loop leaves a connection to
//	                      application threads that poll it, or wait for its
//	                      events, before it looks whether they still come:
//	                      the longest a message waits when they stop
//	                      without arming a CQ, or between waits (rx.go,
//	                      waiter.go); a Go duration or seconds, more than 0
//	                      and at most 1s (default 1ms).
type Policy struct {
	Revision    int  // 1 or 2
	CRC         bool // set C in what we send
	CRCStrict   bool // refuse a peer whose frame has no C
	Markers     bool // set M: we want markers in what we receive
	P2P         bool
	RTR         rtrSet // offered (initiator) RTR types
	V1IRDORD    bool
	Timeout     time.Duration
	MaxPrivData int // total private data bytes we send at most
	// RNRTimeout bounds the wait for a receive buffer (0: none, Terminate
	// at once).
	RNRTimeout time.Duration
	// RefusedRetry is how long a refused TCP connect is tried again.
	RefusedRetry time.Duration
	// ResponderHold: see GOIWARP_RESPONDER_HOLD.
	ResponderHold time.Duration
	// QPPortBase is the first port of the per-process listeners of
	// connections set up without a CM (cmless.go); QPConnectTimeout bounds
	// such a connection's set-up, from RTR.
	QPPortBase       int
	QPConnectTimeout time.Duration
	// QPLinger: how long a CM-less QP whose peer closed the stream stays
	// up before it fails (streamEnded); cmless marks the connections it
	// makes.
	QPLinger time.Duration
	cmless   bool
	// SHM, ShmRing and ShmDirect: see GOIWARP_SHM, GOIWARP_SHM_RING and
	// GOIWARP_SHM_DIRECT.
	SHM       ShmMode
	ShmRing   int
	ShmDirect bool
	// ShmPtracer and PinRX: see GOIWARP_SHM_PTRACER and GOIWARP_PIN_RX,
	// the opt-ins to changing the process's ptracer and affinity.
	ShmPtracer bool
	PinRX      bool
	// RxSpin and PollLease: see GOIWARP_RX_SPIN and GOIWARP_POLL_LEASE.
	RxSpin    time.Duration
	PollLease time.Duration
}

// ShmMode is GOIWARP_SHM.
type ShmMode uint8

const (
	ShmAuto ShmMode = iota
	ShmOff
	ShmOn
)

// Bounds and default of GOIWARP_SHM_RING.
const (
	DefaultShmRing = 4 << 20
	minShmRing     = 64 << 10
	maxShmRing     = 256 << 20
)

// Defaults of GOIWARP_QP_PORT_BASE and GOIWARP_QP_CONNECT_TIMEOUT. The
// port range (DefaultQPPortBase + 0 .. 254) is just above Linux's default
// ephemeral range (32768-60999), so outgoing connections never take it,
// and clear of the ports applications usually pick (perftest's 18515,
// qperf's 19765; 18600, the first choice here, met our own examples').
const (
	DefaultQPPortBase       = 61000
	DefaultQPConnectTimeout = 30 * time.Second
	DefaultQPLinger         = time.Second
)

// DefaultRxSpin is GOIWARP_RX_SPIN's default: off (rxspin.go).
const DefaultRxSpin = 0

// DefaultPollLease is GOIWARP_POLL_LEASE's default: long enough that the
// looks at a connection an application thread is polling cost nothing next
// to the polling, short enough to be the worst wait of a message when the
// application stops polling without arming a CQ.
const DefaultPollLease = time.Millisecond

// DefaultRNRTimeout is GOIWARP_RNR_TIMEOUT's default.
const DefaultRNRTimeout = time.Second

// DefaultRefusedRetry is GOIWARP_CONNECT_RETRY's default: a server that hands
// its port from one listening id to the next (perftest -R: a control
// connection, then the data connections on the same port, while its client
// already connects) has a moment with nobody listening, longer on a loaded
// machine.
const DefaultRefusedRetry = time.Second

// DefaultResponderHold is GOIWARP_RESPONDER_HOLD's default. RFC 5044 (7.1.2)
// has an MPA responder send nothing before the initiator's first FPDU; an
// initiator may read past its reply's private data (siw 6.1 does, and fails
// the connection with EPROTO when an FPDU is already there). Applications
// whose server speaks first (perftest's write_lat) never get a first FPDU,
// so the rule is kept only this long: enough for a peer to take its reply
// in, short enough to be a one-time cost.
const DefaultResponderHold = 100 * time.Millisecond

// rtrSet is a set of RFC 6581 RTR message types.
type rtrSet uint8

const (
	rtrWrite rtrSet = 1 << iota
	rtrRead
	rtrSend
)

// DefaultPolicy is the siw-compatible default.
func DefaultPolicy() Policy {
	return Policy{Revision: 2, RTR: rtrWrite | rtrRead, Timeout: 10 * time.Second, MaxPrivData: 256,
		RNRTimeout: DefaultRNRTimeout, RefusedRetry: DefaultRefusedRetry, ResponderHold: DefaultResponderHold,
		QPPortBase: DefaultQPPortBase, QPConnectTimeout: DefaultQPConnectTimeout, QPLinger: DefaultQPLinger,
		SHM: defaultShm, ShmRing: DefaultShmRing, ShmDirect: true, RxSpin: DefaultRxSpin,
		PollLease: DefaultPollLease}
}

// defaultShm is GOIWARP_SHM's default: the fast path where it is permitted
// (the package's tests run with GOIWARP_SHM=0 set it to ShmOff, so that the
// whole suite also covers TCP).
var defaultShm = ShmAuto

// PolicyFromEnv reads the GOIWARP_* variables above over DefaultPolicy.
// Bad values are logged and ignored.
func PolicyFromEnv() Policy {
	p := DefaultPolicy()
	env := func(name string, parse func(string) bool) {
		if v, ok := os.LookupEnv(name); ok && strings.TrimSpace(v) != "" {
			if !parse(strings.TrimSpace(strings.ToLower(v))) {
				Warnf("ignoring %s=%q", name, v)
			}
		}
	}
	flag := func(dst *bool) func(string) bool {
		return func(v string) bool {
			switch v {
			case "0", "off", "no", "false":
				*dst = false
			case "1", "on", "yes", "true":
				*dst = true
			default:
				return false
			}
			return true
		}
	}
	// duration reads a Go duration ("1.5s") or a number of seconds.
	duration := func(v string) (time.Duration, bool) {
		if d, err := time.ParseDuration(v); err == nil {
			return d, true
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, false
		}
		return time.Duration(n * float64(time.Second)), true
	}
	// durationInto parses a duration into dst: positive, or also 0 where
	// zeroOK (0 meaning none, or at once).
	durationInto := func(dst *time.Duration, zeroOK bool) func(string) bool {
		return func(v string) bool {
			d, ok := duration(v)
			if !ok || d < 0 || d == 0 && !zeroOK {
				return false
			}
			*dst = d
			return true
		}
	}
	env("GOIWARP_MPA_REV", func(v string) bool {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 2 {
			return false
		}
		p.Revision = n
		return true
	})
	env("GOIWARP_MPA_CRC", func(v string) bool {
		switch v {
		case "0", "off":
			p.CRC, p.CRCStrict = false, false
		case "1", "on":
			p.CRC, p.CRCStrict = true, false
		case "2", "strict", "required":
			p.CRC, p.CRCStrict = true, true
		default:
			return false
		}
		return true
	})
	env("GOIWARP_MPA_MARKERS", flag(&p.Markers))
	env("GOIWARP_P2P", flag(&p.P2P))
	env("GOIWARP_MPA_V1_IRDORD", flag(&p.V1IRDORD))
	env("GOIWARP_RTR", func(v string) bool {
		var s rtrSet
		for _, f := range strings.Split(v, ",") {
			switch strings.TrimSpace(f) {
			case "write":
				s |= rtrWrite
			case "read":
				s |= rtrRead
			case "send":
				s |= rtrSend
			default:
				return false
			}
		}
		if s == 0 {
			return false
		}
		p.RTR = s
		return true
	})
	env("GOIWARP_MPA_TIMEOUT", durationInto(&p.Timeout, false))
	env("GOIWARP_RNR_TIMEOUT", durationInto(&p.RNRTimeout, true))
	env("GOIWARP_CONNECT_RETRY", durationInto(&p.RefusedRetry, true))
	env("GOIWARP_RESPONDER_HOLD", durationInto(&p.ResponderHold, true))
	env("GOIWARP_QP_PORT_BASE", func(v string) bool {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n+qpnSlots > 65536 {
			return false
		}
		p.QPPortBase = n
		return true
	})
	env("GOIWARP_QP_CONNECT_TIMEOUT", durationInto(&p.QPConnectTimeout, false))
	env("GOIWARP_QP_LINGER", durationInto(&p.QPLinger, true))
	env("GOIWARP_SHM", func(v string) bool {
		switch v {
		case "auto":
			p.SHM = ShmAuto
		case "0", "off", "no", "false":
			p.SHM = ShmOff
		case "1", "on", "yes", "true":
			p.SHM = ShmOn
		default:
			return false
		}
		return true
	})
	env("GOIWARP_SHM_DIRECT", flag(&p.ShmDirect))
	env("GOIWARP_SHM_PTRACER", flag(&p.ShmPtracer))
	env("GOIWARP_PIN_RX", flag(&p.PinRX))
	env("GOIWARP_RX_SPIN", durationInto(&p.RxSpin, true))
	env("GOIWARP_POLL_LEASE", func(v string) bool {
		var d time.Duration
		if !durationInto(&d, false)(v) || d > time.Second {
			return false
		}
		p.PollLease = d
		return true
	})
	env("GOIWARP_SHM_RING", func(v string) bool {
		n, err := strconv.Atoi(v)
		if err != nil || n < minShmRing || n > maxShmRing || n&(n-1) != 0 {
			return false
		}
		p.ShmRing = n
		return true
	})
	env("GOIWARP_MPA_PDMAX", func(v string) bool {
		n, err := strconv.Atoi(v)
		if err != nil || n < 8 || n > 512 {
			return false
		}
		p.MaxPrivData = n
		return true
	})
	return p
}

// Query describes the provider with the current environment's policy.
func Query() Caps {
	p := PolicyFromEnv()
	return Caps{
		Name:            "goiwarp",
		MPARevision:     p.Revision,
		CRC:             p.CRC,
		Markers:         p.Markers,
		PeerToPeer:      p.P2P,
		MaxPrivateData:  p.maxUserPrivData(),
		ExchangeTimeout: p.Timeout,
	}
}

// prefixLen is the length of the IRD/ORD header we put in front of the
// user's private data.
func (p *Policy) prefixLen() int {
	switch {
	case p.Revision == 2:
		return 4
	case p.V1IRDORD:
		return 8
	}
	return 0
}

func (p *Policy) maxUserPrivData() int { return p.MaxPrivData - p.prefixLen() }
