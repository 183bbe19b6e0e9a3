package main

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/rpc"
)

// VersionCmd prints the version and the build.
type VersionCmd struct{}

func (c *VersionCmd) Run(g *Globals) error {
	b := thrum.CurrentBuild()
	return g.out(b, func(w io.Writer) { fmt.Fprint(w, versionText(b)) })
}

// versionText is what thrum --version prints: "thrum VERSION" alone on
// its first line (scripts read it), then the commit the binary was built
// from.
func versionText(b rpc.Build) string {
	if b.Revision == "" {
		return fmt.Sprintf("thrum %s\ncommit unknown: built without version control stamps\n", b.Version)
	}
	return fmt.Sprintf("thrum %s\ncommit %s, built %s\n", b.Version, buildName(b), cmp.Or(b.VCSTime, "at an unknown time"))
}

// buildName names a build in one word: the first 12 digits of its
// commit, with +dirty when built with uncommitted changes, or its version
// when no commit was stamped.
func buildName(b rpc.Build) string {
	if b.Revision == "" {
		return b.Version
	}
	r := b.Revision[:min(12, len(b.Revision))]
	if b.Modified {
		r += "+dirty"
	}
	return r
}

// buildWhen is "NAME from TIME", or NAME alone when the time is unknown.
func buildWhen(b rpc.Build) string {
	if b.VCSTime == "" {
		return buildName(b)
	}
	return buildName(b) + " from " + b.VCSTime
}

// checkBuild says on stderr, once per run, when the daemon runs another
// build than this CLI: after an upgrade the old daemon keeps running
// until it is restarted.
func (s *session) checkBuild(ctx context.Context) {
	if s.g.buildChecked {
		return
	}
	s.g.buildChecked = true
	h, err := s.c.Health(ctx, &rpc.HealthParams{})
	if mine := thrum.CurrentBuild(); err == nil && h.Build != mine {
		s.g.hint("thrum: the daemon runs build %s; this CLI is %s: thrum daemon restart", buildWhen(h.Build), buildWhen(mine))
	}
}
