package provider

import (
	"encoding/binary"
	"testing"

	"github.com/goiwarp/goiwarp/verbs"
	"github.com/stretchr/testify/require"
)

// A responder QP whose access flags lack the right refuses a Write, Read or
// Atomic into a region that grants it, over TCP and same-host shared memory
// (whose direct placement bypasses the receive path), whether the right was
// never given or is taken away in RTS: access rights violation, Terminate,
// both QPs in ERR, and the responder's memory untouched.
func TestQPAccessFlagsGateRemoteAccess(t *testing.T) {
	all := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	for _, m := range paths {
		for _, tc := range []struct {
			name   string
			op     uint8
			lacks  int
			revoke bool // granted at connect, removed in RTS
			want   uint32
		}{
			{"write", verbs.WRRDMAWrite, verbs.AccessRemoteWrite, false, verbs.WCSuccess},
			{"write-revoked", verbs.WRRDMAWrite, verbs.AccessRemoteWrite, true, verbs.WCSuccess},
			{"read", verbs.WRRDMARead, verbs.AccessRemoteRead, false, verbs.WCRemAccessErr},
			{"read-revoked", verbs.WRRDMARead, verbs.AccessRemoteRead, true, verbs.WCRemAccessErr},
			{"fetch-add", verbs.WRAtomicFetchAdd, verbs.AccessRemoteAtomic, false, verbs.WCRemAccessErr},
			{"cmp-swap-revoked", verbs.WRAtomicCmpSwp, verbs.AccessRemoteAtomic, true, verbs.WCRemAccessErr},
		} {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				o := modePair(m.shm)
				if !tc.revoke {
					o.srvAccess = all &^ tc.lacks
				}
				p := connectPair(t, o)
				require.Equal(t, m.shm == ShmOn, p.cli.ep.shm != nil)
				c, s := p.cli, p.srv
				if tc.revoke {
					require.NoError(t, s.qp.Modify(verbs.QPAttr{AccessFlags: all &^ tc.lacks}, verbs.QPAttrAccessFlags))
				}
				src, smr := c.mem(4096, 0)
				dst, dmr := s.mem(4096, all)
				for i := range src {
					src[i] = 0xab
				}
				binary.NativeEndian.PutUint64(dst[64:], 7)
				c.postRecv(rqe(50))
				n := 200
				if tc.op != verbs.WRRDMAWrite && tc.op != verbs.WRRDMARead {
					n = 8
				}
				w := sqe(1, tc.op, verbs.SendSignaled, sge(smr, src, 0, n))
				w.RKey, w.RemoteAddr = dmr.STag, addr(dst, 64)
				w.CompareAdd, w.Swap = 7, 99
				c.postSend(w)
				requireRemoteAccessFails(t, c, s, 1, tc.want, verbs.EventQPAccessErr)
				require.EqualValues(t, 7, binary.NativeEndian.Uint64(dst[64:]), "responder memory changed")
				require.Equal(t, make([]byte, n-8), dst[72:64+n], "responder memory changed")
				require.Equal(t, byte(0xab), src[0], "requester's sink written")
			})
		}
	}
}
