// Command wakecost measures what a message costs when the receiving side's
// application spins on memory (as ib_write_lat's target does, outside any
// library call) and a receive thread must be woken to place the data: a
// TCP ping-pong over loopback between two processes, each with an
// application thread (C) spinning on a counter and one of three receive
// paths filling it:
//
//	c-read     a C thread blocked in read(2)
//	c-epoll    a C thread blocked in epoll_wait(2), then read(2)
//	go-netpoll a goroutine in RawConn.Read (Go's netpoller), as goiwarp's
//	           RX goroutine
//	go-netpoll-off  the same goroutine, which after a read that finds
//	           it on the CPU the application last sent from takes that CPU
//	           out of its thread's affinity (provider/offcpu.go)
//	c-spin     no receive thread: the application thread reads the
//	           non-blocking socket in its spin loop (as UCX does); the floor
//	           of this machine, tail included
//	c-block    no receive thread: the application thread sleeps in read(2)
//	           on its blocking socket, as a program sleeping on a
//	           completion channel (ibv_get_cq_event) does: the floor of an
//	           event-driven ping-pong, whose every message wakes a sleeper
//	c-read-same, c-read-other  c-read with the application thread pinned
//	           to CPU 0 (server) or 1 (client) and the receive thread to the
//	           same CPU or to the other (2 CPUs or more)
//
// It prints the one-way latency (half the round trip: typical and 99 %)
// min/median/max over -runs runs, modes interleaved. The floor a
// wake-based receive path can reach on this machine; a busy-polling stack
// (UCX) does not pay it.
//
//	go run ./bench/wakecost [-runs 5] [-iters 20000] [-modes c-spin,go-netpoll]
package main

/*
#cgo CFLAGS: -D_GNU_SOURCE
#cgo LDFLAGS: -lpthread
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

extern void goSend(int fd);

static volatile long arrived;
static volatile int app_cpu = -1; // where the application last sent from
static int pin_rx = -1, pin_app = -1;
static int spin_fd = -1; // c-spin, c-block: the application reads this socket itself

static void pin(int cpu) {
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	sched_setaffinity(0, sizeof s, &s);
}

static int get_app_cpu(void) { return app_cpu; }
static void set_pins(int app, int rx) { pin_app = app, pin_rx = rx; }
static void set_spin(int fd) { spin_fd = fd; }
static void add_arrived(long n) { __atomic_add_fetch(&arrived, n, __ATOMIC_SEQ_CST); }

static void *rx_read(void *arg) {
	int fd = (int)(long)arg;
	if (pin_rx >= 0)
		pin(pin_rx);
	char b[64];
	for (;;) {
		int n = read(fd, b, sizeof b);
		if (n <= 0) return NULL;
		add_arrived(n);
	}
}

static void *rx_epoll(void *arg) {
	int fd = (int)(long)arg, ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN}, out;
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	char b[64];
	for (;;) {
		int n = read(fd, b, sizeof b);
		if (n > 0) { add_arrived(n); continue; }
		if (n < 0 && errno == EAGAIN) { epoll_wait(ep, &out, 1, -1); continue; }
		return NULL;
	}
}

static int start_rx(int fd, int epoll) {
	pthread_t t;
	return pthread_create(&t, NULL, epoll ? rx_epoll : rx_read, (void *)(long)fd);
}

static double now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

// ping_pong is the application: it sends 2 bytes (the client first) and
// spins until the peer's 2 bytes have been placed. Writes "typical p99".
static void ping_pong(int fd, int client, int iters, double *typical, double *p99) {
	double *lat = malloc(iters * sizeof *lat);
	long expect = 0;
	if (pin_app >= 0)
		pin(pin_app);
	for (int i = 0; i < iters; i++) {
		double t0 = now_us();
		app_cpu = sched_getcpu();
		if (client) goSend(fd);
		expect += 2;
		while (__atomic_load_n(&arrived, __ATOMIC_SEQ_CST) < expect) {
			char b[64];
			int n = spin_fd >= 0 ? read(spin_fd, b, sizeof b) : 0;
			if (n > 0)
				add_arrived(n);
		}
		app_cpu = sched_getcpu();
		if (!client) goSend(fd);
		lat[i] = (now_us() - t0) / 2;
	}
	qsort(lat, iters, sizeof *lat, cmp);
	*typical = lat[iters / 2];
	*p99 = lat[iters * 99 / 100];
	free(lat);
}
*/
import "C"

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var modes = []string{"c-spin", "c-block", "c-read", "c-epoll", "go-netpoll", "go-netpoll-off", "c-read-same", "c-read-other"}

//export goSend
func goSend(fd C.int) { _, _ = unix.Write(int(fd), []byte{1, 2}) }

