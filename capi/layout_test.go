package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/goiwarp/goiwarp/rdmacm"
	"github.com/goiwarp/goiwarp/verbs"
)

func TestEventNamesMatchC(t *testing.T) {
	for i := -1; i <= int(rdmacm.EventTimewaitExit)+1; i++ {
		if g, c := rdmacm.EventType(i).String(), cEventName(i); g != c {
			t.Errorf("event %d: Go %q, C rdma_event_str %q", i, g, c)
		}
	}
}

// goRingLayout reads the Go mirrors of verbs/abi.go through reflection
// (ringHdr is unexported: its type is reached through verbs.Ring's field).
func goRingLayout(t *testing.T) map[string]fieldLayout {
	hdrField, ok := reflect.TypeOf(verbs.Ring{}).FieldByName("hdr")
	if !ok {
		t.Fatal("verbs.Ring has no hdr field")
	}
	types := map[string]reflect.Type{
		"SGE":     reflect.TypeOf(verbs.SGE{}),
		"SQE":     reflect.TypeOf(verbs.SQE{}),
		"RQE":     reflect.TypeOf(verbs.RQE{}),
		"CQE":     reflect.TypeOf(verbs.CQE{}),
		"ringHdr": hdrField.Type.Elem(),
	}
	out := map[string]fieldLayout{}
	for name, typ := range types {
		out[name] = fieldLayout{0, typ.Size()}
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			if f.Name == "_" {
				continue
			}
			out[name+"."+f.Name] = fieldLayout{f.Offset, f.Type.Size()}
		}
	}
	return out
}

func TestRingLayoutMatchesC(t *testing.T) {
	c, g := cRingLayout(), goRingLayout(t)
	for k, cv := range c {
		if k == "SQE.inline" {
			// the inline payload overlays the SGE array in Go
			if sg := g["SQE.SGE"]; sg.Off != cv.Off || sg.Size < cv.Size {
				t.Errorf("SQE inline payload: C %+v, Go SGE array %+v", cv, sg)
			}
			continue
		}
		gv, ok := g[k]
		if !ok {
			t.Errorf("%s: in capi/giw_ring.h, missing from verbs/abi.go", k)
			continue
		}
		if gv != cv {
			t.Errorf("%s: C offset/size %+v, Go %+v", k, cv, gv)
		}
	}
	for k := range g {
		if _, ok := c[k]; !ok {
			t.Errorf("%s: in verbs/abi.go, missing from capi/giw_ring.h (or from this test)", k)
		}
	}
}

