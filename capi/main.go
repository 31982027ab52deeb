// Command capi is built with -buildmode=c-shared into libgoiwarp-core.so.1
// (which the loader shim, capi/loader, loads): the libibverbs and librdmacm
// C ABI over the Go verbs, provider and rdmacm packages. C code lives in the
// .c files of this directory, two glues with one header each: the verbs glue
// (capi.h) and the rdmacm glue (rdmacm.h, on top of the verbs glue). The Go
// files export functions that convert arguments and dispatch to the Go
// objects, which they name by runtime/cgo handles.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include -O2 -Wall -Wno-unused-function
*/
import "C"

import (
	"os"

	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/verbs"
)

func init() {
	// QPs that programs connect with ibv_modify_qp alone (no CM) get their
	// numbers and their streams from the provider.
	verbs.SetConnector(provider.CMLess)
	startNetpoller()
}

// startNetpoller starts the runtime's netpoller now, with the core: it is
// otherwise started by the first socket, and if the process's descriptors
// run out then, the runtime cannot make its epoll and eventfd and kills the
// process ("runtime: eventfd failed") where the socket's EMFILE was due. A
// pipe is the cheapest pollable file.
func startNetpoller() {
	r, w, err := os.Pipe()
	if err != nil {
		return // the first socket tries again
	}
	r.Close()
	w.Close()
}

func main() {}
