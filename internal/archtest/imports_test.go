package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/redlock/redlock"

// allowed lists, for each package of the library, the non-standard imports it
// may have. Standard-library imports are always allowed.
var allowed = map[string][]string{
	"clock":   nil,
	"drift":   nil,
	"quorum":  nil,
	"redlock": {"clock", "drift", "quorum", "internal/hashtag", "github.com/redis/go-redis/v9"},
	"fence":   {"internal/hashtag", "github.com/redis/go-redis/v9"},
}

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

func isStandard(path string) bool { return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") }

func TestImportArrows(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 4 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, imp := range p.Imports {
			irel, inModule := strings.CutPrefix(imp, module+"/")
			if inModule && (strings.HasPrefix(irel, "cmd/") || strings.HasPrefix(irel, "test/")) {
				t.Errorf("%s imports %s: nothing may import cmd/ or test/", p.ImportPath, imp)
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
				t.Errorf("%s imports %s, which shared/STYLE.md does not allow", p.ImportPath, imp)
			}
		}
	}
}