func TestConstantsMatchC(t *testing.T) {
	goVals := map[string]int64{
		"MaxSGE": verbs.MaxSGE, "MaxInline": verbs.MaxInline, "ringHdrSize": 192,

		"WRRDMAWrite": verbs.WRRDMAWrite, "WRRDMAWriteWithImm": verbs.WRRDMAWriteWithImm,
		"WRSend": verbs.WRSend, "WRSendWithImm": verbs.WRSendWithImm, "WRRDMARead": verbs.WRRDMARead,
		"WRAtomicCmpSwp": verbs.WRAtomicCmpSwp, "WRAtomicFetchAdd": verbs.WRAtomicFetchAdd,
		"WRLocalInv": verbs.WRLocalInv, "WRBindMW": verbs.WRBindMW, "WRSendWithInv": verbs.WRSendWithInv,

		"SendFence": verbs.SendFence, "SendSignaled": verbs.SendSignaled,
		"SendSolicited": verbs.SendSolicited, "SendInline": verbs.SendInline,

		"WCSuccess": verbs.WCSuccess, "WCLocLenErr": verbs.WCLocLenErr, "WCLocProtErr": verbs.WCLocProtErr,
		"WCWRFlushErr": verbs.WCWRFlushErr, "WCLocAccessErr": verbs.WCLocAccessErr,
		"WCRemInvReqErr": verbs.WCRemInvReqErr, "WCRemAccessErr": verbs.WCRemAccessErr,
		"WCRemOpErr": verbs.WCRemOpErr, "WCFatalErr": verbs.WCFatalErr, "WCGeneralErr": verbs.WCGeneralErr,
		"WCTMRndvIncomplete": verbs.WCTMRndvIncomplete,

		"WCOpSend": verbs.WCOpSend, "WCOpRDMAWrite": verbs.WCOpRDMAWrite, "WCOpRDMARead": verbs.WCOpRDMARead,
		"WCOpCompSwap": verbs.WCOpCompSwap, "WCOpFetchAdd": verbs.WCOpFetchAdd, "WCOpBindMW": verbs.WCOpBindMW,
		"WCOpLocalInv": verbs.WCOpLocalInv, "WCOpRecv": verbs.WCOpRecv,
		"WCOpRecvRDMAWImm": verbs.WCOpRecvRDMAWImm, "WCWithImm": verbs.WCWithImm, "WCWithInv": verbs.WCWithInv,

		"AccessLocalWrite": verbs.AccessLocalWrite, "AccessRemoteWrite": verbs.AccessRemoteWrite,
		"AccessRemoteRead": verbs.AccessRemoteRead, "AccessRemoteAtomic": verbs.AccessRemoteAtomic,
		"AccessMWBind": verbs.AccessMWBind, "AccessZeroBased": verbs.AccessZeroBased,
		"AccessOnDemand": verbs.AccessOnDemand, "AccessHugetlb": verbs.AccessHugetlb,
		"AccessRelaxedOrder": verbs.AccessRelaxedOrder,

		"QPSReset": int64(verbs.QPSReset), "QPSInit": int64(verbs.QPSInit), "QPSRTR": int64(verbs.QPSRTR),
		"QPSRTS": int64(verbs.QPSRTS), "QPSSQD": int64(verbs.QPSSQD), "QPSSQE": int64(verbs.QPSSQE),
		"QPSErr": int64(verbs.QPSErr),

		"QPAttrState": verbs.QPAttrState, "QPAttrCurState": verbs.QPAttrCurState,
		"QPAttrAccessFlags": verbs.QPAttrAccessFlags, "QPAttrPKeyIndex": verbs.QPAttrPKeyIndex,
		"QPAttrPort": verbs.QPAttrPort, "QPAttrMaxQPRdAtomic": verbs.QPAttrMaxQPRdAtomic,
		"QPAttrMaxDestRdAtom": verbs.QPAttrMaxDestRdAtom, "QPAttrCap": verbs.QPAttrCap,
		"QPAttrAV": verbs.QPAttrAV, "QPAttrPathMTU": verbs.QPAttrPathMTU, "QPAttrTimeout": verbs.QPAttrTimeout,
		"QPAttrRetryCnt": verbs.QPAttrRetryCnt, "QPAttrRNRRetry": verbs.QPAttrRNRRetry,
		"QPAttrRQPSN": verbs.QPAttrRQPSN, "QPAttrMinRNRTimer": verbs.QPAttrMinRNRTimer,
		"QPAttrSQPSN": verbs.QPAttrSQPSN, "QPAttrDestQPN": verbs.QPAttrDestQPN,
		"MaxGIDs": verbs.MaxGIDs,

		"SRQAttrMaxWR": verbs.SRQAttrMaxWR, "SRQAttrLimit": verbs.SRQAttrLimit,

		"EventCQErr": verbs.EventCQErr, "EventQPFatal": verbs.EventQPFatal,
		"EventQPReqErr": verbs.EventQPReqErr, "EventQPAccessErr": verbs.EventQPAccessErr,
		"EventCommEst": verbs.EventCommEst, "EventSQDrained": verbs.EventSQDrained,
		"EventDeviceFatal": verbs.EventDeviceFatal, "EventPortActive": verbs.EventPortActive,
		"EventSRQErr": verbs.EventSRQErr, "EventSRQLimitReached": verbs.EventSRQLimitReached,
		"EventQPLastWQE": verbs.EventQPLastWQE, "EventWQFatal": verbs.EventWQFatal,

		// verbs' notify constants are unexported; their values are the contract.
		"notifyNone": 0, "notifySolicited": 1, "notifyNext": 2,
	}
	c := cConstants()
	for k, cv := range c {
		gv, ok := goVals[k]
		if !ok {
			t.Errorf("%s: no Go value in the test", k)
			continue
		}
		if gv != cv {
			t.Errorf("%s: C %d, Go %d", k, cv, gv)
		}
	}
	if len(goVals) != len(c) {
		var extra []string
		for k := range goVals {
			if _, ok := c[k]; !ok {
				extra = append(extra, k)
			}
		}
		t.Errorf("Go values without a C counterpart: %s", strings.Join(extra, ", "))
	}
}
