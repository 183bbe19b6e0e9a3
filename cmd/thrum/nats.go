package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/thrumhq/thrum/eventlog/natsync"
)

// NATS, live between machines (eventlog/natsync). Where the server is
// comes from this clone alone: the --nats flag, THRUM_NATS_URL, or git
// config thrum.natsUrl in this clone's .git/config. A committed
// .thrumconfig may suggest a server (nats.url); init shows it, and it is
// used only once this clone's owner accepts it (thrum sync nats accept,
// which records the URL as thrum.natsAccepted): a commit that changes it
// stops publishing until it is accepted again.

// Clone config keys (.git/config) and the committed file.
const (
	natsURLKey      = "thrum.natsUrl"
	natsCredsKey    = "thrum.natsCreds"
	natsDomainKey   = "thrum.natsDomain"
	natsInsecureKey = "thrum.natsInsecure"
	natsStreamKey   = "thrum.natsStream"
	natsSubjectsKey = "thrum.natsSubjects"
	natsAcceptedKey = "thrum.natsAccepted"
	suggestionFile  = ".thrumconfig" // git config format, committed: nats.url
)

// natsFlags are how daemon start and run are told of a NATS server.
type natsFlags struct {
	NATS         string `name:"nats" placeholder:"URL" help:"NATS server for live delivery between machines: nats://host:4222 or tls://host:4222 (or THRUM_NATS_URL, or git config thrum.natsUrl)."`
	NATSCreds    string `name:"nats-creds" placeholder:"FILE" help:"NATS credentials file (user JWT and nkey seed)."`
	NATSDomain   string `name:"nats-domain" help:"JetStream domain of the stream (a leaf node's)."`
	NATSInsecure bool   `name:"nats-insecure" help:"Allow a plain nats:// URL to another host without credentials."`
}

// args are the flags as daemon start passes them on to daemon run.
func (f *natsFlags) args() []string {
	var out []string
	if f.NATS != "" {
		out = append(out, "--nats", f.NATS)
	}
	if f.NATSCreds != "" {
		out = append(out, "--nats-creds", f.NATSCreds)
	}
	if f.NATSDomain != "" {
		out = append(out, "--nats-domain", f.NATSDomain)
	}
	if f.NATSInsecure {
		out = append(out, "--nats-insecure")
	}
	return out
}

// natsPlan is where this clone's events go through NATS, if anywhere.
type natsPlan struct {
	Config *natsync.Config `json:"-"` // nil: NATS is off
	Server string          `json:"server,omitempty"`
	Stream string          `json:"stream,omitempty"`
	// Subjects is the subject prefix; this clone publishes under
	// <Subjects>.<machine>.
	Subjects string `json:"subjects,omitempty"`
	// Suggested is a server a committed file suggests that this clone's
	// owner has not accepted (it is not used).
	Suggested string `json:"suggested,omitempty"`
	From      string `json:"from,omitempty"` // where the URL came from
}

