package admit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/internal/private"
)

// The quarantine. A remote line that may not enter the log, or that is
// not an event at all, is kept aside in QuarantineFile in the log's
// directory, which sync never commits: one JSON object per line (a
// Refusal). It is never applied. A line is kept once, however often a
// transport brings it again.

// QuarantineFile is the file, in the log's directory, that holds the
// remote lines a Gate refused.
const QuarantineFile = "quarantine.jsonl"

// maxQuarantineBytes bounds the refused lines QuarantineFile keeps:
// past it, refused lines are counted (Gate.Refusals) and logged, not
// kept, and are judged again after a restart. The lines that wait have
// as much again of their own, so that refused junk, which anyone who
// can push writes in any amount, does not crowd them out.
const maxQuarantineBytes = 4 << 20

// MaxRefusalGroups bounds what Gate.Refusals lists.
const MaxRefusalGroups = 20

// Refusal is a remote line kept out of the log: a line of QuarantineFile.
type Refusal struct {
	At      string  `json:"at"`                 // when it was refused (eventlog.TimeFormat)
	File    string  `json:"file"`               // where it was found (Source.File)
	Shard   *string `json:"shard,omitempty"`    // the shard it was found for (nil for a file, and in refusals kept before shards were recorded)
	Commit  string  `json:"commit"`             // the source's version then (Source.Commit)
	Reason  string  `json:"reason"`             // why it was refused, or why it waits
	Wait    bool    `json:"wait,omitempty"`     // it waits (it could not be judged yet): kept whole
	EventID string  `json:"event_id,omitempty"` // its event ID, if it is an event
	SHA256  string  `json:"sha256,omitempty"`   // else the line's hash
	Bytes   int     `json:"bytes"`              // the line's length (a line over eventlog.MaxLineBytes is read no further)
	Line    string  `json:"line"`               // the line as found, its first maxRefusalLine bytes
}

// maxRefusalLine bounds the part of a refused line that the quarantine
// keeps (a remote line may be any length).
const maxRefusalLine = 16 << 10

// newRefusal describes a refused line.
func newRefusal(at string, src Source, shard string, line []byte, reason string) Refusal {
	r := Refusal{At: at, File: src.File, Shard: &shard, Commit: src.Commit, Reason: reason, Bytes: len(line), Line: string(line[:min(len(line), maxRefusalLine)])}
	if id := eventlog.LineID(line[:min(len(line), eventlog.MaxLineBytes)]); id == "" {
		sum := sha256.Sum256(line)
		r.SHA256 = hex.EncodeToString(sum[:])
	} else {
		r.EventID = id
	}
	return r
}

// shard returns the shard a refused line was found for: recorded, or
// (in a refusal kept before shards were) the shard of the segment file
// it was found in.
func (r *Refusal) shard() (string, bool) {
	if r.Shard != nil {
		return *r.Shard, true
	}
	shard, _, ok := eventlog.ParseSegmentPath(r.File)
	return shard, ok
}

// newWait describes a line that waits: kept whole, to be judged again.
func newWait(at string, src Source, shard string, line []byte, reason string) Refusal {
	r := newRefusal(at, src, shard, line, reason)
	r.Wait, r.Line = true, string(line)
	return r
}

// RefusalCount sums the refusals of one reason in one remote file.
type RefusalCount struct {
	File, Reason string
	Count        int
	Last         time.Time // the latest of them
}

// key identifies a refused line: its event ID, else a hash of it.
func (r *Refusal) key() string {
	if r.EventID != "" {
		return r.EventID
	}
	return "sha256:" + r.SHA256
}

