package web

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/quotas"
	"github.com/sluicehq/sluice/views"
)

// developerQuotaGrant grants units of one of a developer's quotas for the
// current period, through quotas.Service.Adjust like the admin API's
// POST .../quota-grants (validated alike, audited in the same transaction).
func (s *Server) developerQuotaGrant(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	limit, typed := r.PostFormValue("limit"), strings.TrimSpace(r.PostFormValue("units"))
	// Anything but a whole number is 0, which Adjust refuses on "units".
	units, _ := strconv.ParseInt(typed, 10, 64)
	_, err := s.quotas.Adjust(r.Context(), s.actor(r), id, quotas.Change{Limit: limit, Grant: true, Units: units})
	var ve *plans.ValidationError
	if errors.As(err, &ve) {
		s.developerFormError(w, r, id, limit, ve, func(v *views.DeveloperView) { v.Units = typed })
		return
	}
	if err != nil {
		s.quotaError(w, r, err)
		return
	}
	s.developerDone(w, r, id, url.Values{"done": {"grant"}, "limit": {limit}, "units": {strconv.FormatInt(units, 10)}})
}

// developerQuotaReset resets one of a developer's quotas for the current
// period. Like a shadow tier's Enforce it takes two steps: the page's
// Reset asks (a page saying what resetting does), and only the
// confirmation, which carries confirm=reset, resets.
func (s *Server) developerQuotaReset(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	limit := r.PostFormValue("limit")
	if r.PostFormValue("confirm") != "reset" {
		v, err := s.developerView(r.Context(), id)
		if err != nil {
			s.error(w, r, err)
			return
		}
		for _, q := range v.Quotas {
			if q.Name == limit && !q.PerKey {
				s.render(w, r, http.StatusOK, views.QuotaResetConfirm(s.page(r, "Reset "+q.Name, "developers"), v.Developer, q))
				return
			}
		}
		// Not a quota of the plan: Adjust says so, on "limit".
	}
	_, err := s.quotas.Adjust(r.Context(), s.actor(r), id, quotas.Change{Limit: limit})
	var ve *plans.ValidationError
	if errors.As(err, &ve) {
		s.developerFormError(w, r, id, limit, ve, nil)
		return
	}
	if err != nil {
		s.quotaError(w, r, err)
		return
	}
	s.developerDone(w, r, id, url.Values{"done": {"reset"}, "limit": {limit}})
}

// anchorLayouts are what a datetime-local input sends (with or without
// seconds) and RFC 3339; all but RFC 3339 are read as UTC, as the form says.
var anchorLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

// developerBillingAnchor sets a developer's billing anchor, or with clear=1
// puts it back to their sign-up, through billing.SetAnchor as the admin
// API's PUT .../billing-anchor does (audited user.set_billing_anchor).
func (s *Server) developerBillingAnchor(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	var anchor *time.Time
	typed := strings.TrimSpace(r.PostFormValue("billing_anchor"))
	done := "anchor-cleared"
	if r.PostFormValue("clear") != "1" {
		done = "anchor"
		var msg string
		if typed == "" {
			msg = "is required: a date and time in UTC (or use Back to the sign-up)"
		} else {
			for _, layout := range anchorLayouts {
				if t, err := time.ParseInLocation(layout, typed, time.UTC); err == nil {
					anchor = &t
					break
				}
			}
			if anchor == nil {
				msg = "must be a date and time such as 2026-01-31T10:00 (UTC)"
			}
		}
		if msg != "" {
			s.developerFormError(w, r, id, "anchor", &plans.ValidationError{Fields: []plans.FieldError{{Field: "billing_anchor", Message: msg}}},
				func(v *views.DeveloperView) { v.Anchor = typed })
			return
		}
	}
	_, err := billing.SetAnchor(r.Context(), s.deps.Pool, s.actor(r), id, anchor)
	if errors.Is(err, billing.ErrNotFound) {
		err = errNotFound
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.developerDone(w, r, id, url.Values{"done": {done}})
}

// developerDone answers a change that worked: htmx gets the page's
// controls with the outcome; a plain form post is redirected to the page,
// so a reload does not repeat the change.
func (s *Server) developerDone(w http.ResponseWriter, r *http.Request, id int64, done url.Values) {
	if !isHTMX(r) {
		http.Redirect(w, r, views.DeveloperURL(id)+"?"+done.Encode(), http.StatusSeeOther)
		return
	}
	v, err := s.developerView(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Message = doneMessage(done, v)
	s.render(w, r, http.StatusOK, views.DeveloperControls(v))
}

// developerFormError re-renders the developer page (htmx: its controls)
// with ve's messages beside the fields of the form named form.
func (s *Server) developerFormError(w http.ResponseWriter, r *http.Request, id int64, form string, ve *plans.ValidationError, keep func(*views.DeveloperView)) {
	v, err := s.developerView(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.FormFor, v.Errors = form, views.FieldErrors{}
	for _, f := range ve.Fields {
		v.Errors[f.Field] = f.Message
	}
	if keep != nil {
		keep(&v)
	}
	if isHTMX(r) {
		s.render(w, r, http.StatusUnprocessableEntity, views.DeveloperControls(v))
		return
	}
	s.render(w, r, http.StatusUnprocessableEntity, views.DeveloperPage(s.page(r, v.Developer.Email, "developers"), v))
}

// quotaError answers a grant or reset that failed for other reasons than
// its fields.
func (s *Server) quotaError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, quotas.ErrUnavailable) {
		err = errUnavailable
	}
	s.error(w, r, err)
}
