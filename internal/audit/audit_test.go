package audit_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestRecordAndList(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	type obj struct {
		Name string `json:"name"`
	}
	records := []struct {
		actor, action, typ, id string
		before, after          any
	}{
		{"user:1", "plan.create", audit.ObjectPlan, "1", nil, obj{"a"}},
		{"token:2", "plan.update", audit.ObjectPlan, "1", obj{"a"}, obj{"b"}},
		{"user:1", "key.revoke", audit.ObjectKey, "7", json.RawMessage(`{"state":"active"}`), json.RawMessage(`{"state":"revoked"}`)},
		{"system", "plan.delete", audit.ObjectPlan, "1", obj{"b"}, nil},
	}
	start := time.Now().Add(-time.Minute)
	for _, r := range records {
		if err := audit.Record(ctx, pool, r.actor, r.action, r.typ, r.id, r.before, r.after); err != nil {
			t.Fatalf("Record(%s): %v", r.action, err)
		}
	}

	t.Run("NewestFirstWithBeforeAndAfter", func(t *testing.T) {
		es, err := audit.List(ctx, pool, audit.Filter{})
		if err != nil || len(es) != 4 {
			t.Fatalf("List = %d entries, %v", len(es), err)
		}
		for i, e := range es {
			r := records[len(records)-1-i]
			if e.ID == 0 || e.At.Before(start) || e.Actor != r.actor || e.Action != r.action || e.ObjectType != r.typ || e.ObjectID != r.id {
				t.Errorf("entry %d = %+v, want %+v", i, e, r)
			}
		}
		if es[0].After != nil || string(es[0].Before) != `{"name": "b"}` {
			t.Errorf("delete entry before=%s after=%s", es[0].Before, es[0].After)
		}
		if es[3].Before != nil || string(es[3].After) != `{"name": "a"}` {
			t.Errorf("create entry before=%s after=%s", es[3].Before, es[3].After)
		}
		if string(es[1].After) != `{"state": "revoked"}` {
			t.Errorf("raw JSON after = %s", es[1].After)
		}
	})

	all, _ := audit.List(ctx, pool, audit.Filter{})
	filters := []struct {
		name string
		f    audit.Filter
		want []string
	}{
		{"ByActor", audit.Filter{Actor: "user:1"}, []string{"key.revoke", "plan.create"}},
		{"ByObject", audit.Filter{ObjectType: audit.ObjectPlan, ObjectID: "1"}, []string{"plan.delete", "plan.update", "plan.create"}},
		{"ByType", audit.Filter{ObjectType: audit.ObjectKey}, []string{"key.revoke"}},
		{"Limit", audit.Filter{Limit: 2}, []string{"plan.delete", "key.revoke"}},
		{"BeforeIDPages", audit.Filter{Limit: 2, BeforeID: all[1].ID}, []string{"plan.update", "plan.create"}},
		{"SinceFuture", audit.Filter{Since: time.Now().Add(time.Hour)}, []string{}},
		{"UntilPast", audit.Filter{Until: start}, []string{}},
		{"SinceAndUntil", audit.Filter{Since: start, Until: time.Now().Add(time.Hour)}, []string{"plan.delete", "key.revoke", "plan.update", "plan.create"}},
	}
	for _, tt := range filters {
		t.Run(tt.name, func(t *testing.T) {
			es, err := audit.List(ctx, pool, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, e := range es {
				got = append(got, e.Action)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("actions = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("actions = %v, want %v", got, tt.want)
				}
			}
		})
	}

	t.Run("RollsBackWithTheChange", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := audit.Record(ctx, tx, "user:1", "plan.create", audit.ObjectPlan, "9", nil, obj{"x"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		es, _ := audit.List(ctx, pool, audit.Filter{ObjectID: "9"})
		if len(es) != 0 {
			t.Fatalf("rolled-back entry persisted: %+v", es)
		}
	})
	t.Run("RefusesUnknownObjectType", func(t *testing.T) {
		if err := audit.Record(ctx, pool, "user:1", "x.y", "widget", "1", nil, nil); err == nil {
			t.Fatal("Record(widget) = nil, want an error")
		}
	})
}
