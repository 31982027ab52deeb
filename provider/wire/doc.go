// Package wire encodes and decodes the iWARP wire formats: MPA (RFC 5044,
// with the RFC 6581 enhanced connection establishment), DDP (RFC 5041),
// RDMAP (RFC 5040) and the RFC 7306 extensions (atomics, immediate data),
// plus CRC32c and MPA markers.
//
// The package is pure: no I/O, no goroutines, no mutable package state.
// Headers are typed byte slices in the gVisor netstack style (offset
// constants, accessors, Encode(*Fields)); parse functions never allocate and
// never read past the end of the slice they are given. Errors found while
// parsing received data are *Error values that carry the Terminate (layer,
// error type, error code) triple the engine must send back.
//
// Length conventions: an FPDU on the wire is
//
//	ULPDU Length (2) | ULPDU (DDP segment) | PAD (0-3) | CRC (4)
//
// with markers interleaved when negotiated. "Header length" in this package
// always counts from the first octet of the DDP segment, i.e. right after
// the 2-byte ULPDU Length field.
package wire
