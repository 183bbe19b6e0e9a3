package thrum_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The client examples of the RPC contract ("From Other Languages"), run
// against a live daemon's socket: what the spec tells users to write must
// work. The code is the spec's, verbatim, except the socket path.

const specSocketPath = ".thrum/var/thrum.sock"

// specPythonCallRPC is the spec's Python example up to its call_rpc
// function.
const specPythonCallRPC = `import socket
import json

def call_rpc(method, params={}):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect('.thrum/var/thrum.sock')

    request = {
        'jsonrpc': '2.0',
        'method': method,
        'params': params,
        'id': 1
    }

    sock.sendall(json.dumps(request).encode() + b'\n')
    response = sock.recv(4096)
    sock.close()

    return json.loads(response)
`

// specPythonHealth is the rest of the spec's Python example.
const specPythonHealth = `
# Call health method
result = call_rpc('health')
print(result['result']['status'])
`

// specNodeExample is the spec's Node.js example.
const specNodeExample = `const net = require("net");

function callRPC(method, params = {}) {
  return new Promise((resolve, reject) => {
    const client = net.createConnection(".thrum/var/thrum.sock");

    const request = {
      jsonrpc: "2.0",
      method: method,
      params: params,
      id: 1,
    };

    client.on("connect", () => {
      client.write(JSON.stringify(request) + "\n");
    });

    client.on("data", (data) => {
      const response = JSON.parse(data.toString());
      client.end();
      resolve(response.result);
    });

    client.on("error", reject);
  });
}

// Call health method
callRPC("health").then((result) => {
  console.log("Status:", result.status);
});
`

// specWithSocket puts the daemon's socket path in place of the spec's, which
// must occur exactly once (so a change to the example is noticed here).
func specWithSocket(t *testing.T, code, quote, sock string) string {
	t.Helper()
	old := quote + specSocketPath + quote
	if n := strings.Count(code, old); n != 1 {
		t.Fatalf("the example names %s %d times, want once", old, n)
	}
	if strings.ContainsAny(sock, `'"\`) {
		t.Fatalf("socket path %q needs quoting", sock)
	}
	return strings.Replace(code, old, quote+sock+quote, 1)
}

// runSpecScript runs an interpreter on a script written to a temp file and
// returns its standard output.
func runSpecScript(t *testing.T, interpreter, name, script string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, interpreter, path)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", interpreter, name, err, out, stderr.String())
	}
	return string(out)
}

func TestSpecPythonExample(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not on PATH")
	}
	d := startDaemon(t)
	callRPC := specWithSocket(t, specPythonCallRPC, "'", d.sock)

	if out := runSpecScript(t, python, "health.py", callRPC+specPythonHealth); out != "ok\n" {
		t.Fatalf("the spec's Python example printed %q, want \"ok\\n\"", out)
	}

	out := runSpecScript(t, python, "agents.py", callRPC+"\nprint(json.dumps(call_rpc('agent.list')))\n")
	var resp struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   json.RawMessage `json:"error"`
		Result  struct {
			Agents []struct {
				AgentID string `json:"agent_id"`
				Kind    string `json:"kind"`
				Role    string `json:"role"`
				Module  string `json:"module"`
			} `json:"agents"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("agent.list through call_rpc printed %q: %v", out, err)
	}
	if resp.JSONRPC != "2.0" || string(resp.ID) != "1" || resp.Error != nil {
		t.Fatalf("agent.list response: %s", out)
	}
	got := map[string]string{}
	for _, a := range resp.Result.Agents {
		got[a.AgentID] = a.Kind + "/" + a.Role + "/" + a.Module
	}
	want := map[string]string{"alice": "agent/implementer/auth", "bob": "agent/reviewer/auth"}
	if len(got) != len(want) || got["alice"] != want["alice"] || got["bob"] != want["bob"] {
		t.Fatalf("agent.list through call_rpc: %v, want %v", got, want)
	}
}

func TestSpecNodeExample(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	d := startDaemon(t)
	script := specWithSocket(t, specNodeExample, `"`, d.sock)
	if out := runSpecScript(t, node, "health.js", script); out != "Status: ok\n" {
		t.Fatalf("the spec's Node.js example printed %q, want \"Status: ok\\n\"", out)
	}
}
