// Command enginebw measures the goiwarp engine against plain TCP on
// loopback in one run: a stream of 64 KiB RDMA Writes between two engines
// over one connection, and a Go TCP copy loop with 64 KiB writes, several
// runs each, CRC off and on. It prints min/median/max and the ratio of the
// medians. -qps spreads the writes over several connections whose QPs
// complete into one CQ per side; -shared-cq makes that one CQ serve both
// queues of each QP (perftest's write tests do), so every empty poll asks
// the engine for receive-side progress too.
//
//	go run ./bench/enginebw [-runs 5] [-dur 1s] [-size 65536] [-depth 32] [-qps 1] [-shared-cq]
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/verbs"
	"golang.org/x/sys/unix"
)

var (
	runs  = flag.Int("runs", 5, "runs per measurement")
	dur   = flag.Duration("dur", time.Second, "duration of one run")
	size  = flag.Int("size", 64<<10, "message size")
	depth = flag.Int("depth", 32, "writes in flight")
	prof  = flag.String("cpuprofile", "", "write a CPU profile of the engine runs to this file")
	only  = flag.String("crc", "", "only this CRC setting (0 or 1)")
	nqps  = flag.Int("qps", 1, "connections (QPs per side), writes round-robin, -depth in flight on each")
	oneCQ = flag.Bool("shared-cq", false, "one CQ per side for sends and receives")
)

