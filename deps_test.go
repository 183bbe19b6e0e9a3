package thrum_test

import (
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// homes says which of the module's packages may import each third-party
// dependency (DESIGN.md, "Packages"): one home each, so swapping a
// dependency touches one package. Test files may import anything; only
// the build is checked. An example that serves its own MCP tools is a
// program of its own and may use the MCP SDK as mcpserver does.
var homes = map[string][]string{
	"github.com/jmoiron/sqlx":                {"store"},
	"modernc.org/sqlite":                     {"store"},
	"github.com/coder/websocket":             {"rpc", "internal/jsonrpc"},
	"github.com/modelcontextprotocol/go-sdk": {"mcpserver", "examples/reviewloop"},
	"github.com/google/jsonschema-go":        {"mcpserver", "examples/reviewloop"},
	"github.com/alecthomas/kong":             {"cmd/thrum"},
	"github.com/BurntSushi/toml":             {"cmd/thrum"},
	"github.com/rivo/uniseg":                 {"cmd/thrum"},
	"filippo.io/age":                         {"cmd/thrum"},
	"github.com/nats-io/nats.go":             {"eventlog/natsync"},
	// Only tests run a NATS server: thrum only connects to one.
	"github.com/nats-io/nats-server/v2": {},
}

func TestEachDependencyHasOneHome(t *testing.T) {
	const module = "github.com/thrumhq/thrum"
	// -deps lists every package the module's packages build from; the
	// template keeps the module's own, each with what it imports.
	out, err := exec.Command("go", "list", "-deps",
		"-f", `{{if .Module}}{{if .Module.Main}}{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{"\n"}}{{end}}{{end}}`,
		"./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	importers := map[string][]string{} // dependency -> module packages importing it
	pkgs := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkgs++
		pkg := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		for _, imp := range f[1:] {
			for dep := range homes {
				if imp == dep || strings.HasPrefix(imp, dep+"/") {
					if !slices.Contains(importers[dep], pkg) {
						importers[dep] = append(importers[dep], pkg)
					}
				}
			}
		}
	}
	if pkgs < 5 {
		t.Fatalf("go list found %d of the module's packages:\n%s", pkgs, out)
	}
	for dep, allowed := range homes {
		got := importers[dep]
		sort.Strings(got)
		if len(got) == 0 && len(allowed) > 0 {
			t.Errorf("no package imports %s: drop it from homes (and go.mod) or fix the home", dep)
		}
		for _, pkg := range got {
			if !slices.Contains(allowed, pkg) {
				t.Errorf("%s is imported by %s; its home is %s", dep, pkg, strings.Join(allowed, " or "))
			}
		}
	}
}
