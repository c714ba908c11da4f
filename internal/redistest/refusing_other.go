//go:build !unix

package redistest

import (
	"net"
	"testing"
)

// RefusingAddr is a loopback address where nothing listens: a port
// listened on and closed again (elsewhere than on Unix, where a bound
// socket keeps the port for the test; see refusing_unix.go).
func RefusingAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("RefusingAddr: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
