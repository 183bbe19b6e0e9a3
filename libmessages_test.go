package thrum_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// cliWords are what only the reference CLI understands: its commands, its
// environment variables, its flags. A library error naming them is wrong
// for an embedder; cmd/thrum adds them as hints (cmd/thrum/hints.go).
var cliWords = regexp.MustCompile(`\bthrum (quickstart|init|inbox|send|reply|doctor|daemon (start|stop|status)|(agent|group|session|sync|thread|message|mcp) [a-z]+)\b|\bTHRUM_[A-Z]+|--agent-id\b`)

// TestLibraryStringsNameNoCLI reads every string literal in the library's
// non-test Go files (everything but cmd/, examples/ and the test harness
// internal/thrumtest) and fails on one
// that tells the reader to run a CLI command or set a CLI variable.
func TestLibraryStringsNameNoCLI(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch path {
			case "cmd", "examples", "testdata", "integrations",
				"internal/thrumtest", "internal/hosttest": // test code: it drives the CLI and its log lines speak to a developer running go test
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				s = lit.Value
			}
			if m := cliWords.FindString(s); m != "" {
				t.Errorf("%s: %q names the CLI (%q): say it in cmd/thrum/hints.go", fset.Position(lit.Pos()), s, m)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 20 {
		t.Fatalf("read %d library files; the walk is missing the module", files)
	}
}
