package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// eachLibrarySource calls f with the path (from the module's root) and the
// text of every non-test Go file of the library's packages (allowed's)
// that keep accepts.
func eachLibrarySource(t *testing.T, keep func(rel string) bool, f func(path, src string)) {
	t.Helper()
	for rel := range allowed {
		if !keep(rel) {
			continue
		}
		files, err := filepath.Glob(filepath.Join("../..", rel, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			f(filepath.ToSlash(filepath.Join(rel, filepath.Base(file))), string(src))
		}
	}
}