// planNATS works out the NATS server and stream of this clone.
func planNATS(ctx context.Context, l *layout, f *natsFlags) (*natsPlan, error) {
	p := &natsPlan{}
	url, from := f.NATS, "--nats or THRUM_NATS_URL"
	if l.Git {
		suggested, _ := git(ctx, l.Root, "config", "--file", filepath.Join(l.Root, suggestionFile), "--get", "nats.url")
		if url == "" {
			url, from = gitValue(ctx, l.Root, natsURLKey), natsURLKey+" in .git/config"
		}
		if suggested != "" && url == "" {
			if accepted := gitValue(ctx, l.Root, natsAcceptedKey); accepted == suggested {
				url, from = suggested, suggestionFile+" (accepted)"
			} else {
				p.Suggested = suggested
			}
		}
	}
	if url == "" {
		return p, nil
	}
	cfg := &natsync.Config{URL: url, CredsFile: f.NATSCreds, Domain: f.NATSDomain, Insecure: f.NATSInsecure}
	stream := gitValue(ctx, l.Root, natsStreamKey)
	if _, err := git(ctx, l.Root, "rev-list", "--max-parents=0", "--max-count=1", "HEAD"); err != nil && stream == "" {
		// The stream is named after the first commit, the same in every
		// clone: without one, clones would not meet.
		return nil, fmt.Errorf("NATS needs the repository's first commit to name its stream, and %s has none yet: commit, or name the stream with git config %s NAME", l.Root, natsStreamKey)
	}
	id := l.RepoID(ctx)
	cfg.Stream, cfg.Subjects = "thrum-"+id, "thrum."+id
	if l.Git {
		if cfg.CredsFile == "" {
			cfg.CredsFile = gitValue(ctx, l.Root, natsCredsKey)
		}
		if cfg.Domain == "" {
			cfg.Domain = gitValue(ctx, l.Root, natsDomainKey)
		}
		if !cfg.Insecure {
			cfg.Insecure, _ = gitBool(ctx, l.Root, natsInsecureKey)
		}
		if stream != "" {
			cfg.Stream = stream
		}
		if s := gitValue(ctx, l.Root, natsSubjectsKey); s != "" {
			cfg.Subjects = s
		}
	}
	if err := cfg.Check(); err != nil {
		return nil, withCode(exitUsage, "%s (from %s): %s; for a server you trust on a private network, --nats-insecure", url, from, strings.TrimPrefix(err.Error(), "natsync: "))
	}
	p.Config, p.Server, p.Stream, p.Subjects, p.From = cfg, hideSecret(url), cfg.Stream, cfg.Subjects, from
	return p, nil
}

// gitValue reads a git config key ("" when unset).
func gitValue(ctx context.Context, dir, key string) string {
	v, _ := git(ctx, dir, "config", "--get", key)
	return v
}

// line says where NATS sends this clone's events ("" when nowhere).
func (p *natsPlan) line() string {
	if p.Config == nil {
		if p.Suggested != "" {
			return fmt.Sprintf("NATS: %s suggests the server %s; it is not used until you accept it: thrum sync nats accept", suggestionFile, hideSecret(p.Suggested))
		}
		return ""
	}
	return fmt.Sprintf("Live: the daemon publishes every event this clone writes to NATS server %s, stream %s (subjects %s.>)", p.Server, p.Stream, p.Subjects)
}

// SyncNATSCmd groups what a clone's owner does about NATS.
type SyncNATSCmd struct {
	Init   SyncNATSInitCmd   `cmd:"" help:"Create the repository's stream on the NATS server (once, by someone with the rights)."`
	Accept SyncNATSAcceptCmd `cmd:"" help:"Use the NATS server that the committed .thrumconfig suggests."`
}

// SyncNATSInitCmd creates the stream.
type SyncNATSInitCmd struct {
	natsFlags
	Replicas int           `default:"1" help:"How many servers of a cluster keep the stream (3 survive the loss of one)."`
	MaxAge   time.Duration `default:"720h" help:"How long the stream keeps an event (git keeps them all)."`
}

func (c *SyncNATSInitCmd) Help() string {
	return `Creates the stream every clone of this repository publishes to and reads
from: limits retention (an event stays for --max-age, whoever read it),
file storage, messages up to the server's max_payload, and neither
deleting nor purging allowed. Daemons never create or delete it. Run it
once, as a user allowed to create streams; a stream already there is
shown as it is.

Examples:
  thrum sync nats init --nats nats://127.0.0.1:4222
  thrum sync nats init --nats tls://nats.example.com:4222 --nats-creds admin.creds --replicas 3`
}

