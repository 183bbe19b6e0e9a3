package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/thrumhq/thrum/eventlog/gitsync"
	"github.com/thrumhq/thrum/eventlog/natsync"
)

// What leaves this machine, and where. init says it every time, the
// daemon's start the first time it changes, in one line: the log's
// events go to the git remote's sync branch, and (see nats.go) to a NATS
// stream. A clone that is local (git config thrum.local true, set by
// `thrum init --local`) sends nothing anywhere. Only this clone's own
// configuration (.git/config, the command line, the environment) decides
// it: nothing committed to the repository can.

// localKey is the git config key of local mode, in this clone's
// .git/config: a setting no commit can carry.
const localKey = "thrum.local"

// leaves is where the log's events go from this clone.
type leaves struct {
	Local     bool   `json:"local"`
	Remote    string `json:"remote,omitempty"`     // the git remote ("" if none)
	RemoteURL string `json:"remote_url,omitempty"` // its URL as git config has it, credentials hidden
	Branch    string `json:"branch,omitempty"`     // the sync branch on it
	// History is how many commits the remote's sync branch holds as this
	// clone last fetched it (0 if it has none): events already there.
	History int `json:"remote_history,omitempty"`
	// NATS is where the daemon publishes live (nats.go).
	NATS *natsPlan `json:"nats,omitempty"`
}

// whereTo works out where this clone's events go, with f the daemon's
// NATS flags (nil: none given).
func whereTo(ctx context.Context, l *layout, f *natsFlags) (*leaves, error) {
	w := &leaves{}
	var err error
	if l.Git {
		if w.Local, err = gitBool(ctx, l.Root, localKey); err != nil {
			return nil, err
		}
	}
	if !w.Local {
		if f == nil {
			f = &natsFlags{}
		}
		if w.NATS, err = planNATS(ctx, l, f); err != nil {
			return nil, err
		}
	}
	if !l.Git {
		return w, nil
	}
	if n, err := git(ctx, l.Root, "rev-list", "--count", "refs/remotes/"+gitsync.DefaultRemote+"/"+SyncBranch); err == nil {
		w.History, _ = strconv.Atoi(n)
	}
	if !gitsync.HasRemote(ctx, l.Root, gitsync.DefaultRemote) {
		return w, nil
	}
	u, _ := git(ctx, l.Root, "remote", "get-url", gitsync.DefaultRemote)
	w.Remote, w.RemoteURL, w.Branch = gitsync.DefaultRemote, hideSecret(u), SyncBranch
	return w, nil
}

// gitSyncs reports whether the daemon syncs through the git remote.
func (w *leaves) gitSyncs() bool { return !w.Local && w.Remote != "" }

// natsConfig is the NATS server and stream the daemon uses (nil: none).
func (w *leaves) natsConfig() *natsync.Config {
	if w.Local || w.NATS == nil {
		return nil
	}
	return w.NATS.Config
}

// line says what leaves this machine, and where: one line per way out.
func (w *leaves) line() string {
	var out []string
	switch {
	case w.Local:
		return "Local: the log stays on this machine (" + localKey + " is set in .git/config); nothing is sent anywhere."
	case w.gitSyncs():
		out = append(out, fmt.Sprintf("Sync: the daemon pushes every message and event of the log (not credentials) to git remote %s (%s), branch %s; to keep them on this machine: thrum init --local",
			w.Remote, w.RemoteURL, w.Branch))
	case w.natsConfig() == nil:
		out = append(out, "Sync: off (no git remote): the log stays on this machine.")
	}
	if w.NATS != nil {
		if n := w.NATS.line(); n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "\n")
}

// historyLine says what the remote's sync branch already holds, and how
// to delete it ("" if it holds nothing).
func (w *leaves) historyLine() string {
	if w.History == 0 {
		return ""
	}
	return fmt.Sprintf("%s/%s already holds %d %s of thrum's log, pushed by this or another clone; to delete it from the remote: git push %s --delete %s",
		gitsync.DefaultRemote, SyncBranch, w.History, plural(w.History, "commit", "commits"), gitsync.DefaultRemote, SyncBranch)
}

// announce returns the line to print at a daemon start, and records it
// as told (see untold): at the first start in this clone, and at any
// start after where the log goes changed since a person was told ("" at
// the others).
func (w *leaves) announce(l *layout, first bool) (string, error) {
	line := w.line()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(l.PIDFile), leavesFile))
	if err == nil && !first && strings.TrimSpace(string(b)) == line {
		return "", nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	return line, toldLeaves(l, line)
}

// setLocal records local mode in this clone's git config.
func setLocal(ctx context.Context, l *layout) error {
	if !l.Git {
		return nil // outside git nothing leaves anyway
	}
	_, err := git(ctx, l.Root, "config", "--local", "--bool", localKey, "true")
	return err
}

// gitBool reads a boolean git config key (false when unset).
func gitBool(ctx context.Context, dir, key string) (bool, error) {
	v, err := git(ctx, dir, "config", "--type=bool", "--default=false", "--get", key)
	if err != nil {
		return false, fmt.Errorf("git config %s: %w", key, err)
	}
	return v == "true", nil
}

// hideSecret drops a password from a URL, for printing.
func hideSecret(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
