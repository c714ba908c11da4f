package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// The sizes a newcomer can read a capability at: a file of the library
// holds one capability in at most maxFileLines lines, a function reads in
// one screen (maxFuncLines), and takes at most maxParams parameters (more
// are a struct, or a method on the state they share).
const (
	maxFileLines = 500
	maxFuncLines = 80
	maxParams    = 6
)

// oversized lists what is over the sizes and may stay so for now (empty:
// nothing); the test fails on anything else over them, and on an entry
// that is no longer over (take it out), so the list only shrinks.
var oversized = map[string]bool{}

// sizeFindings returns what in one file's source is over the sizes.
func sizeFindings(name, src string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	if n := strings.Count(src, "\n"); n > maxFileLines {
		out = append(out, fmt.Sprintf("%s: %d lines", name, n))
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		id := fn.Name.Name
		if fn.Recv != nil && len(fn.Recv.List) > 0 {
			id = recvName(fn.Recv.List[0].Type) + "." + id
		}
		lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
		if lines > maxFuncLines {
			out = append(out, fmt.Sprintf("%s: %s: %d lines", name, id, lines))
		}
		params := 0
		for _, p := range fn.Type.Params.List {
			params += max(len(p.Names), 1)
		}
		if params > maxParams {
			out = append(out, fmt.Sprintf("%s: %s: %d parameters", name, id, params))
		}
	}
	return out, nil
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// The coordinator and its internal packages keep to the sizes.
func TestSizes(t *testing.T) {
	var found []string
	inCoordinator := func(rel string) bool { return rel == "redlock" || strings.HasPrefix(rel, "redlock/internal/") }
	eachLibrarySource(t, inCoordinator, func(path, src string) {
		got, err := sizeFindings(path, src)
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, got...)
	})
	slices.Sort(found)
	var keys []string
	for _, f := range found {
		key, _, _ := strings.Cut(f, ": ") // file
		if i := strings.LastIndex(f, ": "); i > len(key) {
			key = f[:i] // file: func
		}
		keys = append(keys, key)
		if !oversized[key] {
			t.Errorf("%s: over the sizes (a file at most %d lines, a function at most %d lines and %d parameters)", f, maxFileLines, maxFuncLines, maxParams)
		}
	}
	for k := range oversized {
		if !slices.Contains(keys, k) {
			t.Errorf("oversized lists %s, which is within the sizes now: take it out", k)
		}
	}
}

// The check sees a long file, a long function and a long parameter list.
func TestSizesAreSeen(t *testing.T) {
	var b strings.Builder
	b.WriteString("package p\n\nfunc many(a, b, c int, d string, e, f, g bool) {}\n\nfunc (x *T) long() {\n")
	for range maxFuncLines {
		b.WriteString("\t_ = 1\n")
	}
	b.WriteString("}\n")
	for range maxFileLines {
		b.WriteString("\n")
	}
	got, err := sizeFindings("p.go", b.String())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p.go: 586 lines", "p.go: many: 7 parameters", "p.go: T.long: 82 lines"}
	if !slices.Equal(got, want) {
		t.Errorf("sizeFindings = %q, want %q", got, want)
	}
}
