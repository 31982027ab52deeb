package provider

import (
	"testing"
	"time"

	"github.com/goiwarp/goiwarp/provider/wire"
	"github.com/stretchr/testify/require"
)

// The IRD slot of a Read Response is free as soon as its last FPDU is
// framed for the socket, before the write: the requester may issue the
// next Read the moment the last byte arrives, and that request must find
// the slot free (ib_read_bw -R saw "IRD exceeded" Terminates).
func TestIRDFreedWhenFramed(t *testing.T) {
	e := &Endpoint{mulpdu: 1024, neg: negotiated{ird: 1, ord: 1}}
	tx := &e.tx
	tx.init(e)
	tx.mssAt = time.Now().Add(time.Hour) // no socket to ask for its MSS: keep mulpdu
	payload := make([]byte, 3000)        // three FPDUs
	tx.irdInUse = 2
	tx.internal = []*txMsg{
		{kind: kindReadResp, h: wire.Header{Opcode: wire.OpReadResponse, STag: 1}, data: [][]byte{payload}, total: len(payload)},
		{kind: kindAtomicResp, h: wire.Header{Opcode: wire.OpAtomicResponse, Last: true, MSN: 1}},
	}
	require.True(t, tx.fill())
	require.Nil(t, tx.cur)
	require.Len(t, tx.acts, 2)
	require.Equal(t, 0, tx.irdInUse, "slots still taken once the responses are framed")
	// Retiring (written) or dropping them does not free the slots twice.
	tx.written = tx.queued
	tx.retire()
	require.Equal(t, 0, tx.irdInUse)

	// A response dropped half-framed gives its slot back once.
	tx.irdInUse = 1
	tx.resetBatch()
	tx.internal = []*txMsg{{kind: kindReadResp, h: wire.Header{Opcode: wire.OpReadResponse, STag: 1},
		data: [][]byte{make([]byte, 8<<20)}, total: 8 << 20}}
	require.True(t, tx.fill())
	require.NotNil(t, tx.cur)
	require.Equal(t, 1, tx.irdInUse)
	tx.dropAll()
	require.Equal(t, 0, tx.irdInUse)
}
