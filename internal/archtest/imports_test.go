package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/redlock/redlock"

// goRedis is the client library, which only the packages that talk to
// Redis import.
const goRedis = "github.com/redis/go-redis/v9"

// allowed lists, for each package of the library, the non-standard imports it
// may have (paths inside the module are relative to it). Standard-library
// imports are always allowed; a package not listed is not checked (commands
// and tests, which nothing imports).
//
// The arrows, from the bottom up (docs/architecture.md draws them):
//   - clock, drift and quorum: pure support packages, the standard library
//     only.
//   - redlock/internal/reply reads what a node says (ACL refusals, INFO,
//     redirections): go-redis only.
//   - internal/luascript runs a script by the digest a server named
//     (Go's FIPS 140-3 mode forbids computing SHA-1): go-redis only.
//   - redlock/internal/wire, the transport: go-redis, reply, luascript
//     and drift (its saturating sums); never the
//     coordinator nor the guard. It knows what a command is, not what a
//     lock is.
//   - redlock/internal/guard, the node guard's engine: the transport's
//     contract (it rides with it as a wire.Rider), reply, and the support
//     packages; never the coordinator.
//   - redlock/internal/waitq, the queue of waiting Lock calls: the standard
//     library only; it knows no nodes and no leases.
//   - redlock/internal/notice, release notices (pub/sub wake-ups): go-redis
//     and hashtag; it knows channels, not locks.
//   - internal/unsafelocker, the per-Locker switches that make a Locker
//     unsafe (the negative controls of the simulator and of the package's
//     tests): the standard library only; package redlock installs its
//     setter.
//   - redlock, the coordinator: all of the above, the only package that
//     ties them together.
//   - internal/benchload, the load of the cycle benchmarks (redlock's and
//     otel's, which must measure the same thing): above the coordinator,
//     and imported by tests only (testOnly).
var allowed = map[string][]string{
	"clock":                   nil,
	"drift":                   nil,
	"quorum":                  nil,
	"redlock/internal/reply":  {goRedis},
	"internal/luascript":      {goRedis},
	"redlock/internal/wire":   {"redlock/internal/reply", "internal/luascript", "drift", goRedis},
	"redlock/internal/guard":  {"redlock/internal/wire", "redlock/internal/reply", "internal/luascript", "clock", "drift", "internal/hashtag", goRedis},
	"redlock/internal/waitq":  nil,
	"redlock/internal/notice": {"internal/hashtag", goRedis},
	"redlock":                 {"clock", "drift", "quorum", "internal/hashtag", "redlock/internal/wire", "redlock/internal/guard", "redlock/internal/reply", "redlock/internal/waitq", "redlock/internal/notice", "internal/unsafelocker", goRedis},
	"internal/unsafelocker":   nil,
	"fence":                   {"internal/hashtag", "internal/luascript", goRedis},
	"internal/nodeflag":       {goRedis},
	"internal/benchload":      {"redlock", "internal/fakeredis", goRedis},
}

// testOnly are the packages only tests may import: code for benchmarks
// that two modules share, in a non-test file only because a _test.go file
// cannot be imported.
var testOnly = []string{"internal/benchload"}

type pkg struct {
	ImportPath string
	Imports    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// tree is the command or test suite a package under cmd/ or test/ belongs
// to (cmd/redlock-bench, test/integration), whose packages may import each
// other; "" for every other package.
func tree(rel string) string {
	parts := strings.SplitN(rel, "/", 3)
	if len(parts) < 2 || (parts[0] != "cmd" && parts[0] != "test") {
		return ""
	}
	return parts[0] + "/" + parts[1]
}

func isStandard(path string) bool { return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") }

// violations returns every import among pkgs that the arrows above forbid.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range p.Imports {
			irel, inModule := strings.CutPrefix(imp, module+"/")
			if inModule && (strings.HasPrefix(irel, "cmd/") || strings.HasPrefix(irel, "test/")) && tree(irel) != tree(rel) {
				out = append(out, p.ImportPath+" imports "+imp+": nothing outside a command's or a test suite's own tree may import cmd/ or test/")
			}
			if inModule && slices.Contains(testOnly, irel) {
				out = append(out, p.ImportPath+" imports "+imp+", which only tests may import")
			}
			want, isLibrary := allowed[rel]
			if !isLibrary || isStandard(imp) {
				continue
			}
			ok := false
			for _, a := range want {
				if a == irel || a == imp {
					ok = true
				}
			}
			if !ok {
				out = append(out, p.ImportPath+" imports "+imp+", which the arrows (shared/STYLE.md, docs/architecture.md) do not allow")
			}
		}
	}
	return out
}

func TestImportArrows(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 4 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = true
	}
	for rel := range allowed {
		if !seen[rel] {
			t.Errorf("package %s, whose arrows this test states, is gone: update the table", rel)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// The check itself bites: each arrow run the wrong way is reported.
func TestWrongArrowsAreReported(t *testing.T) {
	for _, tc := range []struct{ from, imports string }{
		{"redlock/internal/wire", "redlock"},                // the transport knows no lock
		{"redlock/internal/wire", "redlock/internal/guard"}, // nor the guard: it rides by the contract
		{"redlock/internal/guard", "redlock"},               // the guard's engine knows no coordinator
		{"redlock/internal/guard", "quorum"},                // nor the vote
		{"redlock/internal/reply", "redlock/internal/wire"},
		{"drift", goRedis},
		{"redlock", "cmd/redlock-bench"},
		{"internal/faultnet", "test/integration/procs"},      // the library's support knows no test suite
		{"cmd/redlock-bench", "test/integration/harness"},    // nor does a command
		{"test/integration", "cmd/redlock-chaos/internal/x"}, // nor a suite another tree
		{"cmd/redlock-bench", "internal/benchload"},          // benchmark code, for tests only
	} {
		imp := tc.imports
		if !strings.Contains(imp, ".") {
			imp = module + "/" + imp
		}
		got := violations([]pkg{{ImportPath: module + "/" + tc.from, Imports: []string{imp}}})
		if len(got) == 0 {
			t.Errorf("%s importing %s was not reported", tc.from, tc.imports)
		}
	}
	if got := violations([]pkg{{ImportPath: module + "/redlock/internal/guard", Imports: []string{module + "/redlock/internal/wire", "context"}}}); len(got) != 0 {
		t.Errorf("an allowed arrow was reported: %v", got)
	}
	if got := violations([]pkg{{ImportPath: module + "/test/integration/harness", Imports: []string{module + "/test/integration/procs"}}}); len(got) != 0 {
		t.Errorf("a test suite's package importing its own helper was reported: %v", got)
	}
}
