package main

import (
	"crypto/fips140"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock/redlock/internal/redistest"
)

// Under GODEBUG=fips140=only the program starts (no script's SHA-1 is
// computed at init) and the default run works on its embedded nodes,
// every implementation acquiring: the nodes compute SHA-1 inside the
// bypass, the clients never. The control: a client that computes a
// script's SHA-1 (go-redis's redis.NewScript) panics in that run.
func TestEmbeddedRunUnderFIPSOnly(t *testing.T) {
	if ran, out, err := redistest.RunAlone(t, "GODEBUG=fips140=only"); ran {
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	if !fips140.Enforced() {
		t.Fatal("the child does not run in FIPS 140-3 only mode")
	}
	out, err := runCLI(t, "-duration", "300ms", "-clients", "2", "-keys", "2")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	for _, impl := range allImpls {
		m := regexp.MustCompile(`(?m)^` + impl + `: .*\n\s+\d+ cycles/s; (\d+) acquired`).FindStringSubmatch(out)
		if m == nil || m[1] == "0" {
			t.Errorf("%s acquired nothing:\n%s", impl, out)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "SHA-1 is not allowed") {
			t.Errorf("a client's SHA-1 did not panic: %v", r)
		}
	}()
	redis.NewScript("return 1")
}
