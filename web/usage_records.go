package web

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/metering"
)

// usageRecordsCSV downloads the usage records of periods starting on the
// UTC days [from, to) (by default the last 31 days), of one plan when
// plan is set: the same rows as the admin API's /usage-records.csv.
func (s *Server) usageRecordsCSV(w http.ResponseWriter, r *http.Request) {
	if s.deps.UsageRecords == nil {
		s.notFound(w, r)
		return
	}
	q := r.URL.Query()
	f := metering.Filter{Plan: q.Get("plan")}
	f.To = s.now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	f.From = f.To.Add(-31 * 24 * time.Hour)
	for _, d := range []struct {
		field string
		dst   *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(d.field); v != "" {
			t, err := time.Parse(time.DateOnly, v)
			if err != nil {
				s.error(w, r, &badTextError{d.field, "must be a date such as 2026-01-31"})
				return
			}
			*d.dst = t
		}
	}
	if !f.From.Before(f.To) {
		s.error(w, r, &badTextError{"to", "must be after from"})
		return
	}
	if len(f.Plan) > 100 {
		s.error(w, r, &badTextError{"plan", "is too long"})
		return
	}
	s.streamCSV(w, r, "sluice-usage-records-"+f.From.Format("20060102")+".csv", metering.CSVHeader, func(write func([]string) error) error {
		return s.deps.UsageRecords.Each(r.Context(), f, func(rec metering.Record) error { return write(metering.CSVRow(rec)) })
	})
}