func main() {
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	for _, crc := range []string{"0", "1"} {
		if *only != "" && crc != *only {
			continue
		}
		os.Setenv("GOIWARP_MPA_CRC", crc)
		var eng, tcp []float64
		for i := 0; i < *runs; i++ {
			tcp = append(tcp, tcpRun())
			eng = append(eng, engineRun())
		}
		fmt.Printf("CRC %s, %d-byte messages, %d QP(s)%s, %d runs of %v\n", map[string]string{"0": "off", "1": "on"}[crc],
			*size, *nqps, map[bool]string{true: ", shared CQ"}[*oneCQ], *runs, *dur)
		report("  engine RDMA Write", eng)
		report("  TCP copy loop    ", tcp)
		fmt.Printf("  ratio (median)    %.2fx\n", median(eng)/median(tcp))
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func report(name string, v []float64) {
	fmt.Printf("%s  min %6.0f  median %6.0f  max %6.0f MB/s\n", name, slices.Min(v), median(v), slices.Max(v))
}

func tcpRun() float64 {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(err)
	defer ln.Close()
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		must(err)
		defer c.Close()
		buf := make([]byte, *size)
		for {
			n, err := c.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	must(err)
	buf := make([]byte, *size)
	start := time.Now()
	for time.Since(start) < *dur {
		_, err := c.Write(buf)
		must(err)
	}
	c.Close()
	<-done
	return float64(got.Load()) / time.Since(start).Seconds() / 1e6
}

type side struct {
	ctx      *verbs.Context
	pd       *verbs.PD
	scq, rcq *verbs.CQ // the same CQ with -shared-cq
	qps      []*verbs.QP
	ev       chan provider.Event
}

func newSide() *side {
	ctx, err := verbs.Open(&verbs.Device{Name: "giw_lo", Ifname: "lo"})
	must(err)
	s := &side{ctx: ctx, pd: ctx.AllocPD(), ev: make(chan provider.Event, 2**nqps)}
	s.scq, err = ctx.CreateCQ(1024**nqps, nil, 0)
	must(err)
	s.rcq = s.scq
	if !*oneCQ {
		s.rcq, err = ctx.CreateCQ(64, nil, 0)
		must(err)
	}
	for range *nqps {
		qp, err := ctx.CreateQP(verbs.QPInit{PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
			Caps: verbs.QPCaps{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(err)
		must(qp.Modify(verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.QPAttrState|verbs.QPAttrAccessFlags|verbs.QPAttrPort|verbs.QPAttrPKeyIndex))
		s.qps = append(s.qps, qp)
	}
	return s
}

func (s *side) close() {
	for _, qp := range s.qps {
		qp.Destroy()
		qp.FreeRings()
	}
	s.scq.Destroy()
	if s.rcq != s.scq {
		s.rcq.Destroy()
	}
	s.ctx.Close()
}

// Ring access as capi does it (capi/giw_ring.h).
func prodp(b unsafe.Pointer) *uint32 { return (*uint32)(b) }
func consp(b unsafe.Pointer) *uint32 { return (*uint32)(unsafe.Add(b, 64)) }

// activep: giw_ring.active (after size, entry_size, doorbell, notify, state, overflow).
func activep(b unsafe.Pointer) *uint32 { return (*uint32)(unsafe.Add(b, 152)) }

func entry(b unsafe.Pointer, i uint32) unsafe.Pointer {
	size := *(*uint32)(unsafe.Add(b, 128))
	esz := *(*uint32)(unsafe.Add(b, 132))
	return unsafe.Add(b, 192+uintptr(i&(size-1))*uintptr(esz))
}

func (s *side) post(qp *verbs.QP, e verbs.SQE) {
	b := qp.SQ.Base()
	p := atomic.LoadUint32(prodp(b))
	*(*verbs.SQE)(entry(b, p)) = e
	atomic.StoreUint32(prodp(b), p+1)
	if qp.TakeTx() {
		qp.Doorbell()
	}
}

// poll is capi's poll_cq: an empty CQ with a connected QP calls the
// engine's progress hook once and looks again.
func (s *side) poll() (verbs.CQE, bool) {
	b := s.scq.Ring.Base()
	c := atomic.LoadUint32(consp(b))
	if atomic.LoadUint32(prodp(b)) == c {
		if atomic.LoadUint32(activep(b)) == 0 || !s.scq.Progress() || atomic.LoadUint32(prodp(b)) == c {
			return verbs.CQE{}, false
		}
	}
	e := *(*verbs.CQE)(entry(b, c))
	atomic.StoreUint32(consp(b), c+1)
	return e, true
}

func (s *side) mem(n int, access int) ([]byte, *verbs.MR) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(err)
	for i := range b {
		b[i] = byte(i)
	}
	a := uintptr(unsafe.Pointer(&b[0]))
	mr, err := s.pd.RegMR(a, uint64(n), uint64(a), access|verbs.AccessLocalWrite)
	must(err)
	return b, mr
}

func engineRun() float64 {
	cli, srv := newSide(), newSide()
	defer cli.close()
	defer srv.close()
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	must(err)
	accepted := 0
	ln := provider.Listen(tl, func(r *provider.Request) {
		_, err := r.Accept(srv.qps[accepted], provider.ConnParams{IRD: 4, ORD: 4}, func(ev provider.Event) { srv.ev <- ev })
		must(err)
		accepted++
	})
	defer ln.Close()
	var eps []*provider.Endpoint
	for _, qp := range cli.qps { // one at a time: the listener hands out srv.qps in order
		ep, err := provider.Connect(qp, nil, ln.Addr(), provider.ConnParams{IRD: 4, ORD: 4}, 5*time.Second,
			func(ev provider.Event) { cli.ev <- ev })
		must(err)
		if ev := <-cli.ev; ev.Type != provider.Established {
			log.Fatalf("connect: %+v", ev)
		}
		eps = append(eps, ep)
	}
	src, smr := cli.mem(*size, 0)
	dst, dmr := srv.mem(*size**depth, verbs.AccessRemoteWrite) // shared by every QP's writes
	defer unix.Munmap(src)
	defer unix.Munmap(dst)
	defer smr.Dereg()
	defer dmr.Dereg()
	wr := func(i int) verbs.SQE {
		e := verbs.SQE{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, NumSGE: 1,
			RKey: dmr.STag, RemoteAddr: dmr.IOVA + uint64(i%*depth**size)}
		e.SGE[0] = verbs.SGE{Addr: smr.IOVA, Length: uint32(*size), LKey: smr.STag}
		return e
	}
	var bytes int64
	inflight := 0
	start := time.Now()
	i := 0
	for time.Since(start) < *dur {
		for inflight < *depth**nqps {
			cli.post(cli.qps[i%*nqps], wr(i))
			i++
			inflight++
		}
		for {
			c, ok := cli.poll()
			if !ok {
				// capi's poller is a C thread that holds no P; a Go loop
				// spinning here would keep one of the two Ps from the
				// engine's goroutines.
				runtime.Gosched()
				break
			}
			if c.Status != verbs.WCSuccess {
				log.Fatalf("completion %+v", c)
			}
			inflight--
			bytes += int64(*size)
		}
	}
	for inflight > 0 {
		if _, ok := cli.poll(); ok {
			inflight--
			bytes += int64(*size)
		} else {
			runtime.Gosched()
		}
	}
	// Completion means "on the socket"; a final Read-free barrier: the
	// bytes are in the peer's socket buffer at most, a few hundred KiB.
	el := time.Since(start)
	for _, ep := range eps {
		ep.Disconnect()
	}
	return float64(bytes) / el.Seconds() / 1e6
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

var _ = io.Discard
