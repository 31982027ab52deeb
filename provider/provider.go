// Package provider is the iWARP engine: the LLP stream, MPA negotiation,
// transmit and receive per QP, placement, the read responder and Terminate;
// and the provider CM verbs (connect, listen, accept, reject) plus a query
// call, on which the device-independent CM in rdmacm builds.
package provider

import (
	"net"
	"time"
)

// ConnParams is what an MPA exchange carries for the application: its
// private data (the MPA v2 IRD/ORD header already removed) and the
// IRD/ORD it asks for or was granted.
type ConnParams struct {
	PrivateData []byte
	IRD, ORD    uint8
}

// EventType says what happened to a connection.
type EventType int

// Connection events, as the CM maps them to RDMA_CM_EVENT_*.
const (
	// Established: MPA done, the QP is in RTS. On the responder it comes
	// only once the initiator's first FPDU (RTR) arrived.
	Established EventType = iota
	// Rejected: the peer answered with an MPA reject frame (Params carries
	// its private data), refused the TCP connection (Err is ECONNREFUSED),
	// or reset or closed it before its MPA reply (Err is ECONNRESET).
	Rejected
	// Unreachable: TCP connect failed or the MPA exchange timed out.
	Unreachable
	// ConnectError: the MPA exchange failed (bad frame, incompatible policy).
	ConnectError
	// Disconnected: the stream ended (graceful close, Terminate, error);
	// the QP is in ERR and its outstanding work flushed.
	Disconnected
)

// Event is delivered to the callback given to Connect or Accept, in order,
// from a goroutine of the engine.
type Event struct {
	Type   EventType
	Params ConnParams // Established: the peer's private data and the negotiated IRD/ORD; Rejected: the reject's private data
	Err    error
}

// Caps is the answer of the query-provider call.
type Caps struct {
	Name            string
	MPARevision     int  // the revision we send (1 or 2)
	CRC             bool // CRC requested by default
	Markers         bool // markers requested by default
	PeerToPeer      bool
	MaxPrivateData  int           // user private data we send at most
	ExchangeTimeout time.Duration // bound on the MPA exchange
}

// LocalAddr and RemoteAddr of an established endpoint.
type Addrs struct {
	Local, Remote *net.TCPAddr
}
