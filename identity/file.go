package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/thrumhq/thrum/internal/private"
)

// FileVersion is the version written into new identity files.
const FileVersion = 1

// maxFileBytes bounds what Decode reads: identity files are tiny, and a
// huge one is a mistake or an attack.
const maxFileBytes = 64 << 10

// File is the content of .thrum/identities/<name>.json. It is written 0600
// because Token is a secret: whoever holds it may act as the agent.
type File struct {
	Version   int    `json:"version"`
	Name      string `json:"name"`
	AgentID   string `json:"agent_id"`
	Role      string `json:"role"`
	Module    string `json:"module"`
	Display   string `json:"display,omitempty"`
	RepoID    string `json:"repo_id,omitempty"`
	Token     string `json:"token,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	UpdatedAt string `json:"updated_at,omitempty"`
}

// Decode parses and checks an identity file's bytes. Unknown fields are
// ignored (newer versions may add some); the fields thrum needs must be
// valid.
func Decode(b []byte) (*File, error) {
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("identity file is %d bytes: at most %d", len(b), maxFileBytes)
	}
	var f File
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("identity file is not valid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("identity file has data after its JSON object")
	}
	if f.Version > FileVersion {
		return nil, fmt.Errorf("identity file version %d is newer than this thrum understands (%d): upgrade thrum", f.Version, FileVersion)
	}
	if err := ValidateRole("role", f.Role); err != nil {
		return nil, fmt.Errorf("identity file: %w", err)
	}
	if err := ValidateRole("module", f.Module); err != nil {
		return nil, fmt.Errorf("identity file: %w", err)
	}
	if f.Name != "" {
		if err := ValidateName(f.Name); err != nil {
			return nil, fmt.Errorf("identity file: %w", err)
		}
	}
	if f.AgentID == "" {
		f.AgentID = AgentID(f.RepoID, f.Role, f.Module, f.Name)
	}
	return &f, nil
}

// Load reads the identity file at path.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Path returns the file of the agent called name in dir.
func Path(dir, name string) string { return filepath.Join(dir, name+".json") }

// Save writes f into dir as <name>.json (or <agent_id>.json for an unnamed
// agent), mode 0600, atomically: a reader sees the old file or the new one.
func Save(dir string, f *File) error {
	if f.Version == 0 {
		f.Version = FileVersion
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	// Write only what Load accepts: a file it rejects would break every
	// Resolve in the directory.
	if _, err := Decode(b); err != nil {
		return err
	}
	key := f.Name
	if key == "" {
		key = f.AgentID
	}
	if err := ValidateRole("identity file name", key); err != nil {
		return err
	}
	if err := private.Dir(dir); err != nil {
		return err
	}
	return private.WriteFile(Path(dir, key), append(b, '\n'))
}

// List returns the identity files in dir, sorted by name. A file that does
// not parse is an error naming it: silently skipping it could select the
// wrong identity.
func List(dir string) ([]*File, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		f, err := Load(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AgentID < out[j].AgentID })
	return out, nil
}

// Source says where a resolved identity came from, in the words of
// agent.whoami.
type Source string

const (
	SourceEnvironment  Source = "environment"   // THRUM_NAME, THRUM_ROLE, THRUM_MODULE
	SourceFlags        Source = "flags"         // --agent-id, --role, --module
	SourceIdentityFile Source = "identity_file" // the one file in the identities directory
)

// Selector names what the caller asked for. Each field is optional; the
// From… fields say whether a value came from the environment (true) or a
// flag (false), which only changes the reported Source.
type Selector struct {
	Name        string // --agent-id / THRUM_NAME
	Role        string // --role / THRUM_ROLE
	Module      string // --module / THRUM_MODULE
	NameFromEnv bool
	RoleFromEnv bool
}

// ErrNoIdentity is returned by Resolve when nothing selects an identity.
// When several identities match, the error also matches ErrAmbiguous.
var ErrNoIdentity = errors.New("no agent identity")

// ErrAmbiguous is returned by Resolve, with ErrNoIdentity, when several
// identities match and none is named: select one by Name.
var ErrAmbiguous = errors.New("several identities match")

// ambiguousError is Resolve's error when several identities match: it is
// ErrNoIdentity (nothing was selected) and ErrAmbiguous (why).
type ambiguousError struct{ msg string }

func (e *ambiguousError) Error() string { return e.msg }

func (e *ambiguousError) Is(target error) bool {
	return target == ErrNoIdentity || target == ErrAmbiguous
}

func ambiguous(format string, args ...any) error {
	return &ambiguousError{msg: ErrNoIdentity.Error() + ": " + fmt.Sprintf(format, args...)}
}

// Resolve finds the identity to act as, in this order: a name (from
// --agent-id or THRUM_NAME) selects its file; else a role (and module)
// selects the one file that matches; else the single file in dir. Anything
// else is an error that says what to set. A file without a token binds
// nothing and is never selected: on the owner's socket a token is not
// asked for, so a file anyone could have committed (an agent ID and no
// token) would otherwise act as that agent and take its messages.
func Resolve(dir string, sel Selector) (*File, Source, error) {
	if sel.Name != "" {
		name := NormalizeAgentID(sel.Name)
		if err := ValidateRole("agent name", name); err != nil {
			return nil, "", err
		}
		f, err := Load(Path(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, "", fmt.Errorf("%w: no identity file for %q in %s", ErrNoIdentity, name, dir)
		}
		if err != nil {
			return nil, "", err
		}
		if f.Token == "" {
			return nil, "", fmt.Errorf("%w: %s has no token, so it binds nothing: register %s again to get one", ErrNoIdentity, Path(dir, name), name)
		}
		return f, pick(sel.NameFromEnv), nil
	}
	all, err := List(dir)
	if err != nil {
		return nil, "", err
	}
	files := slices.DeleteFunc(all, func(f *File) bool { return f.Token == "" })
	if sel.Role != "" {
		var match []*File
		for _, f := range files {
			if f.Role == sel.Role && (sel.Module == "" || f.Module == sel.Module) {
				match = append(match, f)
			}
		}
		switch len(match) {
		case 1:
			return match[0], pick(sel.RoleFromEnv), nil
		case 0:
			return nil, "", fmt.Errorf("%w: no identity with role %q in %s", ErrNoIdentity, sel.Role, dir)
		default:
			return nil, "", ambiguous("%d identities have role %q (%s)", len(match), sel.Role, names(match))
		}
	}
	switch len(files) {
	case 1:
		return files[0], SourceIdentityFile, nil
	case 0:
		return nil, "", fmt.Errorf("%w: no identity file with a token in %s", ErrNoIdentity, dir)
	default:
		return nil, "", ambiguous("%d identities in %s (%s)", len(files), dir, names(files))
	}
}

func pick(fromEnv bool) Source {
	if fromEnv {
		return SourceEnvironment
	}
	return SourceFlags
}

func names(fs []*File) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = f.AgentID
	}
	return strings.Join(s, ", ")
}
