package thrumtest

import (
	"bufio"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NATSServer is a nats-server with JetStream, built from the module's
// pinned nats-server/v2 and run as a child process, so a test can kill
// it with -9 and start it again on the same port and store. (Tests of
// eventlog/natsync run one in process instead.)
type NATSServer struct {
	// URL is nats://127.0.0.1:PORT.
	URL  string
	Port int
	// Args are added to the server's command line at each start (a
	// config file, -user and -pass, ...).
	Args []string

	t   testing.TB
	bin string
	dir string
	cmd *exec.Cmd
}

// StartNATS starts a nats-server with JetStream on a free loopback port,
// its store in a fresh directory, with args added; it is killed when
// the test ends.
func StartNATS(t testing.TB, args ...string) *NATSServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &NATSServer{URL: "nats://127.0.0.1:" + strconv.Itoa(port), Port: port, Args: args, t: t,
		bin: BuildBinary(t, "github.com/nats-io/nats-server/v2"), dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// Start starts the server (again), and returns once it takes
// connections with JetStream ready.
func (s *NATSServer) Start() {
	s.t.Helper()
	args := append([]string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-sd", filepath.Join(s.dir, "store")}, s.Args...)
	cmd := exec.Command(s.bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("nats-server: %v", err)
	}
	ready := make(chan string, 1)
	go func() {
		var seen []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if len(seen) < 50 {
				seen = append(seen, line)
			}
			if strings.Contains(line, "Server is ready") {
				ready <- ""
			}
		}
		ready <- strings.Join(seen, "\n") // exited without being ready
	}()
	select {
	case out := <-ready:
		if out != "" {
			s.t.Fatalf("nats-server exited before it was ready:\n%s", out)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		s.t.Fatal("nats-server was not ready after 30s")
	}
	s.cmd = cmd
}

// Kill kills the server with SIGKILL and waits for it. It does nothing
// if the server is not running.
func (s *NATSServer) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
	s.cmd = nil
}
