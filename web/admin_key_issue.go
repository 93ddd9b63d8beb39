package web

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// expiryDay reads an expiry date field: "" is no expiry; a day means the key
// works through it and stops at the next midnight UTC.
func expiryDay(v string) (*time.Time, string) {
	if v == "" {
		return nil, ""
	}
	day, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return nil, "must be a date such as 2027-01-31"
	}
	end := day.Add(24 * time.Hour).UTC()
	return &end, ""
}

// keyIssueForm is the operator's form that issues a key to a developer;
// ?owner= fills the email (the developers list links here).
func (s *Server) keyIssueForm(w http.ResponseWriter, r *http.Request) {
	f := views.IssueKeyForm{Owner: strings.TrimSpace(r.URL.Query().Get("owner")), Errors: views.FieldErrors{}}
	s.render(w, r, http.StatusOK, views.IssueKeyPage(s.page(r, "Issue a key", "keys"), f))
}

// keyIssue issues a key to the developer with the email and shows its
// secret once to the operator (who hands it over), through the same one-read
// cookie as a developer's own keys.
func (s *Server) keyIssue(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	f := views.IssueKeyForm{
		Owner:   strings.TrimSpace(r.PostFormValue("owner")),
		Name:    strings.TrimSpace(r.PostFormValue("name")),
		Expires: strings.TrimSpace(r.PostFormValue("expires")),
		Errors:  views.FieldErrors{},
	}
	in := apikeys.NewKey{Name: f.Name}
	var msg string
	if in.ExpiresAt, msg = expiryDay(f.Expires); msg != "" {
		f.Errors["expires_at"] = msg
	}
	owner, err := s.deps.Users.ByEmail(r.Context(), f.Owner)
	switch {
	case f.Owner == "":
		f.Errors["owner"] = "is required"
	case errors.Is(err, users.ErrNotFound):
		f.Errors["owner"] = "no developer has this email"
	case err != nil:
		s.error(w, r, err)
		return
	case owner.Role != users.RoleDeveloper:
		f.Errors["owner"] = "is an operator; keys are issued to developers"
	default:
		in.UserID = owner.ID
	}
	var k apikeys.Key
	var secret string
	if len(f.Errors) == 0 {
		k, secret, err = s.deps.Keys.Create(r.Context(), s.actor(r), in)
		var ve *plans.ValidationError
		switch {
		case errors.As(err, &ve):
			for _, fe := range ve.Fields {
				f.Errors[fe.Field] = fe.Message
			}
		case err != nil:
			s.error(w, r, err)
			return
		}
	}
	if len(f.Errors) > 0 {
		s.render(w, r, http.StatusUnprocessableEntity, views.IssueKeyPage(s.page(r, "Issue a key", "keys"), f))
		return
	}
	u, _ := s.currentUser(r)
	s.log.Info("key issued by an operator", "key_id", k.ID, "owner_id", owner.ID, "operator_id", u.ID)
	s.handOver(w, r, u.ID, operatorSecretPath(k.ID), onceSecret{KeyID: k.ID, Secret: secret})
}

// keyRotate issues a new secret for any key, keeping the previous one for
// the chosen grace, and shows the secret once to the operator.
func (s *Server) keyRotate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	secs, err := strconv.ParseInt(r.PostFormValue("grace_seconds"), 10, 64)
	grace := time.Duration(secs) * time.Second
	if err != nil || !slices.Contains(views.GraceChoices, grace) {
		s.error(w, r, errBadRequest)
		return
	}
	k, secret, err := s.deps.Keys.Rotate(r.Context(), s.actor(r), id, grace)
	if err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	s.log.Info("key rotated by an operator", "key_id", k.ID, "grace", grace, "operator_id", u.ID)
	s.handOver(w, r, u.ID, operatorSecretPath(k.ID), onceSecret{KeyID: k.ID, Secret: secret, Rotated: true, GraceSeconds: secs})
}

// keySecretShow shows the operator a key's new secret the one time its
// cookie arrives.
func (s *Server) keySecretShow(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	k, err := s.deps.Keys.Get(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	o, err := s.takeOver(w, r, u.ID, k.ID)
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		s.render(w, r, http.StatusOK, views.KeySecretGone(s.page(r, "Secret already shown", "keys"), k, keyPath(k.ID)))
		return
	}
	s.render(w, r, http.StatusOK, views.KeySecret(s.page(r, "New secret", "keys"), views.SecretShown{
		Key: k, Secret: o.Secret, Rotated: o.Rotated, Grace: time.Duration(o.GraceSeconds) * time.Second,
		BaseURL: s.publicBase(r), BackURL: keyPath(k.ID),
	}))
}

// keySetExpiry sets, moves or removes a key's expiry.
func (s *Server) keySetExpiry(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	typed := strings.TrimSpace(r.PostFormValue("expires"))
	at, msg := expiryDay(typed)
	if msg == "" {
		_, err := s.deps.Keys.SetExpiry(r.Context(), s.actor(r), id, at)
		var ve *plans.ValidationError
		switch {
		case errors.As(err, &ve):
			msg = ve.Fields[0].Message
		case err != nil:
			s.error(w, r, err)
			return
		default:
			http.Redirect(w, r, keyPath(id)+"?saved=1", http.StatusSeeOther)
			return
		}
	}
	v, err := s.keyPage(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Expires, v.ExpiryError = typed, msg
	s.renderKeyPage(w, r, http.StatusUnprocessableEntity, v)
}
