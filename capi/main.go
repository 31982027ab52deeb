// Command capi is built with -buildmode=c-shared into libgoiwarp.so: the
// libibverbs and librdmacm C ABI over the Go verbs, provider and rdmacm
// packages. C code lives in the .c files of this directory (capi.h is the
// private header); the Go files export functions that convert arguments and
// dispatch to the Go objects, which they name by runtime/cgo handles.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include -O2 -Wall -Wno-unused-function
*/
import "C"

import (
	"github.com/goiwarp/goiwarp/provider"
	"github.com/goiwarp/goiwarp/verbs"
)

// QPs that programs connect with ibv_modify_qp alone (no CM) get their
// numbers and their streams from the provider.
func init() { verbs.SetConnector(provider.CMLess) }

func main() {}
