// Command hostile attacks running server programs that use libgoiwarp.so
// (preloaded) over loopback TCP, as a hostile iWARP peer would: broken MPA
// requests, protocol violations after MPA, out-of-bounds and wrong-PD
// access with STags learned from the server itself, IRD overrun, Terminate
// floods, resets and a peer that stops reading. For each attack it checks
// the Terminate the server sends back (layer, error type, code) or that it
// closes without one; that the server process is still running; and that
// a legitimate client, over libgoiwarp too, completes a run with its data
// verified after every attack (and during the ones that stall a
// connection). At the end the server must die of the SIGTERM we send, not
// of anything else.
//
//	hostile -lib _build/libgoiwarp.so [-port 32400] [-perftest ib_write_bw,ib_read_bw]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

type runner struct {
	lib        string
	logDir     string
	mpaTimeout time.Duration
	rping      string
	rpingSize  int
	only       *regexp.Regexp
	rows       []string
	failed     bool
	// teardownRaces counts legitimate rping runs that verified every ping
	// and then exited 255 on EBADF in teardown (see rpingTeardownRace).
	teardownRaces int
}

func main() {
	r := &runner{}
	flag.StringVar(&r.lib, "lib", "", "libgoiwarp.so to preload into the servers and legitimate clients (required)")
	port := flag.Int("port", 32400, "first TCP port; the run uses this one and the next few")
	flag.StringVar(&r.logDir, "logdir", "", "directory for the servers' logs (default: a new temporary one)")
	flag.StringVar(&r.rping, "rping", "rping", "rping binary (empty: skip the rping suite)")
	flag.IntVar(&r.rpingSize, "S", 65535, "rping server's buffer size (-S); large, so that Read Responses fill the socket")
	perftest := flag.String("perftest", "ib_write_bw", "comma-separated perftest servers to attack (empty: none)")
	flag.DurationVar(&r.mpaTimeout, "mpa-timeout", time.Second, "GOIWARP_MPA_TIMEOUT of the servers")
	only := flag.String("only", "", "run only the attacks whose name matches this regexp")
	flag.Parse()
	if r.lib == "" {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	if r.only, err = regexp.Compile(*only); err != nil {
		fatal(err)
	}
	if missing := r.missing(strings.Split(*perftest, ",")); missing != "" {
		// Without the programs under attack there is nothing to test; in CI
		// that is a broken set-up, not a skip.
		if os.Getenv("CI") != "" {
			fatal(fmt.Errorf("%s not installed (build/deps.sh installs it)", missing))
		}
		fmt.Printf("SKIP: %s not installed\n", missing)
		os.Exit(skipCode)
	}
	if r.logDir == "" {
		if r.logDir, err = os.MkdirTemp("", "goiwarp-hostile-"); err != nil {
			fatal(err)
		}
	}
	if err := os.MkdirAll(r.logDir, 0o755); err != nil {
		fatal(err)
	}
	start := time.Now()
	p := *port
	if r.rping != "" {
		r.rpingSuite(p)
	}
	for _, bin := range strings.Split(*perftest, ",") {
		if bin = strings.TrimSpace(bin); bin != "" {
			p += 10
			r.perftestSuite(bin, p)
		}
	}
	fmt.Println("| server | attack | rule | expected | observed | result |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, row := range r.rows {
		fmt.Println(row)
	}
	if r.teardownRaces > 0 {
		fmt.Printf("%d legitimate rping client(s) verified every ping, then exited 255: rdma_get_cm_event woken for a DISCONNECTED that rdma_destroy_id dropped, then EBADF on the destroyed channel\n", r.teardownRaces)
	}
	fmt.Printf("logs in %s; %.1f s\n", r.logDir, time.Since(start).Seconds())
	if r.failed {
		fmt.Println("FAIL")
		os.Exit(1)
	}
	fmt.Println("PASS")
}

// skipCode is ctest's SKIP_RETURN_CODE for this test.
const skipCode = 77

// missing names the first server program that is not on PATH.
func (r *runner) missing(perftest []string) string {
	for _, p := range append([]string{r.rping}, perftest...) {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err != nil {
			return p
		}
	}
	return ""
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "hostile:", err)
	os.Exit(1)
}

func (r *runner) row(server, attack, why, expected, observed string, err error) {
	res := "ok"
	if err != nil {
		res = "FAIL: " + strings.ReplaceAll(err.Error(), "\n", " ")
		r.failed = true
		fmt.Fprintf(os.Stderr, "FAIL %s %s: %v\n", server, attack, err)
	}
	r.rows = append(r.rows, fmt.Sprintf("| %s | %s | %s | %s | %s | %s |", server, attack, why, expected, observed, res))
}

// attackAll runs the attacks against t; after each the server must be
// alive and, when after is set, a legitimate client must complete.
func (r *runner) attackAll(srv *server, t *target, attacks []*attack, after bool) {
	for _, a := range attacks {
		if !r.only.MatchString(a.name) {
			continue
		}
		o, err := a.run(t)
		if err == nil {
			err = a.check(o)
		}
		observed := o.String()
		if a.unchecked {
			observed = "-"
		}
		if err == nil && !srv.alive() {
			err = fmt.Errorf("server gone: %s", srv.status())
		}
		if err == nil && after {
			if lerr := t.legit(); lerr != nil {
				err = fmt.Errorf("legit client after the attack: %w", lerr)
			}
		}
		r.row(srv.name, a.name, a.why, a.expected(), observed, err)
	}
}

