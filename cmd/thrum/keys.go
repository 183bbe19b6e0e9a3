package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"filippo.io/age"

	"github.com/thrumhq/thrum/internal/private"
	"github.com/thrumhq/thrum/rpc"
)

// The team keys that seal message bodies. This file is age's one home:
// the file thrum key export writes for a person to carry is age-encrypted,
// to a passphrase or to age recipients.

// KeyCmd groups the team key commands.
type KeyCmd struct {
	Status KeyStatusCmd `cmd:"" help:"Show the team keys this clone holds and the messages that wait for one."`
	Rotate KeyRotateCmd `cmd:"" help:"Make a new team key that seals from now on; the old ones still open."`
	Export KeyExportCmd `cmd:"" help:"Write the team keys to an age-encrypted file for another clone."`
	Import KeyImportCmd `cmd:"" help:"Take the team keys from a file thrum key export wrote."`
	Grant  KeyGrantCmd  `cmd:"" help:"Give the team keys to another machine through sync, wrapped to its key."`
	Accept KeyAcceptCmd `cmd:"" help:"Take the team keys another machine granted this one."`
}

// SyncEncryptCmd turns sealing on.
type SyncEncryptCmd struct{}

func (c *SyncEncryptCmd) Help() string {
	return `From now on the content and structured data of every message and edit
this clone sends leave it sealed with a team key (AES-256-GCM): the git
remote and a NATS server hold ciphertext. Envelopes stay clear (who, to
whom, when), and so does everything pushed before. Clones without the key
show "encrypted message from NAME" and deliver nothing until the key is
imported: carry it with thrum key export and thrum key import, and keep
a backup (a lost key loses those bodies for good).

Examples:
  thrum sync encrypt
  thrum key export team.age --passphrase-file ~/.thrum-pass`
}

func (c *SyncEncryptCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.NewKey(ctx, &rpc.KeyNewParams{})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.KeyNewResult)
		if r.Made == "" {
			fmt.Fprintf(w, "> Bodies are already sealed, with team key %s.\n", r.Sealing)
			return
		}
		fmt.Fprintf(w, "> Message bodies leave this clone sealed from now on (team key %s).\n", r.Made)
		fmt.Fprintln(w, "  What was pushed before stays in clear in the remote's history (see docs/security.md).")
		fmt.Fprintln(w, "  Give the key to the team's other clones: thrum key export FILE, then thrum key import FILE there.")
		fmt.Fprintln(w, "  Keep a backup of that file: a lost key loses the bodies it sealed for good.")
	})
}

type KeyStatusCmd struct{}

func (c *KeyStatusCmd) Help() string {
	return `Shows whether this clone seals, the team keys it holds, the messages that
wait for a key it does not hold, grants waiting for this machine, and this
machine's ID (what thrum key grant needs on another machine).

Examples:
  thrum key status
  thrum key status --json`
}

func (c *KeyStatusCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.KeyStatus(ctx, &rpc.KeyStatusParams{})
	}, func(w io.Writer, v any) { printKeyStatus(w, v.(*rpc.KeyStatus)) })
}

func printKeyStatus(w io.Writer, st *rpc.KeyStatus) {
	if st.Sealing == "" {
		fmt.Fprintln(w, "Sealing: off (bodies leave this clone in clear)")
	} else {
		fmt.Fprintf(w, "Sealing: on, with team key %s\n", st.Sealing)
	}
	for _, k := range st.Keys {
		fmt.Fprintf(w, "  Key %s (made %s)\n", k.ID, k.Made)
	}
	if st.Waiting > 0 {
		fmt.Fprintf(w, "%d %s for the team key:", st.Waiting, plural(st.Waiting, "message waits", "messages wait"))
		for _, k := range st.WaitingFor {
			fmt.Fprintf(w, " %d for key %s;", k.Messages, k.Key)
		}
		fmt.Fprintln(w, " import it with thrum key import FILE, or have a holder run thrum key grant with this machine's ID.")
	}
	for _, o := range st.Grants {
		fmt.Fprintf(w, "Machine %s granted %d new %s (%s) at %s: thrum key accept takes them.\n", o.From, len(o.Keys), plural(len(o.Keys), "key", "keys"), strings.Join(o.Keys, ", "), o.At)
	}
	if st.Machine != "" {
		fmt.Fprintf(w, "This machine: %s\n", st.Machine)
	}
}

type KeyGrantCmd struct {
	To string `arg:"" help:"The machine (its ID, as thrum key status shows it there) or an agent registered on it."`
}

