package apikeys_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/apikeys"
)

func isBase62(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// FuzzCheck parses arbitrary presented keys: Check never panics, accepts
// only the documented shape, and its checksum catches any one changed
// character of a key it accepts.
func FuzzCheck(f *testing.F) {
	for range 3 {
		s, err := apikeys.Generate()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s)
	}
	for _, s := range []string{"", "sk_live_", "sk_test_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "sk_live_" + strings.Repeat("a", 200), "sk_live_\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if apikeys.Check(s) != nil {
			return
		}
		if len(s) < apikeys.SecretLen || len(s) > apikeys.MaxSecretLen || !strings.HasPrefix(s, apikeys.SecretPrefix) {
			t.Fatalf("Check accepted %q of length %d", s, len(s))
		}
		for i := len(apikeys.SecretPrefix); i < len(s); i++ {
			if !isBase62(s[i]) {
				t.Fatalf("Check accepted %q with %q at %d", s, s[i], i)
			}
		}
		if p := apikeys.PrefixOf(s); !strings.HasPrefix(s, p) || len(p) != apikeys.PrefixLen {
			t.Fatalf("PrefixOf(%q) = %q", s, p)
		}
		// CRC-32 detects every single-character change.
		b := []byte(s)
		for i := len(apikeys.SecretPrefix); i < len(b); i++ {
			orig := b[i]
			b[i] = map[bool]byte{true: 'b', false: 'a'}[orig == 'a']
			if apikeys.Check(string(b)) == nil {
				t.Fatalf("Check accepted %q, %q with position %d changed", string(b), s, i)
			}
			b[i] = orig
		}
	})
}
