package provider

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// After pinAfter wake-ups in a row that placed data, completed nothing and
// came a few posts after the last (a ping-pong), for a QP whose application
// armed none of its CQs, a receive thread on the poster's CPU leaves that
// CPU; in every other case it stays where it is.
func TestKeepOffPoster(t *testing.T) {
	here, all := onCPU(t)
	left, _ := offCPU(all, here)
	for _, tc := range []struct {
		name      string
		cpu       int
		posts     uint32
		lastPosts uint32
		arms      uint32
		completed bool
		streak    uint32
		want      unix.CPUSet
		wantPosts uint32
		wantArms  uint32
	}{
		{"the poster's CPU, a new post", here, 5, 4, 0, false, pinAfter, left, 5, 0},
		{"a ping-pong not yet seen long enough", here, 5, 4, 0, false, pinAfter - 1, all, 5, 0},
		{"no post since the last look", here, 4, 4, 0, false, pinAfter, all, 4, 0},
		{"the poster on another CPU", here + 1, 5, 4, 0, false, pinAfter, all, 5, 0},
		{"the poster's CPU unknown", -1, 5, 4, 0, false, pinAfter, all, 4, 0},
		{"a CQ armed since: the poster sleeps", here, 5, 4, 1, false, pinAfter, all, 5, 1},
		{"the wake-up completed work", here, 5, 4, 0, true, pinAfter, all, 5, 0},
		{"a stream: many posts since", here, 4 + pinPostsMax + 1, 4, 0, false, pinAfter, all, 4 + pinPostsMax + 1, 0},
		{"a few posts since", here, 4 + pinPostsMax, 4, 0, false, pinAfter, left, 4 + pinPostsMax, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan unix.CPUSet, 1)
			var posts, arms uint32
			go func() {
				// Locked and never unlocked: the thread whose mask the
				// test changed ends with the goroutine.
				runtime.LockOSThread()
				var s unix.CPUSet
				rx := &rxState{posterPosts: tc.lastPosts, pingPongs: tc.streak}
				rx.keepOffPoster(tc.cpu, tc.posts, tc.arms, tc.completed)
				posts, arms = rx.posterPosts, rx.posterArms
				_ = unix.SchedGetaffinity(0, &s)
				got <- s
			}()
			assert.Equal(t, tc.want, <-got)
			assert.Equal(t, tc.wantPosts, posts)
			assert.Equal(t, tc.wantArms, arms)
			releasePinned()
		})
	}
}

// A thread keepOffPoster pinned gets its own affinity back (not one read
// when the library started: a taskset since then is kept) at the first look
// that finds no ping-pong, made by whichever thread: pinned threads starve
// beside another process's spinner.
func TestPinnedThreadsReleased(t *testing.T) {
	here, all := onCPU(t)
	left, _ := offCPU(all, here)
	tidc, done := make(chan int), make(chan struct{})
	defer close(done)
	go func() {
		// Locked and never unlocked: the thread whose mask the test
		// changed ends with the goroutine.
		runtime.LockOSThread()
		rx := &rxState{posterPosts: 4}
		for i := range uint32(pinAfter + 1) {
			rx.keepOffPoster(here, 5+i, 0, false)
		}
		tidc <- unix.Gettid()
		<-done
	}()
	tid := <-tidc
	mask := func() (s unix.CPUSet) {
		require.NoError(t, unix.SchedGetaffinity(tid, &s))
		return s
	}
	require.Equal(t, left, mask(), "pinned off the poster's CPU")
	require.True(t, pinnedAny.Load())

	(&rxState{}).keepOffPoster(here, 6, 0, true)
	assert.Equal(t, all, mask(), "released by another thread's look")
	assert.False(t, pinnedAny.Load())
}

// onCPU makes the test's threads seem to run on the process's first CPU
// (currentCPU) and returns it with the process's CPUs; the test is skipped
// on one CPU, where no thread has anywhere to go.
func onCPU(t *testing.T) (int, unix.CPUSet) {
	t.Helper()
	var all unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &all))
	if all.Count() < 2 {
		t.Skip("one CPU: nowhere to go")
	}
	here := 0
	for !all.IsSet(here) {
		here++
	}
	saved := currentCPU
	currentCPU = func() int { return here }
	t.Cleanup(func() { currentCPU = saved })
	return here, all
}

func TestOffCPU(t *testing.T) {
	var one, two, second unix.CPUSet
	one.Set(3)
	two.Set(0)
	two.Set(1)
	second.Set(1)
	_, ok := offCPU(one, 3)
	require.False(t, ok, "a process on one CPU keeps it")
	set, ok := offCPU(two, 0)
	require.True(t, ok)
	assert.Equal(t, second, set)
	set, ok = offCPU(two, 7)
	require.True(t, ok, "a CPU the process may not use")
	assert.Equal(t, two, set)
}
