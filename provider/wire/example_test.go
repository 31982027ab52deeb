package wire_test

import (
	"fmt"

	"github.com/goiwarp/goiwarp/provider/wire"
)

// The transmit side builds an FPDU in one buffer: header, payload, trailer.
func ExampleEncodeHeader() {
	payload := []byte("hello")
	buf := make([]byte, wire.FPDULen(wire.DDPUntaggedHeaderLen+len(payload)))
	h := wire.Header{Opcode: wire.OpSend, Last: true, MSN: 1}
	hl, _ := wire.EncodeHeader(buf[wire.MPALenSize:], &h)
	copy(buf[wire.MPALenSize+hl:], payload)
	n, _ := wire.FinishFPDU(buf, hl+len(payload), true)
	fmt.Println(n, hl)
	// Output: 32 18
}

// The receive side reads the length field and two control bytes, asks for
// the header length, reads exactly the header, then the payload.
func ExampleParseHeader() {
	fpdu := []byte{
		0x00, 0x0e, // ULPDU Length = 14
		0xc1, 0x40, // DDP: T L DV=1; RDMAP: RV=1 Write
		0x00, 0x00, 0x00, 0x01, // STag
		0, 0, 0, 0, 0, 0, 0, 0, // TO
		0, 0, 0, 0, // CRC (not negotiated)
	}
	ulpduLen := wire.ULPDULen(fpdu)
	hl, err := wire.HeaderLen(fpdu[2:4])
	if err != nil {
		fmt.Println(wire.AsError(err).Terminate())
		return
	}
	var h wire.Header
	if err := wire.ParseHeader(&h, fpdu[2:2+hl], ulpduLen); err != nil {
		return
	}
	fmt.Println(h.Opcode, h.STag, h.TO, h.PayloadLen(ulpduLen))
	// Output: RDMA Write 1 0 0
}
