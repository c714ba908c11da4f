package redistest_test

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redlock/redlock/internal/redistest"
)

// The address refuses every connection, and no server can take its port
// while the test runs.
func TestRefusingAddrRefusesAndKeepsItsPort(t *testing.T) {
	addr := redistest.RefusingAddr(t)
	for range 3 {
		_, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a server could listen on %s", addr)
	}
}
