package verbs

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingTransport reports progress while it has work and counts the turns
// it was given.
type countingTransport struct {
	turns atomic.Int32
	work  atomic.Int32
}

func (c *countingTransport) Kick()      {}
func (c *countingTransport) Close(bool) {}
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
