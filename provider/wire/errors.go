package wire

import (
	"errors"
	"strconv"
)

// Layer is the Terminate "Layer" field: which protocol layer found the
// error (RFC 5040).
type Layer uint8

// Terminate layers.
const (
	LayerRDMAP Layer = 0 // RDMAP
	LayerDDP   Layer = 1 // DDP
	LayerLLP   Layer = 2 // lower layer protocol, i.e. MPA over TCP
)

// String names the layer.
func (l Layer) String() string {
	switch l {
	case LayerRDMAP:
		return "RDMAP"
	case LayerDDP:
		return "DDP"
	case LayerLLP:
		return "LLP"
	}
	return "Layer(" + strconv.Itoa(int(l)) + ")"
}

// ErrorType is the Terminate "Error Type" field; its meaning depends on the
// layer.
type ErrorType uint8

// RDMAP error types (RFC 5040).
const (
	RDMAPErrLocalCatastrophic ErrorType = 0x0 // local catastrophic error
	RDMAPErrRemoteProtection  ErrorType = 0x1 // remote protection error
	RDMAPErrRemoteOperation   ErrorType = 0x2 // remote operation error
)

// DDP error types (RFC 5041).
const (
	DDPErrLocalCatastrophic ErrorType = 0x0 // local catastrophic error
	DDPErrTaggedBuffer      ErrorType = 0x1 // tagged buffer error
	DDPErrUntaggedBuffer    ErrorType = 0x2 // untagged buffer error
	DDPErrReservedForLLP    ErrorType = 0x3 // reserved for use by the LLP
)

// LLPErrMPA is the only LLP error type: an MPA error (RFC 5044).
const LLPErrMPA ErrorType = 0x0

// ErrorCode is the Terminate "Error Code" field; its meaning depends on the
// layer and error type.
type ErrorCode uint8

// RDMAP error codes (RFC 5040). Protection codes go with
// RDMAPErrRemoteProtection, the others with RDMAPErrRemoteOperation;
// RDMAPErrLocalCatastrophic uses code 0.
const (
	RDMAPCodeInvalidSTag        ErrorCode = 0x00 // invalid STag
	RDMAPCodeBaseBounds         ErrorCode = 0x01 // base or bounds violation
	RDMAPCodeAccessRights       ErrorCode = 0x02 // access rights violation
	RDMAPCodeSTagNotAssociated  ErrorCode = 0x03 // STag not associated with RDMAP stream
	RDMAPCodeTOWrap             ErrorCode = 0x04 // TO wrap
	RDMAPCodeInvalidVersion     ErrorCode = 0x05 // invalid RDMAP version
	RDMAPCodeUnexpectedOpcode   ErrorCode = 0x06 // unexpected opcode
	RDMAPCodeCatastrophicStream ErrorCode = 0x07 // catastrophic error, localized to RDMAP stream
	RDMAPCodeCatastrophicGlobal ErrorCode = 0x08 // catastrophic error, global
	RDMAPCodeCannotInvalidate   ErrorCode = 0x09 // STag cannot be invalidated
	RDMAPCodeUnspecified        ErrorCode = 0xff // unspecified error
)

// DDP tagged buffer error codes (RFC 5041), with DDPErrTaggedBuffer.
const (
	DDPCodeTaggedInvalidSTag       ErrorCode = 0x00 // invalid STag
	DDPCodeTaggedBaseBounds        ErrorCode = 0x01 // base or bounds violation
	DDPCodeTaggedSTagNotAssociated ErrorCode = 0x02 // STag not associated with DDP stream
	DDPCodeTaggedTOWrap            ErrorCode = 0x03 // TO wrap
	DDPCodeTaggedInvalidVersion    ErrorCode = 0x04 // invalid DDP version
)

// DDP untagged buffer error codes (RFC 5041), with DDPErrUntaggedBuffer.
const (
	DDPCodeUntaggedInvalidQN      ErrorCode = 0x01 // invalid QN
	DDPCodeUntaggedNoBuffer       ErrorCode = 0x02 // invalid MSN, no buffer available
	DDPCodeUntaggedMSNRange       ErrorCode = 0x03 // invalid MSN, MSN range is not valid
	DDPCodeUntaggedInvalidMO      ErrorCode = 0x04 // invalid MO
	DDPCodeUntaggedTooLong        ErrorCode = 0x05 // DDP message too long for available buffer
	DDPCodeUntaggedInvalidVersion ErrorCode = 0x06 // invalid DDP version
)

