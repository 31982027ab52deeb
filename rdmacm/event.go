package rdmacm

import (
	"net"
)

// EventType is enum rdma_cm_event_type.
type EventType int

// Values of enum rdma_cm_event_type.
const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
)

// eventNames is also capi's rdma_event_str table (capi/rdmacm.c), which must
// not enter Go; capi's TestEventNamesMatchC keeps the two equal.
var eventNames = [...]string{
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
	"RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR",
	"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
	"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED",
	"RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
	"RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT",
}

func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return "UNKNOWN EVENT"
}

// Event is one queued CM event.
type Event struct {
	Type   EventType
	Status int // 0 or a negative errno, as the kernel reports it
	ID     *ID // the id the event is about (the new id for CONNECT_REQUEST)
	Listen *ID // CONNECT_REQUEST: the listening id

	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8

	// Snapshot of the id's addressing when the event was queued; capi copies
	// it into struct rdma_cm_id when the application reads the event, as
	// librdmacm refreshes its ids in rdma_get_cm_event.
	Src, Dst *net.TCPAddr
	Dev      string

	owner *ID // the id whose acknowledgements count this event
}

// Owner is the id whose rdma_destroy_id waits for this event's ack.
func (e *Event) Owner() *ID { return e.owner }
