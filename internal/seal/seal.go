// Package seal keeps a small secret readable only by a portal that holds the
// session secret: AES-256-GCM under a key derived from that secret with a
// label of its own (HMAC-SHA256), bound to additional data so that a sealed
// value moved to another owner opens for no one.
//
// The portal seals two things with it: the one-time secret cookie that
// carries a new API key's secret to the page that shows it (package web),
// and webhook signing secrets at rest (package alerts). The label keeps
// their keys apart; changing the session secret makes both unreadable.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

// ErrUnreadable is what Open says of anything it cannot open: too short,
// tampered with, sealed under another key or bound to other data.
var ErrUnreadable = errors.New("seal: unreadable")

// Box seals and opens values under one derived key.
type Box struct{ aead cipher.AEAD }

// New derives the key labelled label from secret.
func New(secret []byte, label string) Box {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic("seal: " + err.Error()) // a 32-byte key cannot fail
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("seal: " + err.Error())
	}
	return Box{aead: aead}
}

// Seal returns plain sealed and bound to bound: a random nonce, then the
// ciphertext and its tag.
func (b Box) Seal(plain, bound []byte) []byte {
	nonce := make([]byte, b.aead.NonceSize())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails (Go 1.24+)
	return b.aead.Seal(nonce, nonce, plain, bound)
}

// Open returns what Seal sealed with the same bound, or ErrUnreadable.
func (b Box) Open(sealed, bound []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n {
		return nil, ErrUnreadable
	}
	plain, err := b.aead.Open(nil, sealed[:n], sealed[n:], bound)
	if err != nil {
		return nil, ErrUnreadable
	}
	return plain, nil
}