// Local catastrophic error codes (RFC 5040 and RFC 5041): the
// code that goes with RDMAPErrLocalCatastrophic and DDPErrLocalCatastrophic.
const (
	RDMAPCodeLocalCatastrophic ErrorCode = 0x00
	DDPCodeLocalCatastrophic   ErrorCode = 0x00
)

// MPA (LLP) error codes (RFC 5044, RFC 6581), with LLPErrMPA.
const (
	MPACodeTCPClosed         ErrorCode = 0x01 // TCP connection closed, terminated or lost
	MPACodeCRC               ErrorCode = 0x02 // MPA CRC error
	MPACodeMarker            ErrorCode = 0x03 // MPA marker and ULPDU Length field mismatch
	MPACodeInvalidReqRep     ErrorCode = 0x04 // invalid MPA request or reply frame
	MPACodeLocalCatastrophic ErrorCode = 0x05 // local catastrophic error (RFC 6581)
	MPACodeInsufficientIRD   ErrorCode = 0x06 // insufficient IRD resources (RFC 6581)
	MPACodeNoMatchingRTR     ErrorCode = 0x07 // no matching RTR option (RFC 6581)
)

// Error is a protocol error found in received data. Layer, Type and Code
// are what the engine puts in the Terminate message it sends.
type Error struct {
	Layer  Layer
	Type   ErrorType
	Code   ErrorCode
	Reason string
}

// Error implements error.
func (e *Error) Error() string {
	return "iwarp " + e.Layer.String() + " error (type " + strconv.Itoa(int(e.Type)) +
		", code 0x" + strconv.FormatUint(uint64(e.Code), 16) + "): " + e.Reason
}

// Terminate returns the Terminate control fields for e.
func (e *Error) Terminate() TermControl {
	return TermControl{Layer: e.Layer, Type: e.Type, Code: e.Code}
}

// AsError returns the *Error inside err, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// ErrShort means the buffer ends before the structure does. It is not a
// protocol error: the caller has to read more bytes.
var ErrShort = errors.New("iwarp: buffer too short")

// Receive-side protocol errors. They are shared, read-only values; compare
// with errors.Is or inspect them with AsError.
var (
	ErrDDPVersionTagged   = &Error{LayerDDP, DDPErrTaggedBuffer, DDPCodeTaggedInvalidVersion, "invalid DDP version"}
	ErrDDPVersionUntagged = &Error{LayerDDP, DDPErrUntaggedBuffer, DDPCodeUntaggedInvalidVersion, "invalid DDP version"}
	ErrDDPInvalidQN       = &Error{LayerDDP, DDPErrUntaggedBuffer, DDPCodeUntaggedInvalidQN, "invalid queue number for opcode"}
	ErrDDPInvalidMO       = &Error{LayerDDP, DDPErrUntaggedBuffer, DDPCodeUntaggedInvalidMO, "single-segment message with MO != 0 or L = 0"}
	ErrRDMAPVersion       = &Error{LayerRDMAP, RDMAPErrRemoteOperation, RDMAPCodeInvalidVersion, "invalid RDMAP version"}
	ErrRDMAPOpcode        = &Error{LayerRDMAP, RDMAPErrRemoteOperation, RDMAPCodeUnexpectedOpcode, "unknown RDMAP opcode"}
	ErrRDMAPTagged        = &Error{LayerRDMAP, RDMAPErrRemoteOperation, RDMAPCodeUnexpectedOpcode, "tagged flag does not match opcode"}
	ErrRDMAPLength        = &Error{LayerRDMAP, RDMAPErrRemoteOperation, RDMAPCodeCatastrophicStream, "ULPDU length does not fit the opcode's header"}
	ErrMPACRC             = &Error{LayerLLP, LLPErrMPA, MPACodeCRC, "CRC mismatch"}
	ErrMPAMarker          = &Error{LayerLLP, LLPErrMPA, MPACodeMarker, "marker does not point at the FPDU start"}
	ErrMPALength          = &Error{LayerLLP, LLPErrMPA, MPACodeMarker, "bad ULPDU length"}
	ErrMPABadKey          = &Error{LayerLLP, LLPErrMPA, MPACodeInvalidReqRep, "bad MPA request/reply key"}
	ErrMPABadRevision     = &Error{LayerLLP, LLPErrMPA, MPACodeInvalidReqRep, "unsupported MPA revision"}
	ErrMPAPrivateData     = &Error{LayerLLP, LLPErrMPA, MPACodeInvalidReqRep, "MPA private data too long or malformed"}
	ErrTerminateFormat    = &Error{LayerRDMAP, RDMAPErrRemoteOperation, RDMAPCodeCatastrophicStream, "malformed terminate message"}
)
