package eventlog

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hpke"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Sealed bodies. With a team key to seal with (Options.TeamKeys), the
// committer writes the content and structured data of every message.create
// and message.edit outside the local shard sealed: the plain fields are
// left empty and the payload gains a member
//
//	"sealed":{"content":"<field>","structured":"<field>"}
//
// each field unpadded base64url of the team key's ID (8 bytes), a random
// nonce (12 bytes) and the AES-256-GCM ciphertext with its tag (16 bytes):
// SealOverhead bytes more than the plaintext before encoding. The AEAD's
// associated data is the event's ID, type and author and the field's
// name, so a field opens only in the event it was sealed for. A line is
// sealed before it is signed: the signature covers the ciphertext.
//
// The log opens sealed fields where it decodes a payload (Scan, and each
// batch before its projections), with the keys it holds then: the log
// stays the truth and a rebuild opens everything a key opens. A field no
// held key opens leaves the payload's Sealed set and its plain fields
// empty; PayloadAs of an opened payload has Sealed nil.

// TeamKeyLen is the length of a team key's secret.
const TeamKeyLen = 32

// SealOverhead is how many bytes a sealed field holds more than its
// plaintext, before base64: the key ID, the nonce and the tag.
const SealOverhead = teamKeyIDLen + nonceLen + tagLen

const (
	teamKeyIDLen = 8
	nonceLen     = 12
	tagLen       = 16
)

// TeamKey is a symmetric key that seals and opens message bodies. Its
// methods may be called concurrently.
type TeamKey struct {
	id   string // b64 of raw
	raw  [teamKeyIDLen]byte
	aead cipher.AEAD
}

// NewTeamKey returns the team key of a 32-byte secret. Its ID is derived
// from the secret, so a key has the same ID on every clone.
func NewTeamKey(secret []byte) (*TeamKey, error) {
	if len(secret) != TeamKeyLen {
		return nil, fmt.Errorf("a team key is %d bytes, not %d", TeamKeyLen, len(secret))
	}
	block, err := aes.NewCipher(secret)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("thrum-team-key-v1\x00"), secret...))
	k := &TeamKey{aead: aead}
	copy(k.raw[:], sum[:teamKeyIDLen])
	k.id = b64.EncodeToString(k.raw[:])
	return k, nil
}

// ID is the key's ID, as sealed fields and people name it.
func (k *TeamKey) ID() string { return k.id }

// TeamKeys are the team keys a log seals and opens with. Its methods
// must be safe to call concurrently: the committer, Scan and the apply
// goroutine call them.
type TeamKeys interface {
	// TeamKey returns the key whose ID is id, or nil if none is held.
	TeamKey(id string) *TeamKey
	// Sealing returns the key new events are sealed with, or nil to
	// write them in clear.
	Sealing() *TeamKey
}

// Sealed holds an event's sealed fields, each named as the plain field
// it stands for.
type Sealed struct {
	Content    string `json:"content,omitempty"`
	Structured string `json:"structured,omitempty"`
}

// KeyID returns the ID of the key a field of s was sealed with (its
// fields are sealed with one key), or "" if none parses.
func (s *Sealed) KeyID() string {
	for _, f := range []string{s.Content, s.Structured} {
		if b, err := b64.DecodeString(f); err == nil && len(b) >= SealOverhead {
			return b64.EncodeToString(b[:teamKeyIDLen])
		}
	}
	return ""
}

// Sealable reports whether an event of this type has fields the log
// seals.
func Sealable(typ string) bool { return typ == TypeMessageCreate || typ == TypeMessageEdit }

// sealedAD is the associated data of an event's field: its ID, type and
// author and the field's name, so a ciphertext opens nowhere else.
func sealedAD(id, typ, author, field string) []byte {
	ad := make([]byte, 0, len(id)+len(typ)+len(author)+len(field)+3)
	ad = append(ad, id...)
	ad = append(ad, 0)
	ad = append(ad, typ...)
	ad = append(ad, 0)
	ad = append(ad, author...)
	ad = append(ad, 0)
	return append(ad, field...)
}

