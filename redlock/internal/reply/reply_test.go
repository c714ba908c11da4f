package reply

import (
	"errors"
	"testing"

	"github.com/redlock/redlock/internal/redistest"
)

// Each server's wording of an ACL refusal is one; other errors are not.
func TestDeniedByACL(t *testing.T) {
	for text, want := range map[string]bool{
		// Redis 7.0.15
		"NOPERM this user has no permissions to run the 'evalsha' command":                                           true,
		"NOPERM this user has no permissions to access one of the keys used as arguments":                            true,
		"ERR The user executing the script can't run this command or subcommand script: a263..., on @user_script:1.": true,
		// Redis 8.0.2 and Valkey 8.1.1
		"NOPERM User app has no permissions to run the 'client|setinfo' command":                                               true,
		"NOPERM No permissions to access a key":                                                                                true,
		"ERR ACL failure in script: User app has no permissions to run the 'incr' command script: a263..., on @user_script:1.": true,
		// not refusals
		"NOSCRIPT No matching script. Please use EVAL.":         false,
		"ERR value is not an integer or out of range":           false,
		"READONLY You can't write against a read only replica.": false,
	} {
		if got := DeniedByACL(redistest.ServerError(text)); got != want {
			t.Errorf("DeniedByACL(%q) = %v; want %v", text, got, want)
		}
	}
	if DeniedByACL(errors.New("NOPERM but from the network, not the server")) {
		t.Error("a non-server error counted as a refusal")
	}
	if DeniedByACL(nil) {
		t.Error("nil counted as a refusal")
	}
}
