package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/egress"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
)

// newAlertsEnv is the UI with alerts over the test's database.
func newAlertsEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, func(d *web.Deps) {
		// The receivers listen on 127.0.0.1, which only the operator's
		// allowlist opens.
		receivers := egress.Rules{Allow: egress.Allowlist{Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}}
		svc, err := alerts.NewService(d.Pool, d.SessionSecret, receivers)
		if err != nil {
			t.Fatal(err)
		}
		worker, err := alerts.NewWorker(d.Pool, d.SessionSecret, alerts.WorkerOptions{Dialer: egress.NewDialer(egress.Options{Rules: receivers})})
		if err != nil {
			t.Fatal(err)
		}
		d.Alerts, d.AlertSender = svc, worker
	})
}

// hookReceiver records the bodies that arrive with a valid signature.
type hookReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	secret []byte
	valid  []string
	status int
}

func newHookReceiver(t *testing.T, status int) *hookReceiver {
	h := &hookReceiver{status: status}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if alerts.Verify(h.secret, r.Header.Get(alerts.SignatureHeader), body, time.Now(), 0) == nil {
			h.valid = append(h.valid, string(body))
		}
		w.WriteHeader(h.status)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.valid...)
}

func TestMyWebhooks(t *testing.T) {
	e := newAlertsEnv(t)
	dev := e.signedIn(developerEmail)
	rcv := newHookReceiver(t, http.StatusAccepted)

	t.Run("ErrURLRefusedWithTheFieldNamed", func(t *testing.T) {
		for _, bad := range []string{"ftp://example.com/x", "not a url", "https://user:pw@example.com/"} {
			res := dev.post("/app/alerts/webhooks", url.Values{"url": {bad}}, nil)
			if res.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("%q: status %d, want 422", bad, res.StatusCode)
			}
			d := res.doc(t)
			if msg := text(d, "error-url"); msg == "" {
				t.Errorf("%q: no error next to the URL field", bad)
			}
			if v, _ := d.Find(`[data-testid="webhook-url-input"]`).Attr("value"); v != bad {
				t.Errorf("%q: the form shows %q again", bad, v)
			}
		}
	})

	var secret string
	t.Run("RegisterShowsTheSecretOnceAndStartsTheDefaultRule", func(t *testing.T) {
		res := dev.post("/app/alerts/webhooks", url.Values{"url": {rcv.srv.URL + "/hook"}}, nil)
		loc := res.Header.Get("Location")
		if res.StatusCode != http.StatusSeeOther || !strings.HasSuffix(loc, "/secret") {
			t.Fatalf("status %d to %q, want 303 to the secret page", res.StatusCode, loc)
		}
		page := dev.get(loc, nil)
		secret, _ = page.doc(t).Find(`[data-testid="secret"]`).Attr("value")
		if !strings.HasPrefix(secret, "whsec_") || len(secret) < 40 {
			t.Fatalf("secret %q", secret)
		}
		again := dev.get(loc, nil).doc(t)
		if count(again, "secret") != 0 || count(again, "secret-gone") != 1 {
			t.Fatal("the secret was shown twice")
		}
		d := dev.get("/app/alerts", nil).doc(t)
		if got := text(d, "alert-rule-thresholds"); got != "80, 100 %; pace warning" {
			t.Errorf("default rule %q", got)
		}
		if got := text(d, "webhook-url"); got != rcv.srv.URL+"/hook" {
			t.Errorf("listed webhook %q", got)
		}
		if strings.Contains(d.Text(), secret) {
			t.Error("the alerts page shows the secret")
		}
		rcv.mu.Lock()
		rcv.secret = []byte(secret)
		rcv.mu.Unlock()
	})

	t.Run("SendTestEventIsSignedAndLogged", func(t *testing.T) {
		id := webhookID(t, dev)
		res := dev.post("/app/alerts/webhooks/"+id+"/test", url.Values{}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303", res.StatusCode)
		}
		got := rcv.received()
		if len(got) != 1 || !strings.Contains(got[0], `"type":"test"`) {
			t.Fatalf("the receiver got %q, want one signed test event", got)
		}
		d := dev.get(res.Header.Get("Location"), nil).doc(t)
		if text(d, "delivery-status") != "202" || text(d, "delivery-state") != "delivered" ||
			text(d, "delivery-event") != "test" || text(d, "delivery-attempts") != "1" || count(d, "test-sent") != 1 {
			t.Errorf("log row: status %q state %q event %q attempts %q", text(d, "delivery-status"), text(d, "delivery-state"),
				text(d, "delivery-event"), text(d, "delivery-attempts"))
		}
	})

	t.Run("AnotherDevelopersWebhookIsNotFound", func(t *testing.T) {
		id := webhookID(t, dev)
		if _, err := e.users.Create(context.Background(), users.NewUser{Email: "other@example.com", Password: testPassword, Role: users.RoleDeveloper}); err != nil {
			t.Fatal(err)
		}
		other := e.signedIn("other@example.com")
		for _, path := range []string{"/test", "/delete"} {
			if res := other.post("/app/alerts/webhooks/"+id+path, url.Values{}, nil); res.StatusCode != http.StatusNotFound {
				t.Errorf("%s: status %d, want 404", path, res.StatusCode)
			}
		}
		if n := len(rcv.received()); n != 1 {
			t.Errorf("the receiver got %d events, want still 1", n)
		}
		if d := other.get("/app/alerts", nil).doc(t); count(d, "webhook") != 0 || count(d, "delivery") != 0 {
			t.Error("another developer sees the webhook or its log")
		}
	})

	t.Run("DeleteRemovesIt", func(t *testing.T) {
		id := webhookID(t, dev)
		if res := dev.post("/app/alerts/webhooks/"+id+"/delete", url.Values{}, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d", res.StatusCode)
		}
		if d := dev.get("/app/alerts", nil).doc(t); count(d, "webhook") != 0 || count(d, "webhooks-empty") != 1 {
			t.Error("the webhook is still listed")
		}
	})
}