// ReadQuarantine returns the refusals kept in the log directory dir,
// oldest first (none if there is no quarantine file).
func ReadQuarantine(dir string) ([]Refusal, error) {
	f, err := private.OpenFile(filepath.Join(dir, QuarantineFile), os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	defer f.Close()
	var out []Refusal
	sc := bufio.NewScanner(f)
	// A record holds a refused line's kept part, escaped (at most 6 bytes
	// a byte), or a whole line that waits (an event: valid JSON, with no
	// control character to escape; invalid UTF-8 becomes 3 bytes a byte),
	// and the rest of the record.
	sc.Buffer(nil, max(6*maxRefusalLine, 3*eventlog.MaxLineBytes)+64<<10)
	for n := 1; sc.Scan(); n++ {
		var r Refusal
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("admit: %s line %d: %w", QuarantineFile, n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("admit: %s: %w", QuarantineFile, err)
	}
	return out, nil
}

// CountRefusals groups refusals by file and reason, the most recent
// first; it also returns how many of rs wait (Refusal.Wait), which it
// leaves out.
func CountRefusals(rs []Refusal) (counts []RefusalCount, waiting int) {
	var t tally
	for i := range rs {
		if rs[i].Wait {
			waiting++
			continue
		}
		t.add(&rs[i])
	}
	return t.counts(-1), waiting
}

// tally counts refusals by file and reason.
type tally struct {
	groups map[[2]string]*RefusalCount
	total  int
}

// maxTallyGroups bounds a tally's groups (a remote can make up any
// number of reasons); past it, refusals count in one more group.
const maxTallyGroups = 1000

func (t *tally) add(r *Refusal) {
	if t.groups == nil {
		t.groups = map[[2]string]*RefusalCount{}
	}
	k := [2]string{r.File, r.Reason}
	g := t.groups[k]
	if g == nil {
		if len(t.groups) >= maxTallyGroups {
			k = [2]string{"", "other files and reasons"}
			g = t.groups[k]
		}
		if g == nil {
			g = &RefusalCount{File: k[0], Reason: k[1]}
			t.groups[k] = g
		}
	}
	g.Count++
	t.total++
	if at, err := eventlog.ParseTime(r.At); err == nil && at.After(g.Last) {
		g.Last = at
	}
}

// counts returns up to max groups (all if max < 0), the most recent
// first.
func (t *tally) counts(max int) []RefusalCount {
	out := make([]RefusalCount, 0, len(t.groups))
	for _, g := range t.groups {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Last.Equal(out[j].Last) {
			return out[i].Last.After(out[j].Last)
		}
		return out[i].File+out[i].Reason < out[j].File+out[j].Reason
	})
	if max >= 0 && len(out) > max {
		out = out[:max]
	}
	return out
}

// quarantine is a Gate's record of what it refused.
type quarantine struct {
	path     string
	keys     map[string]struct{} // the lines kept in the file
	size     int64               // the file's length
	waitSize int64               // the length of the lines kept that wait
	tally                        // lines refused: kept, or seen this process past the bound
	waits    int                 // lines kept that wait
}

// count counts a line kept, or seen past the bound.
func (q *quarantine) count(r *Refusal) {
	if r.Wait {
		q.waits++
		q.waitSize += int64(len(r.Line))
		return
	}
	q.tally.add(r)
}

// loadQuarantine reads what earlier Gates refused.
func loadQuarantine(dir string) (*quarantine, error) {
	q := &quarantine{path: filepath.Join(dir, QuarantineFile), keys: map[string]struct{}{}}
	rs, err := ReadQuarantine(dir)
	if err != nil {
		return nil, err
	}
	for i := range rs {
		q.keys[rs[i].key()] = struct{}{}
		q.count(&rs[i])
	}
	if st, err := os.Stat(q.path); err == nil {
		q.size = st.Size()
	}
	return q, nil
}

// settle rewrites the quarantine once lines were judged again: the
// lines whose events the log holds now (held) go, and a line that waited
// and is refused now takes its refusal (refused, by event ID).
func (q *quarantine) settle(held map[string]bool, refused map[string]Refusal) error {
	rs, err := ReadQuarantine(filepath.Dir(q.path))
	if err != nil {
		return err
	}
	changed := false
	var buf bytes.Buffer
	nq := &quarantine{path: q.path, keys: map[string]struct{}{}}
	for i := range rs {
		r := &rs[i]
		if r.EventID != "" && held[r.EventID] {
			changed = true
			continue
		}
		if now, ok := refused[r.EventID]; ok && r.Wait && r.EventID != "" {
			r, changed = &now, true
		}
		if err := encodeRefusal(&buf, r); err != nil {
			return err
		}
		nq.keys[r.key()] = struct{}{}
		nq.count(r)
	}
	if !changed {
		return nil
	}
	if err := private.WriteFile(q.path, buf.Bytes()); err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	nq.size = int64(buf.Len())
	*q = *nq
	return nil
}

// add keeps the refusals not kept yet and counts them.
func (q *quarantine) add(rs []Refusal) error {
	var buf bytes.Buffer
	for i := range rs {
		r := &rs[i]
		k := r.key()
		if _, dup := q.keys[k]; dup {
			continue
		}
		if r.Wait && q.waitSize >= maxQuarantineBytes {
			continue // a line that waits and is not kept is brought again by its transport, if at all
		}
		if !r.Wait && q.size+int64(buf.Len())-q.waitSize >= maxQuarantineBytes {
			q.tally.add(r) // counted, not kept
			continue
		}
		q.count(r)
		q.keys[k] = struct{}{}
		if err := encodeRefusal(&buf, r); err != nil {
			return err
		}
	}
	if buf.Len() == 0 {
		return nil
	}
	f, err := private.OpenFile(q.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE)
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	q.size += int64(buf.Len())
	return nil
}

// encodeRefusal writes a refusal as a line of QuarantineFile: a line
// that waits is kept whole, so it is not escaped more than JSON needs
// (ReadQuarantine reads records up to the size this allows).
func encodeRefusal(buf *bytes.Buffer, r *Refusal) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}
