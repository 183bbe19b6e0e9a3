package thrumtest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/internal/thrumtest"
	"github.com/thrumhq/thrum/rpc"
)

func TestMain(m *testing.M) { os.Exit(thrumtest.Main(m)) }

// TestNodeServed: a registered agent authenticates over the Unix socket,
// again after a restart on the same path, and over the WebSocket.
func TestNodeServed(t *testing.T) {
	ctx := context.Background()
	n := thrumtest.OpenNode(t, nil)
	alice := thrumtest.Register(t, n, "alice", "implementer", "auth")
	d := thrumtest.ServeUnix(t, n)
	whoami := func(c *rpc.Client, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Auth(ctx, &rpc.AuthParams{AgentID: alice.ID, Token: alice.Token}); err != nil {
			t.Fatalf("auth: %v", err)
		}
		w, err := c.Whoami(ctx, &rpc.WhoamiParams{})
		if err != nil || w.AgentID != "alice" {
			t.Fatalf("whoami = %+v, %v; want alice", w, err)
		}
	}
	whoami(d.Dial(ctx, nil))
	d.Stop()
	if c, err := d.Dial(ctx, nil); err == nil {
		c.Close()
		t.Fatal("dial succeeded with the daemon stopped")
	}
	d.Start()
	whoami(d.Dial(ctx, nil))
	whoami(rpc.DialWebSocket(ctx, thrumtest.ServeWebSocket(t, n, nil), nil))
}

// TestGitRemote: a clone of the remote has its first commit, and a push
// from one clone reaches another.
func TestGitRemote(t *testing.T) {
	r := thrumtest.GitRemote(t)
	a, b := r.Clone("a"), r.Clone("b")
	if _, err := os.Stat(filepath.Join(a, "README.md")); err != nil {
		t.Fatalf("clone lacks the first commit: %v", err)
	}
	thrumtest.Git(t, a, "commit", "-q", "--allow-empty", "-m", "second")
	thrumtest.Git(t, a, "push", "-q", "origin", "main")
	thrumtest.Git(t, b, "pull", "-q", "origin", "main")
	if got := thrumtest.Git(t, b, "log", "-1", "--format=%s"); got != "second" {
		t.Fatalf("b's head after pull = %q, want second", got)
	}
	if got := thrumtest.Git(t, thrumtest.GitRepo(t), "branch", "--show-current"); got != "main" {
		t.Fatalf("GitRepo's branch = %q, want main", got)
	}
}

// TestBinary: the binary is built once and runs.
func TestBinary(t *testing.T) {
	bin := thrumtest.Binary(t)
	if again := thrumtest.Binary(t); again != bin {
		t.Fatalf("second Binary = %s, want the first build %s", again, bin)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), thrum.Version) {
		t.Fatalf("thrum version: %v\n%s", err, out)
	}
}

// TestServe: one server answers on the socket and the WebSocket, the
// WebSocket acts for the owner with the secret Serve made, and a restart
// serves both again.
func TestServe(t *testing.T) {
	ctx := context.Background()
	n := thrumtest.OpenNode(t, nil)
	d := thrumtest.Serve(t, n, nil)
	if len(d.Secret) < 32 {
		t.Fatalf("owner secret %q, want one made by identity.LoadOwnerSecret", d.Secret)
	}
	check := func() {
		t.Helper()
		u, err := d.Dial(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		if _, err := u.Health(ctx, &rpc.HealthParams{}); err != nil {
			t.Fatalf("health on the socket: %v", err)
		}
		ws, err := d.DialWebSocket(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		if a, err := ws.Auth(ctx, &rpc.AuthParams{OwnerSecret: d.Secret}); err != nil || !a.Owner {
			t.Fatalf("owner auth on the WebSocket = %+v, %v", a, err)
		}
	}
	check()
	d.Stop()
	d.Start()
	check()
}

// TestSeed: THRUM_SEED is the seed when set.
func TestSeed(t *testing.T) {
	t.Setenv("THRUM_SEED", "12345")
	if got := thrumtest.Seed(t); got != 12345 {
		t.Fatalf("Seed = %d with THRUM_SEED=12345", got)
	}
}
