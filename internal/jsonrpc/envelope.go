package jsonrpc

import (
	"bytes"
	"unicode/utf8"
)

// envelope is a JSON-RPC message split into its members, each the raw
// bytes of its value (nil when absent), as the client routes it.
type envelope struct {
	id, method, params, result, err []byte
}

// splitEnvelope splits a message that is one valid JSON object into its
// members without decoding them: one pass of validJSON and one light
// pass over the top level, instead of a full decode, which matters on a
// connection that receives many notifications. ok is false for anything
// it does not handle — not an object, a key with escapes, a key other
// than the five of JSON-RPC and "jsonrpc", or one given twice, or a
// method with escapes or bytes that are not UTF-8 — and the caller then
// decodes with encoding/json, whose rules (such as case-insensitive keys)
// stay the ones that apply.
func splitEnvelope(msg []byte) (e envelope, ok bool) {
	if len(msg) == 0 || msg[0] != '{' || !validJSON(msg) {
		return e, false
	}
	i := skipWS(msg, 1)
	if msg[i] == '}' {
		return e, true
	}
	for {
		// A key: valid JSON, so it is a string here.
		i++
		end := bytes.IndexByte(msg[i:], '"')
		key := msg[i : i+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return e, false
		}
		i = skipWS(msg, i+end+1) + 1 // past the colon
		i = skipWS(msg, i)
		j := skipValue(msg, i)
		val := msg[i:j]
		var slot *[]byte
		switch string(key) {
		case "jsonrpc":
		case "id":
			slot = &e.id
		case "method":
			slot = &e.method
		case "params":
			slot = &e.params
		case "result":
			slot = &e.result
		case "error":
			slot = &e.err
		default:
			return e, false
		}
		if slot != nil {
			if *slot != nil {
				return e, false
			}
			*slot = val
		}
		i = skipWS(msg, j)
		if msg[i] == '}' {
			break
		}
		i = skipWS(msg, i+1) // past the comma, at the next key
	}
	if e.method != nil {
		if e.method[0] != '"' || bytes.IndexByte(e.method, '\\') >= 0 || !utf8.Valid(e.method) {
			return e, false
		}
	}
	return e, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value that starts at i in
// b, which must be valid JSON.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) { // a number, true, false or null
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
		i++
	}
	return i
}

// skipString returns the index just past the string that starts at i.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		for i < len(b) && plainInString[b[i]] {
			i++
		}
		switch {
		case i == len(b):
			return i
		case b[i] == '"':
			return i + 1
		case b[i] == '\\':
			i++ // the byte it escapes
		}
	}
	return len(b)
}
