package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// auditPageSize is how many entries one page shows.
const auditPageSize = 100

// datetimeLocal is what <input type="datetime-local"> sends.
const datetimeLocal = "2006-01-02T15:04"

// auditList shows the audit log, newest first, filtered by actor, object and
// time; a malformed time is a field error, not a failure.
func (s *Server) auditList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	l := views.AuditList{Filter: views.AuditFilter{
		Actor:      strings.TrimSpace(q.Get("actor")),
		ObjectType: q.Get("object_type"),
		ObjectID:   strings.TrimSpace(q.Get("object_id")),
		Since:      q.Get("since"),
		Until:      q.Get("until"),
	}, Errors: views.FieldErrors{}}
	actor := l.Filter.Actor
	// People filter by the email the page shows; the log records the id.
	if strings.Contains(actor, "@") {
		u, err := s.deps.Users.ByEmail(r.Context(), actor)
		switch {
		case errors.Is(err, users.ErrNotFound):
			l.Errors["actor"] = "no user has this email"
		case err != nil:
			s.error(w, r, err)
			return
		default:
			actor = "user:" + strconv.FormatInt(u.ID, 10)
		}
	}
	f := audit.Filter{Actor: actor, ObjectType: l.Filter.ObjectType, ObjectID: l.Filter.ObjectID, Limit: auditPageSize}
	parseTime := func(field, v string) time.Time {
		if v == "" {
			return time.Time{}
		}
		t, err := time.ParseInLocation(datetimeLocal, v, time.UTC)
		if err != nil {
			if t, err = time.Parse(time.RFC3339, v); err != nil {
				l.Errors[field] = "must be a date and time such as 2026-01-31T14:00"
			}
		}
		return t
	}
	f.Since = parseTime("since", l.Filter.Since)
	f.Until = parseTime("until", l.Filter.Until)
	if before, err := strconv.ParseInt(q.Get("before"), 10, 64); err == nil && before > 0 {
		f.BeforeID = before
	}
	status := http.StatusOK
	if len(l.Errors) > 0 {
		status = http.StatusUnprocessableEntity
	} else {
		entries, err := audit.List(r.Context(), s.deps.Pool, f)
		if err != nil {
			s.error(w, r, err)
			return
		}
		l.Entries = entries
		if l.Names, err = s.auditNames(r.Context(), entries); err != nil {
			s.error(w, r, err)
			return
		}
		if len(entries) == auditPageSize {
			l.NextBefore = entries[len(entries)-1].ID
		}
	}
	s.render(w, r, status, views.AuditPage(s.page(r, "Audit log", "audit"), l))
}
