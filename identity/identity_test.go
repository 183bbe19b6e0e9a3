package identity

import (
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string // substring; "" for valid
	}{
		{"simple", "alice", ""},
		{"digits and underscore", "agent_007", ""},
		{"single char", "a", ""},
		{"leading digit", "9lives", ""},
		{"leading underscore", "_x", ""},
		{"max length", strings.Repeat("a", MaxNameLen), ""},
		{"reserved as prefix is fine", "daemon_1", ""},
		{"empty", "", "required"},
		{"too long", strings.Repeat("a", MaxNameLen+1), "too long"},
		{"uppercase", "Alice", "use a-z, 0-9 and _"},
		{"dash", "a-b", "use a-z, 0-9 and _"},
		{"dot", "a.b", "use a-z, 0-9 and _"},
		{"space", "a b", "use a-z, 0-9 and _"},
		{"slash", "a/b", "use a-z, 0-9 and _"},
		{"at sign", "@alice", "use a-z, 0-9 and _"},
		{"non-ascii", "zoë", "use a-z, 0-9 and _"},
		{"reserved uppercase is invalid not reserved", "DAEMON", "use a-z, 0-9 and _"},
	}
	for _, r := range Reserved {
		tests = append(tests, struct {
			name    string
			in      string
			wantErr string
		}{"reserved " + r, r, "reserved"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.in)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want nil", tt.in, err)
				}
				if !IsValidName(tt.in) {
					t.Fatalf("IsValidName(%q) = false", tt.in)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateName(%q) = %v, want an error containing %q", tt.in, err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), "agent name") {
				t.Fatalf("error %q does not say it is about the agent name", err)
			}
			if IsValidName(tt.in) {
				t.Fatalf("IsValidName(%q) = true", tt.in)
			}
		})
	}
	if len(Reserved) != 5 {
		t.Errorf("Reserved = %v: update this test", Reserved)
	}
}

func TestValidateRole(t *testing.T) {
	tests := []struct {
		name    string
		what    string
		in      string
		wantErr string
	}{
		{"role", "role", "reviewer", ""},
		{"module", "module", "core_api", ""},
		{"reserved names are fine as roles", "role", "system", ""},
		{"max length", "role", strings.Repeat("r", MaxNameLen), ""},
		{"empty role", "role", "", "role is required"},
		{"empty module", "module", "", "module is required"},
		{"too long", "module", strings.Repeat("m", MaxNameLen+1), "module"},
		{"uppercase", "role", "Reviewer", `role "Reviewer" is invalid`},
		{"dash", "module", "core-api", `module "core-api" is invalid`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateRole(tt.what, tt.in)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateRole(%q, %q) = %v", tt.what, tt.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateRole(%q, %q) = %v, want an error containing %q", tt.what, tt.in, err, tt.wantErr)
			}
		})
	}
}

func TestAgentID(t *testing.T) {
	unnamed := regexp.MustCompile(`^([a-z0-9_]+)_([a-z2-7]{10})$`)
	base := AgentID("repo1", "reviewer", "core", "")

	t.Run("named agent's ID is its name", func(t *testing.T) {
		for _, repo := range []string{"", "repo1"} {
			if got := AgentID(repo, "reviewer", "core", "alice"); got != "alice" {
				t.Fatalf("AgentID(%q, reviewer, core, alice) = %q, want alice", repo, got)
			}
		}
	})

	t.Run("unnamed agent's ID", func(t *testing.T) {
		m := unnamed.FindStringSubmatch(base)
		if m == nil || m[1] != "reviewer" {
			t.Fatalf("AgentID = %q, want reviewer_ followed by 10 lowercase base32 chars", base)
		}
		if err := ValidateName(base); err != nil {
			t.Fatalf("unnamed AgentID %q is not a valid name: %v", base, err)
		}
		if again := AgentID("repo1", "reviewer", "core", ""); again != base {
			t.Fatalf("AgentID not deterministic: %q then %q", base, again)
		}
		// Pinned so that a change of derivation, which would orphan every
		// unnamed agent's identity file, cannot go unnoticed.
		if want := AgentID("", "r", "m", ""); want != "r_"+pinnedRM {
			t.Fatalf(`AgentID("", "r", "m", "") = %q, want %q`, want, "r_"+pinnedRM)
		}
	})

	differs := []struct {
		name, repo, role, module string
	}{
		{"other repo", "repo2", "reviewer", "core"},
		{"no repo", "", "reviewer", "core"},
		{"other role", "repo1", "planner", "core"},
		{"other module", "repo1", "reviewer", "ui"},
		{"fields shifted", "repo1|reviewer", "core", ""},
	}
	for _, d := range differs {
		t.Run("differs by "+d.name, func(t *testing.T) {
			got := AgentID(d.repo, d.role, d.module, "")
			if got == base {
				t.Fatalf("AgentID(%q, %q, %q) = %q, same as for repo1/reviewer/core", d.repo, d.role, d.module, got)
			}
			if m := unnamed.FindStringSubmatch(got); m == nil || m[1] != d.role {
				t.Fatalf("AgentID = %q, want %s_ followed by 10 base32 chars", got, d.role)
			}
		})
	}
}

