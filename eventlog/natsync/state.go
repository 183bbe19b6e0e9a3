package natsync

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// state is what a Syncer keeps between runs, in Options.StateFile. It is
// written lazily (at most every stateEvery, and at the end of Run), never
// fsynced: after a crash a Syncer resumes from an older state, publishes
// again what it published since (the stream keeps the first copy: see
// Syncer.check) and imports again what it imported (the admission
// drops what the log holds). It is never a record of anything the log
// does not already prove.
type state struct {
	// The stream as last seen: a different creation time means it was
	// deleted and made again.
	Stream  string    `json:"stream"`
	Created time.Time `json:"created"`
	// Seq is the last stream sequence this clone imported (or skipped),
	// and SeqTime that message's time in the stream, which tells a
	// sequence the stream reused after losing messages from the one
	// imported.
	Seq     uint64    `json:"seq"`
	SeqTime time.Time `json:"seq_time"`
	// Missed counts stream messages that went before this clone read
	// them (retention, a reset stream) while no git remote could bring
	// their events.
	Missed uint64 `json:"missed"`
	// PubCreated is the creation time of the stream this clone's
	// positions are in (see Syncer.check).
	PubCreated time.Time `json:"pub_created"`
	// Subjects are this clone's publishing positions, by shard path.
	Subjects map[string]*subjectState `json:"subjects"`
}

// subjectState is where publishing of one shard stands.
type subjectState struct {
	// Pos is the shard offset up to which this clone's lines are in the
	// stream (or were skipped: another machine's, or too large).
	Pos int64 `json:"pos"`
	// Seq is the stream sequence of the last message on the subject (0:
	// none), what the next publish expects, and At when it was
	// acknowledged.
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
	// Sent says a message went out on the subject, acknowledged or not:
	// the stream may hold messages of it that Seq does not know of.
	Sent bool `json:"sent,omitempty"`
}

func loadState(path string) (*state, error) {
	st := &state{Subjects: map[string]*subjectState{}}
	if path == "" {
		return st, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsync: read state: %w", err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		// The state only saves work: start over rather than refuse.
		return &state{Subjects: map[string]*subjectState{}}, nil
	}
	if st.Subjects == nil {
		st.Subjects = map[string]*subjectState{}
	}
	return st, nil
}

// save writes the state through a temporary file and a rename, so a
// crash leaves the old state or the new one, never half of one.
func (st *state) save(path string) error {
	if path == "" {
		return nil
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".natsync-*")
	if err != nil {
		return fmt.Errorf("natsync: save state: %w", err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("natsync: save state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("natsync: save state: %w", err)
	}
	return nil
}

// clone copies the state, for saving outside the Syncer's lock.
func (st *state) clone() *state {
	c := *st
	c.Subjects = make(map[string]*subjectState, len(st.Subjects))
	for k, v := range st.Subjects {
		s := *v
		c.Subjects[k] = &s
	}
	return &c
}
