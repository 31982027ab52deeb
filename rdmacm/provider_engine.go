package rdmacm

import (
	"net"
	"time"

	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/verbs"
)

// iwarpEngine is the provider's iWARP engine behind the Engine interface.
// Connect and Accept return a nil Endpoint on error, not a nil
// *provider.Endpoint inside a non-nil interface: hence the explicit checks.
type iwarpEngine struct{}

func (iwarpEngine) Connect(qp *verbs.QP, laddr, raddr *net.TCPAddr, p provider.ConnParams,
	timeout time.Duration, cb func(provider.Event)) (Endpoint, error) {
	ep, err := provider.Connect(qp, laddr, raddr, p, timeout, cb)
	if err != nil {
		return nil, err
	}
	return ep, nil
}

func (iwarpEngine) Listen(ln *net.TCPListener, cb func(Request)) Listener {
	return provider.Listen(ln, func(r *provider.Request) { cb(providerRequest{r}) })
}

type providerRequest struct{ r *provider.Request }

func (p providerRequest) Params() provider.ConnParams { return p.r.Params }

func (p providerRequest) Addrs() (local, remote *net.TCPAddr) { return p.r.Local, p.r.Remote }

func (p providerRequest) Accept(qp *verbs.QP, cp provider.ConnParams, cb func(provider.Event)) (Endpoint, error) {
	ep, err := p.r.Accept(qp, cp, cb)
	if err != nil {
		return nil, err
	}
	return ep, nil
}

func (p providerRequest) Reject(pd []byte) error { return p.r.Reject(pd) }

func init() { DefaultEngine = iwarpEngine{} }
