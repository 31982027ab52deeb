package shmring

import (
	"bytes"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// newRing makes a ring over 8-byte aligned Go memory.
func newRing(t testing.TB, n int) *Ring {
	mem := make([]uint64, Size(n)/8)
	r, err := New(unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), Size(n)))
	require.NoError(t, err)
	return r
}

func TestNewLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		ok   bool
	}{
		{"power of two", 64, true},
		{"4 MiB", 4 << 20, true},
		{"not a power of two", 100, false},
		{"no data", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := make([]uint64, (Size(tc.n)+7)/8)
			_, err := New(unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), Size(tc.n)))
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrLayout)
			}
		})
	}
}

func TestWrapAround(t *testing.T) {
	r := newRing(t, 16)
	for _, tc := range []struct {
		write    string
		wantW    int
		read     int
		wantR    string
		buffered int
	}{
		{"0123456789", 10, 6, "012345", 4},
		{"abcdefghijklmnop", 12, 16, "6789abcdefghijkl", 0},
		{"xyz", 3, 2, "xy", 1},
		{"", 0, 5, "z", 0},
	} {
		require.Equal(t, tc.wantW, r.Write([]byte(tc.write)), "write %q", tc.write)
		b := make([]byte, tc.read)
		n := r.Read(b)
		require.Equal(t, tc.wantR, string(b[:n]))
		require.Equal(t, tc.buffered, r.Buffered())
		require.Equal(t, 16-tc.buffered, r.Free())
	}
}

func TestSleepFlags(t *testing.T) {
	r := newRing(t, 64)
	require.False(t, r.WakeReader(), "nobody asked")
	require.True(t, r.Sleep())
	r.Write([]byte("x"))
	require.True(t, r.WakeReader())
	require.False(t, r.WakeReader(), "once per Sleep")
	require.False(t, r.Sleep(), "data is there")
	require.False(t, r.WakeReader(), "Sleep that found data cleared its flag")

	r.Write(make([]byte, 63))
	require.True(t, r.SleepWriter(1))
	r.Read(make([]byte, 1))
	require.True(t, r.WakeWriter())
	require.False(t, r.WakeWriter())
	require.False(t, r.SleepWriter(1), "room is there")
	require.True(t, r.SleepWriter(1000), "room for all of it is never there")
	require.True(t, r.WakeWriter())
	r.Read(make([]byte, 64))
	require.False(t, r.SleepWriter(1000), "asks for at most the capacity")
}

// TestConcurrent streams through a small ring between two goroutines that
// sleep on channels standing in for eventfds.
func TestConcurrent(t *testing.T) {
	r := newRing(t, 256)
	src := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dataEv, roomEv := make(chan struct{}, 1), make(chan struct{}, 1)
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for p := src; len(p) > 0; {
			n := r.Write(p[:min(len(p), 100)])
			p = p[n:]
			if r.WakeReader() {
				signal(dataEv)
			}
			if n == 0 && r.SleepWriter(1) {
				<-roomEv
			}
		}
	}()
	var got bytes.Buffer
	b := make([]byte, 77)
	for got.Len() < len(src) {
		n := r.Read(b)
		got.Write(b[:n])
		if r.WakeWriter() {
			signal(roomEv)
		}
		if n == 0 && r.Sleep() {
			<-dataEv
		}
	}
	wg.Wait()
	require.True(t, bytes.Equal(src, got.Bytes()))
}

// A peer that scribbles on the header (the memory is mapped read-write by
// both processes) makes Corrupt true; Read and Write never move more than
// Cap bytes nor touch memory outside the data area whatever it wrote.
func TestCorruptHeader(t *testing.T) {
	const n = 64
	for _, tc := range []struct {
		name       string
		head, tail uint64
		corrupt    bool
	}{
		{"empty", 100, 100, false},
		{"full", 100, 100 + n, false},
		{"tail-far-ahead", 100, 100 + 10*n, true},
		{"tail-one-past-full", 100, 100 + n + 1, true},
		{"tail-behind-head", 100, 99, true},
		{"head-beyond-tail", 1 << 40, 5, true},
		{"head-wrapped", ^uint64(0) - 3, 10, false}, // positions wrap: 14 bytes buffered
		{"tail-max", 0, ^uint64(0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := make([]uint64, (Size(n)+8*8)/8) // a guard after the ring
			b := unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), Size(n)+64)
			for i := range b {
				b[i] = 0xc5
			}
			r, err := New(b[:Size(n)])
			require.NoError(t, err)
			r.head.Store(tc.head)
			r.tail.Store(tc.tail)
			require.Equal(t, tc.corrupt, r.Corrupt())
			require.LessOrEqual(t, r.Buffered(), n)
			require.GreaterOrEqual(t, r.Free(), 0)
			p := make([]byte, 10*n)
			got := r.Read(p)
			require.LessOrEqual(t, got, n, "read more than the ring holds")
			require.Equal(t, tc.head+uint64(got), r.head.Load())
			r.head.Store(tc.head)
			w := r.Write(bytes.Repeat([]byte{1}, 10*n))
			require.LessOrEqual(t, w, n, "wrote more than the ring holds")
			if tc.corrupt {
				require.Zero(t, w, "a corrupt ring has no room")
			}
			require.Equal(t, bytes.Repeat([]byte{0xc5}, 64), b[Size(n):], "guard after the ring written")
		})
	}
}
