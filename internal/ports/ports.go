// Package ports gives each test run on a machine its own share of the
// loopback ports that the integration harness (test/integration) and the
// tools' server processes (internal/redisproc) hand out, so that runs
// side by side (scripts/test.sh starts several at once) never pick the
// same port: a port that was free when one run checked it could otherwise
// be taken by the other before its server binds it, or while a node
// restarts on it.
package ports

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// SlotVar names the run's share: "i/n" is the i-th (from 1) of n equal
// parts of every range. Unset, a run has the whole range.
const SlotVar = "REDLOCK_TEST_PORT_SLOT"

// Range returns this run's part of the ports [lo, hi): the whole of it
// unless SlotVar is set, and an error naming the variable if its value is
// not "i/n" with 1 <= i <= n and a part of at least 100 ports.
func Range(lo, hi int) (int, int, error) {
	return rangeOf(os.Getenv(SlotVar), lo, hi)
}

func rangeOf(slot string, lo, hi int) (int, int, error) {
	if slot == "" {
		return lo, hi, nil
	}
	is, ns, ok := strings.Cut(slot, "/")
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 1 || i > n {
		return 0, 0, fmt.Errorf("ports: %s=%q: want i/n with 1 <= i <= n, for instance 2/3", SlotVar, slot)
	}
	width := (hi - lo) / n
	if width < 100 {
		return 0, 0, fmt.Errorf("ports: %s=%q leaves %d ports of %d-%d to a run; want at least 100", SlotVar, slot, width, lo, hi-1)
	}
	start := lo + (i-1)*width
	return start, start + width, nil
}

var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)

// Free returns a loopback port of this run's part of [lo, hi) (Range) that
// was free a moment ago, with port+offset free too for each offset (a
// cluster node's bus port), and never one it returned before in this
// process, so that a crashed server's port stays its own. Processes of one
// run start at different places in their part, so that they do not all
// try the same ports first.
func Free(lo, hi int, offsets ...int) (int, error) {
	lo, hi, err := Range(lo, hi)
	if err != nil {
		return 0, err
	}
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	free := func(port int) bool {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return false
		}
		ln.Close()
		return true
	}
	start := lo + os.Getpid()%max(1, (hi-lo)/2)
	for _, span := range [][2]int{{start, hi}, {lo, start}} {
	next:
		for port := span[0]; port < span[1]; port++ {
			if handedOut[port] || !free(port) {
				continue
			}
			for _, o := range offsets {
				if !free(port + o) {
					continue next
				}
			}
			handedOut[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("ports: no free loopback port in %d-%d", lo, hi-1)
}
