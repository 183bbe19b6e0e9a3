package eventlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// Signatures. A signed line ends in one more member, written after the
// line was encoded and over its exact bytes:
//
//	{"event_id":…,"type":…,"timestamp":…,<payload>,"sig":"<key ID>.<signature>"}
//
// The signature is Ed25519 over SigDomain, the repository's ID, a NUL
// and the line as it was before the member (its bytes from "{" to the
// "}" that the member was put before). A verifier strips the member and
// never encodes anything again, so git, a stream and a rebuild carry a
// signed line verbatim and no canonical JSON is needed. The key ID
// (KeyID) names which key signed, so a verifier can tell a key it does
// not know yet from a signature that does not verify.

// SigDomain begins every signed message, so that a signature over a
// line can mean nothing else.
const SigDomain = "thrum-event-v1"

// sigKey is the member a signature is written as.
const sigKey = `,"sig":"`

// b64 is strict: a value has one encoding, so a signed line has one
// form.
var b64 = base64.RawURLEncoding.Strict()

// keyIDLen and sigLen are the encoded lengths of a key ID (8 bytes of
// the key's SHA-256) and an Ed25519 signature.
var keyIDLen, sigLen = b64.EncodedLen(8), b64.EncodedLen(ed25519.SignatureSize)

// SigMemberLen is how many bytes a signature adds to a line.
var SigMemberLen = len(sigKey) + keyIDLen + 1 + sigLen + 1

// Sig is a line's signature: the ID of the key that made it, and the
// signature.
type Sig struct {
	KeyID string
	Sig   []byte
}

// String is the value of the line's sig member.
func (s Sig) String() string { return s.KeyID + "." + b64.EncodeToString(s.Sig) }

// EncodeKey writes a public key as thrum writes keys (in registrations,
// thrum-keys): unpadded base64url, 43 characters.
func EncodeKey(pub ed25519.PublicKey) string { return b64.EncodeToString(pub) }

// DecodeKey reads a key EncodeKey wrote.
func DecodeKey(s string) (ed25519.PublicKey, error) {
	if len(s) != b64.EncodedLen(ed25519.PublicKeySize) {
		return nil, fmt.Errorf("key %q is not an Ed25519 public key: want %d characters of base64url", cut(s), b64.EncodedLen(ed25519.PublicKeySize))
	}
	b, err := b64.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("key %q is not an Ed25519 public key: %v", cut(s), err)
	}
	return ed25519.PublicKey(b), nil
}

func cut(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// KeyID returns the short ID a line's signature names its key by: 8
// bytes of the key's SHA-256, base64url. It only finds the key; the
// signature is checked with the whole key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return b64.EncodeToString(sum[:8])
}

// MachineID is the ID of the machine whose key is pub: the key itself,
// encoded, so that a machine's ID proves nothing but what its key signs
// and needs no first use to be trusted.
func MachineID(pub ed25519.PublicKey) string { return EncodeKey(pub) }

// MachineKey returns the key of a machine whose ID is its key
// (MachineID); ok is false for an ID from before machines had keys (a
// random ID) or none.
func MachineKey(id string) (ed25519.PublicKey, bool) {
	k, err := DecodeKey(id)
	return k, err == nil
}

// SignedMessage is what a signature of the unsigned line covers, for the
// repository repoID.
func SignedMessage(repoID string, unsigned []byte) []byte {
	m := make([]byte, 0, len(SigDomain)+len(repoID)+1+len(unsigned))
	m = append(m, SigDomain...)
	m = append(m, repoID...)
	m = append(m, 0)
	return append(m, unsigned...)
}

// ErrBadSig is a sig member that is not a signature thrum writes.
var ErrBadSig = errors.New("the line's sig member is not a signature: want \"<key ID>.<signature>\" in base64url as its last member")

// ParseSig reads the signature of a line (without its newline): signed
// is false for a line whose last member is not "sig" (an unsigned
// line), and err is ErrBadSig for a sig member that is malformed.
// unsigned is the line the signature covers, the member stripped (a new
// slice; line is not changed). It never panics on any input.
func ParseSig(line []byte) (s Sig, unsigned []byte, signed bool, err error) {
	i, v, signed := sigMember(line)
	if !signed {
		return Sig{}, nil, false, nil
	}
	unsigned = append(append(make([]byte, 0, i+1), line[:i]...), '}')
	dot := bytes.IndexByte(v, '.')
	if len(v) != keyIDLen+1+sigLen || dot != keyIDLen {
		return Sig{}, unsigned, true, ErrBadSig
	}
	raw, derr := b64.DecodeString(string(v[dot+1:]))
	if derr != nil || len(raw) != ed25519.SignatureSize {
		return Sig{}, unsigned, true, ErrBadSig
	}
	if _, derr := b64.DecodeString(string(v[:dot])); derr != nil {
		return Sig{}, unsigned, true, ErrBadSig
	}
	return Sig{KeyID: string(v[:dot]), Sig: raw}, unsigned, true, nil
}

// sigMember finds a line's final sig member: where it starts, and its
// value.
func sigMember(line []byte) (at int, value []byte, ok bool) {
	if !bytes.HasSuffix(line, []byte(`"}`)) {
		return 0, nil, false
	}
	i := bytes.LastIndex(line, []byte(sigKey))
	if i < 0 || i+len(sigKey) > len(line)-2 {
		return 0, nil, false
	}
	v := line[i+len(sigKey) : len(line)-2]
	if bytes.IndexByte(v, '"') >= 0 {
		return 0, nil, false
	}
	return i, v, true
}

// Signed reports whether a line ends in a sig member, well formed or
// not: what the projection records (it never verifies; admission did).
func Signed(line []byte) bool {
	_, _, ok := sigMember(line)
	return ok
}

// VerifyLine checks a signed line's signature with pub for the
// repository repoID, and that the line names pub as its key.
func VerifyLine(repoID string, s Sig, unsigned []byte, pub ed25519.PublicKey) bool {
	return len(pub) == ed25519.PublicKeySize && s.KeyID == KeyID(pub) && ed25519.Verify(pub, SignedMessage(repoID, unsigned), s.Sig)
}

// withSig returns the unsigned line ended with its signature s: its
// last "}" moved past the sig member.
func withSig(unsigned []byte, s Sig) []byte {
	out := make([]byte, 0, len(unsigned)+SigMemberLen)
	out = append(out, unsigned[:len(unsigned)-1]...)
	out = append(out, sigKey...)
	out = append(out, s.String()...)
	return append(out, '"', '}')
}

// LegacyHash is how a seal (AgentSeal) names an unsigned line: 16 bytes
// of its SHA-256, base64url.
func LegacyHash(line []byte) string {
	sum := sha256.Sum256(line)
	return b64.EncodeToString(sum[:16])
}