func (c *KeyGrantCmd) Help() string {
	return `Wraps every team key this clone holds to the key the other machine
published (X25519, HPKE) and syncs that grant; its owner takes the keys
with thrum key accept. Check the machine's ID with its owner first:
whoever can push to the remote can register an agent on a machine of
their own.

Examples:
  thrum key grant bob
  thrum key grant 51W03lntq3S58uvrD1UxqfQqetO4o3EnhxcF0D1ikjw`
}

func (c *KeyGrantCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.GrantKeys(ctx, &rpc.KeyGrantParams{To: c.To})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.KeyGrantResult)
		fmt.Fprintf(w, "> Granted %d team %s to machine %s; it reads them once this syncs, and takes them with thrum key accept.\n", r.Keys, plural(r.Keys, "key", "keys"), r.To)
	})
}

type KeyAcceptCmd struct {
	From string `arg:"" optional:"" help:"The machine whose grant to take; needed when grants from several wait."`
}

func (c *KeyAcceptCmd) Help() string {
	return `Takes the team keys another machine granted this one (thrum key status
lists them), then seals with the newest and opens the messages that
waited. Take only a grant you expect: a key someone else made would let
them read what this clone seals with it.

Examples:
  thrum key status
  thrum key accept`
}

func (c *KeyAcceptCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.AcceptKeys(ctx, &rpc.KeyAcceptParams{From: c.From})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.KeyImportResult)
		fmt.Fprintf(w, "> Took %d new team %s; %d %s opened, queued for delivery.\n", len(r.Added), plural(len(r.Added), "key", "keys"), r.Reopened, plural(r.Reopened, "message", "messages"))
		printKeyStatus(w, &r.KeyStatus)
	})
}

type KeyRotateCmd struct{}

func (c *KeyRotateCmd) Help() string {
	return `Makes a new team key, which seals from now on; the older keys stay and
still open what they sealed. Carry the keys to the other clones again.

Examples:
  thrum key rotate
  thrum key export team.age --passphrase-file ~/.thrum-pass`
}

func (c *KeyRotateCmd) Run(ctx context.Context, g *Globals) error {
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.NewKey(ctx, &rpc.KeyNewParams{Rotate: true})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.KeyNewResult)
		fmt.Fprintf(w, "> Team key %s seals from now on; the %d older %s still open what they sealed.\n", r.Made, len(r.Keys)-1, plural(len(r.Keys)-1, "key", "keys"))
		fmt.Fprintln(w, "  Export the keys again and import them on the other clones; keep a backup.")
	})
}

// keyFile is what an exported file holds once opened.
type keyFile struct {
	Thrum string           `json:"thrum"` // "team-keys"
	Keys  []rpc.TeamSecret `json:"keys"`
}

type KeyExportCmd struct {
	File           string   `arg:"" help:"The file to write (refused if it exists)."`
	To             []string `help:"Encrypt to this age recipient (age1…) instead of a passphrase; repeatable." placeholder:"RECIPIENT"`
	PassphraseFile string   `help:"Read the passphrase from this file ('-': standard input)." placeholder:"PATH"`
}

func (c *KeyExportCmd) Help() string {
	return `Writes every team key this clone holds, encrypted with age to a
passphrase (--passphrase-file) or to age recipients (--to), for a person
to carry to another clone: thrum key import FILE there. Whoever opens the
file reads every sealed body. Keep a copy somewhere safe: a lost key
loses the bodies it sealed for good.

Examples:
  thrum key export team.age --passphrase-file ~/.thrum-pass
  thrum key export team.age --to age1… --to age1…`
}

func (c *KeyExportCmd) Run(ctx context.Context, g *Globals) error {
	recipients, err := c.recipients()
	if err != nil {
		return err
	}
	return call(ctx, g, false, func(s *session) (any, error) {
		x, err := s.c.ExportKeys(ctx, &rpc.KeyExportParams{})
		if err != nil {
			return nil, err
		}
		plain, err := json.Marshal(keyFile{Thrum: "team-keys", Keys: x.Keys})
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		enc, err := age.Encrypt(&buf, recipients...)
		if err == nil {
			_, err = enc.Write(plain)
		}
		if err == nil {
			err = enc.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("encrypt the key file: %w", err)
		}
		f, err := private.OpenFile(c.File, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
		if err != nil {
			return nil, fmt.Errorf("write %s: %w (choose a new file name)", c.File, err)
		}
		_, err = f.Write(buf.Bytes())
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(c.File)
			return nil, fmt.Errorf("write %s: %w", c.File, err)
		}
		return map[string]any{"file": c.File, "keys": len(x.Keys)}, nil
	}, func(w io.Writer, v any) {
		r := v.(map[string]any)
		fmt.Fprintf(w, "> Wrote %d team %s to %s (age-encrypted).\n", r["keys"], plural(r["keys"].(int), "key", "keys"), c.File)
		fmt.Fprintln(w, "  On another clone: thrum key import "+c.File)
		fmt.Fprintln(w, "  Keep a backup of it somewhere safe: a lost key loses the bodies it sealed for good.")
	})
}

