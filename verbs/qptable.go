package verbs

import "sync"

// The QP table and the modifies siw answers differently from IB, for QPs
// that applications create themselves and connect through the CM.

// qpTable finds live QPs by number, as a device's QP table does (siw's
// siw_qp_id2obj): the CM binds a connection to the QP an application created
// itself and named only by conn_param.qp_num.
var qpTable sync.Map // uint32 -> *QP

// QPByNum returns the live QP numbered n, or nil.
func QPByNum(n uint32) *QP {
	if v, ok := qpTable.Load(n); ok {
		return v.(*QP)
	}
	return nil
}

// backToSetup: a connected iWARP QP ignores a move back to INIT or RTR, as
// siw does. Programs that drive a QP of their own replay the
// rdma_init_qp_attr sequence INIT, RTR, RTS once ESTABLISHED (rping -q,
// cmtime), while the CM put the QP in RTS already.
func backToSetup(cur, to QPState) bool {
	return (cur == QPSRTS || cur == QPSSQD) && (to == QPSInit || to == QPSRTR)
}