func main() {
	runs := flag.Int("runs", 5, "runs per mode")
	iters := flag.Int("iters", 20000, "round trips per run")
	side := flag.String("side", "", "internal: server or client")
	mode := flag.String("mode", "", "internal: receive path")
	addr := flag.String("addr", "", "internal: address")
	only := flag.String("modes", "", "comma-separated receive paths to run (all if empty)")
	flag.Parse()
	if *side != "" {
		os.Exit(peer(*side, *mode, *addr, *iters))
	}
	fmt.Printf("wakecost: %s, %d runs of %d round trips per mode; one-way µs, min/median/max\n",
		time.Now().Format("2006-01-02 15:04"), *runs, *iters)
	typ := map[string][]float64{}
	p99 := map[string][]float64{}
	var procCPUs unix.CPUSet
	_ = unix.SchedGetaffinity(0, &procCPUs)
	if !procCPUs.IsSet(0) || !procCPUs.IsSet(1) {
		modes = modes[:6] // the pinned modes need CPUs 0 and 1
	}
	if *only != "" {
		modes = slices.DeleteFunc(modes, func(m string) bool { return !slices.Contains(strings.Split(*only, ","), m) })
	}
	for r := 0; r < *runs; r++ {
		for _, m := range modes {
			t, p, err := run(m, *iters)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s run %d: %v\n", m, r+1, err)
				continue
			}
			typ[m], p99[m] = append(typ[m], t), append(p99[m], p)
		}
	}
	fmt.Printf("%-12s %24s %24s\n", "receive path", "typical", "99 %")
	for _, m := range modes {
		fmt.Printf("%-12s %24s %24s\n", m, mmm(typ[m]), mmm(p99[m]))
	}
}

func mmm(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	return fmt.Sprintf("%.2f / %.2f / %.2f", v[0], v[len(v)/2], v[len(v)-1])
}

// run starts a server and a client process of one mode and returns the
// client's figures.
func run(mode string, iters int) (typical, p99 float64, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	a := l.Addr().String()
	l.Close() // the server binds it again: a port free a moment ago
	self, _ := os.Executable()
	args := func(side string) []string {
		return []string{"-side", side, "-mode", mode, "-addr", a, "-iters", fmt.Sprint(iters)}
	}
	srv := exec.Command(self, args("server")...)
	srv.Stderr = os.Stderr
	sout, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		return 0, 0, err
	}
	defer srv.Wait()
	if line, _ := bufio.NewReader(sout).ReadString('\n'); !strings.HasPrefix(line, "listening") {
		srv.Process.Kill()
		return 0, 0, fmt.Errorf("server: %q", line)
	}
	out, err := exec.Command(self, args("client")...).Output()
	if err != nil {
		srv.Process.Kill()
		return 0, 0, fmt.Errorf("client: %v", err)
	}
	_, err = fmt.Sscanf(string(out), "%g %g", &typical, &p99)
	return typical, p99, err
}

// peer is one side of a run: it connects, starts the receive path and runs
// the application's ping-pong.
func peer(side, mode, addr string, iters int) int {
	var c *net.TCPConn
	if side == "server" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("listening")
		cc, err := l.Accept()
		if err != nil {
			return 1
		}
		c = cc.(*net.TCPConn)
	} else {
		cc, err := net.Dial("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		c = cc.(*net.TCPConn)
	}
	_ = c.SetNoDelay(true)
	var fd int
	if strings.HasPrefix(mode, "go-netpoll") {
		offApp := offAppCPU(mode == "go-netpoll-off")
		rc, _ := c.SyscallConn()
		_ = rc.Control(func(f uintptr) { fd = int(f) })
		go func() {
			buf := make([]byte, 64)
			for {
				var n int
				var rerr error
				err := rc.Read(func(f uintptr) bool {
					n, rerr = unix.Read(int(f), buf)
					return rerr != unix.EAGAIN
				})
				if err != nil || rerr != nil || n <= 0 {
					return
				}
				C.add_arrived(C.long(n))
				offApp()
			}
		}()
	} else {
		// A blocking fd of its own for the C thread (c-epoll and c-spin
		// read it non-blocking; c-block's application thread sleeps in it).
		f, err := c.File()
		if err != nil {
			return 1
		}
		fd = int(f.Fd())
		_ = unix.SetNonblock(fd, mode == "c-epoll" || mode == "c-spin")
		appCPU, rxCPU := map[string]int{"server": 0, "client": 1}[side], -1
		switch mode {
		case "c-read-same":
			rxCPU = appCPU
		case "c-read-other":
			rxCPU = 1 - appCPU
		default:
			appCPU = -1
		}
		C.set_pins(C.int(appCPU), C.int(rxCPU))
		epoll := C.int(0)
		if mode == "c-epoll" {
			epoll = 1
		}
		if mode == "c-spin" || mode == "c-block" {
			C.set_spin(C.int(fd))
		} else if C.start_rx(C.int(fd), epoll) != 0 {
			return 1
		}
	}
	var typical, p99 C.double
	client := C.int(0)
	if side == "client" {
		client = 1
	}
	C.ping_pong(C.int(fd), client, C.int(iters), &typical, &p99)
	if side == "client" {
		fmt.Printf("%.3f %.3f\n", float64(typical), float64(p99))
	} else {
		time.Sleep(200 * time.Millisecond) // the client's last bytes are placed
	}
	return 0
}

// offAppCPU returns what the go-netpoll-off receive path does after a read:
// leave the application's CPU if it runs there (nothing for go-netpoll).
func offAppCPU(on bool) func() {
	var procs unix.CPUSet
	if !on || unix.SchedGetaffinity(0, &procs) != nil {
		return func() {}
	}
	return func() {
		app := int(C.get_app_cpu())
		var here uint32
		if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&here)), 0, 0); e != 0 || app < 0 || int(here) != app {
			return
		}
		set := procs
		set.Clear(app)
		if set.Count() > 0 {
			_ = unix.SchedSetaffinity(0, &set)
		}
	}
}
