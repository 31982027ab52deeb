// pvmcost measures what direct placement on a same-host connection costs
// the kernel: process_vm_writev and process_vm_readv into another process
// (one call per operation, as goiwarp's shmdirect.go makes them) beside a
// plain copy within one process, per size, several runs (min/median/max).
// It is the floor under ib_write_lat/ib_read_lat and the ceiling over
// ib_write_bw/ib_read_bw with GOIWARP_SHM (bench/README.md).
//
//	go run ./bench/pvmcost [-runs 5] [-dur 300ms]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const bufLen = 1 << 20

func main() {
	runs := flag.Int("runs", 5, "runs per measurement")
	dur := flag.Duration("dur", 300*time.Millisecond, "time per run")
	child := flag.Bool("child", false, "be the target process (internal)")
	flag.Parse()
	if *child {
		target()
		return
	}
	cmd := exec.Command(os.Args[0], "-child")
	cmd.Stdin = nil
	out, err := cmd.StdoutPipe()
	check(err)
	in, err := cmd.StdinPipe()
	check(err)
	check(cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	check(err)
	f := strings.Fields(line)
	addr, err := strconv.ParseUint(f[0], 10, 64)
	check(err)
	pid := cmd.Process.Pid

	local := make([]byte, bufLen)
	other := make([]byte, bufLen)
	fmt.Printf("%-26s %8s %12s %12s %12s %10s\n", "operation", "bytes", "min", "median", "max", "GB/s(med)")
	for _, size := range []int{2, 4096, 65536, bufLen} {
		liov := []unix.Iovec{{Base: &local[0]}}
		liov[0].SetLen(size)
		riov := []unix.RemoteIovec{{Base: uintptr(addr), Len: size}}
		ops := []struct {
			name string
			fn   func()
		}{
			{"process_vm_writev", func() {
				if _, err := unix.ProcessVMWritev(pid, liov, riov, 0); err != nil {
					check(err)
				}
			}},
			{"process_vm_readv", func() {
				if _, err := unix.ProcessVMReadv(pid, liov, riov, 0); err != nil {
					check(err)
				}
			}},
			{"copy in one process", func() { copy(other[:size], local[:size]) }},
		}
		for _, op := range ops {
			var ns []float64
			for range *runs {
				n, start := 0, time.Now()
				for time.Since(start) < *dur {
					for range 64 {
						op.fn()
					}
					n += 64
				}
				ns = append(ns, float64(time.Since(start).Nanoseconds())/float64(n))
			}
			slices.Sort(ns)
			med := ns[len(ns)/2]
			fmt.Printf("%-26s %8d %10.0fns %10.0fns %10.0fns %10.2f\n", op.name, size, ns[0], med, ns[len(ns)-1], float64(size)/med)
		}
	}
	in.Close()
	_ = cmd.Wait()
}

// target holds a buffer for the parent to write and read, until its stdin closes.
func target() {
	buf := make([]byte, bufLen)
	for i := range buf {
		buf[i] = byte(i)
	}
	fmt.Printf("%d\n", uintptr(unsafe.Pointer(&buf[0])))
	var b [1]byte
	_, _ = os.Stdin.Read(b[:])
	_ = buf[0]
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "pvmcost:", err)
		os.Exit(1)
	}
}
