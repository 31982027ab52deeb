package verbs

import "unsafe"

// Layout of the queue memory shared with the C driver; mirrors capi/giw_ring.h.
const (
	MaxSGE    = 8
	MaxInline = 128

	ringHdrSize = 192
)

// SGE is one scatter/gather element of a work request.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SQE is a send queue entry as capi's post_send writes it.
type SQE struct {
	WRID       uint64
	Opcode     uint8 // WROpcode
	Flags      uint8 // SendFlags
	NumSGE     uint8
	_          uint8
	ImmInv     uint32 // immediate data in network order, or STag to invalidate
	RemoteAddr uint64
	RKey       uint32
	InlineLen  uint32
	CompareAdd uint64
	Swap       uint64
	SGE        [MaxSGE]SGE // holds the payload itself when Flags has SendInline
}

// InlineData returns the payload of an inline send, copied into the entry at post time.
func (e *SQE) InlineData() []byte {
	n := min(int(e.InlineLen), MaxInline)
	return unsafe.Slice((*byte)(unsafe.Pointer(&e.SGE[0])), n)
}

// SGEs returns the scatter/gather list of the entry.
func (e *SQE) SGEs() []SGE { return e.SGE[:min(int(e.NumSGE), MaxSGE)] }

// RQE is a receive queue entry (QP receive queue or SRQ).
type RQE struct {
	WRID   uint64
	NumSGE uint32
	_      uint32
	SGE    [MaxSGE]SGE
}

// SGEs returns the scatter/gather list of the entry.
func (e *RQE) SGEs() []SGE { return e.SGE[:min(int(e.NumSGE), MaxSGE)] }

// CQE is a completion as capi's poll_cq copies it into a struct ibv_wc.
type CQE struct {
	WRID      uint64
	Status    uint32 // WCStatus
	Opcode    uint32 // WCOpcode
	VendorErr uint32
	ByteLen   uint32
	ImmInv    uint32
	QPNum     uint32
	WCFlags   uint32
	_         uint32
}

type ringHdr struct {
	Prod      uint32
	_         [60]byte
	Cons      uint32
	_         [60]byte
	Size      uint32
	EntrySize uint32
	Doorbell  uint32
	Notify    uint32
	State     uint32
	Overflow  uint32
	Active    uint32 // CQ rings: QPs with a connection completing here
	RNRWait   uint32 // RQ/SRQ rings: the engine waits for a receive (post_recv calls in)
	PostCPU   uint32 // send rings: 1 + the CPU of the last post, 0 if unknown
	// EarlyPosts: send rings of a CM-less QP in RTR: post_send takes work
	// (it waits in the ring for the stream, which moves the QP to RTS).
	EarlyPosts uint32
	_          [24]byte
}

// Values of enum ibv_wr_opcode.
const (
	WRRDMAWrite        = 0
	WRRDMAWriteWithImm = 1
	WRSend             = 2
	WRSendWithImm      = 3
	WRRDMARead         = 4
	WRAtomicCmpSwp     = 5
	WRAtomicFetchAdd   = 6
	WRLocalInv         = 7
	WRBindMW           = 8
	WRSendWithInv      = 9
)

// Values of enum ibv_send_flags.
const (
	SendFence     = 1
	SendSignaled  = 2
	SendSolicited = 4
	SendInline    = 8
)

// WCStatus values of enum ibv_wc_status.
const (
	WCSuccess          = 0
	WCLocLenErr        = 1
	WCLocQPOpErr       = 2
	WCLocEECOpErr      = 3
	WCLocProtErr       = 4
	WCWRFlushErr       = 5
	WCMWBindErr        = 6
	WCBadRespErr       = 7
	WCLocAccessErr     = 8
	WCRemInvReqErr     = 9
	WCRemAccessErr     = 10
	WCRemOpErr         = 11
	WCRetryExcErr      = 12
	WCRnrRetryExcErr   = 13
	WCLocRDDViolErr    = 14
	WCRemInvRDReqErr   = 15
	WCRemAbortErr      = 16
	WCInvEECNErr       = 17
	WCInvEECStateErr   = 18
	WCFatalErr         = 19
	WCRespTimeoutErr   = 20
	WCGeneralErr       = 21
	WCTMErr            = 22
	WCTMRndvIncomplete = 23
)

// Values of enum ibv_wc_opcode.
const (
	WCOpSend         = 0
	WCOpRDMAWrite    = 1
	WCOpRDMARead     = 2
	WCOpCompSwap     = 3
	WCOpFetchAdd     = 4
	WCOpBindMW       = 5
	WCOpLocalInv     = 6
	WCOpRecv         = 1 << 7
	WCOpRecvRDMAWImm = WCOpRecv + 1
)

// Values of enum ibv_wc_flags.
const (
	WCWithImm = 1 << 1
	WCWithInv = 1 << 3
)

// Values of enum ibv_access_flags.
const (
	AccessLocalWrite   = 1
	AccessRemoteWrite  = 2
	AccessRemoteRead   = 4
	AccessRemoteAtomic = 8
	AccessMWBind       = 16
	AccessZeroBased    = 32
	AccessOnDemand     = 64
	AccessHugetlb      = 128
	AccessRelaxedOrder = 1 << 20
)

// QPState values of enum ibv_qp_state.
type QPState uint32

const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSSQD
	QPSSQE
	QPSErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return "UNKNOWN"
}

// Values of enum ibv_event_type delivered on a context's async fd.
const (
	EventCQErr            = 0
	EventQPFatal          = 1
	EventQPReqErr         = 2
	EventQPAccessErr      = 3
	EventCommEst          = 4
	EventSQDrained        = 5
	EventPathMig          = 6
	EventPathMigErr       = 7
	EventDeviceFatal      = 8
	EventPortActive       = 9
	EventPortErr          = 10
	EventLIDChange        = 11
	EventPKeyChange       = 12
	EventSMChange         = 13
	EventSRQErr           = 14
	EventSRQLimitReached  = 15
	EventQPLastWQE        = 16
	EventClientReregister = 17
	EventGIDChange        = 18
	EventWQFatal          = 19
)
