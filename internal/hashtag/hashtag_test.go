package hashtag

import "testing"

func TestBeside(t *testing.T) {
	for key, want := range map[string]string{
		"invoice:42":     "{invoice:42}:x",
		"{user:7}:lock":  "{user:7}:lock:x",
		"lock:{user:7}":  "lock:{user:7}:x",
		"a{b":            "{a{b}:x",
		"weird}key{tag}": "weird}key{tag}:x",
		"":               "{}:x",
	} {
		if got, err := Beside(key, ":x"); err != nil || got != want {
			t.Errorf("Beside(%q) = %q, %v; want %q", key, got, err, want)
		}
	}
	for _, key := range []string{"a}b", "{}:empty-tag"} {
		if _, err := Beside(key, ":x"); err == nil {
			t.Errorf("Beside(%q): no error", key)
		}
	}
}
