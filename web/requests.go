package web

import (
	"cmp"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/views"
)

// requestsPageSize is how many rows one page of the request log shows.
const requestsPageSize = 50

// requestRanges maps a range to how far back it looks.
var requestRanges = map[string]time.Duration{
	"15m": 15 * time.Minute, "1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour,
}

// requestsQuery is a request log request, parsed and checked.
type requestsQuery struct {
	form   views.RequestFilter
	filter requestlog.Filter
	after  requestlog.Cursor
}

// parseRequestsQuery reads the request log's form from r's query. The
// developer portal passes its own user id as ownUser: the filter is then
// that developer's rows only, whatever the query says, and the operator's
// fields (developer, address, plan) are ignored.
func (s *Server) parseRequestsQuery(r *http.Request, ownUser int64) (requestsQuery, error) {
	q := r.URL.Query()
	f := views.RequestFilter{
		Range: cmp.Or(q.Get("range"), "24h"), From: q.Get("from"), To: q.Get("to"),
		Key: strings.TrimSpace(q.Get("key")), Route: q.Get("route"), Status: strings.TrimSpace(q.Get("status")),
		Layer: strings.TrimSpace(q.Get("layer")), Outcome: q.Get("outcome"), After: q.Get("after"),
	}
	if ownUser == 0 {
		f.Developer, f.Address, f.Plan = strings.TrimSpace(q.Get("developer")), strings.TrimSpace(q.Get("address")), q.Get("plan")
	}
	rq := requestsQuery{form: f}
	back, ok := requestRanges[f.Range]
	if !ok {
		return rq, &badTextError{"range", "must be one of 15m, 1h, 24h or 7d"}
	}
	now := s.now().UTC()
	rq.filter.To, rq.filter.From = now.Add(time.Second), now.Add(-back)
	for _, t := range []struct {
		field, v string
		dst      *time.Time
	}{{"from", f.From, &rq.filter.From}, {"to", f.To, &rq.filter.To}} {
		if t.v == "" {
			continue
		}
		at, err := time.ParseInLocation(datetimeLocal, t.v, time.UTC)
		if err != nil {
			return rq, &badTextError{t.field, "must be a date and time such as 2026-01-31T14:00"}
		}
		*t.dst = at
	}
	if !rq.filter.From.Before(rq.filter.To) {
		return rq, &badTextError{"to", "must be after from"}
	}
	for _, long := range []struct{ field, v string }{{"route", f.Route}, {"layer", f.Layer}, {"plan", f.Plan}, {"key", f.Key}, {"developer", f.Developer}} {
		if len(long.v) > 300 {
			return rq, &badTextError{long.field, "is too long"}
		}
	}
	rq.filter.Route, rq.filter.Layer, rq.filter.Plan = f.Route, f.Layer, f.Plan
	if f.Status != "" {
		if err := parseStatusFilter(f.Status, &rq.filter); err != nil {
			return rq, err
		}
	}
	if f.Outcome != "" {
		o, err := requestlog.ParseOutcome(f.Outcome)
		if err != nil {
			return rq, &badTextError{"outcome", "must be one of " + strings.Join(views.RequestOutcomes, ", ")}
		}
		rq.filter.Outcome = o
	}
	if f.Address != "" {
		p, err := netip.ParsePrefix(f.Address)
		if err != nil {
			return rq, &badTextError{"address", "must be an address block such as 192.0.2.0/24"}
		}
		rq.filter.Address = p.Masked().String()
	}
	var err error
	if rq.after, err = requestlog.ParseCursor(f.After); err != nil {
		return rq, &badTextError{"after", "is not a page of this log"}
	}
	if ownUser != 0 {
		rq.filter.UserID = ownUser
		if f.Key != "" {
			if rq.filter.KeyID, err = positiveID("key", f.Key); err != nil {
				return rq, err
			}
		}
		return rq, nil
	}
	if rq.filter.UserID, err = s.developerID(r, f.Developer); err != nil {
		return rq, err
	}
	if rq.filter.KeyID, err = s.keyID(r, f.Key); err != nil {
		return rq, err
	}
	return rq, nil
}