// sealField seals one field's plaintext with k for the event id of
// type typ written by author.
func sealField(k *TeamKey, id, typ, author, field string, plain []byte) string {
	b := make([]byte, teamKeyIDLen+nonceLen, SealOverhead+len(plain))
	copy(b, k.raw[:])
	rand.Read(b[teamKeyIDLen:]) // never fails
	b = k.aead.Seal(b, b[teamKeyIDLen:], plain, sealedAD(id, typ, author, field))
	return b64.EncodeToString(b)
}

// ErrNoTeamKey is openField's error for a field sealed with a key not
// held.
var ErrNoTeamKey = errors.New("sealed with a team key this clone does not hold")

// openField opens a field sealField sealed, with the key it names from
// keys. It fails for a field that does not parse, whose key is not held
// (ErrNoTeamKey), or that was not sealed for this event and field.
func openField(keys TeamKeys, id, typ, author, field, sealed string) ([]byte, error) {
	b, err := b64.DecodeString(sealed)
	if err != nil || len(b) < SealOverhead {
		return nil, fmt.Errorf("sealed %s is not a sealed field: want base64url of a key ID, nonce and ciphertext", field)
	}
	var k *TeamKey
	if keys != nil {
		k = keys.TeamKey(b64.EncodeToString(b[:teamKeyIDLen]))
	}
	if k == nil {
		return nil, ErrNoTeamKey
	}
	plain, err := k.aead.Open(nil, b[teamKeyIDLen:teamKeyIDLen+nonceLen], b[teamKeyIDLen+nonceLen:], sealedAD(id, typ, author, field))
	if err != nil {
		return nil, fmt.Errorf("sealed %s does not open with key %s: it was not sealed for this event", field, k.id)
	}
	return plain, nil
}

// sealPayload returns the payload of e as the committer writes it when
// sealing with k: its body fields sealed into Sealed, the plain ones
// empty. Any other payload is returned as it is.
func sealPayload(e *Event, k *TeamKey) any {
	payload := e.Payload
	switch p := payload.(type) { // a pointer is sealed as its value
	case *MessageCreate:
		payload = *p
	case *MessageEdit:
		payload = *p
	}
	switch p := payload.(type) {
	case MessageCreate:
		p.Sealed = &Sealed{Content: sealField(k, e.ID, e.Type, p.AgentID, "content", []byte(p.Content))}
		if len(p.Structured) > 0 {
			p.Sealed.Structured = sealField(k, e.ID, e.Type, p.AgentID, "structured", p.Structured)
		}
		p.Content, p.Structured = "", nil
		return p
	case MessageEdit:
		s := &Sealed{}
		if p.Content != nil {
			s.Content = sealField(k, e.ID, e.Type, p.AgentID, "content", []byte(*p.Content))
		}
		if len(p.Structured) > 0 {
			s.Structured = sealField(k, e.ID, e.Type, p.AgentID, "structured", p.Structured)
		}
		if *s != (Sealed{}) {
			p.Sealed, p.Content, p.Structured = s, nil, nil
		}
		return p
	}
	return payload
}

// openPayload returns p, a payload decoded from e's line, with its
// sealed fields opened, or p as it is if a field does not open.
func openPayload(e *Event, p any, keys TeamKeys) any {
	switch q := p.(type) {
	case MessageCreate:
		if q.Sealed == nil {
			return p
		}
		content, structured, ok := openBody(e, q.AgentID, q.Sealed, keys)
		if !ok {
			return p
		}
		q.Content, q.Structured, q.Sealed = string(content), structured, nil
		return q
	case MessageEdit:
		if q.Sealed == nil {
			return p
		}
		content, structured, ok := openBody(e, q.AgentID, q.Sealed, keys)
		if !ok {
			return p
		}
		if q.Sealed.Content != "" {
			s := string(content)
			q.Content = &s
		}
		q.Structured, q.Sealed = structured, nil
		return q
	}
	return p
}

