package redlock_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/redlock/redlock/redlock"
)

// The README and docs/ name options, methods and functions that a reader
// will type: each must exist, so that a rename cannot leave the documents
// describing an API that is gone. (The ACL recipe is checked word for word
// by the integration suite's TestOperationsGuideShowsTheACLRecipe.)
func TestDocsNameOnlyWhatExists(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"))
	options := reflect.TypeFor[redlock.Options]()
	types := map[string]reflect.Type{
		"Locker": reflect.TypeFor[*redlock.Locker](),
		"Lease":  reflect.TypeFor[*redlock.Lease](),
	}
	optionRef := regexp.MustCompile("(^|[^.\\w])Options\\.([A-Z][A-Za-z]+)") // not redis.Options
	methodRef := regexp.MustCompile("\\(\\*(Locker|Lease)\\)\\.([A-Z][A-Za-z]+)")
	checked := 0
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range optionRef.FindAllStringSubmatch(string(text), -1) {
			checked++
			if _, ok := options.FieldByName(m[2]); !ok {
				t.Errorf("%s names Options.%s, which does not exist", f, m[2])
			}
		}
		for _, m := range methodRef.FindAllStringSubmatch(string(text), -1) {
			checked++
			if _, ok := types[m[1]].MethodByName(m[2]); !ok {
				t.Errorf("%s names (*%s).%s, which does not exist", f, m[1], m[2])
			}
		}
	}
	// The README's list of options: every name in it is a field.
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, found := strings.Cut(string(readme), "`Options` (zero value = defaults):")
	if !found {
		t.Fatal("README: the list of options is gone")
	}
	list, _, _ = strings.Cut(list, "Invalid values")
	for _, m := range regexp.MustCompile("`([A-Z][A-Za-z]+)`").FindAllStringSubmatch(list, -1) {
		checked++
		if _, ok := options.FieldByName(m[1]); !ok {
			t.Errorf("README's list of options names %s, which is not a field of Options", m[1])
		}
	}
	for name := range options.Fields() {
		if !name.IsExported() {
			continue // not an option: the simulator's switches (internal/unsafelocker)
		}
		if !strings.Contains(list, "`"+name.Name+"`") {
			t.Errorf("README's list of options leaves out %s", name.Name)
		}
	}
	if checked < 20 {
		t.Fatalf("only %d names checked: the patterns no longer match the documents", checked)
	}
}

// The README's "Observability and operations" section lists every event
// an Observer can be told of, by its constant's name (OpLateGrant for
// "late grant"), so that a new Op cannot go unlisted.
func TestREADMEListsEveryEvent(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "## Observability and operations")
	if !ok {
		t.Fatal(`README.md has no "Observability and operations" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, op := range redlock.Ops() {
		name := "Op"
		for _, word := range strings.Fields(op.String()) {
			name += strings.ToUpper(word[:1]) + word[1:]
		}
		if !strings.Contains(section, "`"+name+"`") {
			t.Errorf("README's Observability and operations section does not list %s (%q events)", name, op)
		}
	}
}
