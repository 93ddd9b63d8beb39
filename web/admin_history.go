package web

import (
	"cmp"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// historyQuery is a history request, parsed and checked.
type historyQuery struct {
	form     views.HistoryFilter
	filter   history.Filter
	res      history.Resolution
	from, to time.Time
}

// historyRanges maps a range to how far back it looks and its resolution.
var historyRanges = map[string]struct {
	back time.Duration
	res  history.Resolution
}{
	"1h":  {time.Hour, history.Minute},
	"24h": {history.MinuteRetention, history.Minute},
	"7d":  {7 * 24 * time.Hour, history.Hour},
	"90d": {history.HourRetention, history.Hour},
}

// parseHistoryQuery reads the history form from r's query. The developer
// portal passes its own user id as ownUser: the filter is then that
// developer's keys only, whatever the query says.
func (s *Server) parseHistoryQuery(r *http.Request, ownUser int64) (historyQuery, error) {
	q := r.URL.Query()
	f := views.HistoryFilter{
		Range: q.Get("range"), Plan: q.Get("plan"), Developer: q.Get("developer"),
		Key: q.Get("key"), Route: q.Get("route"), Anonymous: q.Get("anonymous") == "1",
	}
	if f.Range == "" {
		f.Range = "24h"
	}
	hq := historyQuery{form: f}
	rg, ok := historyRanges[f.Range]
	if !ok {
		return hq, &badTextError{"range", "must be one of 1h, 24h, 7d or 90d"}
	}
	id := func(field, v string) (int64, error) {
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return 0, &badTextError{field, "must be a whole number above 0"}
		}
		return n, nil
	}
	var err error
	if hq.filter.KeyID, err = id("key", f.Key); err != nil {
		return hq, err
	}
	if ownUser != 0 {
		hq.filter.UserID = ownUser
	} else {
		if hq.filter.UserID, err = id("developer", f.Developer); err != nil {
			return hq, err
		}
		hq.filter.Plan = f.Plan
		hq.filter.Anonymous = f.Anonymous
	}
	if len(f.Route) > 300 {
		return hq, &badTextError{"route", "is too long"}
	}
	if len(f.Plan) > 100 {
		return hq, &badTextError{"plan", "is too long"}
	}
	hq.filter.Route = f.Route
	hq.res = rg.res
	// The range ends after the current bucket, so the bucket in progress
	// shows as it fills.
	span := rg.res.Span()
	hq.to = s.now().UTC().Truncate(span).Add(span)
	hq.from = hq.to.Add(-rg.back)
	return hq, nil
}

// historyView builds the history page for hq; tables lists the breakdowns
// to show.
func (s *Server) historyView(ctx context.Context, hq historyQuery, action string, tables []historyTable) (views.HistoryPage, error) {
	points, err := s.deps.History.Series(ctx, hq.filter, hq.res, hq.from, hq.to)
	if err != nil {
		return views.HistoryPage{}, err
	}
	v := views.HistoryPage{Filter: hq.form, Bucket: hq.res.Span(), Buckets: make([]views.UsageBucket, len(points))}
	for i, p := range points {
		t := views.Traffic{Admitted: p.Admitted, Rejected: p.Rejected}
		v.Buckets[i] = views.UsageBucket{Start: p.At, Traffic: t}
		v.Total = v.Total.Add(t)
	}
	for _, t := range tables {
		rows, err := s.deps.History.Top(ctx, hq.filter, t.dim, hq.res, hq.from, hq.to, 10)
		if err != nil {
			return views.HistoryPage{}, err
		}
		vt := views.HistoryTable{Title: t.title, TestID: t.testID}
		for _, r := range rows {
			b := views.HistoryBreakdown{Label: r.Label, Traffic: views.Traffic{Admitted: r.Admitted, Rejected: r.Rejected}}
			if t.narrow != nil && r.Value != "" {
				f := hq.form
				t.narrow(&f, r.Value)
				b.Href = action + "?" + f.Query()
			}
			vt.Rows = append(vt.Rows, b)
		}
		v.Tables = append(v.Tables, vt)
	}
	v.Routes = s.tierRoutes(ctx)
	v.Note = "Figures are added every few seconds by each instance; the current minute is still filling."
	return v, nil
}

type historyTable struct {
	title, testID string
	dim           history.Dimension
	// narrow sets the filter field of a row's value, for its link; nil:
	// rows are not links.
	narrow func(f *views.HistoryFilter, value string)
}

var (
	narrowPlan      = func(f *views.HistoryFilter, v string) { f.Plan = v }
	narrowRoute     = func(f *views.HistoryFilter, v string) { f.Route = v }
	narrowDeveloper = func(f *views.HistoryFilter, v string) { f.Developer = v }
	narrowKey       = func(f *views.HistoryFilter, v string) { f.Key = v }
)

var adminHistoryTables = []historyTable{
	{"By plan", "history-by-plan", history.ByPlan, narrowPlan},
	{"By route", "history-by-route", history.ByRoute, narrowRoute},
	{"By developer", "history-by-developer", history.ByDeveloper, narrowDeveloper},
	{"By key", "history-by-key", history.ByKey, narrowKey},
	{"Anonymous by address block", "history-by-address", history.ByAddress, nil},
}

