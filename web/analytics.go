package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/views"
)

// analyticsRange is the range an analytics request names, ending with the
// current hour (24h) or today (7d, 30d).
func (s *Server) analyticsRange(name string) (analytics.Range, error) {
	now := s.now().UTC()
	day := 24 * time.Hour
	switch name {
	case "", "24h":
		to := now.Truncate(time.Hour).Add(time.Hour)
		return analytics.Range{From: to.Add(-day), To: to, Bucket: time.Hour}, nil
	case "7d":
		to := now.Truncate(day).Add(day)
		return analytics.Range{From: to.Add(-7 * day), To: to, Bucket: time.Hour}, nil
	case "30d":
		to := now.Truncate(day).Add(day)
		return analytics.Range{From: to.Add(-30 * day), To: to, Bucket: day}, nil
	}
	return analytics.Range{}, &badTextError{"range", "must be one of 24h, 7d or 30d"}
}

// chart is a stacked series as the page draws it; href, when set, makes
// each series (other than "other") a link with its value.
func chart(testID, title string, st analytics.Stacked, href func(value string) string) views.StackedChart {
	c := views.StackedChart{TestID: testID, Title: title, Start: st.Range.From, Bucket: st.Range.Bucket}
	for _, se := range st.Series {
		cs := views.ChartSeries{Label: se.Label, Points: se.Points, Total: se.Total}
		if href != nil && se.Value != "" {
			cs.Href = href(se.Value)
		}
		c.Series = append(c.Series, cs)
	}
	return c
}

func latencyText3(p analytics.Percentiles) string {
	if p.Count == 0 {
		return "—"
	}
	return views.Millis(p.P50) + " / " + views.Millis(p.P95) + " / " + views.Millis(p.P99)
}

func consumerRows(cs []analytics.Consumer, href func(analytics.Consumer) string) []views.ConsumerRow {
	out := make([]views.ConsumerRow, 0, len(cs))
	for _, c := range cs {
		r := views.ConsumerRow{Label: c.Label, Plan: c.Plan, Requests: c.Requests, Rejected: c.Rejected}
		if href != nil {
			r.Href = href(c)
		}
		out = append(out, r)
	}
	return out
}

func headroomView(ks []analytics.KeyHeadroom) []views.KeyHeadroomView {
	out := make([]views.KeyHeadroomView, 0, len(ks))
	for _, k := range ks {
		v := views.KeyHeadroomView{Label: k.Label, Requests: k.Requests, Max: k.Max}
		for _, t := range k.Tiers {
			v.Tiers = append(v.Tiers, views.TierUseView{Tier: t.Tier, Used: t.Used, Of: t.Of, Percent: t.Percent()})
		}
		out = append(out, v)
	}
	return out
}

func daysNote(rg analytics.Range) string {
	from, to := rg.Days()
	return "Whole UTC days " + from.Format("Jan 2") + " to " + to.Add(-24*time.Hour).Format("Jan 2") + "."
}

// rejectedTotal is the rejections of a status class chart.
func rejectedTotal(st analytics.Stacked) int64 {
	for _, s := range st.Series {
		if s.Value == strconv.Itoa(analytics.ClassRejected) {
			return s.Total
		}
	}
	return 0
}

