package verbs

import "sync/atomic"

func atomicStore(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
