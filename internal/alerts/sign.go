package alerts

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries a webhook body's signature:
//
//	Sluice-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
//
// keyed by the webhook's secret. The timestamp is signed too, so a receiver
// that rejects old timestamps (see Verify) cannot be replayed to later.
const SignatureHeader = "Sluice-Signature"

// Other headers of every delivery.
const (
	EventHeader    = "Sluice-Event"
	DeliveryHeader = "Sluice-Delivery"
)

// DefaultTolerance is how old a signature Verify accepts by default.
const DefaultTolerance = 5 * time.Minute

// Sign returns the Sluice-Signature value for body sent at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("alerts: signature does not match")
	ErrStale        = errors.New("alerts: signature timestamp outside tolerance")
)

// Verify checks a Sluice-Signature header value against the body received
// at now: the HMAC must match (compared in constant time) and t must be
// within tolerance of now (0 means DefaultTolerance). It is what a Go
// receiver calls; the README shows the same in a few lines of other
// languages.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrBadSignature
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		ok = ok || hmac.Equal(s, want)
	}
	if !ok {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}
