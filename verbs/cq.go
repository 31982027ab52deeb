package verbs

import (
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CompChannel is a completion channel: a pipe whose read end the application
// polls. Each record is the address of the C struct ibv_cq that fired.
type CompChannel struct {
	r, w int

	// The CQs bound to the channel, copy on write under mu, for a thread
	// about to sleep on it (WaitFDs).
	mu  sync.Mutex
	cqs atomic.Pointer[[]*CQ]

	// fired counts the events written (FireCount), where the C side
	// counts those it read: an event waiting is read at once, without a
	// system call to look.
	fired *atomic.Uint64
}

// FireCount has the channel count the events it writes in *n (memory
// that outlives the channel).
func (ch *CompChannel) FireCount(n *atomic.Uint64) { ch.fired = n }

// WaitReader is a Transport whose arrivals a thread waiting on a completion
// channel can read itself (ibv_get_cq_event): the application's own call
// makes the progress it waits for, one thread woken instead of the
// engine's and then the application's.
type WaitReader interface {
	// WaitFD is the descriptor whose readability means arrivals for the
	// waiting thread to read, or -1; begin says a thread is about to
	// sleep on it (the engine may then leave its reading to such threads).
	WaitFD(begin bool) int
	// WaitRead reads and processes what arrived, as the engine would; it
	// reports whether the thread should wait on the descriptor again
	// (false: somebody else reads it now).
	WaitRead() bool
	// WaitSpin is how long a thread about to sleep on the descriptor
	// looks for arrivals first without sleeping (0: it sleeps at once).
	WaitSpin() time.Duration
}

func (ch *CompChannel) bind(cq *CQ, on bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var l []*CQ
	if p := ch.cqs.Load(); p != nil {
		for _, c := range *p {
			if c != cq {
				l = append(l, c)
			}
		}
	}
	if on {
		l = append(l, cq)
	}
	ch.cqs.Store(&l)
}

// eachWaitReader calls fn for the WaitReaders of the QPs completing into
// the channel's armed CQs (the ones whose events the caller waits for)
// until fn returns false.
func (ch *CompChannel) eachWaitReader(fn func(WaitReader) bool) {
	p := ch.cqs.Load()
	if p == nil {
		return
	}
	for _, cq := range *p {
		if !cq.armed.Load() {
			continue
		}
		qps := cq.qps.Load()
		if qps == nil {
			continue
		}
		for _, qp := range *qps {
			if h := qp.prog.Load(); h != nil {
				if w, ok := h.t.(WaitReader); ok && !fn(w) {
					return
				}
			}
		}
	}
}

// WaitFDs fills fds with the descriptors a thread about to sleep on the
// channel may wait on beside it, and read itself when they turn readable
// (WaitRead); it returns how many, and the longest WaitSpin of theirs.
func (ch *CompChannel) WaitFDs(fds []int32) (n int, spin time.Duration) {
	ch.eachWaitReader(func(w WaitReader) bool {
		if n == len(fds) {
			return false
		}
		if fd := w.WaitFD(true); fd >= 0 && !slices.Contains(fds[:n], int32(fd)) {
			fds[n] = int32(fd)
			n++
			spin = max(spin, w.WaitSpin())
		}
		return true
	})
	return n, spin
}

// WaitRead reads the connection whose descriptor WaitFDs gave as fd; it
// reports whether the thread should wait on it again (false: somebody else
// reads it, or it is no longer the channel's to read).
func (ch *CompChannel) WaitRead(fd int32) bool {
	did := false
	ch.eachWaitReader(func(w WaitReader) bool {
		if w.WaitFD(false) != int(fd) {
			return true
		}
		did = w.WaitRead()
		return false
	})
	return did
}

// NewCompChannel creates a completion channel.
func NewCompChannel() (*CompChannel, error) {
	r, w, err := eventPipe()
	if err != nil {
		return nil, err
	}
	return &CompChannel{r: r, w: w}, nil
}

// FD is the application-visible fd of the channel.
func (ch *CompChannel) FD() int { return ch.r }

// Close closes both ends.
func (ch *CompChannel) Close() {
	unix.Close(ch.r)
	unix.Close(ch.w)
}

func (ch *CompChannel) signal(cookie uintptr) {
	var rec [8]byte
	binary.NativeEndian.PutUint64(rec[:], uint64(cookie))
	if ch.fired != nil {
		ch.fired.Add(1) // before the write: a reader that sees it waits for the record
	}
	if n, _ := unix.Write(ch.w, rec[:]); n != len(rec) && ch.fired != nil {
		ch.fired.Add(^uint64(0)) // the pipe is full: the event is lost
	}
}

// CQ is a completion queue. The engine produces CQEs, capi's poll_cq consumes.
type CQ struct {
	Ctx    *Context
	Ring   *Ring
	Chan   *CompChannel // may be nil
	Cookie uintptr      // address of the C struct ibv_cq, for events

	mu sync.Mutex // serialises producers (the QPs completing into this CQ)

	// The QPs completing into this CQ (send or receive side), copy on write
	// under regMu, for the progress hook poll_cq calls when it finds the CQ
	// empty.
	regMu sync.Mutex
	qps   atomic.Pointer[[]*QP]

	// armed: req_notify_cq armed the CQ (Armed) and no completion fired it
	// since; the application waits for events rather than polls.
	armed atomic.Bool

	turn schedTurn // of the threads that poll it or post to its QPs

	// emptyPolls counts the polls that found the CQ empty and came to the
	// engine (Progress); with the ring's consumer index it tells whether
	// the application looked at the CQ since some earlier moment (Looked).
	// live is Ring for readers without cq.mu; a ring Resize replaced stays
	// mapped (retired) until Destroy, so such a reader never touches
	// unmapped memory.
	emptyPolls atomic.Uint32
	live       atomic.Pointer[Ring]
	retired    []*Ring
}

// Looked changes whenever the application polls the CQ: a poll that finds
// it empty (Progress) or takes a completion from the ring.
func (cq *CQ) Looked() uint64 {
	return uint64(cq.emptyPolls.Load())<<32 | uint64(cq.live.Load().cons())
}

func (cq *CQ) register(qp *QP) {
	cq.regMu.Lock()
	var l []*QP
	if p := cq.qps.Load(); p != nil {
		l = append(l, *p...)
	}
	l = append(l, qp)
	cq.qps.Store(&l)
	cq.updateActiveLocked()
	cq.regMu.Unlock()
}

func (cq *CQ) unregister(qp *QP) {
	cq.regMu.Lock()
	var l []*QP
	if p := cq.qps.Load(); p != nil {
		for _, q := range *p {
			if q != qp {
				l = append(l, q)
			}
		}
	}
	cq.qps.Store(&l)
	cq.updateActiveLocked()
	cq.regMu.Unlock()
}

// updateActive publishes in the ring header how many registered QPs have a
// connection attached: the C poller calls Progress only while it is nonzero.
func (cq *CQ) updateActive() {
	cq.regMu.Lock()
	cq.updateActiveLocked()
	cq.regMu.Unlock()
}

func (cq *CQ) updateActiveLocked() {
	n := uint32(0)
	if p := cq.qps.Load(); p != nil {
		for _, q := range *p {
			if q.prog.Load() != nil {
				n++
			}
		}
	}
	cq.mu.Lock()
	if cq.Ring.mem != nil {
		atomic.StoreUint32(&cq.Ring.hdr.Active, n)
	}
	cq.mu.Unlock()
}

// Progress is the hook poll_cq calls when it found the CQ empty: each
// connected QP completing into this CQ makes non-blocking progress (reads
// what its socket holds, places it, completes it). It reports whether any
// did something.
func (cq *CQ) Progress() bool {
	cq.turn.tick()
	cq.emptyPolls.Add(1)
	p := cq.qps.Load()
	if p == nil {
		return false
	}
	did := false
	for _, qp := range *p {
		if h := qp.prog.Load(); h != nil && h.t.Progress() {
			did = true
		}
	}
	if !did {
		did = progressing.help(cq)
	}
	return did
}

// Armed is the hook req_notify_cq calls while connected QPs complete into
// the CQ: the application is about to sleep on the channel.
func (cq *CQ) Armed() {
	cq.armed.Store(true)
	if p := cq.qps.Load(); p != nil {
		for _, qp := range *p {
			if h := qp.prog.Load(); h != nil {
				h.t.Armed()
			}
		}
	}
}

// A thread that spins in poll_cq, or posts a send, waits for its answer
// and posts again, keeps its P between calls (to the runtime it is in a
// system call), and that P never schedules: its schedtick stands still.
// sysmon takes a P whose schedtick stood still for 10 ms for one running a
// goroutine that will not yield, hands it to another thread, and then wakes
// every 20 us for a millisecond or more; on a machine whose cores the
// spinning threads hold, each of those wake-ups preempts one of them
// (ib_send_lat: about 100 such retakes and 1,000 sysmon wake-ups a second
// per process, a share of its 99 % tail; ib_write_lat, whose target calls
// in only to post, 2,400-4,000). A thread that yields its P every turnEvery
// moves schedtick on, and sysmon stays asleep.
const (
	turnCheck = 256 // calls between looks at the clock
	turnEvery = 5 * time.Millisecond
)

var turnEpoch = time.Now()

// schedTurn is a CQ's: CQ.Progress and the Doorbell of a QP that completes
// sends into it tick it.
type schedTurn struct {
	calls atomic.Uint32
	at    atomic.Int64 // when a caller last yielded its P (ns since turnEpoch)
}

func (s *schedTurn) tick() {
	if s.calls.Add(1)%turnCheck != 0 {
		return
	}
	now := int64(time.Since(turnEpoch))
	last := s.at.Load()
	if now-last >= int64(turnEvery) && s.at.CompareAndSwap(last, now) {
		runtime.Gosched()
	}
}

// progressing lists every QP of the process that has a connection attached,
// so that a poller whose own QPs are quiet helps the others: a program may
// spin on one CQ while its data arrives on a QP of another (perftest -R
// servers spin on the CQ of their control connection while the data QP
// streams), and on a machine whose cores the spinning threads hold, the RX
// goroutine would otherwise wait for a time slice (ib_write_bw -R ran at
// 0.4x of the same test connected without the CM).
var progressing progressList

type progressList struct {
	mu   sync.Mutex
	qps  atomic.Pointer[[]*QP] // copy on write under mu
	next atomic.Uint32         // where the next helper starts
}

// helpPerPoll bounds how many other QPs one empty poll visits: a quiet QP
// costs an atomic load (Endpoint.Progress stops reading an idle socket), so
// a process with many connections pays little per poll, and each is still
// visited every len/helpPerPoll empty polls.
const helpPerPoll = 4

func (l *progressList) add(qp *QP) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n []*QP
	if p := l.qps.Load(); p != nil {
		for _, q := range *p {
			if q == qp {
				return
			}
		}
		n = append(n, *p...)
	}
	n = append(n, qp)
	l.qps.Store(&n)
}

