package verbs

import "sync/atomic"

// Peer is what ibv_modify_qp to RTR says about the other end of a QP that
// is connected without a CM, as InfiniBand programs do it: the address
// vector (a GID, or a LID when the GRH is absent), the peer's QP number and
// the PSNs both sides exchanged. iWARP has no PSNs; they are kept so that
// ibv_query_qp reports what the program set.
type Peer struct {
	Global    bool     // ah_attr.is_global: DGID and SGIDIndex are valid
	DGID      [16]byte // the peer's GID (an IP-form entry of its table)
	SGIDIndex uint8    // our GID the peer was given
	DLID      uint16
	DestQPN   uint32
	RQPSN     uint32
	SQPSN     uint32
}

// Connector sets up the LLP stream of QPs whose programs move them through
// INIT, RTR and RTS with ibv_modify_qp instead of using a CM. The provider
// implements it (verbs cannot import provider); capi installs it with
// SetConnector. Without one, QP numbers count from 1 and RTR with an
// address vector is EOPNOTSUPP.
type Connector interface {
	// Number gives a new QP its number; the number tells peers where to
	// reach it.
	Number() uint32
	// Release takes back the number of a destroyed QP.
	Release(qpn uint32)
	// Start begins connecting qp (just moved to RTR) to p. It checks p at
	// once and reports the connection's progress through qp: Attach when
	// the stream is up, SetError (and QP_FATAL) when it cannot be.
	Start(qp *QP, p Peer) error
	// Ready says the application moved qp to RTS (its ORD is known).
	Ready(qp *QP)
	// Cancel abandons what Start began; when it returns, nothing of the
	// attempt touches qp any more (a connection already attached is the
	// QP's transport and is closed by the QP).
	Cancel(qp *QP)
}

type connectorHolder struct{ c Connector }

var connector atomic.Pointer[connectorHolder]

// SetConnector installs c (nil removes it).
func SetConnector(c Connector) {
	if c == nil {
		connector.Store(nil)
		return
	}
	connector.Store(&connectorHolder{c: c})
}

func currentConnector() Connector {
	if h := connector.Load(); h != nil {
		return h.c
	}
	return nil
}
