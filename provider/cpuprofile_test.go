package provider

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCPUProfileEnv(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.prof")
	stop, err := startCPUProfile(p + ":30")
	if err != nil {
		t.Skip("profiling not available:", err) // another profile running (go test -cpuprofile)
	}
	stop()
	fi, err := os.Stat(p)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("profile %s: %v, %v", p, fi, err)
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "no", "such", "dir")); err == nil {
		t.Fatal("a profile into a missing directory started")
	}
}