// parseStatusFilter reads "429" (one status) or "4xx" (a class).
func parseStatusFilter(v string, f *requestlog.Filter) error {
	if len(v) == 3 && strings.HasSuffix(strings.ToLower(v), "xx") && v[0] >= '1' && v[0] <= '5' {
		f.StatusClass = int(v[0] - '0')
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 100 || n > 599 {
		return &badTextError{"status", "must be a status such as 429 or a class such as 5xx"}
	}
	f.Status = n
	return nil
}

func positiveID(field, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, &badTextError{field, "must be a whole number above 0"}
	}
	return n, nil
}

// developerID reads the operator's developer field: an id or an email.
func (s *Server) developerID(r *http.Request, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if !strings.Contains(v, "@") {
		return positiveID("developer", v)
	}
	u, err := s.deps.Users.ByEmail(r.Context(), v)
	if errors.Is(err, users.ErrNotFound) {
		return 0, &badTextError{"developer", "names no user"}
	}
	return u.ID, err
}

// keyID reads the operator's key field: an id, or the start of a key's
// secret (its visible prefix) matching one key.
func (s *Server) keyID(r *http.Request, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if v[0] >= '0' && v[0] <= '9' {
		return positiveID("key", v)
	}
	keys, _, err := s.deps.Keys.List(r.Context(), apikeys.Filter{Query: v, Limit: 2})
	if err != nil {
		return 0, err
	}
	switch len(keys) {
	case 0:
		return 0, &badTextError{"key", "matches no key"}
	case 1:
		return keys[0].ID, nil
	}
	return 0, &badTextError{"key", "matches several keys; type more of it"}
}

// requestsView reads one page of rq's rows.
func (s *Server) requestsView(r *http.Request, rq requestsQuery, action string, operator bool) (views.RequestsPage, error) {
	rows, next, err := s.deps.RequestLog.List(r.Context(), rq.filter, rq.after, requestsPageSize)
	if err != nil {
		return views.RequestsPage{}, err
	}
	v := views.RequestsPage{Operator: operator, Action: action, CSV: action + ".csv", Filter: rq.form, Routes: s.tierRoutes(r.Context())}
	for _, row := range rows {
		v.Rows = append(v.Rows, requestRow(row))
	}
	if next != (requestlog.Cursor{}) {
		v.Older = rq.form.Query() + "&after=" + next.String()
	}
	v.Note = s.requestLogNote()
	return v, nil
}

// requestLogNote says what the log holds.
func (s *Server) requestLogNote() string {
	note := "Every rejection is logged"
	switch n := s.deps.RequestLogAdmitSample; {
	case n == 1:
		note += ", and every admission"
	case n > 1:
		note += ", and one admission in " + strconv.Itoa(n) + " (shown ×" + strconv.Itoa(n) + ")"
	default:
		note += "; admissions are not"
	}
	if d := s.deps.RequestLogRetention; d > 0 {
		note += "; entries are kept " + strconv.Itoa(int((d+24*time.Hour-1)/(24*time.Hour))) + " days"
	}
	return note + ". New entries appear within a few seconds."
}

func requestRow(r requestlog.Row) views.RequestRow {
	v := views.RequestRow{
		At: r.At, KeyID: r.KeyID, Owner: r.Email, Plan: r.Plan, Route: r.Route, Outcome: r.Outcome, Layer: r.Layer,
		Degraded: r.StoreDegraded, WayIn: r.WayIn, Weight: r.Weight, Status: "—",
	}
	switch {
	case r.KeyID != 0:
		v.Caller = cmp.Or(r.KeyName, "key "+idText(r.KeyID))
		if r.KeyPrefix != "" {
			v.Caller += " (" + r.KeyPrefix + "…)"
		}
	case r.Address != "":
		v.Caller = "anonymous, " + r.Address
	default:
		v.Caller = "anonymous"
	}
	if r.Status != 0 {
		v.Status = strconv.Itoa(r.Status)
	}
	if r.RetryAfter > 0 {
		v.RetryAfter = strconv.FormatInt(r.RetryAfter, 10) + " s"
	}
	if r.UpstreamStatus != 0 {
		v.Upstream = strconv.Itoa(r.UpstreamStatus) + " in " + latencyText(r.Latency)
	}
	return v
}

