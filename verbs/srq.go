package verbs

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SRQ is a shared receive queue. Several QPs' receive paths take from it.
type SRQ struct {
	Ctx    *Context
	PD     *PD
	Ring   *Ring
	MaxSGE uint32
	Cookie uintptr

	mu    sync.Mutex // serialises consumers
	limit atomic.Uint32
	qps   map[*QP]bool
}

// CreateSRQ creates a shared receive queue.
func (c *Context) CreateSRQ(pd *PD, maxWR, maxSGE, limit uint32, cookie uintptr) (*SRQ, error) {
	if pd == nil || maxWR < 1 || maxWR > MaxSRQWR || maxSGE > MaxSGE || limit > maxWR {
		return nil, unix.EINVAL
	}
	r, err := newRing(int(maxWR), unsafe.Sizeof(RQE{}))
	if err != nil {
		return nil, err
	}
	s := &SRQ{Ctx: c, PD: pd, Ring: r, MaxSGE: max(maxSGE, 1), Cookie: cookie, qps: map[*QP]bool{}}
	s.limit.Store(limit)
	return s, nil
}

// Values of enum ibv_srq_attr_mask.
const (
	SRQAttrMaxWR = 1 << 0
	SRQAttrLimit = 1 << 1
)

// Modify arms the limit event (resizing is not supported: EINVAL as siw does).
func (s *SRQ) Modify(maxWR, limit uint32, mask int) error {
	if mask&SRQAttrMaxWR != 0 {
		return unix.EINVAL
	}
	if mask&SRQAttrLimit != 0 {
		if limit > s.Ring.Size() {
			return unix.EINVAL
		}
		s.limit.Store(limit)
	}
	return nil
}

// Limit is the armed limit, 0 when disarmed.
func (s *SRQ) Limit() uint32 { return s.limit.Load() }

// Attach records a QP as a user of the SRQ.
func (s *SRQ) attach(qp *QP) {
	s.mu.Lock()
	s.qps[qp] = true
	s.mu.Unlock()
}

// detach forgets qp; it reports whether qp was attached (its last WQE event is due).
func (s *SRQ) detach(qp *QP) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.qps[qp]
	delete(s.qps, qp)
	return was
}

func (s *SRQ) take() (RQE, bool) {
	s.mu.Lock()
	r := s.Ring
	c := r.cons()
	if c == r.prod() {
		s.mu.Unlock()
		return RQE{}, false
	}
	e := *(*RQE)(r.entry(c))
	r.setCons(c + 1)
	left := r.prod() - (c + 1)
	fire := false
	if lim := s.limit.Load(); lim != 0 && left < lim && s.limit.CompareAndSwap(lim, 0) {
		fire = true
	}
	s.mu.Unlock()
	if fire {
		s.Ctx.PostAsync(EventSRQLimitReached, s.Cookie)
	}
	return e, true
}

// PostDoorbell is capi's call after post_srq_recv found the RNRWait flag
// set: it wakes the receive paths of the QPs using the SRQ.
func (s *SRQ) PostDoorbell() {
	s.mu.Lock()
	qps := make([]*QP, 0, len(s.qps))
	for qp := range s.qps {
		qps = append(qps, qp)
	}
	s.mu.Unlock()
	// Outside s.mu: a receive path woken here may read on at once, on this
	// thread, and take from the SRQ.
	for _, qp := range qps {
		qp.wakeRecv()
	}
}

// Destroy frees the ring.
func (s *SRQ) Destroy() { s.Ring.free() }
