package verbs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestQPByNum(t *testing.T) {
	f := newFixture(t, 16, false)
	assert.Same(t, f.qp, QPByNum(f.qp.Num))
	assert.Nil(t, QPByNum(0))
	f.qp.Destroy()
	assert.Nil(t, QPByNum(f.qp.Num), "a destroyed QP is not found")
}

// The modifies a program replays from rdma_init_qp_attr on its own QP (rping
// -q, cmtime): answered as siw answers them.
func TestModifyAsIWARP(t *testing.T) {
	initAttr := QPAttr{State: QPSInit, PortNum: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead}
	initMask := QPAttrState | QPAttrAccessFlags | QPAttrPort
	for _, tc := range []struct {
		name      string
		connected bool
		attr      QPAttr
		mask      int
		err       error
		want      QPState
	}{
		{"rtr: the rts answer (port alone) changes no state", false, QPAttr{State: QPSRTS, PortNum: 1}, QPAttrPort, nil, QPSRTR},
		{"rtr: a bad port alone is refused", false, QPAttr{PortNum: 2}, QPAttrPort, unix.EINVAL, QPSRTR},
		{"rtr to rtr with the state named is nothing", false, QPAttr{State: QPSRTR, PortNum: 1}, QPAttrState | QPAttrPort, nil, QPSRTR},
		{"rtr back to init is refused", false, QPAttr{State: QPSInit, PortNum: 1}, QPAttrState | QPAttrPort, unix.EINVAL, QPSRTR},
		{"rts ignores init", true, initAttr, initMask, nil, QPSRTS},
		{"rts ignores rtr", true, QPAttr{State: QPSRTR, PortNum: 1, AccessFlags: initAttr.AccessFlags}, initMask, nil, QPSRTS},
		{"rts still goes to err", true, QPAttr{State: QPSErr}, QPAttrState, nil, QPSErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 16, false)
			require.NoError(t, f.qp.Modify(initAttr, initMask))
			require.NoError(t, f.qp.Modify(QPAttr{State: QPSRTR}, QPAttrState))
			if tc.connected {
				require.NoError(t, f.qp.Attach(&syncTransport{qp: f.qp}, 1, 1))
				require.Equal(t, QPSRTS, f.qp.State())
			}
			err := f.qp.Modify(tc.attr, tc.mask)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
			} else {
				assert.NoError(t, err)
			}
			assert.Equal(t, tc.want, f.qp.State())
		})
	}
}
