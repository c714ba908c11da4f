package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
)

// sharedState lists the package-level variables of the library that hold
// state which changes while a program runs, each with the reason it is
// not a field of what uses it. Everything else that changes belongs to a
// Locker (or to what a Locker owns): a switch that one test flips for
// every Locker in the process keeps tests from running side by side, and a
// registry that only grows keeps what its program dropped.
var sharedState = map[string]string{
	"redlock/dials.go: dialRecords": "one record per client, shared by every Locker on it (a client carries " +
		"one hook, not one per Locker); keyed by weak pointers, each entry removed by its client's cleanup",
}

// mutableTypes are the packages and names whose values exist to change:
// a package-level variable of one of these types is state.
var mutableTypes = map[string]bool{"atomic": true, "sync": true}

// packageState returns, for the Go source of one file, each package-level
// variable that holds changing state: a value of a sync or sync/atomic
// type, or a map (which a package-level variable holds only to fill).
func packageState(src string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			mutable := isMutableType(v.Type)
			for _, val := range v.Values {
				mutable = mutable || isMutableValue(val)
			}
			if !mutable {
				continue
			}
			for _, n := range v.Names {
				if n.Name != "_" {
					out = append(out, n.Name)
				}
			}
		}
	}
	return out, nil
}

func isMutableType(e ast.Expr) bool {
	switch t := e.(type) {
	case *ast.SelectorExpr:
		pkg, ok := t.X.(*ast.Ident)
		return ok && mutableTypes[pkg.Name]
	case *ast.IndexExpr: // atomic.Pointer[T]
		return isMutableType(t.X)
	case *ast.StarExpr:
		return isMutableType(t.X)
	case *ast.MapType:
		return true
	}
	return false
}

func isMutableValue(e ast.Expr) bool {
	switch v := e.(type) {
	case *ast.CompositeLit:
		return isMutableType(v.Type)
	case *ast.UnaryExpr: // &sync.Map{}
		return isMutableValue(v.X)
	case *ast.CallExpr: // new(atomic.Bool), make(map[...]...)
		if fn, ok := v.Fun.(*ast.Ident); ok && (fn.Name == "new" || fn.Name == "make") && len(v.Args) > 0 {
			return isMutableType(v.Args[0])
		}
	}
	return false
}

// The library's packages keep no changing state at package level beyond
// what sharedState lists and explains: the tests' switches are per Locker
// (internal/unsafelocker), and a registry keyed by what a program may drop
// lets go of it.
func TestNoPackageLevelState(t *testing.T) {
	var found []string
	eachLibrarySource(t, func(string) bool { return true }, func(path, src string) {
		names, err := packageState(src)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, n := range names {
			found = append(found, path+": "+n)
		}
	})
	slices.Sort(found)
	for _, f := range found {
		if _, ok := sharedState[f]; !ok {
			t.Errorf("%s: package-level state; make it a field of what uses it (a Locker's, or a test hook in internal/unsafelocker), or list it in sharedState with its reason", f)
		}
	}
	for f := range sharedState {
		if !slices.Contains(found, f) {
			t.Errorf("sharedState lists %s, which is gone: take it out", f)
		}
	}
}

// The check sees each form a switch or a registry takes (the control),
// and passes what does not change.
func TestPackageLevelStateIsSeen(t *testing.T) {
	src := `package p
import ("sync"; "sync/atomic")
var off atomic.Bool
var hook atomic.Pointer[func()]
var reg sync.Map
var mu = new(sync.Mutex)
var seen = map[string]bool{}
var made = make(map[int]int)
var byRef = &sync.Map{}
var ErrX = errors.New("x")
var names = []string{"a"}
var _ = atomic.Bool{}
`
	got, err := packageState(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"off", "hook", "reg", "mu", "seen", "made", "byRef"}
	if !slices.Equal(got, want) {
		t.Errorf("packageState = %v, want %v", got, want)
	}
}
