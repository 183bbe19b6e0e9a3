package natsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thrumhq/thrum/eventlog"
)

// errOtherWriter is a subject whose last message this clone did not
// write: another clone publishes as this machine (a copy of it).
var errOtherWriter = errors.New("another clone publishes as this machine")

// publishLoop publishes what the log committed, on Notify and after
// each (re)connection, until ctx ends. Every failure makes it ask the
// stream where each subject stands before it publishes again.
func (s *Syncer) publishLoop(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) {
	checked := false
	var maxLine int
	var last time.Time // when the last pass began
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-s.pubWake:
		}
		// Passes come at most every roundGap: a send after a quiet
		// moment goes at once, a burst in a few messages, each holding
		// all its shard's lines of the moment.
		if d := roundGap - time.Since(last); d > 0 {
			sleep(ctx, d, nil)
		}
		last = time.Now()
		if !nc.IsConnected() {
			checked = false // the connection's handler wakes this loop
			continue
		}
		var err error
		s.mu.Lock()
		if s.pubCheck {
			s.pubCheck, checked = false, false
		}
		s.mu.Unlock()
		if !checked {
			if maxLine, err = s.check(ctx, nc, js); err != nil {
				s.fail(err)
				sleep(ctx, s.opts.Retry, nil)
				wake(s.pubWake)
				continue
			}
			checked = true
		}
		s.mu.Lock()
		s.pubStarted++
		pass := s.pubStarted
		s.mu.Unlock()
		for err == nil {
			var more bool
			if more, err = s.publishRound(ctx, js, maxLine); err == nil {
				s.ok(nc)
				if !more {
					s.mu.Lock()
					s.pubDone = pass
					s.advancedLocked()
					s.mu.Unlock()
					break
				}
			}
		}
		if err != nil && ctx.Err() == nil {
			s.fail(err)
			checked = false
			sleep(ctx, s.opts.Retry, nil)
			wake(s.pubWake)
		}
	}
}

// check asks the stream where each of this clone's subjects stands, and
// sets the positions by it: a subject's last message says how far the
// shard is published (further than the saved state after a crash, less
// far after the server lost what it had acknowledged but not yet
// written). A stream made again is given all this clone wrote. It
// returns the longest run a message may carry.
func (s *Syncer) check(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (maxRun int, err error) {
	str, err := js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
	}
	info := str.CachedInfo()
	maxRun = int(nc.MaxPayload())
	if m := int(info.Config.MaxMsgSize); m > 0 && m < maxRun {
		maxRun = m
	}
	maxRun -= headroom
	s.mu.Lock()
	s.status.MaxAge = info.Config.MaxAge
	st := s.st
	if !st.PubCreated.Equal(info.Created) {
		// A stream this clone has not published to (the first, or one
		// made again) gets all this clone wrote, so a clone that reads
		// it needs no other way to any of it.
		for _, sub := range st.Subjects {
			sub.Pos, sub.Seq = 0, 0
		}
		st.PubCreated = info.Created
		s.dirty = true
	}
	var mine []string
	for path, sub := range st.Subjects {
		if sub.Sent {
			mine = append(mine, path)
		}
	}
	s.mu.Unlock()
	for _, path := range mine {
		shard, _, _ := eventlog.ParseSegmentPath(path)
		m, err := str.GetLastMsgForSubject(ctx, s.subject(shard))
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, fmt.Errorf("last message of %s: %w", s.subject(shard), err)
		}
		var end int64
		if m != nil {
			off, perr := strconv.ParseInt(m.Header.Get(HeaderOffset), 10, 64)
			if perr != nil || off < 0 {
				return 0, fmt.Errorf("%w: %s's last message (sequence %d) has no offset", errOtherWriter, m.Subject, m.Sequence)
			}
			same, err := s.logHas(ctx, path, off, m.Data)
			if err != nil {
				return 0, err
			}
			if !same {
				return 0, fmt.Errorf("%w: %s's last message (sequence %d) differs from this log at %s offset %d; was this clone copied? A copy shares its machine ID: run NATS in one of them only", errOtherWriter, m.Subject, m.Sequence, path, off)
			}
			end = off + int64(len(m.Data))
		}
		s.mu.Lock()
		sub := st.Subjects[path]
		switch {
		case m != nil:
			sub.Pos, sub.Seq = end, m.Sequence
		case sub.Seq > 0 && (time.Since(sub.At) < s.status.MaxAge || s.status.MaxAge == 0):
			// Messages the stream still had to keep are gone: it lost
			// what it had acknowledged. Publish it all again.
			sub.Pos, sub.Seq = 0, 0
		default:
			sub.Seq = 0 // aged out
		}
		s.dirty = true
		s.mu.Unlock()
	}
	return maxRun, nil
}

