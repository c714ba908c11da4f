package reply

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedirection(t *testing.T) {
	for _, tc := range []struct {
		err  string
		ask  bool
		addr string
		ok   bool
	}{
		{"MOVED 3999 127.0.0.1:6381", false, "127.0.0.1:6381", true},
		{"ASK 3999 127.0.0.1:6381", true, "127.0.0.1:6381", true},
		{"MOVED 3999 [::1]:6381", false, "[::1]:6381", true},
		{"TRYAGAIN Multiple keys request during rehashing of slot", false, "", false},
		{"ERR MOVED 1 2", false, "", false},
		{"MOVED 3999", false, "", false},
		{"CLUSTERDOWN The cluster is down", false, "", false},
	} {
		ask, addr, ok := Redirection(errors.New(tc.err))
		assert.Equal(t, tc.ok, ok, tc.err)
		assert.Equal(t, tc.ask, ask, tc.err)
		assert.Equal(t, tc.addr, addr, tc.err)
	}
}
