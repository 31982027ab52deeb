// Package rdmacm is goiwarp's device-independent RDMA connection manager: event
// channels, CM ids and their state machine, address and route resolution, and
// the mapping of listen/connect/accept/reject/disconnect onto the provider CM
// verbs, with the event semantics of the kernel's rdma_cm over iw_cm.
//
// It holds no C memory: capi owns struct rdma_cm_id and struct rdma_cm_event
// and keeps the C address of each id in ID.Cookie.
package rdmacm
