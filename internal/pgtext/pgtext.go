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