// logHas reports whether the log holds data at offset off of the shard
// file path.
func (s *Syncer) logHas(ctx context.Context, path string, off int64, data []byte) (bool, error) {
	if len(data) == 0 {
		return false, nil
	}
	from := s.log.Positions()
	if from[path] < off+int64(len(data)) {
		return false, nil
	}
	from[path] = off
	var got []byte
	errDone := errors.New("done")
	_, err := s.log.Scan(ctx, from, func(e *eventlog.Event) error {
		if eventlog.ShardPath(e.Shard) != path {
			return nil
		}
		got = append(append(got, e.Raw...), '\n')
		if len(got) >= len(data) {
			return errDone
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return false, err
	}
	return bytes.Equal(got, data), nil
}

// run is a message to publish: consecutive lines of one shard that this
// machine wrote, from offset start to end.
type run struct {
	path       string
	shard      string
	start, end int64
	data       []byte
	skip       int64 // without data: the offset past the lines skipped
}

// publishRound reads what the log committed past each shard's position,
// publishes one run per shard, and moves the positions on as the stream
// acknowledges. more says whether lines were left for another round.
func (s *Syncer) publishRound(ctx context.Context, js jetstream.JetStream, maxRun int) (more bool, err error) {
	// A shard's lines since its tail began come from the tail; before
	// that, from the log, up to where the tail begins.
	ends := s.log.Positions()
	from, upTo := map[string]int64{}, map[string]int64{}
	var order []*run
	tooLarge := 0
	s.mu.Lock()
	for path, end := range ends {
		if path == eventlog.LocalFile {
			continue
		}
		sub := s.st.Subjects[path]
		if sub == nil {
			sub = &subjectState{}
			s.st.Subjects[path] = sub
		}
		shard, _, _ := eventlog.ParseSegmentPath(path)
		t := s.tails[shard]
		switch {
		case t != nil && sub.Pos >= t.from:
			if len(order) == maxRunsOut {
				more = true
				continue
			}
			r, left := s.runLocked(path, shard, t, sub.Pos, maxRun, &tooLarge)
			if len(r.data) > 0 || r.skip > sub.Pos {
				order = append(order, r)
			}
			more = more || left
		case t != nil && sub.Pos < t.from:
			from[path], upTo[path] = sub.Pos, t.from
			more = more || t.end > t.from // the tail's, once the log's are out
		case sub.Pos < end:
			from[path], upTo[path] = sub.Pos, end
		}
	}
	var unpublished int64
	s.mu.Unlock()

	if len(from) > 0 {
		// Who wrote here changes only with the local shard
		// (credentials): the answers hold until it grows.
		if end := ends[eventlog.LocalFile]; s.localEnd != end || s.local == nil {
			s.local, s.localEnd = map[string]bool{}, end
		}
		read, skipped, full, err := s.collect(ctx, from, ends, upTo, maxRunsOut-len(order), maxRun)
		if err != nil {
			return false, fmt.Errorf("read the log: %w", err)
		}
		order, tooLarge, more = append(order, read...), tooLarge+skipped, more || full
	}

	// One message per subject in flight; all subjects at once.
	type sent struct {
		r   *run
		ack jetstream.PubAckFuture
	}
	var out []sent
	expect := map[*run]uint64{}
	s.mu.Lock()
	s.status.TooLarge += tooLarge
	for _, r := range order {
		sub := s.st.Subjects[r.path]
		if len(r.data) == 0 {
			if r.skip > sub.Pos {
				sub.Pos, s.dirty = r.skip, true
			}
			continue
		}
		expect[r] = sub.Seq
		sub.Sent, s.dirty = true, true
	}
	s.mu.Unlock()
	for _, r := range order {
		seq, ok := expect[r]
		if !ok {
			continue
		}
		msg := &nats.Msg{Subject: s.subject(r.shard), Data: r.data, Header: nats.Header{HeaderOffset: []string{strconv.FormatInt(r.start, 10)}}}
		f, perr := js.PublishMsgAsync(msg, jetstream.WithExpectLastSequencePerSubject(seq))
		if perr != nil {
			err = perr
			break
		}
		out = append(out, sent{r, f})
	}
	for _, o := range out {
		var ack *jetstream.PubAck
		select {
		case ack = <-o.ack.Ok():
		case perr := <-o.ack.Err():
			if isWrongLast(perr) {
				perr = fmt.Errorf("%s: the stream's last message is not the one this clone published last (%w); asking the stream", o.ack.Msg().Subject, perr)
			}
			err = errors.Join(err, perr)
			continue
		case <-ctx.Done():
			return false, ctx.Err()
		}
		s.mu.Lock()
		sub := s.st.Subjects[o.r.path]
		sub.Pos, sub.Seq, sub.At = o.r.end, ack.Sequence, time.Now()
		s.status.Published++
		s.advancedLocked()
		s.mu.Unlock()
	}
	ends = s.log.Positions()
	s.mu.Lock()
	for path, end := range ends {
		if sub := s.st.Subjects[path]; sub != nil && path != eventlog.LocalFile {
			unpublished += max(end-sub.Pos, 0)
		}
	}
	s.status.Unpublished = unpublished
	s.mu.Unlock()
	return more && err == nil, err
}

// collect reads the shards from their positions in from up to upTo (at
// most maxRuns of them): for each, the run of this machine's
// consecutive lines to publish next (up to maxRun bytes), or, before
// any, how far the lines to skip go (another machine's, or too large
// for a message: those it counts). full says lines were left for
// another round. It reads each shard no further than its next run (or
// roundBytes of lines to skip), and stops when every shard is done, so
// a long backlog is read once. ends are the log's positions, where it
// reads no shard.
func (s *Syncer) collect(ctx context.Context, from, ends, upTo map[string]int64, maxRuns, maxRun int) (runs []*run, tooLarge int, full bool, err error) {
	at := maps.Clone(ends)
	open := map[string]*run{} // shards still being read
	for path, pos := range from {
		if len(open) == maxRuns {
			full = true
			break
		}
		at[path] = pos
		r := &run{path: path}
		r.shard, _, _ = eventlog.ParseSegmentPath(path)
		open[path] = r
		runs = append(runs, r)
	}
	if len(open) == 0 {
		return runs, 0, full, nil
	}
	read := map[string]int{}
	errStop := errors.New("stop")
	_, err = s.log.Scan(ctx, at, func(e *eventlog.Event) error {
		path := eventlog.ShardPath(e.Shard)
		r := open[path]
		if r == nil {
			return nil // done, or made since ends was taken: a later round's
		}
		done, err := s.take(ctx, r, e, maxRun, &tooLarge)
		if err != nil {
			return err
		}
		read[path] += len(e.Raw) + 1
		switch {
		case done: // e waits for the next run
			full = true
		case read[path] > roundBytes:
			full = full || e.Offset < upTo[path]
		}
		if done || read[path] > roundBytes || e.Offset >= upTo[path] {
			delete(open, path)
			if len(open) == 0 {
				return errStop
			}
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return runs, tooLarge, full, err
}

// take adds e to its shard's run, or to the lines skipped before it;
// done says the run is complete without it (e is left for the next).
func (s *Syncer) take(ctx context.Context, r *run, e *eventlog.Event, maxRun int, tooLarge *int) (done bool, err error) {
	mine, err := s.wroteHere(ctx, e)
	if err != nil {
		return false, err
	}
	n := int64(len(e.Raw) + 1)
	switch {
	case !mine || n > int64(maxRun):
		if len(r.data) > 0 {
			return true, nil // a run is consecutive lines
		}
		if mine {
			*tooLarge++ // git carries it
		}
		r.skip = e.Offset
		return false, nil
	case len(r.data)+int(n) > maxRun:
		return true, nil
	}
	if len(r.data) == 0 {
		r.start = e.Offset - n
	}
	r.data = append(append(r.data, e.Raw...), '\n')
	r.end = e.Offset
	return false, nil
}

// wroteHere reports whether this machine wrote e, asking Options.Local;
// for an agent's shard, once per author while the local shard stays as
// it is (events.jsonl's events are asked each time: their answer may
// depend on more than who claims them).
func (s *Syncer) wroteHere(ctx context.Context, e *eventlog.Event) (bool, error) {
	if s.opts.Local == nil {
		return true, nil
	}
	key := e.Shard + "\x00" + eventlog.Author(e)
	if v, ok := s.local[key]; ok && e.Shard != "" {
		return v, nil
	}
	v, err := s.opts.Local(ctx, e)
	if err != nil {
		return false, err
	}
	if e.Shard != "" {
		s.local[key] = v
	}
	return v, nil
}

// isWrongLast reports whether a publish was refused because the subject's
// last sequence was not the one it expected.
func isWrongLast(err error) bool {
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		c := je.APIError().ErrorCode
		return c == jetstream.JSErrCodeStreamWrongLastSequence || c == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}