func (c *KeyExportCmd) recipients() ([]age.Recipient, error) {
	switch {
	case len(c.To) > 0 && c.PassphraseFile != "":
		return nil, errors.New("use either --to or --passphrase-file, not both")
	case len(c.To) > 0:
		rs, err := age.ParseRecipients(strings.NewReader(strings.Join(c.To, "\n")))
		if err != nil {
			return nil, fmt.Errorf("--to: %w", err)
		}
		return rs, nil
	case c.PassphraseFile != "":
		pass, err := readPassphrase(c.PassphraseFile)
		if err != nil {
			return nil, err
		}
		r, err := age.NewScryptRecipient(pass)
		if err != nil {
			return nil, err
		}
		return []age.Recipient{r}, nil
	}
	return nil, errors.New("say how to encrypt the file: --passphrase-file PATH (or - for standard input), or --to an age recipient")
}

type KeyImportCmd struct {
	File           string `arg:"" help:"A file thrum key export wrote."`
	Identity       string `help:"An age identity file that opens it (when it was exported --to)." placeholder:"PATH"`
	PassphraseFile string `help:"Read the passphrase from this file ('-': standard input)." placeholder:"PATH"`
}

func (c *KeyImportCmd) Help() string {
	return `Adds the team keys in FILE to this clone's, which then seals with the
newest, and opens the messages that waited for them: they reach their
recipients as if they had just arrived, once.

Examples:
  thrum key import team.age --passphrase-file ~/.thrum-pass
  thrum key import team.age --identity ~/.age/key.txt`
}

func (c *KeyImportCmd) Run(ctx context.Context, g *Globals) error {
	var ids []age.Identity
	switch {
	case c.Identity != "" && c.PassphraseFile != "":
		return errors.New("use either --identity or --passphrase-file, not both")
	case c.Identity != "":
		f, err := os.Open(c.Identity)
		if err != nil {
			return err
		}
		ids, err = age.ParseIdentities(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("--identity: %w", err)
		}
	case c.PassphraseFile != "":
		pass, err := readPassphrase(c.PassphraseFile)
		if err != nil {
			return err
		}
		id, err := age.NewScryptIdentity(pass)
		if err != nil {
			return err
		}
		ids = []age.Identity{id}
	default:
		return errors.New("say how to open the file: --passphrase-file PATH (or - for standard input), or --identity an age identity file")
	}
	raw, err := os.ReadFile(c.File)
	if err != nil {
		return err
	}
	r, err := age.Decrypt(bytes.NewReader(raw), ids...)
	if err != nil {
		return fmt.Errorf("open %s: %w (is it the file thrum key export wrote, and the right passphrase or identity?)", c.File, err)
	}
	plain, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return fmt.Errorf("open %s: %w", c.File, err)
	}
	var kf keyFile
	if err := json.Unmarshal(plain, &kf); err != nil || kf.Thrum != "team-keys" {
		return fmt.Errorf("%s holds no team keys", c.File)
	}
	return call(ctx, g, false, func(s *session) (any, error) {
		return s.c.ImportKeys(ctx, &rpc.KeyImportParams{Keys: kf.Keys})
	}, func(w io.Writer, v any) {
		r := v.(*rpc.KeyImportResult)
		fmt.Fprintf(w, "> Imported %d new team %s; %d %s opened, queued for delivery.\n", len(r.Added), plural(len(r.Added), "key", "keys"), r.Reopened, plural(r.Reopened, "message", "messages"))
		printKeyStatus(w, &r.KeyStatus)
	})
}

// readPassphrase reads a passphrase, its first line, from path ("-":
// the command's standard input).
func readPassphrase(path string) (string, error) {
	var r io.Reader
	if path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return "", err
	}
	pass, _, _ := strings.Cut(string(b), "\n")
	pass = strings.TrimRight(pass, "\r")
	if pass == "" {
		return "", errors.New("the passphrase is empty")
	}
	return pass, nil
}
