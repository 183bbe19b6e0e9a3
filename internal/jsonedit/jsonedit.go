// Package jsonedit edits JSON configuration files the way a person would:
// it splices in the text of one member or element and leaves every other
// byte alone, so key order, indentation, line endings, comments and keys
// it knows nothing about all survive. It reads plain JSON and, when asked,
// JSONC (// and /* */ comments, trailing commas), the dialect some hosts
// accept in their settings.
//
// A Doc is not safe for concurrent use.
package jsonedit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
)

// Doc is a parsed document and the edits made to it so far.
type Doc struct {
	src    []byte
	jsonc  bool
	clean  []byte   // src with comments and trailing commas blanked to spaces
	commas []int    // offsets of the trailing commas blanked in clean
	blocks [][2]int // where each /* */ comment starts and ends in src
	root   *node
	unit   string // one level of indentation, as the document writes it
	nl     string // the document's line ending
}

type kind byte

const (
	scalar kind = iota
	object
	array
)

// node is one value: its bytes are src[start:end]. An object's members
// are keys[i] (starting at keyStart[i]) with value kids[i]; an array's
// elements are kids.
type node struct {
	kind       kind
	start, end int
	keys       []string
	keyStart   []int
	kids       []*node
}

// SyntaxError says where a document stops being JSON.
type SyntaxError struct {
	Line, Column int
	Msg          string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Parse reads src, which must hold exactly one JSON value; with jsonc,
// comments and trailing commas are allowed too. An empty (or blank)
// document reads as an empty object: a file that does not exist yet is
// made by editing that.
func Parse(src []byte, jsonc bool) (*Doc, error) {
	d := &Doc{src: src, jsonc: jsonc, unit: "  ", nl: "\n"}
	if len(bytes.TrimSpace(src)) == 0 {
		d.src = []byte("{}\n")
	}
	if bytes.Contains(d.src, []byte("\r\n")) {
		d.nl = "\r\n"
	}
	if err := d.parse(); err != nil {
		return nil, err
	}
	if d.root.kind == object && len(d.root.kids) > 0 && !d.sameLine(d.root.start, d.root.keyStart[0]) {
		if in, out := d.indent(d.root.keyStart[0]), d.indent(d.root.start); len(in) > len(out) && strings.HasPrefix(in, out) {
			d.unit = in[len(out):]
		}
	}
	return d, nil
}

// Bytes returns the document as edited.
func (d *Doc) Bytes() []byte { return d.src }

func (d *Doc) parse() error {
	d.clean, d.commas, d.blocks = d.src, nil, nil
	if d.jsonc {
		var err error
		if d.clean, d.commas, d.blocks, err = blank(d.src); err != nil {
			return err
		}
	}
	if !json.Valid(d.clean) {
		// Decode only to say where the text stops being JSON.
		dec := json.NewDecoder(bytes.NewReader(d.clean))
		var v any
		if err := dec.Decode(&v); err != nil {
			return d.syntaxError(err, dec)
		}
		dec.Token()
		return d.errorAt(int(dec.InputOffset())-1, "data after the end of the top-level value")
	}
	// The text is valid: walk it to learn where each value is.
	p := &walker{b: d.clean}
	d.root = p.value()
	return nil
}

func (d *Doc) syntaxError(err error, dec *json.Decoder) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return d.errorAt(int(se.Offset)-1, strings.TrimPrefix(se.Error(), "json: "))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return d.errorAt(len(d.src), "unexpected end of the document")
	}
	return d.errorAt(int(dec.InputOffset()), err.Error())
}

// errorAt reports a problem with the byte at offset off.
func (d *Doc) errorAt(off int, msg string) error {
	off = min(max(off, 0), len(d.src))
	line := bytes.Count(d.src[:off], []byte("\n")) + 1
	col := off - bytes.LastIndexByte(d.src[:off], '\n')
	return &SyntaxError{Line: line, Column: col, Msg: msg}
}

// walker turns a valid document into nodes with offsets. It checks
// nothing: json.Valid did.
type walker struct {
	b []byte
	i int
}

// skip moves past blanks and separators.
func (p *walker) skip() {
	for p.i < len(p.b) && strings.IndexByte(" \t\r\n,:", p.b[p.i]) >= 0 {
		p.i++
	}
}

// str moves past the string that starts at p.i.
func (p *walker) str() {
	for p.i++; p.b[p.i] != '"'; p.i++ {
		if p.b[p.i] == '\\' {
			p.i++
		}
	}
	p.i++
}

func (p *walker) value() *node {
	p.skip()
	n := &node{start: p.i}
	switch p.b[p.i] {
	case '{', '[':
		n.kind = array
		if p.b[p.i] == '{' {
			n.kind = object
		}
		for p.i++; ; {
			p.skip()
			if c := p.b[p.i]; c == '}' || c == ']' {
				break
			}
			if n.kind == object {
				ks := p.i
				p.str()
				k := string(p.b[ks+1 : p.i-1])
				if strings.IndexByte(k, '\\') >= 0 {
					json.Unmarshal(p.b[ks:p.i], &k) // valid, so it decodes
				}
				n.keys, n.keyStart = append(n.keys, k), append(n.keyStart, ks)
			}
			n.kids = append(n.kids, p.value())
		}
		p.i++ // the closing delimiter
	case '"':
		p.str()
	default:
		for p.i < len(p.b) && strings.IndexByte(" \t\r\n,]}", p.b[p.i]) < 0 {
			p.i++
		}
	}
	n.end = p.i
	return n
}

