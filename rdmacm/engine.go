package rdmacm

import (
	"net"
	"time"

	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/verbs"
)

// Engine is what the CM needs from a provider's CM verbs. The default is the
// iWARP engine in package provider; tests substitute a fake.
type Engine interface {
	Connect(qp *verbs.QP, laddr, raddr *net.TCPAddr, p provider.ConnParams,
		timeout time.Duration, cb func(provider.Event)) (Endpoint, error)
	Listen(ln *net.TCPListener, cb func(Request)) Listener
}

// Endpoint is a connection the engine set up.
type Endpoint interface{ Disconnect() }

// Listener is an engine listener.
type Listener interface{ Close() }

// Request is an incoming connection request.
type Request interface {
	Params() provider.ConnParams
	Addrs() (local, remote *net.TCPAddr)
	Accept(qp *verbs.QP, p provider.ConnParams, cb func(provider.Event)) (Endpoint, error)
	Reject(privateData []byte) error
}

// DefaultEngine is used by ids created without an explicit engine.
var DefaultEngine Engine