// rpingSuite attacks one persistent rping server (-P: a thread and a PD per
// connection, so a legitimate client can connect between and during
// attacks).
func (r *runner) rpingSuite(port int) {
	ps := strconv.Itoa(port)
	srv, err := r.startServer("rping", port, r.rping, "-s", "-P", "-a", "127.0.0.1", "-p", ps, "-S", strconv.Itoa(r.rpingSize))
	if err != nil {
		r.row("rping -s -P", "start", "", "-", "-", err)
		return
	}
	srv.name = "rping -s -P"
	t := &target{r: r, addr: "127.0.0.1:" + ps, legit: func() error { return r.rpingClient(ps) }}
	r.row(srv.name, "(legit client before any attack)", "", "10 pings verified", "-", t.legit())
	r.attackAll(srv, t, preMPAAttacks, true)
	r.attackAll(srv, t, protocolAttacks, true)
	r.attackAll(srv, t, rpingAttacks, true)
	st, err := drained(port, 10*time.Second)
	r.row(srv.name, "(connections at the end)", "every attacked connection torn down, none stuck",
		"only LISTEN and TIME_WAIT on the port", st, err)
	err = srv.stop()
	if err == nil {
		if l := srv.crashLog(); l != "" {
			err = fmt.Errorf("server log: %s", l)
		}
	}
	r.row(srv.name, "(process at the end)", "", "alive, dies of our SIGTERM", srv.status(), err)
}

// rpingClient runs rping's client: 10 pings, data validated (-V) and
// printed (-v) so the count can be checked.
func (r *runner) rpingClient(port string) error {
	out, err := r.client(30*time.Second, r.rping, "-c", "-a", "127.0.0.1", "-p", port, "-C", "10", "-S", "64", "-V", "-v")
	n := strings.Count(out, "ping data:")
	if n != 10 || strings.Contains(out, "mismatch") {
		return fmt.Errorf("rping client: %d pings verified, want 10: %v\n%s", n, err, out)
	}
	if err != nil && rpingTeardownRace(err, out) {
		r.teardownRaces++
		return nil
	}
	return err
}

// rpingTeardownRace recognises a client that verified every ping and then
// lost its own teardown: rping's main destroys the id and the event channel
// without waiting for DISCONNECTED while its CM thread blocks in
// rdma_get_cm_event. With librdmacm that thread stays blocked in the kernel
// until the process exits. With goiwarp, rdma_destroy_id drops the queued
// DISCONNECTED whose wakeup already reached the reader; it finds nothing,
// reads the channel's fd again after rdma_destroy_event_channel closed it,
// gets EBADF, and rping's CM thread calls exit(255). That is goiwarp's
// client side (capi), not the server under attack: counted, not failed.
func rpingTeardownRace(err error, out string) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == 255 &&
		strings.Contains(out, "rdma_get_cm_event: Bad file descriptor")
}

// calibrationFailed is perftest's line when its clock calibration failed.
var calibrationFailed = regexp.MustCompile(`(?m)^Correlation coefficient r\^2: \S+ < 0\.9$`)

// perftestSuite: a perftest -R server serves one client and exits. The MPA
// attacks never reach it (goiwarp's listener drops them), so one server
// takes them all and then must serve a legitimate client's full run. The
// attacks on an established stream take the server's only connection:
// each gets a server of its own, which must end without crashing.
func (r *runner) perftestSuite(bin string, port int) {
	args := func(p int) []string {
		return []string{bin, "-R", "-d", "giw_lo", "-p", strconv.Itoa(p), "-n", "200", "-s", "4096"}
	}
	ps := strconv.Itoa(port)
	srv, err := r.startServer(bin, port, args(port)...)
	if err != nil {
		r.row(bin, "start", "", "-", "-", err)
		return
	}
	t := &target{r: r, addr: "127.0.0.1:" + ps}
	r.attackAll(srv, t, preMPAAttacks, false)
	out, err := r.client(30*time.Second, append(args(port), "127.0.0.1")...)
	// perftest's own clock calibration can fail on a busy machine (its
	// cycles-per-µs fit has r^2 < 0.9): it then exits 1 without a table on
	// either side after a complete run. Not ours to judge; the server
	// must still end without crashing.
	var ee *exec.ExitError
	uncalibrated := calibrationFailed.MatchString(out) &&
		(err == nil || errors.As(err, &ee) && ee.ExitCode() > 0) // not killed, not timed out
	observed := "-"
	if uncalibrated {
		observed = "perftest's calibration failed (r^2 < 0.9): exit status not judged"
		err = nil
	} else if err == nil && !strings.Contains(out, "#bytes") {
		err = fmt.Errorf("no result table:\n%s", out)
	}
	if err == nil {
		select {
		case <-srv.done:
			if st := srv.status(); st != "exit 0" && !(uncalibrated && strings.HasPrefix(st, "exit ")) {
				err = fmt.Errorf("server %s", st)
			}
		case <-time.After(10 * time.Second):
			srv.kill()
			err = fmt.Errorf("server still running 10 s after its client")
		}
	} else {
		srv.kill()
	}
	r.row(bin, "(legit client after the MPA attacks)", "", "both exit 0", observed, err)
	for i, a := range []*attack{invalidSTagAttack, sendTooLongAttack} {
		if !r.only.MatchString(a.name) {
			continue
		}
		p := port + 1 + i
		srv, err := r.startServer(bin, p, args(p)...)
		if err != nil {
			r.row(bin, a.name, a.why, a.expected(), "-", err)
			continue
		}
		t := &target{r: r, addr: "127.0.0.1:" + strconv.Itoa(p)}
		o, err := a.run(t)
		if err == nil {
			err = a.check(o)
		}
		if eerr := srv.end(5 * time.Second); err == nil {
			err = eerr
		}
		if l := srv.crashLog(); err == nil && l != "" {
			err = fmt.Errorf("server log: %s", l)
		}
		r.row(bin, a.name, a.why, a.expected(), o.String()+"; server "+srv.status(), err)
	}
}
