package web

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/seal"
)

// A new secret travels from the POST that issued it to the one GET that
// shows it (post, redirect, get), so reloading the page never issues a second
// key. It travels in a cookie sealed with AES-GCM under a key derived from
// the session secret, bound to the developer and the key, readable only on
// the key's secret page, for a couple of minutes, and cleared by the first
// read: the secret is in no URL, no server memory (any instance can show
// it) and no history entry can show it again.
const (
	secretOnceCookie = "sluice_secret_once"
	secretOnceMaxAge = 2 * time.Minute
)

// errSecretGone is why a secret page shows no secret: it was read already,
// or never issued to this browser.
var errSecretGone = errors.New("secret already shown")

// onceSecret is what the cookie carries.
type onceSecret struct {
	KeyID   int64  `json:"k"`
	Secret  string `json:"s"`
	Rotated bool   `json:"r,omitempty"`
	// GraceSeconds is how long the previous secret keeps working.
	GraceSeconds int64 `json:"g,omitempty"`
	// Until is when the cookie stops being honoured (unix seconds), should a
	// browser keep it past its Max-Age.
	Until int64 `json:"u"`
}

// newSecretSealer is the box onceSecret cookies are sealed in.
func newSecretSealer(sessionSecret []byte) seal.Box {
	return seal.New(sessionSecret, "sluice one-time secret")
}

// secretPagePath is the page that shows key id's new secret once to its
// developer; operatorSecretPath shows it to the operator who issued it.
func secretPagePath(keyID int64) string {
	return "/app/keys/" + strconv.FormatInt(keyID, 10) + "/secret"
}

func operatorSecretPath(keyID int64) string { return keyPath(keyID) + "/secret" }

// bindTo is the additional data a cookie is sealed with: a cookie made for
// one developer opens for no other.
func bindTo(userID int64) []byte { return []byte("user:" + strconv.FormatInt(userID, 10)) }

// handOver sets the cookie carrying the secret for the viewer userID and
// redirects to page, which shows it.
func (s *Server) handOver(w http.ResponseWriter, r *http.Request, userID int64, page string, o onceSecret) {
	o.Until = s.now().Add(secretOnceMaxAge).Unix()
	plain, err := json.Marshal(o)
	if err != nil {
		s.error(w, r, err)
		return
	}
	sealed := s.sealer.Seal(plain, bindTo(userID))
	http.SetCookie(w, &http.Cookie{
		Name:     secretOnceCookie,
		Value:    base64.RawURLEncoding.EncodeToString(sealed),
		Path:     page,
		MaxAge:   int(secretOnceMaxAge / time.Second),
		HttpOnly: true,
		Secure:   s.secureRequest(r),
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, page, http.StatusSeeOther)
}

// takeOver reads and clears the cookie for key keyID on this page;
// errSecretGone when there is none that opens for this viewer and key.
func (s *Server) takeOver(w http.ResponseWriter, r *http.Request, userID, keyID int64) (onceSecret, error) {
	c, err := r.Cookie(secretOnceCookie)
	if err != nil {
		return onceSecret{}, errSecretGone
	}
	http.SetCookie(w, &http.Cookie{
		Name: secretOnceCookie, Path: r.URL.Path, MaxAge: -1,
		HttpOnly: true, Secure: s.secureRequest(r), SameSite: http.SameSiteStrictMode,
	})
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return onceSecret{}, errSecretGone
	}
	plain, err := s.sealer.Open(sealed, bindTo(userID))
	if err != nil {
		return onceSecret{}, errSecretGone
	}
	var o onceSecret
	if err := json.Unmarshal(plain, &o); err != nil || o.KeyID != keyID || s.now().Unix() > o.Until {
		return onceSecret{}, errSecretGone
	}
	return o, nil
}
