package verbs

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncTransport completes every send at once on the kicking thread, and
// after a hard Close touches the queues no more, as the engine does: a
// transmitter still holding the token flushes and gives it back.
type syncTransport struct {
	qp   *QP
	mu   sync.Mutex
	dead bool
}

func (s *syncTransport) Kick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.dead {
			s.qp.Flush()
		} else {
			for {
				_, i, ok := s.qp.NextSend()
				if !ok {
					break
				}
				s.qp.CompleteSend(i, WCSuccess, 8)
			}
		}
		if !s.qp.ReleaseTx() {
			return
		}
	}
}

func (s *syncTransport) Close(bool) {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
}

func (s *syncTransport) Progress() bool { return false }
func (s *syncTransport) Armed()         {}

// capiPost is capi's post_send: write and publish under the SQ lock, then
// ring if the engine is idle. It reports false when the ring is full.
func capiPost(qp *QP, sqLock *sync.Mutex, wrid uint64) bool {
	sqLock.Lock()
	r := qp.SQ
	p := r.prod()
	if p-r.cons() >= r.Size() {
		sqLock.Unlock()
		return false
	}
	*(*SQE)(r.entry(p)) = SQE{WRID: wrid, Opcode: WRSend, Flags: SendSignaled}
	r.setProd(p + 1)
	sqLock.Unlock()
	if atomic.SwapUint32(&r.hdr.Doorbell, 0) == 1 {
		qp.Doorbell()
	}
	return true
}

// Several posters on one QP, a poller, a resizer and an arming thread on its
// CQ (the last three under one lock, capi's poll lock), while the QP is in
// ERR, stays in RTS, or goes to ERR midway: every WR completes exactly once,
// and on one QP no success follows a flush. Run with -race.
func TestConcurrentPostPollResize(t *testing.T) {
	const posters, per = 4, 500
	for _, tc := range []struct {
		name        string
		rts         bool // attached to a transport
		errAfter    int  // completions polled before the move to ERR; -1 never
		wantFlushed bool // every WR flushed
	}{
		{"ERR from the start", false, 0, true},
		{"RTS throughout", true, -1, false},
		{"RTS, ERR midway", true, posters * per / 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 64, false)
			toInit(t, f.qp)
			if tc.rts {
				require.NoError(t, f.qp.Attach(&syncTransport{qp: f.qp}, 1, 1))
			}
			if tc.errAfter == 0 {
				require.NoError(t, f.qp.Modify(QPAttr{State: QPSErr}, QPAttrState))
			}
			var sqLock, pollLock sync.Mutex
			deadline := time.Now().Add(10 * time.Second)
			// What is posted and not polled yet must fit the CQ at its smallest.
			credits := make(chan struct{}, 64)
			var wg sync.WaitGroup
			for p := range posters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range per {
						select {
						case credits <- struct{}{}:
						case <-time.After(time.Until(deadline)):
							t.Errorf("poster %d: WR %d: completions stopped", p, i)
							return
						}
						for !capiPost(f.qp, &sqLock, uint64(p*per+i)) {
							if time.Now().After(deadline) {
								t.Errorf("poster %d: WR %d never found room: work stranded", p, i)
								return
							}
							runtime.Gosched()
						}
					}
				}()
			}
			stop := make(chan struct{})
			var aux sync.WaitGroup
			aux.Add(1)
			go func() { // resize and arm under the poll lock, as capi does
				defer aux.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					pollLock.Lock()
					assert.NoError(t, f.cq.Resize(64<<(k%3)))
					atomic.StoreUint32(&f.cq.Ring.hdr.Notify, notifyNext)
					pollLock.Unlock()
					runtime.Gosched()
				}
			}()

			seen := make([]bool, posters*per)
			n, flushed := 0, 0
			for n < posters*per && time.Now().Before(deadline) {
				pollLock.Lock()
				got := f.poll()
				pollLock.Unlock()
				for _, e := range got {
					require.False(t, seen[e.WRID], "WR %d completed twice", e.WRID)
					seen[e.WRID] = true
					if e.Status == WCWRFlushErr {
						flushed++
					} else {
						require.EqualValues(t, WCSuccess, e.Status)
						require.Zero(t, flushed, "a success after a flush")
					}
				}
				for range got {
					<-credits
				}
				if len(got) == 0 {
					runtime.Gosched()
				}
				n += len(got)
				if tc.errAfter > 0 && n >= tc.errAfter && f.qp.State() != QPSErr {
					require.NoError(t, f.qp.Modify(QPAttr{State: QPSErr}, QPAttrState))
				}
			}
			wg.Wait()
			close(stop)
			aux.Wait()
			assert.Equal(t, posters*per, n, "completions")
			if tc.wantFlushed {
				assert.Equal(t, n, flushed)
			}
			if tc.errAfter < 0 {
				assert.Zero(t, flushed)
			}
		})
	}
}

// capiPostRecv is capi's post_recv on a QP in ERR: publish under the RQ
// lock, then the receive doorbell flushes.
func capiPostRecv(qp *QP, rqLock *sync.Mutex, wrid uint64) bool {
	rqLock.Lock()
	r := qp.RQ
	p := r.prod()
	if p-r.cons() >= r.Size() {
		rqLock.Unlock()
		return false
	}
	*(*RQE)(r.entry(p)) = RQE{WRID: wrid}
	r.setProd(p + 1)
	rqLock.Unlock()
	qp.PostRecvDoorbell()
	return true
}

// Receives posted from several threads to a QP in ERR are flushed once each
// (each poster's doorbell flushes what it finds) while a thread polls.
// Run with -race.
func TestConcurrentRecvFlush(t *testing.T) {
	for _, posters := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d posters", posters), func(t *testing.T) {
			const per = 2000
			f := newFixture(t, 64, false)
			toInit(t, f.qp)
			require.NoError(t, f.qp.Modify(QPAttr{State: QPSErr}, QPAttrState))
			var rqLock sync.Mutex
			credits := make(chan struct{}, 64) // posted and not polled fit the CQ
			for p := range posters {
				go func() {
					for i := range per {
						credits <- struct{}{}
						for !capiPostRecv(f.qp, &rqLock, uint64(p*per+i)) {
							runtime.Gosched()
						}
					}
				}()
			}
			seen := make([]int, posters*per)
			deadline := time.Now().Add(10 * time.Second)
			n := 0
			for n < posters*per && time.Now().Before(deadline) {
				got := f.poll()
				for _, e := range got {
					assert.EqualValues(t, WCWRFlushErr, e.Status)
					seen[e.WRID]++
					<-credits
				}
				n += len(got)
				if len(got) == 0 {
					runtime.Gosched()
				}
			}
			dup := 0
			for _, c := range seen {
				if c > 1 {
					dup++
				}
			}
			assert.Equal(t, posters*per, n, "completions")
			assert.Zero(t, dup, "receives flushed more than once")
		})
	}
}
