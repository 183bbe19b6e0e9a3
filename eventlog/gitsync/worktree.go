package gitsync

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/private"
)

// The log's worktree. A clone's log starts as a branch of its own: an
// orphan commit with the empty tree, checked out in an empty directory.
// Nothing of the remote's tree is ever checked out: the remote's lines
// reach the log only through a merge, and so through admission (see
// package admit), and a file the remote planted (local.jsonl, a symbolic
// link, a path outside the log) is never written to disk.
//
// An older thrum started a clone's branch from the remote's and checked
// it out whole. Repair undoes what that let a remote plant, at every
// start, before the log is opened.

// MakeWorktree makes sure the repository at repo has the sync branch
// and that it is checked out at dir, repairing a worktree whose
// directory vanished. A new branch is an orphan commit with the empty
// tree, whatever the remote has. made reports whether it made the
// worktree.
func MakeWorktree(ctx context.Context, repo, dir, branch string) (made bool, err error) {
	git := func(args ...string) (string, error) {
		out, err := run(ctx, repo, nil, args...)
		return strings.TrimSpace(out), err
	}
	if _, err := git("rev-parse", "--verify", "--quiet", "refs/heads/"+branch); err != nil {
		empty, err := git("hash-object", "-t", "tree", "-w", "--stdin")
		if err != nil {
			return false, err
		}
		commit, err := run(ctx, repo, []string{"GIT_AUTHOR_NAME=thrum", "GIT_AUTHOR_EMAIL=thrum@localhost",
			"GIT_COMMITTER_NAME=thrum", "GIT_COMMITTER_EMAIL=thrum@localhost"}, "commit-tree", empty, "-m", "thrum: start the sync branch")
		if err != nil {
			return false, err
		}
		commit = strings.TrimSpace(commit)
		// update-ref with an empty old value fails if another process
		// made the branch meanwhile: never clobber it.
		if _, err := git("update-ref", "refs/heads/"+branch, commit, ""); err != nil {
			return false, err
		}
	}
	if st, err := os.Lstat(filepath.Join(dir, ".git")); err == nil && st.Mode().IsRegular() {
		return false, nil // a linked worktree
	}
	_, _ = git("worktree", "prune")
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return false, fmt.Errorf("gitsync: %s exists but is not a worktree of %s: move it aside and try again", dir, branch)
	}
	if err := private.Dir(filepath.Dir(dir)); err != nil {
		return false, err
	}
	if _, err := git("worktree", "add", "--quiet", dir, branch); err != nil {
		return false, err
	}
	// git made it by the umask, which may let others write it; no one
	// else could reach it yet, since its parent is private.
	if err := os.Chmod(dir, private.DirMode); err != nil {
		return true, err
	}
	return true, private.Dir(dir)
}

// AdoptedFile is the file, in the directory Repair moves things to,
// that lists what it moved (one Adoption per line).
const AdoptedFile = "adopted.jsonl"

// Adoption is one thing Repair moved out of the log's directory.
type Adoption struct {
	At      string `json:"at"`                 // when (eventlog.TimeFormat)
	Path    string `json:"path"`               // where it was, relative to the log's directory
	MovedTo string `json:"moved_to,omitempty"` // where it is now ("" if it had to be removed)
	Why     string `json:"why"`
}

// Repaired is what Repair did.
type Repaired struct {
	Moved []Adoption
	// Dropped lists the identities whose credentials came from the
	// remote's tree (a local shard an older thrum checked out): they no
	// longer authenticate, and their holders register again.
	Dropped []string
	// LocalRewritten reports that the local shard lost the remote's
	// lines: a projection made from it must be rebuilt.
	LocalRewritten bool
}