// pinnedRM is the hash part of AgentID("", "r", "m", ""): the first 10
// base32 characters of sha256("|r|m"), lower-cased.
const pinnedRM = "ezmmhzdaun"

func TestNormalizeAgentID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"alice", "alice"},
		{"@alice", "alice"},
		{"  @alice\n", "alice"},
		{"@@alice", "@alice"},
		{"agent:reviewer:ABC123", "reviewer_abc123"},
		{"agent:r:m:XYZ", "r_xyz"},
		{"@agent:planner:Hash", "planner_hash"},
		{"agent:a:b:c:D", "a_d"},
		{"reviewer_abc123", "reviewer_abc123"},
		{"Alice", "Alice"},
		{"agent:", "agent:"},
		{"agent:reviewer", "agent:reviewer"},
		{"agent::ABC", "agent::ABC"},
		{"agent:reviewer:", "agent:reviewer:"},
		{"user:alice", "user:alice"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := NormalizeAgentID(tt.in); got != tt.want {
				t.Fatalf("NormalizeAgentID(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseLegacyID(t *testing.T) {
	tests := []struct {
		in         string
		role, hash string
		ok         bool
	}{
		{"agent:reviewer:ABC123", "reviewer", "ABC123", true},
		{"agent:r:m:XYZ", "r", "XYZ", true},
		{"agent:r::XYZ", "r", "XYZ", true},
		{"agent:r:m:", "", "", false},
		{"agent::XYZ", "", "", false},
		{"agent:r", "", "", false},
		{"agent:", "", "", false},
		{"agents:r:X", "", "", false},
		{"Agent:r:X", "", "", false},
		{"@agent:r:X", "", "", false},
		{"alice", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			role, hash, ok := ParseLegacyID(tt.in)
			if role != tt.role || hash != tt.hash || ok != tt.ok {
				t.Fatalf("ParseLegacyID(%q) = %q, %q, %v; want %q, %q, %v", tt.in, role, hash, ok, tt.role, tt.hash, tt.ok)
			}
		})
	}
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := NewToken()
		if len(tok) != 64 {
			t.Fatalf("NewToken() = %q: length %d, want 64", tok, len(tok))
		}
		if b, err := hex.DecodeString(tok); err != nil || len(b) != 32 {
			t.Fatalf("NewToken() = %q: not 32 hex-encoded bytes (%v)", tok, err)
		}
		if tok != strings.ToLower(tok) {
			t.Fatalf("NewToken() = %q: not lowercase hex", tok)
		}
		if seen[tok] {
			t.Fatalf("NewToken() repeated %q", tok)
		}
		seen[tok] = true
	}
}

func TestHashToken(t *testing.T) {
	tests := []struct{ token, want string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			if got := HashToken(tt.token); got != tt.want {
				t.Fatalf("HashToken(%q) = %q, want %q", tt.token, got, tt.want)
			}
		})
	}
	tok := NewToken()
	// A copy of the token in fresh memory must hash the same: the hash
	// depends on the token's bytes only.
	if first, again := HashToken(tok), HashToken(string([]byte(tok))); first != again {
		t.Errorf("HashToken is not deterministic: %q then %q", first, again)
	}
	if HashToken(tok) == tok || HashToken(tok) == HashToken(NewToken()) {
		t.Error("HashToken does not hide or distinguish tokens")
	}
}
