package web

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// maxOwnKeys is how many of their keys a developer's page lists.
const maxOwnKeys = 100

// myKeys lists the signed-in developer's keys.
func (s *Server) myKeys(w http.ResponseWriter, r *http.Request) {
	v, err := s.myKeysPage(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.MyKeys(s.page(r, "My keys", "app-keys"), v))
}

func (s *Server) myKeysPage(r *http.Request) (views.MyKeysPage, error) {
	u, _ := s.currentUser(r)
	keys, _, err := s.deps.Keys.List(r.Context(), apikeys.Filter{UserID: u.ID, Limit: maxOwnKeys})
	if err != nil {
		return views.MyKeysPage{}, err
	}
	return views.MyKeysPage{Keys: keys, Now: s.now(), Errors: views.FieldErrors{}}, nil
}

// createMyKey issues a key to the signed-in developer and sends the browser
// to the page that shows its secret once (see secret_once.go), so a reload
// shows that page again rather than issuing another key.
func (s *Server) createMyKey(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	f := views.MyKeyForm{Name: strings.TrimSpace(r.PostFormValue("name")), Expires: strings.TrimSpace(r.PostFormValue("expires")),
		Routes: r.PostFormValue("allowed_routes"), CIDRs: r.PostFormValue("allowed_cidrs"), ReadOnly: r.PostFormValue("read_only") != ""}
	errs := views.FieldErrors{}
	in := apikeys.NewKey{UserID: u.ID, Name: f.Name, Scope: apikeys.ScopeInput{
		Routes: strings.Split(f.Routes, "\n"), CIDRs: strings.Split(f.CIDRs, "\n"), ReadOnly: f.ReadOnly}}
	if f.Expires != "" {
		day, err := time.Parse(time.DateOnly, f.Expires)
		if err != nil {
			errs["expires_at"] = "must be a date such as 2027-01-31"
		} else {
			// A key expiring "on" a day works through that day.
			end := day.Add(24 * time.Hour).UTC()
			in.ExpiresAt = &end
		}
	}
	var k apikeys.Key
	var secret string
	var err error
	status := http.StatusUnprocessableEntity
	if len(errs) == 0 {
		k, secret, err = s.deps.Keys.Create(r.Context(), s.actor(r), in)
		var ve *plans.ValidationError
		switch {
		case errors.As(err, &ve):
			for _, fe := range ve.Fields {
				errs[fe.Field] = fe.Message
			}
		case errors.Is(err, apikeys.ErrTooManyKeys):
			errs["keys"] = fmt.Sprintf("You already hold %d active keys, the most allowed. Revoke one you no longer use, then create the new one.", s.deps.Keys.MaxKeysPerUser())
			status = http.StatusConflict
		case err != nil:
			s.error(w, r, err)
			return
		}
	}
	if len(errs) > 0 {
		v, err := s.myKeysPage(r)
		if err != nil {
			s.error(w, r, err)
			return
		}
		v.Form, v.Errors = f, errs
		s.render(w, r, status, views.MyKeys(s.page(r, "My keys", "app-keys"), v))
		return
	}
	s.log.Info("key created by its owner", "user_id", u.ID, "key_id", k.ID)
	s.handOver(w, r, u.ID, secretPagePath(k.ID), onceSecret{KeyID: k.ID, Secret: secret})
}

// showMyKeySecret shows a key's new secret the one time its cookie arrives;
// afterwards (a reload, a back button, another tab) it says the secret was
// shown and how to get a new one.
func (s *Server) showMyKeySecret(w http.ResponseWriter, r *http.Request) {
	k, err := s.ownKey(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	o, err := s.takeOver(w, r, u.ID, k.ID)
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		s.render(w, r, http.StatusOK, views.KeySecretGone(s.page(r, "Secret already shown", "app-keys"), k, "/app/keys"))
		return
	}
	title := "Your new key"
	if o.Rotated {
		title = "New secret"
	}
	s.render(w, r, http.StatusOK, views.KeySecret(s.page(r, title, "app-keys"), views.SecretShown{
		Key: k, Secret: o.Secret, Rotated: o.Rotated, Grace: time.Duration(o.GraceSeconds) * time.Second, BaseURL: s.publicBase(r),
		BackURL: "/app/keys",
	}))
}

// ownKey loads key {id} if it belongs to the signed-in developer. Another
// developer's key is as absent as one that does not exist (404), so ids
// cannot be probed.
func (s *Server) ownKey(r *http.Request) (apikeys.Key, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return apikeys.Key{}, errNotFound
	}
	u, _ := s.currentUser(r)
	return s.deps.Keys.GetForUser(r.Context(), u.ID, id)
}

// rotateMyKey issues a new secret for one of the developer's keys, keeping
// the previous one valid for the chosen grace, and sends the browser to the
// page that shows it once.
func (s *Server) rotateMyKey(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	k, err := s.ownKey(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	secs, err := strconv.ParseInt(r.PostFormValue("grace_seconds"), 10, 64)
	grace := time.Duration(secs) * time.Second
	if err != nil || !slices.Contains(views.GraceChoices, grace) {
		s.error(w, r, errBadRequest)
		return
	}
	k, secret, err := s.deps.Keys.Rotate(r.Context(), s.actor(r), k.ID, grace)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("key rotated by its owner", "key_id", k.ID, "grace", grace)
	u, _ := s.currentUser(r)
	s.handOver(w, r, u.ID, secretPagePath(k.ID), onceSecret{KeyID: k.ID, Secret: secret, Rotated: true, GraceSeconds: int64(grace / time.Second)})
}

// confirmRevokeMyKey asks before revoking.
func (s *Server) confirmRevokeMyKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.ownKey(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.MyKeyRevoke(s.page(r, "Revoke key", "app-keys"), k))
}

// revokeMyKey revokes one of the developer's keys.
func (s *Server) revokeMyKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.ownKey(r)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if err := s.deps.Keys.Revoke(r.Context(), s.actor(r), k.ID); err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("key revoked by its owner", "key_id", k.ID)
	http.Redirect(w, r, "/app/keys", http.StatusSeeOther)
}
