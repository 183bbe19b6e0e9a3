package gitsync

import (
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
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
// round, and stores them as one small pack per round (writePack). Only repositories with SHA-1 object names are written
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

// writeObject adds an object to those of the round, kept in memory until
// writePack stores them, and returns its ID.
func (s *Syncer) writeObject(kind string, data []byte) (string, error) {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", kind, len(data))
	h.Write(data)
	id := h.Sum(nil)
	s.fresh = append(s.fresh, packObject{rawObject{kind, data}, id})
	s.noteWritten(kind, data)
	return hex.EncodeToString(id), nil
}

// packObject is an object of the round, for writePack.
type packObject struct {
	rawObject
	id []byte
}

// writePack stores the round's objects as one pack and its index in the
// repository (a round's blobs, trees and commit as loose objects cost a
// file and a directory each, and these are what a round's CPU went to).
// Each file is written aside, synced and renamed into place, the index
// last, as git does: a pack without its index is not read.
func (s *Syncer) writePack() error {
	if len(s.fresh) == 0 {
		return nil
	}
	objs := s.fresh
	var pack bytes.Buffer
	offsets, crcs := make([]uint32, len(objs)), make([]uint32, len(objs))
	if s.zw == nil {
		s.zw, _ = zlib.NewWriterLevel(&pack, zlib.BestSpeed)
	}
	writePackHeader(&pack, len(objs))
	for i, o := range objs {
		start := pack.Len()
		offsets[i] = uint32(start)
		writeObjectHeader(&pack, o.kind, len(o.data))
		s.zw.Reset(&pack)
		s.zw.Write(o.data)
		if err := s.zw.Close(); err != nil {
			return err
		}
		crcs[i] = crc32.ChecksumIEEE(pack.Bytes()[start:])
	}
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])

	// The index (version 2): a fan-out table by first byte, the names in
	// order, their CRC-32s and offsets, the pack's checksum, its own.
	order := make([]int, len(objs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bytes.Compare(objs[order[a]].id, objs[order[b]].id) < 0 })
	// A name twice (the same blob in two files) is indexed once.
	uniq := order[:0]
	for _, i := range order {
		if len(uniq) == 0 || !bytes.Equal(objs[uniq[len(uniq)-1]].id, objs[i].id) {
			uniq = append(uniq, i)
		}
	}
	var idx bytes.Buffer
	idx.Write([]byte{0xff, 't', 'O', 'c', 0, 0, 0, 2})
	var fan [256]uint32
	for _, i := range uniq {
		fan[objs[i].id[0]]++
	}
	var n uint32
	for b := 0; b < 256; b++ {
		n += fan[b]
		binary.Write(&idx, binary.BigEndian, n)
	}
	for _, i := range uniq {
		idx.Write(objs[i].id)
	}
	for _, i := range uniq {
		binary.Write(&idx, binary.BigEndian, crcs[i])
	}
	for _, i := range uniq {
		binary.Write(&idx, binary.BigEndian, offsets[i])
	}
	idx.Write(sum[:])
	isum := sha1.Sum(idx.Bytes())
	idx.Write(isum[:])

	dir := filepath.Join(s.objects, "pack")
	name := filepath.Join(dir, "pack-"+hex.EncodeToString(sum[:]))
	for _, f := range []struct {
		ext  string
		data []byte
	}{{".pack", pack.Bytes()}, {".idx", idx.Bytes()}} {
		if err := writeFileAside(dir, name+f.ext, f.data); err != nil {
			return fmt.Errorf("write pack: %w", err)
		}
	}
	s.fresh = nil
	return nil
}

// writeFileAside writes a read-only file as git writes its objects:
// aside, synced, renamed into place.
func writeFileAside(dir, path string, data []byte) error {
	tmp, err := os.CreateTemp(dir, "tmp_pack_")
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(dir, 0o755); err == nil {
			tmp, err = os.CreateTemp(dir, "tmp_pack_")
		}
	}
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	_, err = tmp.Write(data)
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
		return err
	}
	return os.Rename(tmp.Name(), path)
}
