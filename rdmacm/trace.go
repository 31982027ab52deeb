package rdmacm

import (
	"fmt"
	"os"
)

// GOIWARP_CM_TRACE=1 prints every CM event queued and every engine event
// received to stderr.
var traceOn = os.Getenv("GOIWARP_CM_TRACE") != ""

func tracef(format string, args ...any) {
	if traceOn {
		fmt.Fprintf(os.Stderr, "goiwarp cm[%d]: "+format+"\n", append([]any{os.Getpid()}, args...)...)
	}
}
