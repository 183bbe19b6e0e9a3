package thrum_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thrumhq/thrum/rpc"
)

// Subscribers in a process of their own, for BenchmarkRPCSendFanout: the
// clients that watch a daemon (MCP servers, web consoles, scripts) are
// other programs, which the kernel schedules beside the daemon, not
// goroutines the daemon's Go scheduler queues with its own. The test
// binary runs itself again (TestMain sees fanoutEnv) as that process,
// which speaks a line protocol on its stdin and stdout:
//
//	child:  ready                (every subscriber is subscribed)
//	parent: start                (count CPU and system calls from here)
//	child:  started
//	parent: want N               (N notifications were sent in all)
//	child:  {fanoutReport JSON}  (once N arrived, or after 30 s)

// fanoutEnv holds the child's fanoutConfig, as JSON.
const fanoutEnv = "THRUM_FANOUT_SUBSCRIBERS"

type fanoutConfig struct {
	URL   string // the daemon's WebSocket
	Token string // the agent each subscriber authenticates as
	Count int    // subscribers
}

// fanoutReport is what the child measured between start and the end.
type fanoutReport struct {
	Got      int64                // notifications of new messages received
	Arrivals map[string]time.Time // message ID → arrival at the last subscriber
	CPU      time.Duration        // the child's CPU time
	Reads    int64                // read and write system calls (Linux)
	Writes   int64
}

// fanoutChild is the child process: it returns the exit code.
func fanoutChild(config string) int {
	var cfg fanoutConfig
	if err := json.Unmarshal([]byte(config), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fanout child:", err)
		return 2
	}
	ctx := context.Background()
	var got atomic.Int64
	var pushes pushTimes // arrivals at the last subscriber
	for i := range cfg.Count {
		last := i == cfg.Count-1
		c, err := rpc.DialWebSocket(ctx, cfg.URL, &rpc.ClientOptions{OnNotification: func(method string, params json.RawMessage) {
			if method != rpc.NotificationMessage {
				return
			}
			got.Add(1)
			if last {
				pushes.arrived(params)
			}
		}})
		if err == nil {
			_, err = c.Auth(ctx, &rpc.AuthParams{Token: cfg.Token})
		}
		if err == nil {
			_, err = c.Subscribe(ctx, &rpc.SubscribeParams{All: true})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fanout child: subscriber", i, err)
			return 1
		}
		defer c.Close()
	}
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	if !in.Scan() || in.Text() != "start" {
		return 1
	}
	cpu0, _ := processCPU()
	r0, w0, _ := processSyscalls()
	fmt.Println("started")
	var want int64
	if !in.Scan() {
		return 1
	}
	if _, err := fmt.Sscanf(in.Text(), "want %d", &want); err != nil {
		return 1
	}
	for deadline := time.Now().Add(30 * time.Second); got.Load() < want && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	cpu1, _ := processCPU()
	r1, w1, _ := processSyscalls()
	pushes.mu.Lock()
	defer pushes.mu.Unlock()
	rep := fanoutReport{Got: got.Load(), Arrivals: pushes.arrival, CPU: cpu1 - cpu0, Reads: r1 - r0, Writes: w1 - w0}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

// noteMessageID finds a notification's message ID without decoding it
// whole, so as to add little to the CPU measured.
func noteMessageID(params []byte) (string, bool) {
	const key = `"message_id":"`
	i := bytes.Index(params, []byte(key))
	if i < 0 {
		return "", false
	}
	id, _, ok := bytes.Cut(params[i+len(key):], []byte(`"`))
	return string(id), ok
}

// fanoutProcess is the parent's handle on a child.
type fanoutProcess struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startFanoutProcess starts a child with count subscribers of d's
// WebSocket, authenticated as agent, and returns once all subscribed.
func startFanoutProcess(b *testing.B, d *daemon, agent string, count int) *fanoutProcess {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cfg, _ := json.Marshal(fanoutConfig{URL: d.wsURL, Token: d.tokens[agent], Count: count})
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), fanoutEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &fanoutProcess{cmd: cmd, in: in, out: bufio.NewReader(out)}
	b.Cleanup(func() {
		p.in.Close()
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	p.expect(b, "ready")
	return p
}

// expect reads the child's next line and fails unless it is want.
func (p *fanoutProcess) expect(b *testing.B, want string) {
	b.Helper()
	line, err := p.out.ReadString('\n')
	if strings.TrimSpace(line) != want {
		b.Fatalf("fan-out child said %q (%v), want %q", line, err, want)
	}
}

// start has the child count its CPU and system calls from now.
func (p *fanoutProcess) start(b *testing.B) {
	b.Helper()
	fmt.Fprintln(p.in, "start")
	p.expect(b, "started")
}

// report waits until the child has received want notifications (or gave
// up waiting) and returns what it measured.
func (p *fanoutProcess) report(b *testing.B, want int) fanoutReport {
	b.Helper()
	fmt.Fprintf(p.in, "want %d\n", want)
	var rep fanoutReport
	if err := json.NewDecoder(p.out).Decode(&rep); err != nil {
		b.Fatalf("fan-out child's report: %v", err)
	}
	return rep
}
