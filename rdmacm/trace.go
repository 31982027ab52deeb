package rdmacm

import (
	"os"

	"github.com/goiwarp/goiwarp/provider"
)

// CM tracing: every CM event queued and every engine event received, at
// debug level (GOIWARP_LOG=debug). GOIWARP_CM_TRACE=1 (any value but "" and
// "0") prints the CM trace alone whatever GOIWARP_LOG says; it is kept for
// compatibility and equals GOIWARP_LOG=debug restricted to the CM.
var traceForced = func() bool {
	v := os.Getenv("GOIWARP_CM_TRACE")
	return v != "" && v != "0"
}()

func tracef(format string, args ...any) {
	switch {
	case traceForced:
		provider.LogForce(provider.LevelDebug, "cm: "+format, args...)
	case provider.LogEnabled(provider.LevelDebug):
		provider.Logf(provider.LevelDebug, "cm: "+format, args...)
	}
}
