package signin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

// DeviceLifetime is how long a device token proves a past sign-in; each
// sign-in from the device renews it.
const DeviceLifetime = 180 * 24 * time.Hour

// maxDeviceTokens is how many accounts one browser's device cookie
// remembers.
const maxDeviceTokens = 3

// Devices makes and checks device tokens: proof, kept in a browser cookie,
// that the browser signed in to an account with its right password before.
// A token names the account by a keyed tag (never the email), a random
// device id and its issue time, and is authenticated with HMAC-SHA256, so
// it cannot be forged or moved to another account; it carries no session
// and grants nothing but a sign-in attempt that the account's failures
// from elsewhere do not delay (see Throttle.Attempt).
type Devices struct {
	key [32]byte
}

// NewDevices derives the tokens' key from the portal's session secret.
func NewDevices(sessionSecret []byte) Devices {
	m := hmac.New(sha256.New, sessionSecret)
	m.Write([]byte("sluice sign-in device tokens v1"))
	var d Devices
	copy(d.key[:], m.Sum(nil))
	return d
}

const (
	tagLen    = 8
	idLen     = 16
	macLen    = 16
	tokenLen  = tagLen + idLen + 8 + macLen
	tokenText = (tokenLen*8 + 5) / 6 // unpadded base64
)

func (d Devices) tag(email string) []byte {
	m := hmac.New(sha256.New, d.key[:])
	m.Write([]byte("account\x00" + normalEmail(email)))
	return m.Sum(nil)[:tagLen]
}

func (d Devices) mac(b []byte) []byte {
	m := hmac.New(sha256.New, d.key[:])
	m.Write(b)
	return m.Sum(nil)[:macLen]
}

// issue makes a token for the account with the device id (16 random bytes
// when id is nil).
func (d Devices) issue(email string, id []byte, now time.Time) string {
	if id == nil {
		id = make([]byte, idLen)
		_, _ = rand.Read(id)
	}
	b := make([]byte, 0, tokenLen)
	b = append(b, d.tag(email)...)
	b = append(b, id...)
	b = binary.BigEndian.AppendUint64(b, uint64(now.Unix()))
	b = append(b, d.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// open checks a token and returns its tag and device id; ok is false for
// a forged, damaged or expired token.
func (d Devices) open(token string, now time.Time) (tag, id []byte, ok bool) {
	if len(token) != tokenText {
		return nil, nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) != tokenLen {
		return nil, nil, false
	}
	body, sum := b[:tokenLen-macLen], b[tokenLen-macLen:]
	if !hmac.Equal(sum, d.mac(body)) {
		return nil, nil, false
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(body[tagLen+idLen:])), 0)
	if now.Sub(issued) > DeviceLifetime || issued.After(now.Add(time.Minute)) {
		return nil, nil, false
	}
	return body[:tagLen], body[tagLen : tagLen+idLen], true
}

// Device returns the device id that cookie (a device cookie's value)
// proves for email, or "" when it holds no valid token of that account.
func (d Devices) Device(email, cookie string, now time.Time) string {
	tag := d.tag(email)
	for token := range strings.SplitSeq(cookie, ".") {
		if t, id, ok := d.open(token, now); ok && hmac.Equal(t, tag) {
			return hex.EncodeToString(id)
		}
	}
	return ""
}

// Remember returns the device cookie's new value after a sign-in to email
// with its right password: the account's token, renewed with the same
// device id (or a new one), first, then the browser's valid tokens of other
// accounts, at most maxDeviceTokens in all.
func (d Devices) Remember(email, cookie string, now time.Time) string {
	tag := d.tag(email)
	var id []byte
	var others []string
	for token := range strings.SplitSeq(cookie, ".") {
		t, tid, ok := d.open(token, now)
		switch {
		case !ok:
		case hmac.Equal(t, tag):
			id = tid
		case len(others) < maxDeviceTokens-1:
			others = append(others, token)
		}
	}
	return strings.Join(append([]string{d.issue(email, id, now)}, others...), ".")
}

// normalEmail is an email as sign-in compares it.
func normalEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }
