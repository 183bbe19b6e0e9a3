package gitsync

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The Syncer writes the objects of its own commits (blobs of segment
// files, the trees over them, the commit) as loose objects, in git's
// format, instead of running git add, write-tree and commit-tree each
// round: a round then starts two git processes (update-ref and push)
// instead of five. Only repositories with SHA-1 object names are written
// so; others go through git's commands.

// treeDir is one directory of the tree the Syncer commits.
type treeDir struct {
	entries map[string]treeEntry // by name
	id      string               // the tree object; "" when changed since written
}

type treeEntry struct {
	mode string // as in a tree object: "100644", "40000" for a directory
	id   string
}

const dirMode = "40000"

// loadTree reads a tree, recursively, into s.dirs.
func (s *Syncer) loadTree(ctx context.Context, tree string) error {
	out, err := s.gitEnvBytes(ctx, nil, "ls-tree", "-r", "-t", "-z", "--full-tree", tree)
	if err != nil {
		return fmt.Errorf("ls-tree: %w", err)
	}
	dirs := map[string]*treeDir{"": {entries: map[string]treeEntry{}, id: tree}}
	for _, rec := range bytes.Split(out, []byte{0}) {
		meta, path, ok := strings.Cut(string(rec), "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			continue
		}
		parent, name := splitPath(path)
		d := dirs[parent]
		if d == nil {
			return fmt.Errorf("ls-tree: %s listed before its directory", path)
		}
		mode := strings.TrimLeft(f[0], "0")
		d.entries[name] = treeEntry{mode: mode, id: f[2]}
		if f[1] == "tree" {
			dirs[path] = &treeDir{entries: map[string]treeEntry{}, id: f[2]}
		}
	}
	s.dirs = dirs
	return nil
}

func splitPath(path string) (dir, name string) {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return "", path
}

// setBlob puts a file's blob into the tree, adding the directories it
// needs, and marks the directories up to the root as changed.
func (s *Syncer) setBlob(path, id string) {
	dir, name := splitPath(path)
	s.dir_(dir).entries[name] = treeEntry{mode: "100644", id: id}
	for {
		s.dirs[dir].id = ""
		if dir == "" {
			return
		}
		dir, _ = splitPath(dir)
	}
}

// dir_ returns the directory at path, adding it (and its parents) if new.
func (s *Syncer) dir_(path string) *treeDir {
	if d := s.dirs[path]; d != nil {
		return d
	}
	d := &treeDir{entries: map[string]treeEntry{}}
	s.dirs[path] = d
	parent, name := splitPath(path)
	s.dir_(parent).entries[name] = treeEntry{mode: dirMode}
	return d
}

// writeTree writes the changed directories under path, deepest first,
// and returns the tree of path.
func (s *Syncer) writeTree(path string) (string, error) {
	d := s.dirs[path]
	if d.id != "" {
		return d.id, nil
	}
	names := make([]string, 0, len(d.entries))
	for name, e := range d.entries {
		if e.mode == dirMode {
			sub := name
			if path != "" {
				sub = path + "/" + name
			}
			if s.dirs[sub] != nil {
				id, err := s.writeTree(sub)
				if err != nil {
					return "", err
				}
				d.entries[name] = treeEntry{mode: dirMode, id: id}
			}
		}
		names = append(names, name)
	}
	// git orders a tree's entries by name, a directory's name taken
	// with a slash after it.
	key := func(name string) string {
		if d.entries[name].mode == dirMode {
			return name + "/"
		}
		return name
	}
	sort.Slice(names, func(i, j int) bool { return key(names[i]) < key(names[j]) })
	var b bytes.Buffer
	for _, name := range names {
		e := d.entries[name]
		raw, err := hex.DecodeString(e.id)
		if err != nil || len(raw) != sha1.Size {
			return "", fmt.Errorf("tree %q: entry %s has object name %q", path, name, e.id)
		}
		b.WriteString(e.mode + " " + name + "\x00")
		b.Write(raw)
	}
	id, err := s.writeObject("tree", b.Bytes())
	if err != nil {
		return "", err
	}
	d.id = id
	return id, nil
}

// writeCommit writes a commit of tree with the given parents, by thrum,
// now.
func (s *Syncer) writeCommit(tree string, parents []string, msg string) (string, error) {
	now := time.Now()
	_, off := now.Zone()
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	who := fmt.Sprintf("thrum <thrum@localhost> %d %c%02d%02d", now.Unix(), sign, off/3600, off%3600/60)
	var b bytes.Buffer
	fmt.Fprintf(&b, "tree %s\n", tree)
	for _, p := range parents {
		fmt.Fprintf(&b, "parent %s\n", p)
	}
	fmt.Fprintf(&b, "author %s\ncommitter %s\n\n%s\n", who, who, msg)
	return s.writeObject("commit", b.Bytes())
}

// writeBlob stores the first n bytes of a segment file as a blob and
// returns its ID.
func (s *Syncer) writeBlob(rel string, n int64) (string, error) {
	f, err := os.Open(filepath.Join(s.dir, filepath.FromSlash(rel)))
	if err != nil {
		return "", err
	}
	defer f.Close()
	data := make([]byte, n)
	if _, err := io.ReadFull(f, data); err != nil {
		return "", err
	}
	return s.writeObject("blob", data)
}

// writeObject stores a loose object (zlib of "<kind> <length>\x00" and
// the data, named by their SHA-1) unless the repository has it, and
// returns its ID. It is written aside, synced and renamed into place, as
// git does.
func (s *Syncer) writeObject(kind string, data []byte) (string, error) {
	header := fmt.Sprintf("%s %d\x00", kind, len(data))
	h := sha1.New()
	h.Write([]byte(header))
	h.Write(data)
	id := hex.EncodeToString(h.Sum(nil))
	dir := filepath.Join(s.objects, id[:2])
	path := filepath.Join(dir, id[2:])
	if _, err := os.Stat(path); err == nil {
		return id, nil
	}
	tmp, err := os.CreateTemp(dir, "tmp_obj_")
	if errors.Is(err, fs.ErrNotExist) { // the first object of its fan-out directory
		if err = os.MkdirAll(dir, 0o755); err == nil {
			tmp, err = os.CreateTemp(dir, "tmp_obj_")
		}
	}
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	// One compressor, reset for each object: making one costs more than
	// compressing a small object.
	if s.zw == nil {
		s.zw, _ = zlib.NewWriterLevel(tmp, zlib.BestSpeed)
	} else {
		s.zw.Reset(tmp)
	}
	zw := s.zw
	zw.Write([]byte(header))
	zw.Write(data)
	err = zw.Close()
	if err == nil {
		err = tmp.Chmod(0o444)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	s.noteWritten(kind, data)
	return id, nil
}
