package web

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/a-h/templ"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/orgs"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// UI-level error kinds. Domain packages' sentinels are mapped in errorKinds.
var (
	errUnauthenticated = errors.New("sign in required")
	errForbidden       = errors.New("forbidden")
	errNotFound        = errors.New("not found")
	errBadRequest      = errors.New("bad request")
	errUnavailable     = errors.New("feature unavailable")
)

// errorKind is how one kind of error is shown: a status and a message for
// people. Internal error text is never shown.
type errorKind struct {
	err     error
	status  int
	message string
}

// errorKinds maps error kinds to what the user sees, most specific first.
var errorKinds = []errorKind{
	{errUnauthenticated, http.StatusUnauthorized, "Please sign in."},
	{errForbidden, http.StatusForbidden, "You do not have access to this page."},
	{errNotFound, http.StatusNotFound, "There is nothing here."},
	{errBadRequest, http.StatusBadRequest, "The request was not understood."},
	{errUnavailable, http.StatusServiceUnavailable, "This part of Sluice is not available right now."},
	{plans.ErrNotFound, http.StatusNotFound, "There is no such plan or tier."},
	{plans.ErrConflict, http.StatusConflict, "Someone else changed this plan first. Reload and try again."},
	{plans.ErrSlugTaken, http.StatusConflict, "Another plan already uses that slug."},
	{plans.ErrInUse, http.StatusConflict, "This plan is in use by keys or developers."},
	{apikeys.ErrNotFound, http.StatusNotFound, "There is no such API key."},
	{apikeys.ErrRevoked, http.StatusConflict, "This key is revoked; it can no longer be changed."},
	{apikeys.ErrExpired, http.StatusConflict, "This key has expired; it can no longer be changed."},
	{apikeys.ErrConflict, http.StatusConflict, "Someone else changed this key first. Reload and try again."},
	{services.ErrNotFound, http.StatusNotFound, "There is no such service."},
	{apikeys.ErrTooManyKeys, http.StatusConflict, "This developer already holds the most API keys allowed. Revoke one first."},
	{users.ErrNotFound, http.StatusNotFound, "There is no such user."},
	{users.ErrUnknownPlan, http.StatusUnprocessableEntity, "That plan does not exist."},
	{users.ErrConflict, http.StatusConflict, "Someone else changed this user first. Reload and try again."},
	{enforce.ErrStoreUnavailable, http.StatusServiceUnavailable, "The rate-limit store is unreachable. Try again shortly."},
	{playground.ErrBusy, http.StatusServiceUnavailable, "Too many playground replays are running. Try again shortly."},
	{orgs.ErrNotMember, http.StatusNotFound, "There is no such organisation, or you are not a member of it."},
	{orgs.ErrNotFound, http.StatusNotFound, "There is no such organisation."},
	{orgs.ErrForbidden, http.StatusForbidden, "Your role in this organisation does not allow this. Ask an owner."},
	{orgs.ErrAccountHolder, http.StatusConflict, "The organisation's account holder stays its owner: they cannot leave, be removed or lose the owner role."},
	{orgs.ErrInvitationInvalid, http.StatusNotFound, "This invitation is unknown, used or expired. Ask for a new one."},
	{orgs.ErrWrongInvitee, http.StatusForbidden, "This invitation was sent to another email address. Sign in with the account of that address."},
	{orgs.ErrNotDeveloper, http.StatusForbidden, "Only developer accounts join organisations."},
}

// errorStatus returns the status and user message for err, and whether err
// is internal (unexpected, so logged).
func errorStatus(err error) (status int, message string, internal bool) {
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.status, k.message, false
		}
	}
	var ve *plans.ValidationError
	if errors.As(err, &ve) {
		return http.StatusUnprocessableEntity, "Some fields are invalid: " + ve.Error(), false
	}
	var bt *badTextError
	if errors.As(err, &bt) {
		return http.StatusBadRequest, "The field " + strconv.Quote(bt.field) + " " + bt.message + ".", false
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, "The form is too large.", false
	}
	return http.StatusInternalServerError, "Internal error. It has been logged; please try again.", true
}

// error answers a failed request: the status its kind maps to, a page (or an
// htmx fragment) with a message written for people, and one log line for
// internal errors. A cancelled request gets no answer and no log.
func (s *Server) error(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	status, message, internal := errorStatus(err)
	if internal {
		s.log.Error("request failed", "method", r.Method, "path", loggedPath(r), "err", err)
		// An unexpected failure while a dependency is down is almost
		// certainly that outage: say so, as a temporary condition.
		if down := s.failingDependencies(r.Context(), true); len(down) > 0 {
			status = http.StatusServiceUnavailable
			message = strings.Join(down, " and ") + " cannot be reached right now, so this page cannot be shown. Try again shortly."
		}
	}
	if isHTMX(r) {
		// htmx does not swap error responses by default; the layout's
		// htmx config lets 4xx/5xx fragments into the page.
		s.render(w, r, status, views.ErrorFragment(status, message))
		return
	}
	s.render(w, r, status, views.ErrorPage(s.page(r, "Error", ""), status, message))
}

// notFound answers paths no route serves with the UI's own 404 page.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.error(w, r, errNotFound)
}

// render writes a component with a status. It renders into a buffer first so
// a failing component becomes a clean 500 rather than half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	var buf bytes.Buffer
	if err := c.Render(r.Context(), &buf); err != nil {
		if r.Context().Err() != nil {
			return
		}
		s.log.Error("render failed", "method", r.Method, "path", loggedPath(r), "err", err)
		http.Error(w, "Internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Add("Vary", "HX-Request")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// page builds the layout's data for the current request: who is looking,
// which section is current, and a banner per failing dependency.
func (s *Server) page(r *http.Request, title, section string) views.Page {
	p := views.Page{Title: title, Section: section, AssetPrefix: staticPrefix}
	if u, ok := s.person(r); ok {
		p.Viewer = &views.Viewer{ID: u.ID, Email: u.Email, Role: u.Role}
		if m, ok := s.membership(r); ok && m.AccountUserID != u.ID {
			p.Viewer.Org = m.Name
		}
	}
	for _, name := range s.failingDependencies(r.Context(), false) {
		p.Banners = append(p.Banners, views.Banner{
			Kind:   "warn",
			TestID: "banner-unhealthy",
			Text:   name + " is unreachable: some figures may be stale and some changes may fail until it is back.",
		})
	}
	return p
}

// loggedPath is r's path as a log line may show it: the value of a
// {token} wildcard (a password-reset, sign-up or invitation link) is a
// secret that lets its holder in, so it is replaced by "{token}".
func loggedPath(r *http.Request) string {
	if !strings.Contains(r.Pattern, "{token}") {
		return r.URL.Path
	}
	token := r.PathValue("token")
	if token == "" {
		return r.URL.Path
	}
	return strings.ReplaceAll(r.URL.Path, token, "{token}")
}
