package natsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/thrumhq/thrum/eventlog"
	"github.com/thrumhq/thrum/eventlog/admit"
)

// consumeLoop imports the stream's messages until ctx ends, starting
// again after every failure and (re)connection.
func (s *Syncer) consumeLoop(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) {
	for ctx.Err() == nil {
		if !nc.IsConnected() {
			sleep(ctx, time.Hour, s.conWake)
			continue
		}
		// Drop a wake-up that came before this start: it is this start.
		select {
		case <-s.conWake:
		default:
		}
		if err := s.consume(ctx, nc, js); err != nil && ctx.Err() == nil {
			s.fail(err)
			sleep(ctx, s.opts.Retry, s.conWake)
		}
	}
}

// consume reads the stream from where this clone stands until ctx ends,
// the connection comes back (the stream may have changed meanwhile) or
// something fails.
func (s *Syncer) consume(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	str, err := js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
	}
	info := str.CachedInfo()
	cfg, behind, err := s.startAt(ctx, str, info)
	if err != nil {
		return err
	}
	if behind > 0 {
		// Messages this clone never read are gone (a stream made again,
		// retention): their events come from git, before going on.
		if s.opts.Refresh == nil {
			s.mu.Lock()
			s.st.Missed += behind
			s.status.Missed = s.st.Missed
			s.dirty = true
			s.mu.Unlock()
			if s.opts.Logger != nil {
				s.opts.Logger.Warn("natsync: stream messages went before this clone read them, and no git remote brings their events", "stream", s.cfg.Stream, "messages", behind)
			}
		} else if err := s.gitRound(ctx); err != nil {
			return fmt.Errorf("a git round for what the stream no longer has: %w", err)
		}
	}
	cons, err := js.OrderedConsumer(ctx, s.cfg.Stream, cfg)
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", s.cfg.Stream, err)
	}
	// What the client buffers is bounded in bytes: a pull is room for
	// two of the largest messages (a megabyte of lines each), so the
	// next comes while one is imported. A batch is bounded in bytes too.
	msgs := make(chan jetstream.Msg, 1)
	errs := make(chan error, 1)
	stop := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-stop:
		}
	}, jetstream.PullMaxBytes(2*max(batchBytes, int(nc.MaxPayload())+headroom)), jetstream.PullHeartbeat(heartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		return fmt.Errorf("consume %s: %w", s.cfg.Stream, err)
	}
	defer func() {
		close(stop)
		cc.Stop()
		<-cc.Closed()
	}()
	s.ok(nc)
	// The stream may be made again without the consumer failing: look
	// at it now and then.
	look := time.NewTicker(lookEvery)
	defer look.Stop()
	batch := make([]jetstream.Msg, 0, s.opts.Batch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.conWake:
			return nil // look at the stream again
		case <-look.C:
			if i, err := str.Info(ctx); err != nil || !i.Created.Equal(info.Created) {
				return err
			}
		case err := <-errs:
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				return err
			}
			s.fail(err) // the ordered consumer recovers from the rest itself
		case m := <-msgs:
			// A batch takes what follows within a moment: one import
			// (one fsync) for a burst.
			batch = append(batch[:0], m)
			size := len(m.Data())
			lull := time.NewTimer(batchLull)
		more:
			for len(batch) < s.opts.Batch && size < batchBytes {
				select {
				case m := <-msgs:
					batch = append(batch, m)
					size += len(m.Data())
					lull.Reset(batchLull)
				case <-lull.C:
					break more
				}
			}
			lull.Stop()
			err := s.importBatch(ctx, batch)
			clear(batch) // let the messages go while the next is awaited
			if err != nil {
				return err
			}
			s.ok(nc)
		}
	}
}

// startAt decides where the consumer starts: after the message this
// clone imported last, if the stream still holds it; from the start of a
// stream made again; from the time of the last message imported if the
// stream lost it (its sequences may have been given to new messages). It
// returns how many messages went before this clone read them.
func (s *Syncer) startAt(ctx context.Context, str jetstream.Stream, info *jetstream.StreamInfo) (jetstream.OrderedConsumerConfig, uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.cfg.Subjects + ".>"}, DeliverPolicy: jetstream.DeliverAllPolicy}
	s.mu.Lock()
	seq, at, created := s.st.Seq, s.st.SeqTime, s.st.Created
	s.status.MaxAge = info.Config.MaxAge
	s.mu.Unlock()
	var behind uint64
	switch {
	case created.IsZero():
		// The first time: all the stream holds (the log keeps each event once).
	case !created.Equal(info.Created):
		// Made again: whatever the old one held that this clone had not
		// read is lost to the stream, and publishing starts over in it.
		seq, at, behind = 0, time.Time{}, 1
		s.mu.Lock()
		s.pubCheck = true
		s.mu.Unlock()
		wake(s.pubWake)
	case seq > 0:
		m, err := str.GetMsg(ctx, seq)
		switch {
		case err == nil && m.Time.Equal(at):
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
			if first := info.State.FirstSeq; seq+1 < first {
				behind = first - seq - 1
			}
		case err == nil || errors.Is(err, jetstream.ErrMsgNotFound):
			if seq+1 < info.State.FirstSeq {
				// Aged out: go on from the first the stream holds.
				behind = info.State.FirstSeq - seq - 1
				cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
				break
			}
			// The stream lost messages it had acknowledged, and may have
			// given their sequences to new ones: read again from the
			// time of the last one imported.
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &at
			behind = 1
		default:
			return cfg, 0, fmt.Errorf("message %d of %s: %w", seq, s.cfg.Stream, err)
		}
	}
	s.mu.Lock()
	s.st.Created, s.st.Seq, s.st.SeqTime = info.Created, seq, at
	s.dirty = true
	s.mu.Unlock()
	return cfg, behind, nil
}

