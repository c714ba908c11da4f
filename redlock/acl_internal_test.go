package redlock

import (
	"errors"
	"strings"
	"testing"

	"github.com/redlock/redlock/internal/redistest"
	"github.com/redlock/redlock/redlock/internal/reply"
	"github.com/redlock/redlock/redlock/internal/wire"
)

// A refusal names what was refused: the command and key, or the script and
// every command it calls; any other error passes unchanged.
func TestPermissionErrorNamesWhatWasRefused(t *testing.T) {
	err := explainDenied(wire.ScriptCommand(fenceScript, []string{"k", "{k}:fencing"}, "v", "7"), redistest.ServerError("ERR The user executing the script can't run this command or subcommand script: x"))
	if !errors.Is(err, ErrNoPermission) {
		t.Fatalf("%v: want ErrNoPermission", err)
	}
	for _, want := range []string{"fence script", `"k"`, "GET, SET", "{k}:fencing", "can't run"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	err = explainDenied(acquireCommand("k", "v", 1000), redistest.ServerError("NOPERM User app has no permissions to run the 'set' command"))
	if !errors.Is(err, ErrNoPermission) || !strings.Contains(err.Error(), `SET on "k"`) {
		t.Errorf("%v: want ErrNoPermission naming SET on \"k\"", err)
	}
	// A refusal already named (the guard's examination, in the round of
	// a SET) keeps its name, not the SET's.
	named := reply.Denied("the guard's examine script", redistest.ServerError("NOPERM User app has no permissions to run the 'info' command"))
	if err := explainDenied(acquireCommand("k", "v", 1000), named); err != named {
		t.Errorf("a refusal of the guard's examination became %v", err)
	}
	other := redistest.ServerError("ERR value is not an integer or out of range")
	if err := explainDenied(acquireCommand("k", "v", 1000), other); err != other {
		t.Errorf("another error became %v", err)
	}
}
