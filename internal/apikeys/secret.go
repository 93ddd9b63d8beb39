// Package apikeys issues and manages developers' API keys: the secret format,
// hashing, the key lifecycle (create, rotate with a grace period, revoke,
// expire) and its Postgres repository, plus the batched last-used recorder.
//
// A secret looks like "sk_live_" + 32 base62 random characters + a 6-character
// base62 checksum. The fixed prefix lets secret scanners find leaked keys; the
// checksum lets Check reject a mistyped key without touching the database.
// Only the SHA-256 of a secret and its first PrefixLen characters are stored.
package apikeys

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// Secret format.
const (
	// SecretPrefix starts every secret.
	SecretPrefix = "sk_live_"
	// RandomLen is the number of random base62 characters (about 190 bits).
	RandomLen = 32
	// ChecksumLen is the length of the base62 CRC-32 checksum at the end.
	ChecksumLen = 6
	// SecretLen is the length of a generated secret.
	SecretLen = len(SecretPrefix) + RandomLen + ChecksumLen
	// MaxSecretLen bounds what Check accepts, so that hashing a presented
	// value stays cheap whatever a client sends.
	MaxSecretLen = 128
	// PrefixLen is how much of a secret is stored and shown to identify it.
	PrefixLen = 12
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// ErrMalformed means a presented secret is not a well-formed Sluice key
// (wrong prefix, length, characters or checksum).
var ErrMalformed = errors.New("malformed API key")

// Generate returns a new random secret.
func Generate() (string, error) {
	var b [SecretLen]byte
	copy(b[:], SecretPrefix)
	random := b[len(SecretPrefix) : len(SecretPrefix)+RandomLen]
	// Rejection sampling keeps every character uniformly distributed: bytes
	// >= 248 (4*62) would favour the first characters of the alphabet.
	var buf [64]byte
	for n := 0; n < RandomLen; {
		if _, err := rand.Read(buf[:]); err != nil {
			return "", fmt.Errorf("generate API key: %w", err)
		}
		for _, c := range buf {
			if c >= 248 {
				continue
			}
			random[n] = base62[c%62]
			n++
			if n == RandomLen {
				break
			}
		}
	}
	body := b[:len(SecretPrefix)+RandomLen]
	putChecksum(b[len(body):], crc32.ChecksumIEEE(body))
	return string(b[:]), nil
}

// putChecksum writes sum as ChecksumLen base62 digits, most significant
// first (62^6 > 2^32, so every CRC-32 fits).
func putChecksum(dst []byte, sum uint32) {
	v := uint64(sum)
	for i := ChecksumLen - 1; i >= 0; i-- {
		dst[i] = base62[v%62]
		v /= 62
	}
}

// Check reports whether secret is well formed: the prefix, at least
// RandomLen base62 characters, and a matching checksum. It does no I/O and
// does not allocate, so it runs first on every request. The error wraps
// ErrMalformed.
func Check(secret string) error {
	if len(secret) < SecretLen || len(secret) > MaxSecretLen || !strings.HasPrefix(secret, SecretPrefix) {
		return ErrMalformed
	}
	for i := len(SecretPrefix); i < len(secret); i++ {
		if !isBase62(secret[i]) {
			return ErrMalformed
		}
	}
	n := len(secret) - ChecksumLen
	var want [ChecksumLen]byte
	putChecksum(want[:], crc32String(secret[:n]))
	if string(want[:]) != secret[n:] {
		return ErrMalformed
	}
	return nil
}

// crc32String is crc32.ChecksumIEEE over a string, computed bytewise from
// the standard table: converting to []byte for the library call would cost
// a heap allocation on every request.
func crc32String(s string) uint32 {
	crc := ^uint32(0)
	for i := 0; i < len(s); i++ {
		crc = crc32.IEEETable[byte(crc)^s[i]] ^ (crc >> 8)
	}
	return ^crc
}

func isBase62(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// Hash returns the SHA-256 of a secret, the form in which it is stored and
// looked up.
func Hash(secret string) [32]byte {
	// A stack copy keeps the per-request hash allocation-free for secrets up
	// to MaxSecretLen; longer input (never a valid key) is hashed directly.
	var buf [MaxSecretLen]byte
	if len(secret) > len(buf) {
		return sha256.Sum256([]byte(secret))
	}
	n := copy(buf[:], secret)
	return sha256.Sum256(buf[:n])
}

// PrefixOf returns the visible start of a secret ("sk_live_4fQz"), stored
// so operators and developers can tell keys apart and search for a leaked one.
func PrefixOf(secret string) string {
	if len(secret) < PrefixLen {
		return secret
	}
	return secret[:PrefixLen]
}
