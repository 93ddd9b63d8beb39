package users

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Argon2id parameters for new hashes: OWASP's recommended minimum (19 MiB,
// two passes, one lane), which keeps a login near 30 ms on a small server.
// They are stored in each hash, so raising them later still verifies old
// hashes.
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonSaltLen   = 16
	argonKeyLen    = 32
)

// maxPasswordBytes bounds the input to the hash so a huge password cannot
// make a login expensive.
const maxPasswordBytes = 1024

// HashPassword returns an argon2id hash of pw in the PHC string format
// ($argon2id$v=19$m=...,t=...,p=...$salt$hash), the form stored in
// users.password_hash.
func HashPassword(pw string) (string, error) {
	if len(pw) > maxPasswordBytes {
		return "", fmt.Errorf("password longer than %d bytes", maxPasswordBytes)
	}
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	key := argon2.IDKey([]byte(pw), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemoryKiB, argonTime, argonThreads, enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// CheckPassword reports whether pw matches hash (made by HashPassword). The
// comparison takes constant time; a malformed hash never matches.
func CheckPassword(hash, pw string) bool {
	if len(pw) > maxPasswordBytes {
		return false
	}
	p, err := parseHash(hash)
	if err != nil {
		return false
	}
	key := argon2.IDKey([]byte(pw), p.salt, p.time, p.memory, p.threads, uint32(len(p.key)))
	return subtle.ConstantTimeCompare(key, p.key) == 1
}

type argonHash struct {
	memory, time uint32
	threads      uint8
	salt, key    []byte
}

// parseHash decodes a PHC argon2id string, bounding its parameters so a
// tampered row cannot make verification arbitrarily expensive.
func parseHash(s string) (argonHash, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return argonHash{}, errors.New("not an argon2id PHC string")
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return argonHash{}, errors.New("unsupported argon2 version")
	}
	var h argonHash
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &h.memory, &h.time, &h.threads); err != nil {
		return argonHash{}, errors.New("bad argon2 parameters")
	}
	if h.memory < 8 || h.memory > 1<<20 || h.time < 1 || h.time > 16 || h.threads < 1 {
		return argonHash{}, errors.New("argon2 parameters out of range")
	}
	var err error
	if h.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil || len(h.salt) < 8 {
		return argonHash{}, errors.New("bad argon2 salt")
	}
	if h.key, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(h.key) < 16 || len(h.key) > 64 {
		return argonHash{}, errors.New("bad argon2 key")
	}
	return h, nil
}

// generatedAlphabet leaves out look-alike characters (0/O, 1/l/I) so a
// generated password can be read aloud or copied by hand.
const generatedAlphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// generatedLen gives about 117 bits (20 characters of 57).
const generatedLen = 20

// GeneratePassword returns a random password for a reset or a new account,
// drawn without bias from generatedAlphabet.
func GeneratePassword() (string, error) {
	var b strings.Builder
	buf := make([]byte, 1)
	for b.Len() < generatedLen {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("generate password: %w", err)
		}
		// Rejection sampling: bytes at or above the largest multiple of the
		// alphabet's length would favour its first characters.
		if int(buf[0]) >= 256/len(generatedAlphabet)*len(generatedAlphabet) {
			continue
		}
		b.WriteByte(generatedAlphabet[int(buf[0])%len(generatedAlphabet)])
	}
	return b.String(), nil
}

const selectHasPassword = `SELECT password_hash LIKE '$argon2id$%' FROM users WHERE id = $1`

// HasPassword reports whether user id has a password to sign in with; an
// account made by SSO has none until a reset gives it one, so it has
// nothing to change.
func (r *Repo) HasPassword(ctx context.Context, id int64) (bool, error) {
	var has bool
	if err := r.db.QueryRow(ctx, selectHasPassword, id).Scan(&has); err != nil {
		return false, fmt.Errorf("user %d has a password: %w", id, mapError(err))
	}
	return has, nil
}
