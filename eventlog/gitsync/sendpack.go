package gitsync

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Pushing to a remote on disk without git push. A push to a remote that
// is a local path costs, besides the remote's receive-pack, a git push
// process, the shell it starts receive-pack through and a pack-objects
// that walks the history to find what the remote lacks. The Syncer
// already knows what the remote lacks: the objects it wrote itself since
// its last push that the remote took. So, for a local remote, it starts
// the remote's receive-pack itself, checks the remote's branch against
// the commit it last pushed, and sends those objects as one pack. The
// remote checks the pack's connectivity as for any push, so a wrong
// guess is refused, never stored; then, and whenever the Syncer does not
// know (the first push of a process, a commit made by git's commands, a
// remote that moved on), the round pushes with git push as before.

// maxUnpushed bounds the objects kept for the next push (an unreachable
// remote must not grow memory without end): past it they are dropped and
// the next push is git's.
const maxUnpushed = 16 << 20

// rawObject is an object written since the last push, for the next.
type rawObject struct {
	kind string
	data []byte
}

// pushTarget is where a direct push goes: a remote on disk, and the
// receive-pack command configured for it ("" for git's own).
type pushTarget struct {
	path, receivePack string
}

// noteWritten keeps an object the Syncer wrote for the next direct push.
func (s *Syncer) noteWritten(kind string, data []byte) {
	if s.pushBase == "" {
		return
	}
	s.unpushedBytes += len(data)
	if s.unpushedBytes > maxUnpushed {
		s.forgetUnpushed()
		return
	}
	s.unpushed = append(s.unpushed, rawObject{kind, data})
}

// forgetUnpushed stops direct pushes until git push has pushed HEAD.
func (s *Syncer) forgetUnpushed() {
	s.pushBase, s.unpushed, s.unpushedBytes = "", nil, 0
}

// pushed records that the remote's branch is now HEAD.
func (s *Syncer) pushed() {
	s.pushBase, s.unpushed, s.unpushedBytes = s.head, nil, 0
}

// target finds, once, whether the remote is a path on disk.
func (s *Syncer) target(ctx context.Context) *pushTarget {
	if s.targetKnown {
		return s.direct
	}
	s.targetKnown = true
	url, err := s.git(ctx, "remote", "get-url", "--push", s.opts.Remote)
	if err != nil || strings.Contains(url, "\n") { // several push URLs: git push
		return nil
	}
	path, ok := strings.CutPrefix(url, "file://")
	if !ok && !filepath.IsAbs(url) || !filepath.IsAbs(path) {
		return nil
	}
	rp, _ := s.git(ctx, "config", "--get", "remote."+s.opts.Remote+".receivepack")
	s.direct = &pushTarget{path: path, receivePack: rp}
	return s.direct
}

// pushDirect pushes HEAD to a remote on disk as described above. ok is
// false when it did not push (the caller then runs git push); err says
// why, for tests.
func (s *Syncer) pushDirect(ctx context.Context) (ok bool, err error) {
	if s.pushBase == "" || s.head == "" || s.objects == "" {
		return false, nil
	}
	t := s.target(ctx)
	if t == nil {
		return false, nil
	}
	var cmd *exec.Cmd
	if t.receivePack == "" {
		cmd = exec.CommandContext(ctx, "git", "receive-pack", t.path)
	} else { // as git runs it: through the shell, with the path quoted
		cmd = exec.CommandContext(ctx, "sh", "-c", t.receivePack+" '"+strings.ReplaceAll(t.path, "'", `'\''`)+"'")
	}
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return false, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	if beforeSendPack != nil {
		beforeSendPack(s)
	}
	err = s.sendPack(bufio.NewReader(out), in)
	in.Close()
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("receive-pack: %v: %s", werr, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return false, err
	}
	s.pushed()
	s.directPushes++
	return true, nil
}

// beforeSendPack, when set (by tests), sees the Syncer before each
// direct push.
var beforeSendPack func(*Syncer)

var errMoved = errors.New("the remote's branch is not the commit last pushed")

