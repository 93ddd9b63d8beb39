package alerts

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"

	"github.com/sluicehq/sluice/internal/seal"
)

// A webhook's secret must be usable to sign, so unlike an API key it cannot
// be kept as a hash. It is stored sealed with AES-256-GCM under a key
// derived (HMAC-SHA256, its own label) from the portal's session secret,
// bound to the webhook's owner as additional data: a copy of the database
// alone signs nothing, and a sealed secret moved to another row opens for
// no one. Changing the session secret makes the stored secrets unreadable:
// deliveries then fail with "secret unreadable" until the developer
// registers the webhook again.
type sealer struct{ box seal.Box }

func newSealer(sessionSecret []byte) (sealer, error) {
	if len(sessionSecret) < 32 {
		return sealer{}, errors.New("alerts: the session secret must be at least 32 bytes")
	}
	return sealer{box: seal.New(sessionSecret, "sluice webhook signing secret")}, nil
}

func ownerData(userID int64) []byte { return []byte("webhook-owner:" + strconv.FormatInt(userID, 10)) }

func (s sealer) seal(userID int64, secret []byte) ([]byte, error) {
	return s.box.Seal(secret, ownerData(userID)), nil
}

var errSecretUnreadable = errors.New("webhook secret unreadable (was the session secret changed?)")

func (s sealer) open(userID int64, sealed []byte) ([]byte, error) {
	b, err := s.box.Open(sealed, ownerData(userID))
	if err != nil {
		return nil, errSecretUnreadable
	}
	return b, nil
}

// newSecret is a webhook signing secret: "whsec_" and 32 random bytes.
func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b)
}
