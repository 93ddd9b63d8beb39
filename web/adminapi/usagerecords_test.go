package adminapi

import (
	"context"
	"encoding/csv"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/metering"
	"github.com/sluicehq/sluice/internal/users"
)

func TestUsageRecords(t *testing.T) {
	e := newEnv(t)
	ann := e.user("ann@example.com", users.RoleDeveloper, nil)
	bob := e.user("bob@example.com", users.RoleDeveloper, nil)
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour)
	// Three days of ann (every request, and tier search), one of bob.
	add := func(user int64, tier string, start time.Time, rev int, requests int64) {
		t.Helper()
		_, err := e.pool.Exec(context.Background(), `INSERT INTO meter_records (id, user_id, plan, tier, period_start, period_end, revision, requests, rejected)
VALUES ($1, $2, 'pro', $3, $4, $5, $6, $7, 1)`, metering.RecordID(user, "pro", tier, start, rev), user, tier, start, start.Add(24*time.Hour), rev, requests)
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		add(ann.ID, "", day.Add(time.Duration(i)*24*time.Hour), 0, 10)
		add(ann.ID, "search", day.Add(time.Duration(i)*24*time.Hour), 0, 4)
	}
	add(ann.ID, "", day, 1, 2) // late requests of the first day
	add(bob.ID, "", day, 0, 7)

	list := func(query string) usageRecordList {
		t.Helper()
		res := e.do("GET", Prefix+"/usage-records"+query, testBootstrap, nil)
		if res.status != http.StatusOK {
			t.Fatalf("%s: %d %s", query, res.status, res.body)
		}
		var out usageRecordList
		res.decode(t, &out)
		return out
	}
	t.Run("Everything", func(t *testing.T) {
		out := list("")
		if len(out.Items) != 8 || out.NextCursor != nil {
			t.Fatalf("%d records, cursor %v; want 8 on one page", len(out.Items), out.NextCursor)
		}
		first := out.Items[0]
		if !first.PeriodStart.Equal(day) || first.Plan != "pro" || first.PeriodEnd.Sub(first.PeriodStart) != 24*time.Hour || first.DeliveredAt != nil {
			t.Errorf("first record %+v", first)
		}
	})
	t.Run("Pages", func(t *testing.T) {
		var ids []string
		q := "?limit=3"
		for range 5 {
			out := list(q)
			for _, r := range out.Items {
				ids = append(ids, r.ID)
			}
			if out.NextCursor == nil {
				break
			}
			q = "?limit=3&cursor=" + url.QueryEscape(*out.NextCursor)
		}
		if len(ids) != 8 || strings.Join(ids, ",") == "" {
			t.Errorf("%d records over the pages, want 8", len(ids))
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if seen[id] {
				t.Errorf("record %s on two pages", id)
			}
			seen[id] = true
		}
	})
	t.Run("Filters", func(t *testing.T) {
		sum := func(out usageRecordList) (n int64) {
			for _, r := range out.Items {
				n += r.Requests
			}
			return n
		}
		if got := sum(list("?all_tiers=true&developer_id=" + strconv.FormatInt(ann.ID, 10))); got != 32 {
			t.Errorf("ann's every-request records sum to %d, want 32", got)
		}
		if got := sum(list("?tier=search")); got != 12 {
			t.Errorf("the search tier's records sum to %d, want 12", got)
		}
		from := day.Add(24 * time.Hour).Format(time.RFC3339)
		if got := len(list("?from=" + url.QueryEscape(from)).Items); got != 4 {
			t.Errorf("%d records from the second day, want 4", got)
		}
	})
	t.Run("CSV", func(t *testing.T) {
		res := e.do("GET", Prefix+"/usage-records.csv?developer_id="+strconv.FormatInt(bob.ID, 10), testBootstrap, nil)
		if res.status != http.StatusOK || res.header.Get("Content-Type") != "text/csv; charset=utf-8" {
			t.Fatalf("CSV: %d %s", res.status, res.header.Get("Content-Type"))
		}
		rows, err := csv.NewReader(strings.NewReader(string(res.body))).ReadAll()
		if err != nil || len(rows) != 2 || strings.Join(rows[0], ",") != strings.Join(metering.CSVHeader, ",") {
			t.Fatalf("CSV %q (%v)", rows, err)
		}
		if r := rows[1]; r[0] != metering.RecordID(bob.ID, "pro", "", day, 0) || r[2] != "bob@example.com" || r[8] != "7" {
			t.Errorf("bob's row %q", r)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		for _, q := range []string{"?from=yesterday", "?limit=0", "?cursor=forged", "?all_tiers=maybe", "?developer_id=x",
			"?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z"} {
			res := e.do("GET", Prefix+"/usage-records"+q, testBootstrap, nil)
			if res.status != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", q, res.status)
				continue
			}
			if p := res.problem(t); len(p.Errors) == 0 {
				t.Errorf("%s: problem names no field: %+v", q, p)
			}
		}
		if res := e.do("GET", Prefix+"/usage-records", "", nil); res.status != http.StatusUnauthorized {
			t.Errorf("without a token: %d, want 401", res.status)
		}
	})
}