func (l *progressList) remove(qp *QP) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.qps.Load()
	if p == nil {
		return
	}
	n := make([]*QP, 0, len(*p))
	for _, q := range *p {
		if q != qp {
			n = append(n, q)
		}
	}
	l.qps.Store(&n)
}

// help makes progress on up to helpPerPoll QPs that do not complete into
// cq (whose own QPs were just visited), round robin.
func (l *progressList) help(cq *CQ) bool {
	p := l.qps.Load()
	if p == nil || len(*p) == 0 {
		return false
	}
	qps := *p
	start := int(l.next.Add(helpPerPoll))
	did := false
	for i := range min(helpPerPoll, len(qps)) {
		qp := qps[(start+i)%len(qps)]
		if qp.SendCQ == cq || qp.RecvCQ == cq {
			continue
		}
		if h := qp.prog.Load(); h != nil && h.t.Progress() {
			did = true
		}
	}
	return did
}

// CreateCQ creates a CQ with room for at least cqe entries.
func (c *Context) CreateCQ(cqe int, ch *CompChannel, cookie uintptr) (*CQ, error) {
	if cqe < 1 || cqe > MaxCQE {
		return nil, unix.EINVAL
	}
	r, err := newRing(cqe, unsafe.Sizeof(CQE{}))
	if err != nil {
		return nil, err
	}
	cq := &CQ{Ctx: c, Ring: r, Chan: ch, Cookie: cookie}
	cq.live.Store(r)
	if ch != nil {
		ch.bind(cq, true)
	}
	return cq, nil
}

