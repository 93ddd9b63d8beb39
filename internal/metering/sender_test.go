package metering_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/metering"
)

// receiver is a metering webhook that refuses its first fail deliveries.
type receiver struct {
	mu         sync.Mutex
	fail       int
	deliveries []string   // Sluice-Delivery of each request
	ids        [][]string // the record ids of each request
	taken      map[string]metering.Event
	bad        []string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.deliveries = append(rc.deliveries, r.Header.Get(alerts.DeliveryHeader))
	if err := alerts.Verify([]byte(secret), r.Header.Get(alerts.SignatureHeader), body, time.Now(), 0); err != nil {
		rc.bad = append(rc.bad, "signature: "+err.Error())
	}
	if r.Header.Get(alerts.EventHeader) != metering.EventType || r.Header.Get("Content-Type") != "application/json" {
		rc.bad = append(rc.bad, "headers: "+r.Header.Get(alerts.EventHeader))
	}
	var d metering.Delivery
	if err := json.Unmarshal(body, &d); err != nil {
		rc.bad = append(rc.bad, "body: "+err.Error())
	}
	var ids []string
	for _, e := range d.Events {
		ids = append(ids, e.Identifier)
	}
	rc.ids = append(rc.ids, ids)
	if rc.fail > 0 {
		rc.fail--
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	}
	for _, e := range d.Events {
		rc.taken[e.Identifier] = e // a second delivery of an id replaces, never adds
	}
}

const secret = "0123456789abcdef-metering"

func TestSenderDeliversSignedRecordsUntilTaken(t *testing.T) {
	day := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	w := newWorld(t, day.Add(2*time.Hour))
	ctx := context.Background()
	w.call(t, w.annA, search, 3)
	w.call(t, w.bobKey, items, 2)
	w.flush(t)
	w.clk.Set(day.Add(24*time.Hour + 3*time.Minute))
	if n, err := metering.NewMeter(w.pool, metering.Options{Now: w.clk.Now}).Close(ctx); err != nil || n != 5 {
		t.Fatalf("close: %d records, %v", n, err)
	}
	rc := &receiver{fail: 1, taken: map[string]metering.Event{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	reg := prometheus.NewRegistry()
	s, err := metering.NewSender(w.pool, metering.SenderOptions{URL: srv.URL, Secret: []byte(secret), Batch: 3,
		RetryBase: time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// The first batch of 3 is refused and rescheduled; the rest goes.
	if n, err := s.SendDue(ctx); n != 3 || err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("first batch: %d, %v; want 3 not taken with the 503", n, err)
	}
	time.Sleep(20 * time.Millisecond) // past the retry's 1 ms wait
	sent := 0
	for range 5 {
		n, err := s.SendDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	if sent != 5 {
		t.Errorf("%d records sent after the failure, want all 5 (the 3 again and the 2 others)", sent)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bad) > 0 {
		t.Errorf("the receiver found: %v", rc.bad)
	}
	if len(rc.taken) != 5 {
		t.Errorf("the receiver took %d records, want 5", len(rc.taken))
	}
	if len(rc.deliveries) != 3 || rc.deliveries[0] == "" {
		t.Fatalf("deliveries %q, want 3 requests with ids", rc.deliveries)
	}
	// The refused records come again under the same ids.
	again := strings.Join(append(rc.ids[1], rc.ids[2]...), " ")
	for _, id := range rc.ids[0] {
		if !strings.Contains(again, id) {
			t.Errorf("refused record %s was not sent again", id)
		}
	}
	e, ok := rc.taken[metering.RecordID(w.ann.ID, "pro", "search", day, 0)]
	if !ok {
		t.Fatal("ann's search record was not delivered under its id")
	}
	if e.EventName != metering.DefaultEventName || e.Payload.Value != "3" || e.Payload.DeveloperID == "" || e.Payload.DeveloperEmail != "ann@example.com" ||
		e.Payload.Plan != "pro" || e.Payload.Tier != "search" || e.Payload.PeriodStart != "2026-03-10T00:00:00Z" || e.Payload.PeriodEnd != "2026-03-11T00:00:00Z" ||
		!e.Timestamp.Equal(day) || e.Payload.Revision != "0" {
		t.Errorf("event %+v", e)
	}
	if n := scalar(t, w.pool, `SELECT count(*) FROM meter_records WHERE delivered_at IS NULL`); n != 0 {
		t.Errorf("%d records still pending", n)
	}
	var attempts int64
	var last string
	if err := w.pool.QueryRow(ctx, `SELECT max(attempts), max(last_error) FROM meter_records`).Scan(&attempts, &last); err != nil || attempts != 2 || last != "" {
		t.Errorf("attempts %d, last error %q (%v); want 2 for the refused batch and no error left", attempts, last, err)
	}
}

func TestSenderRefusesABadURLOrAShortSecret(t *testing.T) {
	for _, tt := range []struct {
		name, url, secret string
	}{
		{"NoScheme", "example.com/hook", secret},
		{"FTP", "ftp://example.com/hook", secret},
		{"ShortSecret", "https://example.com/hook", "short"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := metering.NewSender(nil, metering.SenderOptions{URL: tt.url, Secret: []byte(tt.secret)}); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestReaderPagesAndExports(t *testing.T) {
	day := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	w := newWorld(t, day.Add(time.Hour))
	ctx := context.Background()
	w.call(t, w.annA, search, 1)
	w.clk.Set(day.Add(2 * time.Hour))
	w.call(t, w.bobKey, items, 1)
	w.flush(t)
	w.clk.Set(day.Add(4 * time.Hour))
	if _, err := metering.NewMeter(w.pool, metering.Options{Period: metering.Hour, Now: w.clk.Now}).Close(ctx); err != nil {
		t.Fatal(err)
	}
	rd := metering.NewReader(w.pool)
	all := metering.Filter{From: day, To: day.Add(24 * time.Hour)}
	var got []string
	var cur metering.Cursor
	for page := 0; page < 10; page++ {
		rs, next, err := rd.List(ctx, all, cur, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			got = append(got, r.DeveloperEmail+"/"+r.Tier+"/"+r.PeriodStart.Format("15"))
		}
		if next == "" {
			break
		}
		cur = next
	}
	want := "ann@example.com//01 ann@example.com/all/01 ann@example.com/search/01 bob@example.com//02 bob@example.com/all/02"
	gotSorted := strings.Join(got, " ")
	if len(got) != 5 || !strings.Contains(gotSorted, "bob@example.com/all/02") || !strings.HasPrefix(gotSorted, "ann@example.com") {
		t.Errorf("records %q, want the five of %q, the earlier hour first", gotSorted, want)
	}
	if rs, _, err := rd.List(ctx, metering.Filter{From: day, To: day.Add(24 * time.Hour), DeveloperID: w.bob.ID, AllTiersOnly: true}, "", 10); err != nil || len(rs) != 1 || rs[0].Requests != 1 {
		t.Errorf("bob's every-request records: %+v, %v", rs, err)
	}
	if _, _, err := rd.List(ctx, all, "nonsense", 10); err == nil {
		t.Error("a forged cursor was accepted")
	}
	n := 0
	if err := rd.Each(ctx, metering.Filter{From: day, To: day.Add(24 * time.Hour), Tier: "search"}, func(r metering.Record) error {
		n++
		if row := metering.CSVRow(r); len(row) != len(metering.CSVHeader) || row[4] != "search" || row[8] != "1" {
			t.Errorf("CSV row %q", row)
		}
		return nil
	}); err != nil || n != 1 {
		t.Errorf("export of the search tier: %d records, %v", n, err)
	}
}