// gitRound runs a git round, bounded by DefaultGapWait.
func (s *Syncer) gitRound(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultGapWait)
	defer cancel()
	return s.opts.Refresh(ctx)
}

// pending is what a batch imports into one shard from one subject:
// lines, in order. Subjects are apart: what one brings, which admission
// may refuse, does not move where another's lines must start.
type pending struct {
	shard string
	src   admit.Source
	lines [][]byte
	have  int64 // the agent shard's end here once these are in
}

// importBatch admits a batch of messages, shard by shard, then records
// the last one's sequence. An agent's shard takes each line only at its
// author's offset: what the shard here already has is dropped, and a
// message that starts past its end (a gap) waits for one git round, then
// is left to git.
func (s *Syncer) importBatch(ctx context.Context, batch []jetstream.Msg) error {
	shards := map[string]*pending{}
	var order []*pending
	flush := func() error {
		for _, p := range order {
			for lines := p.lines; len(lines) > 0; {
				n, size := 0, 0
				for n < len(lines) && size < admit.BatchBytes {
					size += len(lines[n])
					n++
				}
				r, err := s.opts.Admission.Admit(ctx, p.src, p.shard, lines[:n])
				if r != nil {
					s.mu.Lock()
					s.status.Imported += len(r.Imported)
					s.mu.Unlock()
				}
				if err != nil {
					return fmt.Errorf("admit %s: %w", p.src.File, err)
				}
				lines = lines[n:]
			}
		}
		clear(shards)
		order = order[:0]
		return nil
	}
	refreshed := false
	var last *jetstream.MsgMetadata
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("message metadata: %w", err)
		}
		last = meta
		machine, shard, ok := s.parseSubject(m.Subject())
		if !ok || machine == s.opts.Machine {
			continue // not a shard's, or this clone's own lines coming back
		}
		start := func() *pending { // the subject's lines from here, into the shard as it is now
			p := &pending{shard: shard, src: admit.Source{File: m.Subject(), Commit: "stream sequence " + strconv.FormatUint(meta.Sequence.Stream, 10)}}
			p.have = s.log.Positions()[eventlog.ShardPath(shard)]
			shards[m.Subject()] = p
			order = append(order, p)
			return p
		}
		p := shards[m.Subject()]
		if p == nil {
			p = start()
		}
		lines := splitLines(m.Data())
		if shard == "" {
			p.lines = append(p.lines, lines...)
			continue
		}
		off, err := strconv.ParseInt(m.Headers().Get(HeaderOffset), 10, 64)
		if err != nil || off < 0 {
			s.leftToGit(m, meta, "it has no offset")
			continue
		}
		lines, gap := fromOffset(lines, off, p.have)
		if gap && s.opts.Refresh != nil && !refreshed {
			// The lines before these are not here yet: a git round may
			// bring them (once per batch).
			if err := flush(); err != nil {
				return err
			}
			refreshed = true
			if err := s.gitRound(ctx); err != nil && s.opts.Logger != nil {
				s.opts.Logger.Warn("natsync: git round for a gap", "err", err)
			}
			p = start()
			lines, gap = fromOffset(splitLines(m.Data()), off, p.have)
		}
		if gap {
			s.mu.Lock()
			s.status.Gaps++
			s.mu.Unlock()
			s.leftToGit(m, meta, fmt.Sprintf("it starts at offset %d of %s, which ends at %d here", off, eventlog.ShardPath(shard), p.have))
			continue
		}
		for _, l := range lines {
			p.have += int64(len(l)) + 1
		}
		p.lines = append(p.lines, lines...)
	}
	if err := flush(); err != nil {
		return err
	}
	if last != nil {
		s.mu.Lock()
		s.st.Seq, s.st.SeqTime = last.Sequence.Stream, last.Timestamp
		s.status.Lag = last.NumPending
		s.advancedLocked()
		s.mu.Unlock()
	}
	return nil
}

// fromOffset returns the lines of a message starting at offset off of a
// shard that holds have bytes here: those past have (the rest are here
// already), or gap true if the message starts past have, or a line
// straddles it (the shard here is not its author's).
func fromOffset(lines [][]byte, off, have int64) (_ [][]byte, gap bool) {
	for len(lines) > 0 && off < have {
		off += int64(len(lines[0])) + 1
		lines = lines[1:]
	}
	if off > have {
		return nil, true
	}
	return lines, false
}

// splitLines splits a message into its lines, without their newlines. A
// last line without one is kept (the admission refuses what is not an
// event).
func splitLines(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			out = append(out, data)
			break
		}
		out = append(out, data[:i])
		data = data[i+1:]
	}
	return out
}

func (s *Syncer) leftToGit(m jetstream.Msg, meta *jetstream.MsgMetadata, why string) {
	if s.opts.Logger != nil {
		s.opts.Logger.Info("natsync: message left to git", "subject", m.Subject(), "seq", meta.Sequence.Stream, "why", why)
	}
}