// Resize replaces the ring by a bigger one (the old one stays mapped until
// Destroy: see live); the caller (capi) holds the
// poller's lock so nobody consumes meanwhile. Pending CQEs are moved over.
func (cq *CQ) Resize(cqe int) error {
	if cqe < 1 || cqe > MaxCQE {
		return unix.EINVAL
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	old := cq.Ring
	pending := old.prod() - old.cons()
	if uint32(cqe) < pending {
		return unix.EINVAL
	}
	r, err := newRing(cqe, unsafe.Sizeof(CQE{}))
	if err != nil {
		return err
	}
	for i := uint32(0); i < pending; i++ {
		*(*CQE)(r.entry(i)) = *(*CQE)(old.entry(old.cons() + i))
	}
	r.setProd(pending)
	r.hdr.Notify = atomic.LoadUint32(&old.hdr.Notify)
	r.hdr.Active = atomic.LoadUint32(&old.hdr.Active)
	cq.Ring = r
	cq.live.Store(r)
	cq.retired = append(cq.retired, old)
	return nil
}

// Push appends a completion. It reports false when the CQ overflowed; the
// completion is lost then, the CQ is in error, and IBV_EVENT_CQ_ERR is raised.
func (cq *CQ) Push(e *CQE, solicited bool) bool {
	cq.mu.Lock()
	r := cq.Ring
	p := r.prod()
	if p-r.cons() >= r.Size() {
		first := atomic.SwapUint32(&r.hdr.Overflow, 1) == 0
		cq.mu.Unlock()
		if first {
			cq.Ctx.PostAsync(EventCQErr, cq.Cookie)
		}
		return false
	}
	*(*CQE)(r.entry(p)) = *e
	r.setProd(p + 1)
	// Disarm under cq.mu: Resize swaps (and unmaps) the ring under it.
	fire := cq.Chan != nil && disarm(&r.hdr.Notify, solicited || e.Status != WCSuccess)
	cq.mu.Unlock()
	if fire {
		cq.armed.Store(false)
		cq.Chan.signal(cq.Cookie)
	}
	return true
}

// disarm consumes the request of req_notify_cq that this completion fires
// (any armed request, or only "next" when the completion is not solicited).
func disarm(n *uint32, solicited bool) bool {
	for {
		armed := atomic.LoadUint32(n)
		if armed == notifyNone || (armed == notifySolicited && !solicited) {
			return false
		}
		if atomic.CompareAndSwapUint32(n, armed, notifyNone) {
			return true
		}
	}
}

const (
	notifyNone      = 0
	notifySolicited = 1
	notifyNext      = 2
)

// Destroy frees the ring.
func (cq *CQ) Destroy() {
	if cq.Chan != nil {
		cq.Chan.bind(cq, false)
	}
	cq.mu.Lock()
	cq.Ring.free()
	for _, r := range cq.retired {
		r.free()
	}
	cq.retired = nil
	cq.mu.Unlock()
}
