package verbs

import "sync"

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
