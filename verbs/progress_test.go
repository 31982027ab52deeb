package verbs

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingTransport reports progress while it has work and counts the turns
// it was given.
type countingTransport struct {
	turns atomic.Int32
	work  atomic.Int32
	arms  atomic.Int32
}

func (c *countingTransport) Kick()      {}
func (c *countingTransport) Close(bool) {}
func (c *countingTransport) Armed()     { c.arms.Add(1) }
func (c *countingTransport) Progress() bool {
	c.turns.Add(1)
	return c.work.Add(-1) >= 0
}

// A poller whose own QPs are quiet gives a turn to a QP of another CQ (the
// data QP of a perftest -R server, which spins on its control QP's CQ), and
// a QP leaves the list when its connection is withdrawn.
func TestPollerHelpsQPsOfOtherCQs(t *testing.T) {
	polled, other := newFixture(t, 16, false), newFixture(t, 16, false)
	own, foreign := &countingTransport{}, &countingTransport{}
	for _, f := range []struct {
		fx *fixture
		tr Transport
	}{{polled, own}, {other, foreign}} {
		toInit(t, f.fx.qp)
		require.NoError(t, f.fx.qp.Attach(f.tr, 1, 1))
	}

	foreign.work.Store(3)
	for range 3 {
		assert.True(t, polled.cq.Progress(), "the other CQ's QP had work")
	}
	assert.False(t, polled.cq.Progress())
	assert.GreaterOrEqual(t, own.turns.Load(), int32(4), "own QPs come first")
	assert.GreaterOrEqual(t, foreign.turns.Load(), int32(4))

	// A QP is not helped from its own CQ twice in one poll.
	before := own.turns.Load()
	polled.cq.Progress()
	assert.Equal(t, before+1, own.turns.Load())

	require.NoError(t, other.qp.Modify(QPAttr{State: QPSErr}, QPAttrState))
	turns := foreign.turns.Load()
	foreign.work.Store(1)
	assert.False(t, polled.cq.Progress(), "a QP in ERR has no connection to help")
	assert.Equal(t, turns, foreign.turns.Load())
}

// Arming a CQ (capi's req_notify_cq calls Armed) tells its connected QPs,
// and the QP reports its events armed until a completion fires the event.
func TestArmedCQ(t *testing.T) {
	f := newFixture(t, 16, false)
	tr := &countingTransport{}
	toInit(t, f.qp)
	require.NoError(t, f.qp.Attach(tr, 1, 1))
	require.False(t, f.qp.EventsArmed())

	atomic.StoreUint32(&f.cq.Ring.hdr.Notify, notifyNext) // req_notify_cq's part in C
	f.cq.Armed()
	assert.EqualValues(t, 1, tr.arms.Load())
	assert.True(t, f.qp.EventsArmed())

	require.True(t, f.cq.Push(&CQE{WRID: 1}, false))
	assert.False(t, f.qp.EventsArmed(), "the completion fired the event")
}

// A thread that polls a CQ, or posts to a QP that completes sends into it,
// yields its P once a turn (turnEvery) has passed since the last yield on
// the CQ, looking at the clock every turnCheck calls, and not sooner.
func TestSpinnerTakesSchedTurn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		since  time.Duration
		yields bool
	}{
		{"just yielded", 0, false},
		{"a turn ago", turnEvery, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 16, false)
			last := int64(time.Since(turnEpoch) - tc.since)
			for _, caller := range []struct {
				name string
				turn *schedTurn
				call func()
			}{
				{"poll_cq", &f.cq.turn, func() { f.cq.Progress() }},
				{"post_send", &f.qp.SendCQ.turn, f.qp.Doorbell},
			} {
				caller.turn.at.Store(last)
				for range turnCheck {
					caller.call()
				}
				assert.Equal(t, tc.yields, caller.turn.at.Load() != last, caller.name)
			}
		})
	}
}
