package web_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/web"
)

// errorLog records the server's ERROR lines.
type errorLog struct {
	mu    sync.Mutex
	lines bytes.Buffer
}

func (l *errorLog) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines.WriteString(r.Message + "\n")
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }
func (l *errorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines.String()
}

// NUL bytes and invalid UTF-8 in forms and filters are refused as 400
// naming the field, before any query: no 500, no ERROR line.
func TestBadTextRefusedBeforeAnyQuery(t *testing.T) {
	logs := &errorLog{}
	e := newEnvWith(t, func(d *web.Deps) { d.Logger = slog.New(logs) })
	op, dev := e.signedIn(operatorEmail), e.signedIn(developerEmail)
	for _, tt := range []struct {
		name  string
		c     *client
		get   string
		post  string
		form  url.Values
		field string
	}{
		{name: "SignInEmailNUL", c: e.anonymous(), post: "/signin", form: url.Values{"email": {"op\x00@example.com"}, "password": {"x"}}, field: "email"},
		{name: "SignInEmailInvalidUTF8", c: e.anonymous(), post: "/signin", form: url.Values{"email": {"op\xff@example.com"}, "password": {"x"}}, field: "email"},
		{name: "SignUpEmailInvalidUTF8", c: e.anonymous(), post: "/signup", form: url.Values{"email": {"new\xff@example.com"}, "password": {"a long enough password"}}, field: "email"},
		{name: "PlanNameNUL", c: op, post: "/admin/plans", form: url.Values{"slug": {"gold"}, "name": {"Go\x00ld"}}, field: "name"},
		{name: "PlanDescriptionInvalidUTF8", c: op, post: "/admin/plans", form: url.Values{"slug": {"gold"}, "name": {"Gold"}, "description": {"\xc3"}}, field: "description"},
		{name: "KeyNameNUL", c: dev, post: "/app/keys", form: url.Values{"name": {"ci\x00"}}, field: "name"},
		{name: "KeyNameInvalidUTF8", c: dev, post: "/app/keys", form: url.Values{"name": {"ci\xfe"}}, field: "name"},
		{name: "KeysFilterNUL", c: op, get: "/admin/keys?q=%00", field: "q"},
		{name: "KeysFilterInvalidUTF8", c: op, get: "/admin/keys?q=%FF", field: "q"},
		{name: "DevelopersFilterNUL", c: op, get: "/admin/developers?q=a%00", field: "q"},
		{name: "AuditActorNUL", c: op, get: "/admin/audit?actor=%00", field: "actor"},
		{name: "AuditActorInvalidUTF8", c: op, get: "/admin/audit?actor=%C3", field: "actor"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var res response
			if tt.get != "" {
				res = tt.c.get(tt.get, nil)
			} else {
				res = tt.c.post(tt.post, tt.form, nil)
			}
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", res.StatusCode)
			}
			if msg := res.doc(t).Find(`[data-testid="error-message"]`).Text(); !strings.Contains(msg, `"`+tt.field+`"`) {
				t.Errorf("message %q does not name %q", msg, tt.field)
			}
		})
	}
	if _, err := e.plans.GetBySlug(t.Context(), "gold"); err == nil {
		t.Error("a refused plan was written")
	}
	if got := logs.String(); got != "" {
		t.Errorf("ERROR lines logged:\n%s", got)
	}
}