// adminAnalytics is the operator's analytics: every caller, or one plan's.
func (s *Server) adminAnalytics(w http.ResponseWriter, r *http.Request) {
	if s.deps.Analytics == nil {
		s.notFound(w, r)
		return
	}
	q := r.URL.Query()
	rg, err := s.analyticsRange(q.Get("range"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	plan := q.Get("plan")
	if len(plan) > 100 {
		s.error(w, r, &badTextError{"plan", "is too long"})
		return
	}
	v, err := s.operatorAnalytics(r.Context(), rg, plan)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Range, v.Plan = q.Get("range"), plan
	if v.Range == "" {
		v.Range = "24h"
	}
	if ps, err := s.deps.Plans.List(r.Context()); err == nil {
		for _, p := range ps {
			v.Plans = append(v.Plans, p.Slug)
		}
	}
	s.render(w, r, http.StatusOK, views.AnalyticsPageView(s.page(r, "Analytics", "analytics"), v))
}

func (s *Server) operatorAnalytics(ctx context.Context, rg analytics.Range, plan string) (views.AnalyticsPage, error) {
	a := s.deps.Analytics
	v := views.AnalyticsPage{Operator: true, Action: "/admin/analytics", DaysNote: daysNote(rg)}
	byRoute, byClass, err := a.Traffic(ctx, rg, plan, 5)
	if err != nil {
		return v, err
	}
	points, overall, err := a.Latency(ctx, rg, plan, "")
	if err != nil {
		return v, err
	}
	from, to := rg.Days()
	top, err := a.TopConsumers(ctx, from, to, plan, 0, analytics.ByRequests, 10)
	if err != nil {
		return v, err
	}
	rejected, err := a.TopConsumers(ctx, from, to, plan, 0, analytics.ByRejected, 10)
	if err != nil {
		return v, err
	}
	series, err := a.ConsumerSeries(ctx, rg, top[:min(len(top), 5)])
	if err != nil {
		return v, err
	}
	// The consumers' chart: the five busiest keys, and everyone else.
	consumers := analytics.Stacked{Range: rg, Series: series}
	other := analytics.Series{Label: "other", Points: byRoute.Totals()}
	for i, t := range consumers.Totals() {
		other.Points[i] = max(other.Points[i]-t, 0)
	}
	for _, p := range other.Points {
		other.Total += p
	}
	consumers.Series = append(consumers.Series, other)

	v.ByRoute = chart("analytics-by-route", "Requests by route", byRoute, nil)
	v.ByClass = chart("analytics-by-class", "Requests by status class", byClass, nil)
	v.ByConsumer = chart("analytics-by-consumer", "Requests by consumer (the five busiest keys)", consumers, func(id string) string {
		return "/admin/requests?range=7d&key=" + url.QueryEscape(id)
	})
	v.LatencyChart = views.LatencyChart{TestID: "analytics-latency-chart", Start: rg.From, Bucket: rg.Bucket}
	for _, p := range points {
		v.LatencyChart.P50 = append(v.LatencyChart.P50, p.P50)
		v.LatencyChart.P95 = append(v.LatencyChart.P95, p.P95)
		v.LatencyChart.P99 = append(v.LatencyChart.P99, p.P99)
	}
	for _, t := range byRoute.Totals() {
		v.Requests += t
	}
	v.Rejected = rejectedTotal(byClass)
	v.Latency = latencyText3(overall)
	keyLog := func(c analytics.Consumer) string {
		if c.KeyID == 0 {
			return "/admin/requests?range=7d&address=" + url.QueryEscape(c.Address)
		}
		return "/admin/requests?range=7d&key=" + strconv.FormatInt(c.KeyID, 10)
	}
	v.TopConsumers = consumerRows(top, keyLog)
	v.TopRejected = consumerRows(rejected, keyLog)
	if s.deps.Headroom != nil {
		var slugs []string
		if plan != "" {
			slugs = []string{plan}
		} else if ps, err := s.deps.Plans.List(ctx); err == nil {
			for _, p := range ps {
				slugs = append(slugs, p.Slug)
			}
		}
		heavy, err := s.deps.Headroom.Heaviest(ctx, s.now(), slugs, 3)
		if err != nil {
			s.log.WarnContext(ctx, "analytics headroom", "err", err)
			v.Notes = append(v.Notes, "The limits' state could not be read just now; the headroom table is empty.")
		}
		for _, ph := range heavy {
			v.Headroom = append(v.Headroom, views.PlanHeadroomView{Plan: ph.Plan, Keys: headroomView(ph.Keys)})
		}
	}
	v.Notes = append(v.Notes, "Counted from every decision; figures are added every few seconds by each instance.")
	if s.deps.UsageRecords != nil {
		from, to := rg.Days()
		q := url.Values{"from": {from.Format(time.DateOnly)}, "to": {to.Format(time.DateOnly)}}
		if plan != "" {
			q.Set("plan", plan)
		}
		v.RecordsCSV = "/admin/usage-records.csv?" + q.Encode()
	}
	return v, nil
}

// myAnalytics is a developer's own analytics: their keys' traffic, status
// classes and latency, rejections and headroom.
func (s *Server) myAnalytics(w http.ResponseWriter, r *http.Request) {
	if s.deps.Analytics == nil {
		s.notFound(w, r)
		return
	}
	u, _ := s.currentUser(r)
	q := r.URL.Query()
	rg, err := s.analyticsRange(q.Get("range"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	ctx := r.Context()
	a := s.deps.Analytics
	v := views.AnalyticsPage{Action: "/app/analytics", Range: q.Get("range"), DaysNote: daysNote(rg)}
	if v.Range == "" {
		v.Range = "24h"
	}
	byRoute, err := a.DeveloperByRoute(ctx, rg, u.ID, 5)
	if err != nil {
		s.error(w, r, err)
		return
	}
	byClass, err := a.DeveloperByClass(ctx, rg, u.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	lat, err := a.DeveloperLatency(ctx, rg, u.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	from, to := rg.Days()
	rejected, err := a.TopConsumers(ctx, from, to, "", u.ID, analytics.ByRejected, 20)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.ByRoute = chart("analytics-by-route", "My requests by route", byRoute, nil)
	v.ByClass = chart("analytics-by-class", "My logged requests by status class", byClass, nil)
	v.LatencyChart = views.LatencyChart{TestID: "analytics-latency-chart", Start: rg.From, Bucket: rg.Bucket}
	for _, t := range byRoute.Totals() {
		v.Requests += t
	}
	v.Rejected = rejectedTotal(byClass)
	v.Latency = latencyText3(lat)
	v.TopRejected = consumerRows(rejected, func(c analytics.Consumer) string {
		return "/app/requests?range=7d&outcome=rejected&key=" + strconv.FormatInt(c.KeyID, 10)
	})
	if s.deps.Headroom != nil {
		keys, _, err := s.deps.Keys.List(ctx, apikeys.Filter{UserID: u.ID, Limit: maxOwnKeys})
		if err != nil {
			s.error(w, r, err)
			return
		}
		var cs []analytics.Consumer
		for _, k := range keys {
			cs = append(cs, analytics.Consumer{KeyID: k.ID, UserID: u.ID, Label: k.Name})
		}
		own, err := s.deps.Headroom.Keys(ctx, cs)
		if err != nil {
			s.log.WarnContext(ctx, "analytics headroom", "err", err)
			v.Notes = append(v.Notes, "The limits' state could not be read just now; the headroom table is empty.")
		}
		if len(own) > 0 {
			v.Headroom = []views.PlanHeadroomView{{Plan: "", Keys: headroomView(own)}}
		}
	}
	v.Notes = append(v.Notes, "Requests by route count every call; status classes and latency are read from your request log ("+
		s.requestLogSampleText()+"), so they reach back as far as it keeps entries.")
	s.render(w, r, http.StatusOK, views.AnalyticsPageView(s.page(r, "My analytics", "app-analytics"), v))
}

// requestLogSampleText says how the request log samples admissions.
func (s *Server) requestLogSampleText() string {
	switch n := s.deps.RequestLogAdmitSample; {
	case n == 1:
		return "every call is logged"
	case n > 1:
		return "one admitted call in " + strconv.Itoa(n) + " is logged and counted " + strconv.Itoa(n) + " times"
	}
	return "admitted calls are not logged"
}