// adminHistory is the operator's usage history: per minute or hour, per
// plan, developer, key, route, or anonymous traffic alone.
func (s *Server) adminHistory(w http.ResponseWriter, r *http.Request) {
	if s.deps.History == nil {
		s.notFound(w, r)
		return
	}
	hq, err := s.parseHistoryQuery(r, 0)
	if err != nil {
		s.error(w, r, err)
		return
	}
	tables := adminHistoryTables
	if !hq.filter.Anonymous && (hq.filter.UserID != 0 || hq.filter.KeyID != 0) {
		tables = tables[:4] // a developer or key has no anonymous traffic
	}
	v, err := s.historyView(r.Context(), hq, "/admin/history", tables)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Operator, v.Action, v.CSV = true, "/admin/history", "/admin/history.csv"
	if ps, err := s.deps.Plans.List(r.Context()); err == nil {
		for _, p := range ps {
			v.Plans = append(v.Plans, p.Slug)
		}
	}
	s.render(w, r, http.StatusOK, views.HistoryPageView(s.page(r, "Usage history", "history"), v))
}

// adminHistoryCSV downloads the rows behind the operator's history page.
func (s *Server) adminHistoryCSV(w http.ResponseWriter, r *http.Request) {
	if s.deps.History == nil {
		s.notFound(w, r)
		return
	}
	hq, err := s.parseHistoryQuery(r, 0)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeHistoryCSV(w, r, hq, "sluice-usage")
}

// historyCSVHeader is the first line of every history download.
var historyCSVHeader = []string{"time", "plan", "route", "key_id", "key_name", "developer_id", "developer_email", "address_block", "admitted", "rejected"}

func (s *Server) writeHistoryCSV(w http.ResponseWriter, r *http.Request, hq historyQuery, name string) {
	s.streamCSV(w, r, name+"-"+hq.form.Range+"-"+string(hq.res)+".csv", historyCSVHeader, func(write func([]string) error) error {
		return s.deps.History.EachRow(r.Context(), hq.filter, hq.res, hq.from, hq.to, func(row history.Row) error {
			return write([]string{
				row.At.UTC().Format(time.RFC3339), csvText(row.Plan), csvText(row.Route),
				idText(row.KeyID), csvText(row.KeyName), idText(row.UserID), csvText(row.Email), row.Address,
				strconv.FormatInt(row.Admitted, 10), strconv.FormatInt(row.Rejected, 10),
			})
		})
	})
}

// csvText keeps a cell a spreadsheet would run as a formula (a key name
// such as "=HYPERLINK(...)") as text.
func csvText(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}

func idText(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

// shadowCallers is who plan's shadow tiers would have rejected, for the
// plan page; the problem says why the table is empty when it could not be
// read.
func (s *Server) shadowCallers(ctx context.Context, plan string) ([]views.ShadowCaller, string) {
	if s.deps.History == nil {
		return nil, "The usage history is not configured."
	}
	rows, err := s.deps.History.Shadow(ctx, plan, s.now(), 20)
	if err != nil {
		s.log.WarnContext(ctx, "shadow rejections", "plan", plan, "err", err)
		return nil, "The would-be rejections could not be read just now."
	}
	out := make([]views.ShadowCaller, 0, len(rows))
	for _, r := range rows {
		// The engine names a tier "<plan slug>-<tier name>"; show the
		// name the tiers table shows.
		tier := strings.TrimPrefix(r.Tier, plan+"-")
		c := views.ShadowCaller{Tier: tier, KeyID: r.KeyID, LastHour: r.LastHour, LastDay: r.LastDay}
		switch {
		case r.KeyID != 0:
			c.Caller = cmp.Or(r.KeyName, "key "+idText(r.KeyID)) + " (" + cmp.Or(r.Email, "developer "+idText(r.UserID)) + ")"
		case r.UserID != 0:
			c.Caller = cmp.Or(r.Email, "developer "+idText(r.UserID))
		case r.Address != "":
			c.Caller = "anonymous, " + r.Address
		default:
			c.Caller = "anonymous"
		}
		out = append(out, c)
	}
	return out, ""
}

// anonymousTraffic is the last hour of keyless traffic for the overview;
// nil when there is no history or it cannot be read.
func (s *Server) anonymousTraffic(ctx context.Context) *views.AnonymousTraffic {
	if s.deps.History == nil {
		return nil
	}
	to := s.now().UTC().Truncate(time.Minute).Add(time.Minute)
	from := to.Add(-time.Hour)
	f := history.Filter{Anonymous: true}
	plans, err := s.deps.History.Top(ctx, f, history.ByPlan, history.Minute, from, to, 100)
	if err != nil {
		s.log.WarnContext(ctx, "anonymous traffic", "err", err)
		return nil
	}
	blocks, err := s.deps.History.Top(ctx, f, history.ByAddress, history.Minute, from, to, 5)
	if err != nil {
		s.log.WarnContext(ctx, "anonymous traffic", "err", err)
		return nil
	}
	a := &views.AnonymousTraffic{}
	for _, p := range plans {
		a.Traffic = a.Traffic.Add(views.Traffic{Admitted: p.Admitted, Rejected: p.Rejected})
	}
	for _, b := range blocks {
		a.Blocks = append(a.Blocks, views.HistoryBreakdown{Label: b.Label, Traffic: views.Traffic{Admitted: b.Admitted, Rejected: b.Rejected}})
	}
	return a
}

// hasShadowTier reports whether p has a tier in shadow mode.
func hasShadowTier(p plans.Plan) bool {
	for _, l := range p.Limits {
		if l.Mode == enforce.ModeShadow {
			return true
		}
	}
	return false
}
