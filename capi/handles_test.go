package main

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHandles(t *testing.T) {
	a, b := new(int), new(int)
	ha, hb := newHandle(a), newHandle(b)
	require.NotZero(t, ha)
	require.NotEqual(t, ha, hb)
	require.Same(t, a, handleValue[*int](ha))
	require.Same(t, b, handleValue[*int](hb))
	require.Nil(t, handleValue[*string](ha), "a handle of another type")
	require.Nil(t, handleValue[*int](0))
	require.Nil(t, handleValue[*int](hb+1000), "not a handle")

	deleteHandle(ha)
	require.Nil(t, handleValue[*int](ha), "deleted")
	deleteHandle(ha) // twice: harmless, the index is freed once
	c := new(int)
	hc := newHandle(c)
	require.Equal(t, ha, hc, "a freed index is reused")
	require.Same(t, c, handleValue[*int](hc))
	hd := newHandle(new(int))
	require.NotEqual(t, hc, hd, "and only once")
	deleteHandle(hb)
	deleteHandle(hc)
	deleteHandle(hd)
}

// Lookups run concurrently with creation (the table grows) and deletion.
func TestHandlesConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				v := new(int)
				h := newHandle(v)
				if handleValue[*int](h) != v {
					t.Errorf("handle %d: wrong value", h)
					return
				}
				deleteHandle(h)
			}
		}()
	}
	wg.Wait()
}
