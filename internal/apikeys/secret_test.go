package apikeys_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/apikeys"
)

func TestGenerate(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		s, err := apikeys.Generate()
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		if len(s) != apikeys.SecretLen || !strings.HasPrefix(s, "sk_live_") {
			t.Fatalf("secret %q: want %d chars starting sk_live_", s, apikeys.SecretLen)
		}
		if err := apikeys.Check(s); err != nil {
			t.Fatalf("Check(generated %q) = %v", s, err)
		}
		if seen[s] {
			t.Fatalf("Generate repeated %q", s)
		}
		seen[s] = true
	}
}

func TestCheck(t *testing.T) {
	good, err := apikeys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) string {
		b := []byte(good)
		if b[i] == 'a' {
			b[i] = 'b'
		} else {
			b[i] = 'a'
		}
		return string(b)
	}
	swap := func(i int) string {
		b := []byte(good)
		for b[i] == b[i+1] {
			i++
		}
		b[i], b[i+1] = b[i+1], b[i]
		return string(b)
	}
	tests := []struct {
		name   string
		secret string
		valid  bool
	}{
		{"Generated", good, true},
		{"Empty", "", false},
		{"WrongPrefix", "sk_test_" + good[8:], false},
		{"TypoInRandomPart", flip(20), false},
		{"TypoInChecksum", flip(len(good) - 1), false},
		{"SwappedCharacters", swap(10), false},
		{"Truncated", good[:len(good)-1], false},
		{"NonBase62", good[:15] + "-" + good[16:], false},
		{"TrailingSpace", good + " ", false},
		{"Huge", "sk_live_" + strings.Repeat("a", 500), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := apikeys.Check(tt.secret)
			if tt.valid && err != nil {
				t.Fatalf("Check = %v, want nil", err)
			}
			if !tt.valid && !errors.Is(err, apikeys.ErrMalformed) {
				t.Fatalf("Check = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestHashAndPrefix(t *testing.T) {
	s, _ := apikeys.Generate()
	if apikeys.Hash(s) != apikeys.Hash(s) {
		t.Fatal("Hash is not deterministic")
	}
	other, _ := apikeys.Generate()
	if apikeys.Hash(s) == apikeys.Hash(other) {
		t.Fatal("two secrets share a hash")
	}
	if p := apikeys.PrefixOf(s); p != s[:12] || len(p) != apikeys.PrefixLen {
		t.Fatalf("PrefixOf = %q, want %q", p, s[:12])
	}
	if p := apikeys.PrefixOf("short"); p != "short" {
		t.Fatalf("PrefixOf(short) = %q", p)
	}
}

func ExampleCheck() {
	secret, _ := apikeys.Generate()
	fmt.Println(apikeys.Check(secret))
	// A single mistyped character is caught without a database lookup.
	typo := secret[:20] + string(secret[21]) + string(secret[20]) + secret[22:]
	if secret[20] == secret[21] {
		typo = secret[:20] + "!" + secret[21:]
	}
	fmt.Println(apikeys.Check(typo))
	// Output:
	// <nil>
	// malformed API key
}

func BenchmarkCheckAndHash(b *testing.B) {
	s, _ := apikeys.Generate()
	b.ReportAllocs()
	for b.Loop() {
		if apikeys.Check(s) != nil {
			b.Fatal("invalid")
		}
		_ = apikeys.Hash(s)
	}
}
