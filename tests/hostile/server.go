package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// env is the environment of every program run over libgoiwarp: preloaded,
// and a short MPA timeout so that a stalled handshake ends within the test.
func (r *runner) env() []string {
	return append(os.Environ(), "LD_PRELOAD="+r.lib, "GOIWARP_MPA_TIMEOUT="+r.mpaTimeout.String())
}

// server is a program under attack, started under LD_PRELOAD.
type server struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
}

func (r *runner) startServer(name string, port int, args ...string) (*server, error) {
	log := filepath.Join(r.logDir, fmt.Sprintf("%s-%d.log", name, port))
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = r.env()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitListen(port, 10*time.Second); err != nil {
		s.kill()
		return nil, err
	}
	return s, nil
}

// tcpStates returns the states (hex, as /proc/net/tcp has them: 01
// ESTABLISHED, 06 TIME_WAIT, 08 CLOSE_WAIT, 0A LISTEN ...) of the sockets
// whose local port is port.
func tcpStates(port int) []string {
	want := fmt.Sprintf(":%04X ", port)
	var st []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// local_address is field 1, st is field 3.
			if fs := strings.Fields(sc.Text()); len(fs) > 3 && strings.HasSuffix(fs[1]+" ", want) {
				st = append(st, fs[3])
			}
		}
	}
	return st
}

// drained waits until the server's port has no socket left but its
// listener and TIME_WAITs: the server closed every connection we opened,
// including the ones it had to give up on. It returns the states seen last.
func drained(port int, d time.Duration) (string, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(d)
	for {
		st := tcpStates(port)
		left := slices.DeleteFunc(slices.Clone(st), func(s string) bool { return s == "0A" || s == "06" })
		if len(left) == 0 {
			return fmt.Sprintf("%d sockets: LISTEN and TIME_WAIT", len(st)), nil
		}
		select {
		case <-limit:
			return fmt.Sprintf("states %v", st), fmt.Errorf("connections left open after %v (states %v)", d, left)
		case <-tick.C:
		}
	}
}

// waitListen polls the kernel's socket table until port is in LISTEN
// state: connecting to find out would itself be a connection the server
// has to handle.
func (s *server) waitListen(port int, d time.Duration) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(d)
	for {
		if slices.Contains(tcpStates(port), "0A") {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s exited before listening: %s", s.name, s.status())
		case <-limit:
			return fmt.Errorf("%s not listening on %d after %v", s.name, port, d)
		case <-tick.C:
		}
	}
}

func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// status describes how the process ended.
func (s *server) status() string {
	if s.alive() {
		return "running"
	}
	ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return "exit " + strconv.Itoa(ws.ExitStatus())
}

// crashLog returns the first line of the server's log that shows a crash
// of the Go runtime or a sanitizer report.
func (s *server) crashLog() string {
	b, _ := os.ReadFile(s.log)
	for _, l := range strings.Split(string(b), "\n") {
		for _, bad := range []string{"fatal error:", "panic:", "SIGSEGV", "SIGBUS", "DATA RACE", "Sanitizer"} {
			if strings.Contains(l, bad) {
				return l
			}
		}
	}
	return ""
}

// stop ends a server that must still be running: SIGTERM, and the only
// acceptable end is death by that signal (rping installs no handler).
func (s *server) stop() error {
	if !s.alive() {
		return fmt.Errorf("%s died during the attacks: %s", s.name, s.status())
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.kill()
		return fmt.Errorf("%s ignored SIGTERM for 10 s", s.name)
	}
	ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		return fmt.Errorf("%s ended with %s, want killed by SIGTERM", s.name, s.status())
	}
	return nil
}

// end waits up to d for a server that may finish on its own (a perftest
// server whose only connection was attacked), else stops it. Either way it
// must not have crashed: an exit status of its own, or our SIGTERM.
func (s *server) end(d time.Duration) error {
	select {
	case <-s.done:
		ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return fmt.Errorf("%s crashed: %s", s.name, s.status())
		}
		return nil
	case <-time.After(d):
		return s.stop()
	}
}

func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// client runs a legitimate client over libgoiwarp to completion and
// returns its output; a non-zero exit or a timeout is an error.
func (r *runner) client(d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = r.env()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("timed out after %v", d))
	}
	if err != nil {
		return string(out), fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