// latencyText is a latency in milliseconds, with a decimal below 10 ms.
func latencyText(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 10 {
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
}

// adminRequests is the operator's request log: every caller's.
func (s *Server) adminRequests(w http.ResponseWriter, r *http.Request) {
	if s.deps.RequestLog == nil {
		s.notFound(w, r)
		return
	}
	rq, err := s.parseRequestsQuery(r, 0)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v, err := s.requestsView(r, rq, "/admin/requests", true)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if ps, err := s.deps.Plans.List(r.Context()); err == nil {
		for _, p := range ps {
			v.Plans = append(v.Plans, p.Slug)
		}
	}
	s.render(w, r, http.StatusOK, views.RequestsPageView(s.page(r, "Requests", "requests"), v))
}

// myRequests is a developer's request log: their own keys' rows only.
func (s *Server) myRequests(w http.ResponseWriter, r *http.Request) {
	if s.deps.RequestLog == nil {
		s.notFound(w, r)
		return
	}
	u, _ := s.currentUser(r)
	rq, err := s.parseRequestsQuery(r, u.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v, err := s.requestsView(r, rq, "/app/requests", false)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if v.Keys, err = s.ownKeyChoices(r.Context(), u.ID); err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.RequestsPageView(s.page(r, "My requests", "app-requests"), v))
}

// adminRequestsCSV downloads the operator's request log rows.
func (s *Server) adminRequestsCSV(w http.ResponseWriter, r *http.Request) {
	s.requestsCSV(w, r, 0, "sluice-requests")
}

// myRequestsCSV downloads a developer's own request log rows.
func (s *Server) myRequestsCSV(w http.ResponseWriter, r *http.Request) {
	u, _ := s.currentUser(r)
	s.requestsCSV(w, r, u.ID, "my-requests")
}

// requestsCSVHeader is the first line of every request log download.
var requestsCSVHeader = []string{"time", "way_in", "outcome", "plan", "route", "key_id", "key_name", "key_prefix",
	"developer_id", "developer_email", "address_block", "status", "layer", "retry_after_seconds", "store_degraded",
	"upstream_status", "upstream_latency_ms", "weight"}

// requestsCSV streams the rows of the query, newest first, at most
// requestlog.MaxExport of them.
func (s *Server) requestsCSV(w http.ResponseWriter, r *http.Request, ownUser int64, name string) {
	if s.deps.RequestLog == nil {
		s.notFound(w, r)
		return
	}
	rq, err := s.parseRequestsQuery(r, ownUser)
	if err != nil {
		s.error(w, r, err)
		return
	}
	name += "-" + rq.filter.From.Format("20060102T1504") + ".csv"
	s.streamCSV(w, r, name, requestsCSVHeader, func(write func([]string) error) error {
		return s.deps.RequestLog.Each(r.Context(), rq.filter, func(row requestlog.Row) error {
			latency := ""
			if row.UpstreamStatus != 0 {
				latency = strconv.FormatFloat(float64(row.Latency)/float64(time.Millisecond), 'f', 3, 64)
			}
			return write([]string{
				row.At.UTC().Format(time.RFC3339Nano), row.WayIn, row.Outcome, csvText(row.Plan), csvText(row.Route),
				idText(row.KeyID), csvText(row.KeyName), row.KeyPrefix, idText(row.UserID), csvText(row.Email), row.Address,
				idText(int64(row.Status)), csvText(row.Layer), idText(row.RetryAfter), row.StoreDegraded,
				idText(int64(row.UpstreamStatus)), latency, strconv.Itoa(row.Weight),
			})
		})
	})
}
