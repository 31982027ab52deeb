package provider

import (
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// GOIWARP_CPUPROFILE=path[:seconds] writes a Go CPU profile of the first
// seconds (default 10) of the process to path: how the engine spends its
// time under an unmodified program (README, environment; bench/README).
func init() {
	if v := os.Getenv("GOIWARP_CPUPROFILE"); v != "" {
		_, _ = startCPUProfile(v)
	}
}

// startCPUProfile starts the profile GOIWARP_CPUPROFILE asks for; stop
// ends it early.
func startCPUProfile(v string) (stop func(), err error) {
	d := 10 * time.Second
	if i := strings.LastIndexByte(v, ':'); i > 0 {
		if s, err := strconv.ParseFloat(v[i+1:], 64); err == nil && s > 0 {
			v, d = v[:i], time.Duration(s*float64(time.Second))
		}
	}
	f, err := os.Create(v)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	t := time.AfterFunc(d, func() { pprof.StopCPUProfile(); f.Close() })
	return func() {
		if t.Stop() {
			pprof.StopCPUProfile()
			f.Close()
		}
	}, nil
}
