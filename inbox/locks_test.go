package inbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxSyncPrimitives bounds the synchronization the agent side of delivery
// holds, inbox and mcpserver together: inbox's one mutex, mcpserver's
// server mutex and the stdio writer's. Each is written with its order in
// DESIGN.md ("Reaching agents in their hosts").
const maxSyncPrimitives = 4

// TestSyncPrimitives counts every mutex, RWMutex, sync.Map, Once, other
// sync type and atomic that inbox and mcpserver declare (a field, a
// variable) or use (an atomic function): state under one lock reads
// top-down; state under ten does not.
func TestSyncPrimitives(t *testing.T) {
	var found []string
	fset := token.NewFileSet()
	for _, dir := range []string{".", "../mcpserver"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			pkgs := map[string]bool{}
			for _, imp := range f.Imports {
				if p := strings.Trim(imp.Path.Value, `"`); p == "sync" || p == "sync/atomic" {
					name := filepath.Base(p)
					if imp.Name != nil {
						name = imp.Name.Name
					}
					pkgs[name] = true
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && pkgs[x.Name] {
					found = append(found, fset.Position(sel.Pos()).String()+" "+x.Name+"."+sel.Sel.Name)
				}
				return true
			})
		}
	}
	for _, f := range found {
		t.Log(f)
	}
	if len(found) > maxSyncPrimitives {
		t.Errorf("inbox and mcpserver hold %d sync primitives, want at most %d", len(found), maxSyncPrimitives)
	}
}
