package pgtext_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/pgtext"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestProblemAgreesWithPostgres checks each verdict against what Postgres
// does with the string.
func TestProblemAgreesWithPostgres(t *testing.T) {
	pool := testenv.Postgres(t)
	for _, tt := range []struct {
		name, in, want string
	}{
		{"Plain", "Gold plan", ""},
		{"Unicode", "Café ☕ 東京", ""},
		{"Empty", "", ""},
		{"NUL", "a\x00b", "must not contain a NUL byte"},
		{"InvalidUTF8", "a\xffb", "must be valid UTF-8"},
		{"TruncatedRune", "caf\xc3", "must be valid UTF-8"},
		{"Surrogate", "\xed\xa0\x80", "must be valid UTF-8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := pgtext.Problem(tt.in); got != tt.want {
				t.Fatalf("Problem(%q) = %q, want %q", tt.in, got, tt.want)
			}
			var out string
			err := pool.QueryRow(t.Context(), `SELECT $1::text`, tt.in).Scan(&out)
			if (err == nil) != (tt.want == "") {
				t.Errorf("Postgres error %v, but Problem says %q", err, tt.want)
			}
		})
	}
}

func TestNameProblem(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"Gold plan", ""},
		{"Café ☕", ""},
		{"a\x00b", "must not contain a NUL byte"},
		{"\xed\xa0\x80", "must be valid UTF-8"},
		{"Go\ufffdld", "must not contain U+FFFD, the replacement character: a character was lost on the way (an unpaired surrogate?)"},
	} {
		if got := pgtext.NameProblem(tt.in); got != tt.want {
			t.Errorf("NameProblem(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
