package verbs

import (
	"encoding/binary"
	"sync"

	"golang.org/x/sys/unix"
)

// Limits the device reports in ibv_query_device. They are what the engine
// enforces, not wishes.
const (
	MaxQP       = 1 << 14
	MaxQPWR     = 1 << 14
	MaxCQ       = 1 << 14
	MaxCQE      = 1 << 20 // libfabric's rxm asks (tx+rx size) x universe 256 = 196,608; siw allows 3,276,800
	MaxMR       = 1 << 20
	MaxMRSize   = 1 << 40
	MaxPD       = 1 << 16
	MaxSRQ      = 1 << 12
	MaxSRQWR    = 1 << 14
	MaxIRD      = 128 // max_qp_rd_atom: inbound Read/Atomic requests a QP serves at once
	MaxORD      = 128 // max_qp_init_rd_atom: outbound Read/Atomic requests in flight
	MaxMsgSize  = 1 << 31
	PageSizeCap = 0xfffff000
	MaxCompVec  = 1
	NumPorts    = 1
)

// Context is an opened device: the owner of PDs, CQs, QPs and its async event fd.
type Context struct {
	Dev *Device

	asyncR, asyncW int
	mu             sync.Mutex
	closed         bool
}

// Open opens a device.
func Open(d *Device) (*Context, error) {
	r, w, err := eventPipe()
	if err != nil {
		return nil, err
	}
	return &Context{Dev: d, asyncR: r, asyncW: w}, nil
}

// eventPipe makes the pipe behind an application-visible event fd. The
// engine's write end never blocks: a full pipe drops the record.
func eventPipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	if err := unix.SetNonblock(p[1], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, -1, err
	}
	return p[0], p[1], nil
}

// AsyncFD is the read end handed to the application as context->async_fd.
func (c *Context) AsyncFD() int { return c.asyncR }

// AsyncEventSize is the size of one record on the async fd: event type
// (uint32), padding, and the C object the event is about (uint64).
const AsyncEventSize = 16

// PostAsync queues an async event for the C object at cookie.
func (c *Context) PostAsync(event uint32, cookie uintptr) {
	var rec [AsyncEventSize]byte
	binary.NativeEndian.PutUint32(rec[0:], event)
	binary.NativeEndian.PutUint64(rec[8:], uint64(cookie))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		_, _ = unix.Write(c.asyncW, rec[:])
	}
}

// Close releases the context's fds.
func (c *Context) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	unix.Close(c.asyncR)
	unix.Close(c.asyncW)
}
