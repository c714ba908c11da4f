package redlock_test

import (
	"testing"

	"github.com/redlock/redlock/internal/declaredkeys"
)

// Every script the library runs touches only the keys it was given in
// KEYS: each operation that sends a script (declaredkeys.Exercise) runs
// here on in-process nodes that check every command's keys against KEYS
// (declaredkeys.Prelude), and each .lua file of the repository must have
// run so, so that a script added later is covered or this test names it.
// A violation fails the operation, since every node refuses it. The same
// runs on real servers in test/integration.
func TestEveryScriptDeclaresItsKeys(t *testing.T) {
	files := declaredkeys.RepoScripts(t, "..")
	c := newCluster(t, 3)
	var checked []*declaredkeys.Node
	for _, n := range c.clients {
		checked = append(checked, declaredkeys.NewNode(n, declaredkeys.Sources(files)))
	}
	declaredkeys.Exercise(t, checked)
	declaredkeys.RequireEveryScriptRan(t, files, checked)
}
