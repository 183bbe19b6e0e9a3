package natsync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamOptions configure InitStream. A nil *StreamOptions means all
// defaults.
type StreamOptions struct {
	// Replicas is how many servers of a cluster keep the stream. Default
	// 1 (a single server; three survive the loss of one).
	Replicas int
	// MaxAge is how long the stream keeps a message. Default
	// DefaultMaxAge.
	MaxAge time.Duration
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Name       string
	Subjects   []string
	Created    time.Time
	Replicas   int
	MaxAge     time.Duration
	MaxMsgSize int32
	Messages   uint64
	FirstSeq   uint64
	LastSeq    uint64
}

// InitStream creates the stream a Syncer uses, as its owner runs it once
// (a Syncer never creates, purges or deletes it): limits retention (a
// message stays for MaxAge whoever read it), file storage, the oldest
// discarded first, messages up to the server's max_payload, and neither
// deleting messages nor purging allowed. A stream of that name already
// there is returned as it is, with created false.
func InitStream(ctx context.Context, cfg *Config, opts *StreamOptions) (info *StreamInfo, created bool, err error) {
	if err := cfg.Check(); err != nil {
		return nil, false, err
	}
	var o StreamOptions
	if opts != nil {
		o = *opts
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	nc, js, err := dial(cfg, nats.Timeout(10*time.Second))
	if err != nil {
		return nil, false, err
	}
	defer nc.Close()
	str, err := js.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		str, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        cfg.Stream,
			Description: "thrum's event log, live between clones",
			Subjects:    []string{cfg.Subjects + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    o.Replicas,
			MaxAge:      o.MaxAge,
			Discard:     jetstream.DiscardOld,
			MaxMsgSize:  int32(nc.MaxPayload()),
			DenyDelete:  true,
			DenyPurge:   true,
		})
		created = err == nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("natsync: stream %s: %w", cfg.Stream, err)
	}
	return describe(str.CachedInfo()), created, nil
}

func describe(i *jetstream.StreamInfo) *StreamInfo {
	return &StreamInfo{Name: i.Config.Name, Subjects: i.Config.Subjects, Created: i.Created, Replicas: i.Config.Replicas,
		MaxAge: i.Config.MaxAge, MaxMsgSize: i.Config.MaxMsgSize, Messages: i.State.Msgs, FirstSeq: i.State.FirstSeq, LastSeq: i.State.LastSeq}
}

// dial connects to cfg's server with its credentials, plus opts.
func dial(cfg *Config, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("natsync: connect to %s: %w", cfg.URL, err)
	}
	var js jetstream.JetStream
	if cfg.Domain != "" {
		js, err = jetstream.NewWithDomain(nc, cfg.Domain, jetstream.WithPublishAsyncMaxPending(maxRunsOut))
	} else {
		js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxRunsOut))
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("natsync: %w", err)
	}
	return nc, js, nil
}