func webhookID(t *testing.T, c *client) string {
	t.Helper()
	id, ok := c.get("/app/alerts", nil).doc(t).Find(`[data-testid="webhook"]`).First().Attr("data-webhook")
	if !ok {
		t.Fatal("no webhook listed")
	}
	return id
}

func TestMyAlertRules(t *testing.T) {
	e := newAlertsEnv(t)
	dev := e.signedIn(developerEmail)
	k, _ := e.createKey(e.dev.ID, "backend")
	tests := []struct {
		name       string
		form       url.Values
		wantStatus int
		wantField  string
		wantError  string
	}{
		{"ErrThresholdNotAPercent", url.Values{"scope": {"account"}, "thresholds": {"80, lots"}}, 422, "thresholds", `"lots" is not a percent from 1 to 100`},
		{"ErrNothingToAlertOn", url.Values{"scope": {"account"}, "thresholds": {""}}, 422, "thresholds", "name at least one percent, or choose the pace warning"},
		{"ErrKeyNotTheirs", url.Values{"scope": {"987654"}, "thresholds": {"50"}}, 422, "key", "is not one of your keys"},
		{"ErrScopeJunk", url.Values{"scope": {"everything"}, "thresholds": {"50"}}, 422, "key", "choose the whole account or one of your keys"},
		{"SavedForTheAccount", url.Values{"scope": {"account"}, "thresholds": {"90 50"}, "email": {"on"}}, 303, "", ""},
		{"SavedForOneKey", url.Values{"scope": {strconv.FormatInt(k.ID, 10)}, "thresholds": {"100"}, "pace": {"on"}}, 303, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := dev.post("/app/alerts/rules", tc.form, nil)
			if res.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.wantStatus)
			}
			if tc.wantField != "" {
				if got := text(res.doc(t), "error-"+tc.wantField); got != tc.wantError {
					t.Errorf("error on %s: %q, want %q", tc.wantField, got, tc.wantError)
				}
			}
		})
	}
	d := dev.get("/app/alerts", nil).doc(t)
	var rows []string
	d.Find(`[data-testid="alert-rule"]`).Each(func(_ int, s *goquery.Selection) {
		rows = append(rows, strings.TrimSpace(s.Find(`[data-testid="alert-rule-scope"]`).Text())+": "+
			strings.TrimSpace(s.Find(`[data-testid="alert-rule-thresholds"]`).Text()))
	})
	want := []string{"Whole account: 50, 90 %", "Key backend: 100 %; pace warning"}
	if strings.Join(rows, "|") != strings.Join(want, "|") {
		t.Fatalf("rules %q, want %q", rows, want)
	}
	// The form starts from the account's rule.
	th, _ := d.Find(`[data-testid="alert-thresholds"]`).Attr("value")
	_, pace := d.Find(`[data-testid="alert-pace"]`).Attr("checked")
	_, email := d.Find(`[data-testid="alert-email"]`).Attr("checked")
	if th != "50, 90" || pace || !email {
		t.Errorf("form shows %q, pace %v, email %v; want the account's rule", th, pace, email)
	}
	// Deleting the key's rule leaves the account's.
	id, _ := d.Find(`[data-testid="alert-rule"]`).Eq(1).Find("form").Attr("action")
	if res := dev.post(id, url.Values{}, nil); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete %s: %d", id, res.StatusCode)
	}
	if d := dev.get("/app/alerts", nil).doc(t); count(d, "alert-rule") != 1 || text(d, "alert-rule-scope") != "Whole account" {
		t.Errorf("after deleting the key's rule: %d rules, first %q", count(d, "alert-rule"), text(d, "alert-rule-scope"))
	}
}