// blank returns src with comments and trailing commas replaced by spaces
// (newlines kept, so offsets and line numbers stay), where the commas
// were, and where each block comment was.
func blank(src []byte) ([]byte, []int, [][2]int, error) {
	b := bytes.Clone(src)
	var blocks [][2]int
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			// To the line's end: \r or \n, as JSONC hosts read it. The \r
			// of a \r\n stays, so that a member added after the comment
			// goes before the whole line ending, not between its bytes.
			for ; i < len(b) && b[i] != '\n' && b[i] != '\r'; i++ {
				b[i] = ' '
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			end := bytes.Index(b[i+2:], []byte("*/"))
			if end < 0 {
				line := bytes.Count(src[:i], []byte("\n")) + 1
				return nil, nil, nil, &SyntaxError{Line: line, Column: i - bytes.LastIndexByte(src[:i], '\n'), Msg: "comment not closed with */"}
			}
			for j := i; j < i+2+end+2; j++ {
				if b[j] != '\n' && b[j] != '\r' {
					b[j] = ' '
				}
			}
			blocks = append(blocks, [2]int{i, i + 2 + end + 2})
			i += 2 + end + 1
		}
	}
	var commas []int
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case ',':
			j := i + 1
			for j < len(b) && strings.IndexByte(" \t\r\n", b[j]) >= 0 {
				j++
			}
			if j < len(b) && (b[j] == '}' || b[j] == ']') {
				b[i] = ' '
				commas = append(commas, i)
			}
		}
	}
	return b, commas, blocks, nil
}

// Get returns the value at path — object keys as strings, array indexes
// as ints — decoded as encoding/json would into an any (numbers as
// json.Number), and whether it is there. Where an object repeats a key,
// the last one counts, as in the JavaScript hosts that read these files.
func (d *Doc) Get(path ...any) (any, bool) {
	n, rest := d.find(path)
	if n == nil || len(rest) > 0 {
		return nil, false
	}
	return d.decode(n), true
}

func (d *Doc) decode(n *node) any {
	dec := json.NewDecoder(bytes.NewReader(d.clean[n.start:n.end]))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic("jsonedit: a parsed value does not decode: " + err.Error())
	}
	return v
}

// find walks path as far as it exists: it returns the last node reached
// and the steps of path not taken (nil when n is the value at path). n is
// nil when a step does not fit the value it applies to.
func (d *Doc) find(path []any) (n *node, rest []any) {
	n = d.root
	for i, step := range path {
		switch s := step.(type) {
		case string:
			if n.kind != object {
				return nil, nil
			}
			j := len(n.keys) - 1
			for j >= 0 && n.keys[j] != s {
				j--
			}
			if j < 0 {
				return n, path[i:]
			}
			n = n.kids[j]
		case int:
			if n.kind != array || s < 0 || s >= len(n.kids) {
				return nil, nil
			}
			n = n.kids[s]
		default:
			return nil, nil
		}
	}
	return n, nil
}

// Set makes the value at path equal v (anything json.Marshal takes),
// adding the member and any objects missing on the way, or replacing the
// value there. It reports whether the document changed: not when the value
// there already equals v. Steps of path that must be added must be keys.
func (d *Doc) Set(v any, path ...any) (bool, error) {
	raw, want, err := encode(v)
	if err != nil {
		return false, err
	}
	n, rest := d.find(path)
	switch {
	case n == nil:
		return false, d.pathError(path)
	case len(rest) == 0:
		if reflect.DeepEqual(d.decode(n), want) {
			return false, nil
		}
		// In the old value's layout: on one line if it was.
		oneLine := !bytes.ContainsAny(d.src[n.start:n.end], "\n")
		if err := d.splice(n.start, n.end, d.render(raw, d.indent(n.start), oneLine)); err != nil {
			return false, err
		}
		return true, nil
	case n.kind != object:
		return false, d.pathError(path)
	}
	for i := len(rest) - 1; i > 0; i-- {
		k, ok := rest[i].(string)
		if !ok {
			return false, d.pathError(path)
		}
		raw = append(append([]byte("{"+quote(k)+":"), raw...), '}')
	}
	if err := d.add(n, rest[0].(string), raw); err != nil {
		return false, err
	}
	return true, nil
}

// Append adds v as the last element of the array at path, creating the
// array (and objects on the way) when it is missing.
func (d *Doc) Append(v any, path ...any) error {
	raw, _, err := encode(v)
	if err != nil {
		return err
	}
	n, rest := d.find(path)
	if n != nil && len(rest) == 0 && n.kind == array {
		return d.add(n, "", raw)
	}
	if n == nil || len(rest) == 0 {
		return d.pathError(path)
	}
	_, err = d.Set([]json.RawMessage{raw}, path...)
	return err
}