// Repair makes the log in dir, a worktree of the sync branch, hold only
// what this machine wrote or admitted, before the log is opened. Moved
// into adopted (made 0700), never followed or read: every symbolic link
// and special file in dir, and every file another user owns. The local
// shard's files that the branch's tree tracks (the remote's, checked out
// by an older thrum) lose the remote's bytes: the files are moved aside
// and the local shard written again from the lines this machine appended
// after them. Every directory left is made 0700 and every file 0600. It
// records what it moved in adopted's AdoptedFile.
func Repair(ctx context.Context, dir, adopted string) (*Repaired, error) {
	rep := &Repaired{}
	now := eventlog.FormatTime(time.Now())
	moveAside := func(rel, why string) error {
		if err := private.Dir(adopted); err != nil {
			return err
		}
		to := filepath.Join(adopted, strings.ReplaceAll(now+"-"+rel, "/", "_"))
		a := Adoption{At: now, Path: rel, MovedTo: to, Why: why}
		if err := os.Rename(filepath.Join(dir, filepath.FromSlash(rel)), to); err != nil {
			// Another file system: a link or special file is removed
			// (never followed), the rest left for the caller to see.
			if !errors.Is(err, syscall.EXDEV) {
				return fmt.Errorf("gitsync: move %s aside: %w", rel, err)
			}
			if err := os.Remove(filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
				return fmt.Errorf("gitsync: remove %s: %w", rel, err)
			}
			a.MovedTo, a.Why = "", why+" (removed: it could not be moved to "+adopted+")"
		}
		rep.Moved = append(rep.Moved, a)
		return nil
	}
	if err := walkLog(dir, "", moveAside); err != nil {
		return nil, err
	}
	if err := repairLocalShard(ctx, dir, rep, moveAside); err != nil {
		return nil, err
	}
	if len(rep.Moved) == 0 {
		return rep, nil
	}
	var buf bytes.Buffer
	for _, a := range rep.Moved {
		b, _ := json.Marshal(a)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	f, err := private.OpenFile(filepath.Join(adopted, AdoptedFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE)
	if err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	return rep, nil
}

// walkLog moves aside what the log directory (its part rel) may not
// hold, without following anything, and makes what stays private.
func walkLog(dir, rel string, moveAside func(rel, why string) error) error {
	entries, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Errorf("gitsync: %w", err)
	}
	uid := os.Geteuid()
	for _, e := range entries {
		sub := e.Name()
		if rel != "" {
			sub = rel + "/" + e.Name()
		}
		if sub == ".git" {
			continue // the worktree's link to its repository: git's
		}
		fi, err := e.Info() // lstat: a link is never followed
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("gitsync: %w", err)
		}
		path := filepath.Join(dir, filepath.FromSlash(sub))
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			err = moveAside(sub, "a symbolic link in the log directory (a clone an older thrum made checked out the remote's)")
		case !fi.IsDir() && !fi.Mode().IsRegular():
			err = moveAside(sub, "a special file in the log directory ("+fi.Mode().Type().String()+")")
		case st != nil && int(st.Uid) != uid:
			err = moveAside(sub, fmt.Sprintf("owned by another user (uid %d)", st.Uid))
		case fi.IsDir():
			if err = os.Chmod(path, private.DirMode); err == nil {
				err = walkLog(dir, sub, moveAside)
			}
		case fi.Mode().Perm() != private.FileMode:
			err = os.Chmod(path, private.FileMode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// repairLocalShard drops from the local shard the bytes the branch's
// tree brought: the lines of each tracked segment file's blob, at its
// start. The shard is written again, as one file, from the rest.
func repairLocalShard(ctx context.Context, dir string, rep *Repaired, moveAside func(rel, why string) error) error {
	out, err := run(ctx, dir, nil, "ls-tree", "-r", "-z", "--full-tree", "HEAD")
	if err != nil {
		return fmt.Errorf("gitsync: %w", err)
	}
	tracked := map[string]string{} // segment path → blob
	for _, rec := range strings.Split(out, "\x00") {
		meta, path, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if shard, _, seg := eventlog.ParseSegmentPath(path); ok && len(f) == 3 && f[1] == "blob" && seg && shard == eventlog.LocalShard {
			tracked[path] = f[2]
		}
	}
	if len(tracked) == 0 {
		return nil
	}
	segs, err := localSegments(dir)
	if err != nil {
		return err
	}
	// The remote's bytes: a tracked file's blob, where the file still
	// starts with it (a file that does not is not the checkout's, or was
	// repaired already), up to the end of the line they end in.
	var mine bytes.Buffer
	cut := false
	files := make([][]byte, len(segs))
	theirs := make([]int, len(segs))
	for i, rel := range segs {
		b, err := readRegular(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		files[i] = b
		blob, ok := tracked[rel]
		if !ok {
			continue
		}
		s, err := run(ctx, dir, nil, "cat-file", "blob", blob)
		if err != nil {
			return fmt.Errorf("gitsync: %w", err)
		}
		if n := len(s); n > 0 && bytes.HasPrefix(b, []byte(s)) {
			if j := bytes.IndexByte(b[n-1:], '\n'); j >= 0 {
				theirs[i] = n + j
			} else {
				theirs[i] = len(b)
			}
			cut = true
		}
	}
	if !cut {
		return nil
	}
	for i, rel := range segs {
		for _, line := range bytes.Split(files[i][:theirs[i]], []byte("\n")) {
			if e, err := eventlog.DecodeLine(line); err == nil && e.Type == eventlog.TypeCredentialAdd {
				if p, err := eventlog.PayloadAs[eventlog.Credential](e); err == nil {
					rep.Dropped = append(rep.Dropped, p.AgentID)
				}
			}
		}
		mine.Write(files[i][theirs[i]:])
		if err := moveAside(rel, "the local shard as an older thrum checked it out from the remote (the remote's lines, then this machine's)"); err != nil {
			return err
		}
	}
	slices.Sort(rep.Dropped)
	rep.Dropped = slices.Compact(rep.Dropped)
	rep.LocalRewritten = true
	if err := private.WriteFile(filepath.Join(dir, eventlog.LocalFile), mine.Bytes()); err != nil {
		return fmt.Errorf("gitsync: write the local shard again: %w", err)
	}
	return nil
}

// localSegments lists the local shard's segment files, in order.
func localSegments(dir string) ([]string, error) {
	out := []string{}
	if fi, err := os.Lstat(filepath.Join(dir, eventlog.LocalFile)); err == nil && fi.Mode().IsRegular() {
		out = append(out, eventlog.LocalFile)
	}
	sub := strings.TrimSuffix(eventlog.LocalFile, ".jsonl")
	entries, err := os.ReadDir(filepath.Join(dir, sub))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	for _, e := range entries { // ReadDir sorts: segment numbers are zero-padded
		if _, _, ok := eventlog.ParseSegmentPath(sub + "/" + e.Name()); ok && e.Type().IsRegular() {
			out = append(out, sub+"/"+e.Name())
		}
	}
	return out, nil
}

// readRegular reads a file of the log, never through a link.
func readRegular(path string) ([]byte, error) {
	f, err := private.OpenFile(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	defer f.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(bufio.NewReader(f))
	return b.Bytes(), err
}

// ReadAdopted returns what Repair moved aside into adopted, oldest
// first (none if it moved nothing).
func ReadAdopted(adopted string) ([]Adoption, error) {
	b, err := os.ReadFile(filepath.Join(adopted, AdoptedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	var out []Adoption
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var a Adoption
		if err := json.Unmarshal(line, &a); err != nil {
			return out, fmt.Errorf("gitsync: %s: %w", AdoptedFile, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// run runs git in dir with the extra environment env and returns its
// output; a failure carries git's own words.
func run(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	b, err := runGit(gitCmd(ctx, dir, env, args...), args)
	return string(b), err
}
