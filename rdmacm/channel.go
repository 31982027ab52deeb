package rdmacm

import (
	"encoding/binary"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// Channel is an event channel. Its fd is an eventfd that is readable while
// events are queued: rdma_get_cm_event reads it (honouring O_NONBLOCK the
// application may have set) and then pops one event, re-arming the fd when
// more remain. The fd is level-triggered, so one channel serves any number
// of readers and poll() works.
type Channel struct {
	fd int

	mu     sync.Mutex
	q      []*Event
	closed bool
}

// NewChannel creates an event channel.
func NewChannel() (*Channel, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &Channel{fd: fd}, nil
}

// FD is the channel's pollable file descriptor.
func (c *Channel) FD() int { return c.fd }

func (c *Channel) kick() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(c.fd, one[:])
}

func (c *Channel) push(e *Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.q = append(c.q, e)
	if len(c.q) == 1 {
		c.kick()
	}
}

// Pop takes the next event, or nil when none is queued (another reader or a
// migration took it). The caller has consumed the fd's readiness; Pop
// re-arms it when events remain. The event counts as reported to its owner.
func (c *Channel) Pop() *Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.q) == 0 {
		return nil
	}
	e := c.q[0]
	c.q[0] = nil
	c.q = c.q[1:]
	if len(c.q) > 0 {
		c.kick()
	}
	if e.owner != nil {
		e.owner.reported()
	}
	return e
}

// TryPop is Pop for callers that do not read the fd (Go tests): it drains the
// fd's readiness itself.
func (c *Channel) TryPop() *Event {
	var b [8]byte
	_ = unix.SetNonblock(c.fd, true)
	_, _ = unix.Read(c.fd, b[:])
	return c.Pop()
}

// take removes the queued events owned by id and returns them.
func (c *Channel) take(id *ID) []*Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Event
	c.q = slices.DeleteFunc(c.q, func(e *Event) bool {
		if e.owner == id {
			out = append(out, e)
			return true
		}
		return false
	})
	return out
}

// Len is the number of queued events.
func (c *Channel) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.q)
}

// Close closes the fd; queued events are dropped.
func (c *Channel) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.q = nil
	unix.Close(c.fd)
}