func (c *SyncNATSInitCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	p, err := planNATS(ctx, l, &c.natsFlags)
	if err != nil {
		return err
	}
	if p.Config == nil {
		return withCode(exitUsage, "no NATS server: give one with --nats URL (or THRUM_NATS_URL, or git config %s URL)", natsURLKey)
	}
	info, created, err := natsync.InitStream(ctx, p.Config, &natsync.StreamOptions{Replicas: c.Replicas, MaxAge: c.MaxAge})
	if err != nil {
		return err
	}
	res := map[string]any{"created": created, "server": p.Server, "stream": info.Name, "subjects": info.Subjects,
		"replicas": info.Replicas, "max_age_ms": info.MaxAge.Milliseconds(), "max_msg_size": info.MaxMsgSize, "messages": info.Messages}
	return g.out(res, func(w io.Writer) {
		verb := "Created"
		if !created {
			verb = "Already there:"
		}
		fmt.Fprintf(w, "%s stream %s on %s: subjects %s, %d %s, events kept %s, messages up to %d bytes, %d stored\n",
			verb, info.Name, p.Server, strings.Join(info.Subjects, " "), info.Replicas, plural(info.Replicas, "replica", "replicas"), info.MaxAge, info.MaxMsgSize, info.Messages)
		g.hint("Next, on each machine: thrum daemon start --nats %s (or git config %s %s, then thrum daemon start)", p.Server, natsURLKey, p.Server)
	})
}

// SyncNATSAcceptCmd accepts the committed suggestion.
type SyncNATSAcceptCmd struct{}

func (c *SyncNATSAcceptCmd) Help() string {
	return `Records the NATS server that the committed .thrumconfig suggests (nats.url)
as accepted by this clone (git config thrum.natsAccepted); the daemon uses
it from its next start. A commit that changes the suggestion stops NATS
until it is accepted again.

Examples:
  thrum sync nats accept && thrum daemon restart`
}

func (c *SyncNATSAcceptCmd) Run(ctx context.Context, g *Globals) error {
	l, err := resolveLayout(ctx, g)
	if err != nil {
		return err
	}
	if !l.Git {
		return errors.New("not in a git repository: there is no committed suggestion")
	}
	suggested, err := git(ctx, l.Root, "config", "--file", filepath.Join(l.Root, suggestionFile), "--get", "nats.url")
	if err != nil || suggested == "" {
		return fmt.Errorf("%s suggests no NATS server (nats.url)", suggestionFile)
	}
	if _, err := git(ctx, l.Root, "config", "--local", natsAcceptedKey, suggested); err != nil {
		return err
	}
	return g.out(map[string]any{"accepted": hideSecret(suggested)}, func(w io.Writer) {
		fmt.Fprintf(w, "Accepted NATS server %s for this clone (%s); restart the daemon to use it.\n", hideSecret(suggested), natsAcceptedKey)
	})
}

// envNATS is the NATS flags of a command that has none: the
// environment's THRUM_NATS_URL.
func envNATS(g *Globals) *natsFlags { return &natsFlags{NATS: g.env("THRUM_NATS_URL")} }

// doctorPlan is what doctor says of NATS, so two clones can be compared:
// the server, the stream and subjects, and this clone's machine name.
type doctorPlan struct {
	natsPlan
	Machine string `json:"machine,omitempty"`
}

func (d *doctorPlan) line() string {
	if d.Config == nil {
		return d.natsPlan.line()
	}
	return fmt.Sprintf("NATS: server %s (from %s), stream %s, subjects %s.>; this clone publishes as %s", d.Server, d.From, d.Stream, d.Subjects, d.Machine)
}

// doctorNATS is this clone's NATS configuration as the daemon would
// take it from .git/config and the environment (nil when there is none),
// with the log's machine ID.
func doctorNATS(ctx context.Context, g *Globals, l *layout, machine string) *doctorPlan {
	to, err := whereTo(ctx, l, envNATS(g))
	if err != nil || to.NATS == nil || to.NATS.Config == nil && to.NATS.Suggested == "" {
		return nil
	}
	return &doctorPlan{natsPlan: *to.NATS, Machine: machine}
}
