package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCRC32cVectors checks the iSCSI CRC32c test vectors of RFC 3720
// appendix B.4 (the RFC lists the bytes as transmitted, least significant
// first; the values here are the CRCs as numbers) and the usual check value.
func TestCRC32cVectors(t *testing.T) {
	inc := make([]byte, 32)
	dec := make([]byte, 32)
	ones := make([]byte, 32)
	for i := range inc {
		inc[i] = byte(i)
		dec[i] = byte(31 - i)
		ones[i] = 0xff
	}
	// RFC 3720 B.4: "An iSCSI - SCSI Read (10) Command PDU".
	scsiRead := []byte{
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
		0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
		0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want uint32
		wire []byte // as transmitted (RFC 3720 notation)
	}{
		{"32 zeros", make([]byte, 32), 0x8a9136aa, []byte{0xaa, 0x36, 0x91, 0x8a}},
		{"32 ones", ones, 0x62a8ab43, []byte{0x43, 0xab, 0xa8, 0x62}},
		{"incrementing", inc, 0x46dd794e, []byte{0x4e, 0x79, 0xdd, 0x46}},
		{"decrementing", dec, 0x113fdb5c, []byte{0x5c, 0xdb, 0x3f, 0x11}},
		{"iSCSI read command", scsiRead, 0xd9963a56, []byte{0x56, 0x3a, 0x96, 0xd9}},
		{"123456789", []byte("123456789"), 0xe3069283, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, CRC32c(tc.in))
			// Incremental over any split gives the same value.
			for i := 0; i <= len(tc.in); i++ {
				assert.Equal(t, tc.want, CRC32cUpdate(CRC32cUpdate(0, tc.in[:i]), tc.in[i:]))
			}
			if tc.wire != nil {
				var b [4]byte
				PutCRC(b[:], CRC32c(tc.in))
				assert.Equal(t, tc.wire, b[:], "trailer byte order")
				assert.Equal(t, tc.want, GetCRC(b[:]))
			}
		})
	}
	assert.NotNil(t, CRC32cTable())
}