// openBody opens s's fields: ok only if every field opens, the content
// is UTF-8 and the structured data a JSON object, as the API takes them.
func openBody(e *Event, author string, s *Sealed, keys TeamKeys) (content []byte, structured json.RawMessage, ok bool) {
	var err error
	if s.Content != "" {
		if content, err = openField(keys, e.ID, e.Type, author, "content", s.Content); err != nil || !utf8.Valid(content) {
			return nil, nil, false
		}
	}
	if s.Structured != "" {
		if structured, err = openField(keys, e.ID, e.Type, author, "structured", s.Structured); err != nil ||
			!json.Valid(structured) || structured[0] != '{' {
			return nil, nil, false
		}
	}
	return content, structured, true
}

// sealed holds a payload's sealed fields to their encoding; with a
// sealed member, the plain body fields must be empty.
func (c *fieldCheck) sealed(s *Sealed, plainEmpty bool) {
	if s == nil {
		return
	}
	c.rule(plainEmpty, "sealed", "", "a sealed body leaves content and structured empty")
	c.rule(s.Content != "" || s.Structured != "", "sealed", "", "seal at least one field")
	var kid string
	for _, f := range []struct{ name, v string }{{"sealed.content", s.Content}, {"sealed.structured", s.Structured}} {
		if f.v == "" {
			continue
		}
		b, err := b64.DecodeString(f.v)
		ok := err == nil && len(b) >= SealOverhead
		c.rule(ok, f.name, f.v, "use base64url of a key ID, a nonce and a ciphertext")
		if ok {
			id := b64.EncodeToString(b[:teamKeyIDLen])
			c.rule(kid == "" || kid == id, f.name, f.v, "seal every field of an event with one key")
			kid = id
		}
	}
}

// Team keys between machines. A machine publishes an X25519 key
// (MachineKEM), signed with its machine key; another machine grants it
// the team keys by sealing them to that key with HPKE (RFC 9180:
// DHKEM(X25519), HKDF-SHA256, AES-256-GCM), in a KeyGrant whose info
// binds the repository and both machines, so a grant opens only for the
// machine it names, in the repository it was made for.

// EncodeKEM writes an X25519 public key as MachineKEM carries it.
func EncodeKEM(pub *ecdh.PublicKey) string { return b64.EncodeToString(pub.Bytes()) }

// DecodeKEM reads a key EncodeKEM wrote.
func DecodeKEM(s string) (*ecdh.PublicKey, error) {
	b, err := b64.DecodeString(s)
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("key %q is not an X25519 public key: want 43 characters of base64url", cut(s))
	}
	return ecdh.X25519().NewPublicKey(b)
}

// grantInfo is the HPKE info of a grant from one machine to another.
func grantInfo(repoID, from, to string) []byte {
	return []byte("thrum-key-grant-v1\x00" + repoID + "\x00" + from + "\x00" + to)
}

// WrapKeys seals keys (the team keys, as keystore writes them) for the
// machine to whose KEM key kem is, in the grant of from to to.
func WrapKeys(kem, repoID, from, to string, keys []byte) (string, error) {
	pub, err := DecodeKEM(kem)
	if err != nil {
		return "", err
	}
	pk, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return "", err
	}
	ct, err := hpke.Seal(pk, hpke.HKDFSHA256(), hpke.AES256GCM(), grantInfo(repoID, from, to), keys)
	if err != nil {
		return "", err
	}
	return b64.EncodeToString(ct), nil
}

// UnwrapKeys opens a grant's Wrapped with the KEM key of the machine it
// was made for.
func UnwrapKeys(priv *ecdh.PrivateKey, repoID string, g KeyGrant) ([]byte, error) {
	ct, err := b64.DecodeString(g.Wrapped)
	if err != nil {
		return nil, errors.New("a grant's keys are not base64url")
	}
	k, err := hpke.NewDHKEMPrivateKey(priv)
	if err != nil {
		return nil, err
	}
	plain, err := hpke.Open(k, hpke.HKDFSHA256(), hpke.AES256GCM(), grantInfo(repoID, g.Machine, g.To), ct)
	if err != nil {
		return nil, fmt.Errorf("the grant of machine %s does not open with this machine's key: it was made for another", g.Machine)
	}
	return plain, nil
}
