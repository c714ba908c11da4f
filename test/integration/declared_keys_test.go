package integration

import (
	"path/filepath"
	"testing"

	"github.com/redlock/redlock/internal/declaredkeys"
	"github.com/redlock/redlock/test/integration/harness"
	"github.com/stretchr/testify/require"
)

// Every script the library runs touches only the keys it was given in
// KEYS, on the suite's real servers (Redis's and Valkey's own Lua, where
// the check's prelude runs as it does in miniredis): every operation that
// sends a script (declaredkeys.Exercise) succeeds with each command's keys
// checked against KEYS, and every .lua file of the repository ran so.
func TestEveryScriptDeclaresItsKeysOnRealServers(t *testing.T) {
	c := harness.Start(t, harness.Options{Nodes: 3})
	files := declaredkeys.RepoScripts(t, filepath.Join("..", ".."))
	var checked []*declaredkeys.Node
	for _, n := range c.Nodes {
		checked = append(checked, declaredkeys.NewNode(n.Client, declaredkeys.Sources(files)))
	}
	// The control: on this server's Lua, the check refuses a key outside
	// KEYS, through redis.call and redis.pcall alike.
	for _, script := range []string{`return redis.call("GET", "{other}")`, `return redis.pcall("SET", "{other}", "v")`} {
		err := checked[0].Eval(t.Context(), script, []string{"{k}"}).Err()
		require.ErrorContains(t, err, "declared keys: ", script)
	}
	declaredkeys.Exercise(t, checked)
	declaredkeys.RequireEveryScriptRan(t, files, checked)
}
