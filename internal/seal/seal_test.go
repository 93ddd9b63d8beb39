package seal_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/seal"
)

// TestSealOpensOnlyForItsKeyAndBinding: a sealed value opens with the same
// secret, label and binding, and with nothing else.
func TestSealOpensOnlyForItsKeyAndBinding(t *testing.T) {
	secret := bytes.Repeat([]byte("s"), 32)
	box := seal.New(secret, "label one")
	sealed := box.Seal([]byte("whsec_x"), []byte("user:1"))
	if bytes.Contains(sealed, []byte("whsec_x")) {
		t.Fatalf("sealed value %q holds the plain text", sealed)
	}
	if got, err := box.Open(sealed, []byte("user:1")); err != nil || string(got) != "whsec_x" {
		t.Fatalf("Open = %q, %v; want the plain text", got, err)
	}
	if again := box.Seal([]byte("whsec_x"), []byte("user:1")); bytes.Equal(again, sealed) {
		t.Error("two seals of one value are equal: the nonce is not fresh")
	}
	tampered := append([]byte(nil), sealed...)
	tampered[len(tampered)-1] ^= 1
	for name, open := range map[string]func() ([]byte, error){
		"other binding": func() ([]byte, error) { return box.Open(sealed, []byte("user:2")) },
		"other label":   func() ([]byte, error) { return seal.New(secret, "label two").Open(sealed, []byte("user:1")) },
		"other secret": func() ([]byte, error) {
			return seal.New(bytes.Repeat([]byte("t"), 32), "label one").Open(sealed, []byte("user:1"))
		},
		"tampered":  func() ([]byte, error) { return box.Open(tampered, []byte("user:1")) },
		"truncated": func() ([]byte, error) { return box.Open(sealed[:5], []byte("user:1")) },
	} {
		if got, err := open(); !errors.Is(err, seal.ErrUnreadable) || got != nil {
			t.Errorf("%s: Open = %q, %v; want ErrUnreadable", name, got, err)
		}
	}
}
