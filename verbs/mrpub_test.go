package verbs

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func pubView(t *testing.T) *PubView {
	fd, err := PubTableFD()
	require.NoError(t, err)
	v, err := MapPubTable(fd)
	require.NoError(t, err)
	t.Cleanup(v.Unmap)
	return v
}

// A peer's checks against the published table are the engine's (Access).
func TestPubAcquire(t *testing.T) {
	v := pubView(t)
	c := openCtx(t)
	pd, other := c.AllocPD(), c.AllocPD()
	buf := buffer(t, 4096)
	mr, err := pd.RegMR(addr(buf), 4096, 0x10000, AccessLocalWrite|AccessRemoteWrite)
	require.NoError(t, err)
	defer mr.Dereg()
	require.True(t, mr.pubSlot)
	self := os.Getpid()
	for _, tc := range []struct {
		name   string
		stag   uint32
		pd     uint32
		addr   uint64
		length uint64
		access int
		ok     bool
	}{
		{"ok", mr.STag, pd.ID, 0x10000, 4096, AccessRemoteWrite, true},
		{"ok-inside", mr.STag, pd.ID, 0x10100, 16, AccessRemoteWrite, true},
		{"wrong-stag", mr.STag ^ (PubSlots << 1), pd.ID, 0x10000, 16, AccessRemoteWrite, false},
		{"wrong-pd", mr.STag, other.ID, 0x10000, 16, AccessRemoteWrite, false},
		{"no-read", mr.STag, pd.ID, 0x10000, 16, AccessRemoteRead, false},
		{"below", mr.STag, pd.ID, 0xffff, 16, AccessRemoteWrite, false},
		{"beyond", mr.STag, pd.ID, 0x10ff8, 16, AccessRemoteWrite, false},
		{"wraps", mr.STag, pd.ID, 0x10000, ^uint64(0), AccessRemoteWrite, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote, h, ok := v.Acquire(self, tc.stag, tc.pd, tc.addr, tc.length, tc.access)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.EqualValues(t, uint64(addr(buf))+tc.addr-0x10000, remote)
				// Held: a second holder is refused, then let in again.
				_, _, again := v.Acquire(self, tc.stag, tc.pd, tc.addr, tc.length, tc.access)
				require.False(t, again)
				h.Release()
				_, h2, again := v.Acquire(self, tc.stag, tc.pd, tc.addr, tc.length, tc.access)
				require.True(t, again)
				h2.Release()
			}
		})
	}
	require.NoError(t, InvalidateSTag(pd, mr.STag))
	_, _, ok := v.Acquire(self, mr.STag, pd.ID, 0x10000, 16, AccessRemoteWrite)
	require.False(t, ok, "invalidated")
}

// Deregistration waits for a holder, and not for one that died.
func TestPubDeregWaitsForHolder(t *testing.T) {
	v := pubView(t)
	c := openCtx(t)
	pd := c.AllocPD()
	buf := buffer(t, 4096)
	for _, tc := range []struct {
		name   string
		holder int
		wait   bool
	}{
		{"live-holder", os.Getpid(), true},
		{"dead-holder", 1 << 22, false}, // above pid_max's default: no such process
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr, err := pd.RegMR(addr(buf), 4096, 0, AccessLocalWrite|AccessRemoteWrite)
			require.NoError(t, err)
			_, h, ok := v.Acquire(tc.holder, mr.STag, pd.ID, 0, 8, AccessRemoteWrite)
			require.True(t, ok)
			done := make(chan struct{})
			go func() { mr.Dereg(); close(done) }()
			if tc.wait {
				select {
				case <-done:
					t.Fatal("Dereg returned while the entry was held")
				case <-time.After(50 * time.Millisecond):
				}
				h.Release()
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Dereg did not return")
			}
			_, _, ok = v.Acquire(tc.holder, mr.STag, pd.ID, 0, 8, AccessRemoteWrite)
			require.False(t, ok)
		})
	}
}

// Re-registration withdraws the entry and publishes the new translation.
func TestPubRereg(t *testing.T) {
	v := pubView(t)
	c := openCtx(t)
	pd := c.AllocPD()
	a, b := buffer(t, 4096), buffer(t, 8192)
	mr, err := pd.RegMR(addr(a), 4096, 0, AccessLocalWrite|AccessRemoteWrite)
	require.NoError(t, err)
	defer mr.Dereg()
	require.NoError(t, mr.Rereg(pd, addr(b), 8192, 0x20000, AccessLocalWrite|AccessRemoteRead, 1|4))
	self := os.Getpid()
	_, _, ok := v.Acquire(self, mr.STag, pd.ID, 0, 8, AccessRemoteWrite)
	require.False(t, ok)
	remote, h, ok := v.Acquire(self, mr.STag, pd.ID, 0x20000+4096, 4096, AccessRemoteRead)
	require.True(t, ok)
	h.Release()
	require.EqualValues(t, uint64(addr(b))+4096, remote)
}
