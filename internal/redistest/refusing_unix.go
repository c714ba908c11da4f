//go:build unix

package redistest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusingAddr is a loopback address that refuses connections for as long
// as the test runs: a TCP socket bound to a port and never listening, so
// that a dial there meets "connection refused" and no other server can take
// the port. (A port listened on and closed again was free for the kernel to
// give the next server of any test running in parallel, which then answered
// there: a node meant to be down read as up.)
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("RefusingAddr: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("RefusingAddr: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("RefusingAddr: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("RefusingAddr: bound to %T, not an IPv4 address", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))
}