// sendPack speaks git's push protocol (version 0) to receive-pack: read
// the refs it advertises, update the sync branch from the commit last
// pushed to HEAD, send the objects written since as a pack, read the
// report.
func (s *Syncer) sendPack(r *bufio.Reader, w io.Writer) error {
	ref := "refs/heads/" + s.opts.Branch
	old, caps := strings.Repeat("0", 40), ""
	first := true
	for {
		line, flush, err := readPkt(r)
		if err != nil {
			return err
		}
		if flush {
			break
		}
		if first {
			line, caps, _ = strings.Cut(line, "\x00")
			first = false
		}
		id, name, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if name == ref {
			old = id
		}
	}
	if old != s.pushBase {
		io.WriteString(w, "0000") // no commands: receive-pack ends
		return errMoved
	}
	want := []string{"report-status"}
	for _, c := range strings.Fields(caps) {
		if c == "quiet" {
			want = append(want, c)
		}
	}
	if !strings.Contains(" "+caps+" ", " report-status ") {
		io.WriteString(w, "0000")
		return errors.New("receive-pack does not report status")
	}
	var req bytes.Buffer
	writePkt(&req, old+" "+s.head+" "+ref+"\x00"+strings.Join(want, " "))
	req.WriteString("0000")
	if _, err := w.Write(req.Bytes()); err != nil {
		return err
	}
	if err := sendObjects(w, s.unpushed); err != nil {
		return err
	}
	var report []string
	for {
		line, flush, err := readPkt(r)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if flush {
			break
		}
		report = append(report, strings.TrimSuffix(line, "\n"))
	}
	if len(report) < 2 || report[0] != "unpack ok" || report[1] != "ok "+ref {
		return fmt.Errorf("receive-pack refused the push: %s", strings.Join(report, "; "))
	}
	return nil
}

// readPkt reads a pkt-line: its payload, or flush for "0000".
func readPkt(r *bufio.Reader) (line string, flush bool, err error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return "", false, err
	}
	var n [2]byte
	if _, err := hex.Decode(n[:], head[:]); err != nil {
		return "", false, fmt.Errorf("pkt-line length %q", head)
	}
	size := int(n[0])<<8 | int(n[1])
	if size == 0 {
		return "", true, nil
	}
	if size < 4 {
		return "", false, fmt.Errorf("pkt-line length %d", size)
	}
	b := make([]byte, size-4)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", false, err
	}
	return string(b), false, nil
}

func writePkt(b *bytes.Buffer, payload string) {
	fmt.Fprintf(b, "%04x%s", len(payload)+4, payload)
}

var packTypes = map[string]byte{"commit": 1, "tree": 2, "blob": 3}

// sendObjects writes objects as a pack (version 2, no deltas, the data
// stored uncompressed in zlib streams).
func sendObjects(w io.Writer, objs []rawObject) error {
	h := sha1.New()
	bw := bufio.NewWriter(io.MultiWriter(w, h))
	writePackHeader(bw, len(objs))
	// Stored, not compressed: the pack goes through a pipe to a process
	// on this machine, which inflates it and compresses each object
	// again as it stores it.
	zw, _ := zlib.NewWriterLevel(bw, zlib.NoCompression)
	for _, o := range objs {
		writeObjectHeader(bw, o.kind, len(o.data))
		zw.Reset(bw)
		zw.Write(o.data)
		if err := zw.Close(); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

func writePackHeader(w io.Writer, n int) {
	var head [12]byte
	copy(head[:], "PACK")
	binary.BigEndian.PutUint32(head[4:], 2)
	binary.BigEndian.PutUint32(head[8:], uint32(n))
	w.Write(head[:])
}

// writeObjectHeader writes a pack entry's type and size: 3 bits of type,
// then the size 4 bits first and 7 bits per byte after, the high bit
// saying more follow.
func writeObjectHeader(w io.ByteWriter, kind string, size int) {
	c := packTypes[kind]<<4 | byte(size&15)
	size >>= 4
	for size > 0 {
		w.WriteByte(c | 0x80)
		c = byte(size & 0x7f)
		size >>= 7
	}
	w.WriteByte(c)
}
