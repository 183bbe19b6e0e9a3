package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/thrumhq/thrum"
	"github.com/thrumhq/thrum/identity"
	"github.com/thrumhq/thrum/rpc"
)

// The library's errors speak to a Go caller: what was wrong, in the
// library's terms. What a person at a shell should run next is the CLI's
// to say, so report appends a hint chosen by the error's code, its reason
// (rpc.Reason, for codes too coarse alone) or a sentinel — never by
// parsing the message.

// hintFor returns the command or setting that fixes err, or "".
func hintFor(g *Globals, err error) string {
	if he := (*hintedError)(nil); errors.As(err, &he) {
		return he.hint
	}
	switch {
	case errors.Is(err, identity.ErrAmbiguous):
		return "set THRUM_NAME or --agent-id to choose one"
	case errors.Is(err, identity.ErrNoIdentity):
		name, role := "NAME", "ROLE"
		if g.AgentID != "" {
			name = identity.NormalizeAgentID(g.AgentID)
		}
		if g.Role != "" {
			role = g.Role
		}
		return fmt.Sprintf("run `thrum quickstart --name %s --role %s --module MODULE`", name, role)
	case errors.Is(err, thrum.ErrLocked):
		return "stop the daemon with `thrum daemon stop`"
	}
	switch rpc.Reason(err) {
	case rpc.ReasonNoCaller:
		return "set THRUM_NAME or --agent-id, or run `thrum quickstart`"
	case rpc.ReasonAgentNotRegistered:
		return "run thrum quickstart"
	case rpc.ReasonInvalidToken:
		return "register again with `thrum quickstart` to get a new token"
	case rpc.ReasonNoSession:
		return "start one with `thrum session start`"
	case rpc.ReasonUnknownRecipient:
		return "see thrum agent list, thrum group list"
	}
	return ""
}

// withHint is msg followed by err's hint, if it has one.
func withHint(g *Globals, err error, msg string) string {
	if h := hintFor(g, err); h != "" {
		return msg + ": " + h
	}
	return msg
}

// hintedError is an error with the hint its command worked out from what
// only the command knows (the worktrees, the names registered), which
// hintFor then gives in place of its own.
type hintedError struct {
	error
	hint string
}

func (e *hintedError) Unwrap() error { return e.error }

// underscored is name with the characters names do not allow ('-', '.',
// ' ') as '_' and lower-cased, if that makes a valid name; else "".
func underscored(name string) string {
	u := strings.ToLower(strings.NewReplacer("-", "_", ".", "_", " ", "_").Replace(name))
	if u == name || !identity.IsValidName(u) {
		return ""
	}
	return u
}

// didYouMean returns the candidate nearest to s, if one is at most two
// edits away and fewer than half its length; else "".
func didYouMean(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); c != s && d < bestD && 2*d < len(s) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes (names
// are ASCII).
func editDistance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			prev, row[j] = row[j], min(row[j]+1, row[j-1]+1, prev+cost)
		}
	}
	return row[len(b)]
}
