package main

/*
#include "capi.h"
*/
import "C"

import (
	"unsafe"

	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

//export goVerbsLimits
func goVerbsLimits(l *C.struct_gcapi_limits) {
	*l = C.struct_gcapi_limits{
		max_qp: verbs.MaxQP, max_qp_wr: verbs.MaxQPWR, max_cq: verbs.MaxCQ, max_cqe: verbs.MaxCQE,
		max_mr: verbs.MaxMR, max_pd: verbs.MaxPD, max_srq: verbs.MaxSRQ, max_srq_wr: verbs.MaxSRQWR,
		max_ird: verbs.MaxIRD, max_ord: verbs.MaxORD, max_sge: verbs.MaxSGE, max_inline: verbs.MaxInline,
		max_mr_size: verbs.MaxMRSize, max_msg_size: verbs.MaxMsgSize, page_size_cap: verbs.PageSizeCap,
	}
}

func fillDevInfo(o *C.struct_gcapi_devinfo, d *verbs.Device) {
	setCString(o.name[:], d.Name)
	setCString(o.ifname[:], d.Ifname)
	o.guid = C.uint64_t(d.GUID)
	gid := d.GID()
	for i := range gid {
		o.gid[i] = C.uint8_t(gid[i])
	}
	gids := d.GIDs()
	n := min(len(gids), int(C.GCAPI_MAX_GIDS))
	for i := range n {
		for j := range gids[i] {
			o.gids[i][j] = C.uint8_t(gids[i][j])
		}
	}
	o.ngids = C.int32_t(n)
	o.lid = C.uint16_t(d.LID())
	o.ifindex = C.int32_t(d.Index)
	o.mtu = C.int32_t(d.MTU)
	o.vendor_id = C.uint32_t(d.VendorID)
	o.part_id = C.uint32_t(d.PartID)
}

// goVerbsDevices writes up to max devices and returns how many there are.
//
//export goVerbsDevices
func goVerbsDevices(out *C.struct_gcapi_devinfo, max C.int) C.int {
	devs := verbs.Devices()
	if out != nil && max > 0 {
		arr := unsafe.Slice(out, int(max))
		for i, d := range devs {
			if i >= int(max) {
				break
			}
			fillDevInfo(&arr[i], d)
		}
	}
	return C.int(len(devs))
}

// goVerbsOpen opens the device called name.
//
//export goVerbsOpen
func goVerbsOpen(name *C.char, info *C.struct_gcapi_devinfo, outH *C.uintptr_t, outAsync *C.int) C.int {
	want := C.GoString(name)
	for _, d := range verbs.Devices() {
		if d.Name != want {
			continue
		}
		c, err := verbs.Open(d)
		if err != nil {
			return errnoOf(err)
		}
		fillDevInfo(info, d)
		*outH = newHandle(c)
		*outAsync = C.int(c.AsyncFD())
		return 0
	}
	return C.int(unix.ENODEV)
}

//export goVerbsClose
func goVerbsClose(h C.uintptr_t) {
	if c := handleValue[*verbs.Context](h); c != nil {
		c.Close()
	}
	deleteHandle(h)
}
