// Package pgtext says whether a string can be stored in a Postgres text
// column. Postgres refuses NUL bytes and invalid UTF-8 with an error that
// would otherwise surface as a 500; callers check inputs with Problem
// before any query and answer 4xx naming the field.
package pgtext

import (
	"strings"
	"unicode/utf8"
)

// Problem returns what is wrong with s as stored text ("must not contain a
// NUL byte", "must be valid UTF-8"), or "" when Postgres accepts it.
func Problem(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "must not contain a NUL byte"
	}
	return ""
}

// NameProblem is Problem for a name (of a plan, key, service, token...),
// which also refuses U+FFFD, the replacement character: a decoder puts it
// where a character was lost (a lone UTF-16 surrogate, which browsers and
// JSON decoders replace, or bytes in another encoding), and a name that
// silently lost a character is a name nobody typed.
func NameProblem(s string) string {
	if msg := Problem(s); msg != "" {
		return msg
	}
	if strings.ContainsRune(s, utf8.RuneError) {
		return "must not contain U+FFFD, the replacement character: a character was lost on the way (an unpaired surrogate?)"
	}
	return ""
}
