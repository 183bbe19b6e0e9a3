package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/thrumhq/thrum/rpc"
)

// WebCmd prints (and opens) a one-time login URL for the web console.
type WebCmd struct {
	Open bool `help:"Open the URL in the default browser (xdg-open, or open on macOS)."`
}

func (c *WebCmd) Help() string {
	return `The daemon serves a web console on its loopback port: a live feed of every
message, the agents with their presence and work context, threads, groups,
each agent's inbox with unread counts, search, and a composer to write as
yourself (or as an agent, disclosed).

web asks the daemon, over its owner-only Unix socket, for a login code and
prints the console's URL with the code in its fragment. The code works
once, within one minute; the page exchanges it for a web session of 12
hours at most, which the daemon keeps across restarts, in that browser tab
only. Run web again for another tab, or when the page says the daemon
moved to another port.

Examples:
  thrum web
  thrum web --open
  thrum web --json`
}

func (c *WebCmd) Run(ctx context.Context, g *Globals) error {
	s, err := connect(ctx, g)
	if err != nil {
		return err
	}
	defer s.close()
	b, err := os.ReadFile(s.l.WSPort)
	if err != nil {
		return withCode(exitNoDaemon, "the daemon has not written its port to %s: is it running? (thrum daemon status)", s.l.WSPort)
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("web: bad port in %s: %q", s.l.WSPort, b)
	}
	login, err := s.c.WebLogin(ctx, &rpc.WebLoginParams{})
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/#login=%s", port, login.Code)
	err = g.out(map[string]any{"url": url, "expires_at": login.ExpiresAt}, func(w io.Writer) {
		fmt.Fprintln(w, url)
		g.hint("Open it within a minute; it signs one browser tab in as the owner, once.")
	})
	if err != nil || !c.Open {
		return err
	}
	opener := "xdg-open"
	if runtime.GOOS == "darwin" {
		opener = "open"
	}
	cmd := exec.Command(opener, url)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("web: cannot open a browser with %s: %w; open the URL above yourself", opener, err)
	}
	go cmd.Wait()
	return nil
}
