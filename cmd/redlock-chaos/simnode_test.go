package main

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The scriptflush fault empties the simulated server's script cache, as
// SCRIPT FLUSH does: a script loaded before is unknown after.
func TestScriptFlushEmptiesTheCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newSimNode(0, newNodeClock(0), 1, 0, false)
		defer n.kill()
		c, err := n.server().Dial()
		require.NoError(t, err)
		defer c.Close()
		exchange := func(cmd string) string {
			_, err := c.Write([]byte(cmd))
			require.NoError(t, err)
			buf := make([]byte, 128)
			k, err := c.Read(buf)
			require.NoError(t, err)
			return string(buf[:k])
		}
		loaded := exchange("*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n$8\r\nreturn 1\r\n")
		require.Len(t, loaded, 47, "a digest: %q", loaded)
		digest := loaded[5:45]
		exists := "*3\r\n$6\r\nSCRIPT\r\n$6\r\nEXISTS\r\n$40\r\n" + digest + "\r\n"
		require.Equal(t, "*1\r\n:1\r\n", exchange(exists), "cached before the flush")
		n.flushScripts()
		assert.Equal(t, "*1\r\n:0\r\n", exchange(exists), "cached after the flush")
	})
}
