package jsonrpc

// validJSON reports whether b is exactly one JSON value, with optional
// whitespace around it: the answer of json.Valid (which FuzzValidJSON
// checks), including its limit of 10000 levels of nesting, but in one
// loop over the bytes instead of a call per byte, since a client checks
// every notification it receives. Like json.Valid it does not check that
// strings are UTF-8.
func validJSON(b []byte) bool {
	var stackBuf [32]byte
	stack := stackBuf[:0] // '{' or '[' per open container
	i := skipWS(b, 0)
value:
	if i >= len(b) {
		return false
	}
	switch c := b[i]; {
	case c == '{':
		if len(stack) == maxJSONDepth {
			return false
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == '}' {
			i++
			break
		}
		stack = append(stack, '{')
		goto key
	case c == '[':
		if len(stack) == maxJSONDepth {
			return false
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == ']' {
			i++
			break
		}
		stack = append(stack, '[')
		goto value
	case c == '"':
		if i = validString(b, i); i < 0 {
			return false
		}
	case c == '-' || '0' <= c && c <= '9':
		if i = validNumber(b, i); i < 0 {
			return false
		}
	case c == 't':
		if i = validLiteral(b, i, "true"); i < 0 {
			return false
		}
	case c == 'f':
		if i = validLiteral(b, i, "false"); i < 0 {
			return false
		}
	case c == 'n':
		if i = validLiteral(b, i, "null"); i < 0 {
			return false
		}
	default:
		return false
	}
	// After a value: the end, a comma, or the end of its container.
	for {
		i = skipWS(b, i)
		if len(stack) == 0 {
			return i == len(b)
		}
		if i >= len(b) {
			return false
		}
		top := stack[len(stack)-1]
		switch {
		case b[i] == ',':
			i = skipWS(b, i+1)
			if top == '{' {
				goto key
			}
			goto value
		case b[i] == '}' && top == '{', b[i] == ']' && top == '[':
			stack = stack[:len(stack)-1]
			i++
		default:
			return false
		}
	}
key: // at a member's key, whitespace skipped
	if i >= len(b) || b[i] != '"' {
		return false
	}
	if i = validString(b, i); i < 0 {
		return false
	}
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return false
	}
	i = skipWS(b, i+1)
	goto value
}

// maxJSONDepth is encoding/json's limit of nesting.
const maxJSONDepth = 10000

// validString returns the index just past the string starting at b[i]
// (a quote), or -1 if it is not a valid one.
func validString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		for i < len(b) && plainInString[b[i]] {
			i++
		}
		if i == len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// plainInString marks the bytes that stand for themselves in a JSON
// string: all but the quote, the backslash and control characters.
var plainInString = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// validNumber returns the index just past the number starting at b[i],
// or -1 if it is not a valid one.
func validNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

func validLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}
