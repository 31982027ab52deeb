package wire

import "hash/crc32"

// castagnoli is the CRC32c table. crc32.MakeTable returns the shared,
// read-only table for Castagnoli, which crc32.Update runs with the hardware
// instruction where the CPU has it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32cTable returns the CRC32c (Castagnoli) table for use with hash/crc32.
func CRC32cTable() *crc32.Table { return castagnoli }

// CRC32c returns the CRC32c of b (the MPA FPDU CRC, RFC 5044).
func CRC32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// CRC32cUpdate returns the CRC32c of the data already summed into crc
// followed by b. Start from 0; CRC32cUpdate(CRC32cUpdate(0, a), b) equals
// CRC32c(append(a, b...)), so an FPDU scattered over several slices can be
// summed without copying.
func CRC32cUpdate(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }
