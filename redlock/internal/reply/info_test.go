package reply

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestInfoField(t *testing.T) {
	info := "role:master\r\nconnected_slaves:2\r\nmaster_replid:ab\r\nmaster_replid2:cd\r\n"
	for prefix, want := range map[string]string{"role:": "master", "connected_slaves:": "2", "master_replid:": "ab", "master_replid2:": "cd"} {
		got, ok := InfoField(info, prefix)
		assert.True(t, ok, prefix)
		assert.Equal(t, want, got, prefix)
	}
	_, ok := InfoField(info, "slaves:")
	assert.False(t, ok, "a field is matched whole, at a line's start")
}