func (d *Doc) pathError(path []any) error {
	s := make([]string, len(path))
	for i, p := range path {
		s[i] = fmt.Sprint(p)
	}
	return fmt.Errorf("%s is not where an object or array was expected", strings.Join(s, "."))
}

// add inserts key: raw into the object n (or raw into the array n, with
// key ""), after its last member, in the container's own layout.
func (d *Doc) add(n *node, key string, raw []byte) error {
	prefix := ""
	if n.kind == object {
		prefix = quote(key) + ": "
	}
	if len(n.kids) == 0 {
		outer := d.indent(n.start)
		inner := outer + d.unit
		text := d.nl + inner + prefix + d.render(raw, inner, false)
		if len(bytes.TrimSpace(d.src[n.start+1:n.end-1])) == 0 {
			return d.splice(n.start+1, n.end-1, text+d.nl+outer)
		}
		return d.splice(n.start+1, n.start+1, text) // keep the comments inside
	}
	first := n.kids[0].start
	if n.kind == object {
		first = n.keyStart[0]
	}
	last := n.kids[len(n.kids)-1]
	if d.sameLine(n.start, first) {
		// Written on one line: stay on it.
		return d.splice(last.end, last.end, ", "+prefix+d.render(raw, "", true))
	}
	lastStart := last.start
	if n.kind == object {
		lastStart = n.keyStart[len(n.keyStart)-1]
	}
	inner := d.indent(lastStart)
	member := d.nl + inner + prefix + d.render(raw, inner, false)
	// After a trailing comma (JSONC) if there is one, adding no comma.
	pos, comma := last.end, ","
	for i := pos; i < len(d.clean) && strings.IndexByte(" \t\r\n", d.clean[i]) >= 0; i++ {
		if slices.Contains(d.commas, i) {
			pos, comma = i+1, ""
			break
		}
	}
	// A comment ending the line stays with the member it follows.
	eol := pos
	for eol < len(d.clean) && (d.clean[eol] == ' ' || d.clean[eol] == '\t') {
		eol++
	}
	if eol < len(d.clean) && (d.clean[eol] == '\n' || d.clean[eol] == '\r') && !d.inBlock(eol) {
		for eol > pos && d.clean[eol-1] == d.src[eol-1] {
			eol-- // before blanks that are not a comment's
		}
	} else {
		eol = pos // the line goes on, or a block comment does: add before it
	}
	return d.replace(edit{eol, eol, member}, edit{pos, pos, comma})
}

// inBlock reports whether offset i is inside a /* */ comment.
func (d *Doc) inBlock(i int) bool {
	return slices.ContainsFunc(d.blocks, func(b [2]int) bool { return b[0] < i && i < b[1] })
}

// edit replaces src[i:j] with text.
type edit struct {
	i, j int
	text string
}

func (d *Doc) splice(i, j int, text string) error { return d.replace(edit{i, j, text}) }

// replace makes edits, which must not overlap and come last first, and
// parses the result again.
func (d *Doc) replace(edits ...edit) error {
	old := d.src
	for _, e := range edits {
		d.src = slices.Concat(d.src[:e.i], []byte(e.text), d.src[e.j:])
	}
	if err := d.parse(); err != nil {
		d.src = old
		if perr := d.parse(); perr != nil {
			panic("jsonedit: the document no longer parses: " + perr.Error())
		}
		return fmt.Errorf("jsonedit: an edit made the document invalid (%v): please report it", err)
	}
	return nil
}

// render lays out raw (compact JSON) for a place whose line is indented
// by indent: on one line, or with one member per line in the document's
// unit and line ending.
func (d *Doc) render(raw []byte, indent string, oneLine bool) string {
	var b bytes.Buffer
	unit := d.unit
	if oneLine {
		indent, unit = "", ""
	}
	if err := json.Indent(&b, raw, indent, unit); err != nil {
		panic("jsonedit: rendering a value it encoded: " + err.Error())
	}
	if oneLine { // { "a": [ 1, 2 ] }: a string holds no raw newline
		return strings.ReplaceAll(b.String(), "\n", " ")
	}
	return strings.ReplaceAll(b.String(), "\n", d.nl)
}

// indent is the leading white space of the line that holds offset i.
func (d *Doc) indent(i int) string {
	start := bytes.LastIndexByte(d.src[:i], '\n') + 1
	end := start
	for end < len(d.src) && (d.src[end] == ' ' || d.src[end] == '\t') {
		end++
	}
	return string(d.src[start:end])
}

func (d *Doc) sameLine(i, j int) bool { return !bytes.ContainsAny(d.src[i:j], "\n") }

// encode marshals v without HTML escaping, and decodes it back the way
// Get decodes, for comparing.
func encode(v any) (json.RawMessage, any, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, nil, err
	}
	raw := bytes.TrimSpace(b.Bytes())
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var back any
	if err := dec.Decode(&back); err != nil {
		return nil, nil, err
	}
	return raw, back, nil
}

func quote(s string) string {
	raw, _, _ := encode(s)
	return string(raw)
}
