package adminapi

import (
	"encoding/csv"
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/metering"
)

type usageRecordList struct {
	Items []metering.Record `json:"items"`
	// NextCursor, when not null, is the cursor that fetches the next page.
	NextCursor *string `json:"next_cursor"`
}

// usageRecordFilter reads the records' query: periods starting in [from,
// to) (by default the last 31 days), a developer, a plan, a tier.
func usageRecordFilter(qr *queryReader, now time.Time) metering.Filter {
	f := metering.Filter{
		From: qr.time("from"), To: qr.time("to"),
		DeveloperID: qr.int64Range("developer_id", 0, 1, 1<<62),
		Plan:        qr.str("plan"), Tier: qr.str("tier"),
		AllTiersOnly: qr.oneOf("all_tiers", "true", "false") == "true",
	}
	if f.To.IsZero() {
		f.To = now.Add(24 * time.Hour)
	}
	if f.From.IsZero() {
		f.From = f.To.Add(-31 * 24 * time.Hour)
	}
	if !f.From.Before(f.To) {
		qr.bad("to", "must be after from")
	}
	return f
}

// listUsageRecords returns usage records, oldest period first, paged
// forward with cursor.
func (a *api) listUsageRecords(w http.ResponseWriter, r *http.Request) {
	qr := newQueryReader(r)
	f := usageRecordFilter(qr, a.now())
	limit := int(qr.int64Range("limit", 100, 1, 1000))
	cursor := metering.Cursor(qr.str("cursor"))
	if err := qr.err(); err != nil {
		a.fail(w, r, err)
		return
	}
	items, next, err := a.metering.List(r.Context(), f, cursor, limit)
	if errors.Is(err, metering.ErrCursor) {
		a.fail(w, r, &validationError{fields: []FieldError{{Field: "cursor", Message: metering.ErrCursor.Error()}}})
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := usageRecordList{Items: items}
	if out.Items == nil {
		out.Items = []metering.Record{}
	}
	if next != "" {
		s := string(next)
		out.NextCursor = &s
	}
	writeJSON(w, http.StatusOK, out)
}

// exportUsageRecords streams the records as CSV, at most
// metering.MaxExport of them.
func (a *api) exportUsageRecords(w http.ResponseWriter, r *http.Request) {
	qr := newQueryReader(r)
	f := usageRecordFilter(qr, a.now())
	if err := qr.err(); err != nil {
		a.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Disposition", `attachment; filename="sluice-usage-records-`+f.From.UTC().Format("20060102")+`.csv"`)
	cw := csv.NewWriter(w)
	_ = cw.Write(metering.CSVHeader)
	rows := 0
	err := a.metering.Each(r.Context(), f, func(rec metering.Record) error {
		rows++
		return cw.Write(metering.CSVRow(rec))
	})
	if err != nil && rows == 0 && r.Context().Err() == nil {
		h.Del("Content-Disposition")
		a.fail(w, r, err)
		return
	}
	cw.Flush()
	if err == nil {
		err = cw.Error()
	}
	if err != nil && r.Context().Err() == nil {
		a.logger.Warn("usage records CSV cut short", "err", err, "rows", rows)
	}
}
