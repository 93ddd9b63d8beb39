package adminapi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/pgtext"
)

// textProblems finds the strings of a JSON document that Postgres could not
// store or that would not be stored as sent: invalid UTF-8 and unpaired
// UTF-16 surrogate escapes such as "\ud800" (both of which encoding/json
// would silently replace with U+FFFD) and NUL bytes (which it would decode
// from \u0000). Each is named by its JSON path, as validation names fields
// ("limits[2].name"). A document that is not valid JSON yields nothing:
// decoding reports that.
func textProblems(raw []byte) []FieldError {
	badAt := -1
	if !utf8.Valid(raw) {
		for i := 0; i < len(raw); {
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n <= 1 {
				badAt = i
				break
			}
			i += n
		}
	}
	type frame struct {
		path      string
		object    bool
		expectKey bool
		key       string
		index     int
	}
	var stack []*frame
	childPath := func() string {
		if len(stack) == 0 {
			return ""
		}
		f := stack[len(stack)-1]
		if f.object {
			if f.path == "" {
				return f.key
			}
			return f.path + "." + f.key
		}
		return f.path + "[" + strconv.Itoa(f.index) + "]"
	}
	// advance moves the enclosing container past one value.
	advance := func() {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1]
		if f.object {
			f.expectKey = true
		} else {
			f.index++
		}
	}
	var out []FieldError
	seen := map[string]bool{}
	report := func(path, msg string) {
		if path == "" {
			path = "body"
		}
		if !seen[path] {
			seen[path] = true
			out = append(out, FieldError{Field: path, Message: msg})
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		end := dec.InputOffset()
		isKey := len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].expectKey
		if s, ok := tok.(string); ok && isKey {
			f := stack[len(stack)-1]
			f.key, f.expectKey = s, false
			if badAt >= int(start) && badAt < int(end) {
				report(childPath(), "is not valid UTF-8")
			} else if loneSurrogate(raw[start:end]) {
				report(childPath(), "(a field name) "+loneSurrogateMessage)
			} else if msg := pgtext.Problem(s); msg != "" {
				report(childPath(), "(a field name) "+msg)
			}
			continue
		}
		path := childPath()
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				stack = append(stack, &frame{path: path, object: v == '{', expectKey: v == '{'})
			default:
				stack = stack[:len(stack)-1]
				advance()
			}
			continue
		case string:
			if badAt >= int(start) && badAt < int(end) {
				report(path, pgtext.Problem("\xff"))
			} else if loneSurrogate(raw[start:end]) {
				report(path, loneSurrogateMessage)
			} else if msg := pgtext.Problem(v); msg != "" {
				report(path, msg)
			}
		}
		advance()
	}
}

const loneSurrogateMessage = "must be valid Unicode: it holds an unpaired UTF-16 surrogate escape (\\ud800 to \\udfff without its other half), which would be stored as U+FFFD"

// loneSurrogate reports whether raw JSON text holds a \uXXXX escape of a
// UTF-16 surrogate that is not half of a high-low pair. Backslashes occur
// only inside JSON strings, so any stretch of a document may be scanned.
func loneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character: a quote, a backslash, 'n'... or 'u'
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r, ok := hex4(raw[i+1:])
		if !ok {
			continue
		}
		i += 4
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		case r >= 0xd800 && r <= 0xdbff:
			if len(raw) >= i+7 && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo, ok := hex4(raw[i+3:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
					i += 6
					continue
				}
			}
			return true
		}
	}
	return false
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}
