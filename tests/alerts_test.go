package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/plans"
)

// signedReceiver is a webhook endpoint that keeps the events arriving with
// a valid signature, and counts those without.
type signedReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	secret  []byte
	events  []alerts.Event
	invalid int
}

func newSignedReceiver(t *testing.T) *signedReceiver {
	r := &signedReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		var ev alerts.Event
		if r.secret == nil || alerts.Verify(r.secret, req.Header.Get(alerts.SignatureHeader), body, time.Now(), 0) != nil ||
			json.Unmarshal(body, &ev) != nil {
			r.invalid++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		r.events = append(r.events, ev)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *signedReceiver) got() ([]alerts.Event, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]alerts.Event(nil), r.events...), r.invalid
}

// count is how many received events have the type and threshold.
func (r *signedReceiver) count(typ string, threshold int) int {
	evs, _ := r.got()
	n := 0
	for _, e := range evs {
		if e.Type == typ && e.ThresholdPercent == threshold {
			n++
		}
	}
	return n
}

// TestWebhookAlertsInTheBrowser: a developer registers a webhook in the
// portal, copies its secret, presses "send test event", and the test's
// receiver gets it with a valid signature while the delivery log shows the
// answer; then traffic through the real middleware crosses 80 % and 100 %
// of a limit and each crossing arrives exactly once.
func TestWebhookAlertsInTheBrowser(t *testing.T) {
	// The receiver listens on 127.0.0.1: a private receiver the operator allows.
	p := startPortalWith(t, portalConfig{env: map[string]string{"PORTAL_ALERT_INTERVAL": "200ms", "PORTAL_OUTBOUND_ALLOW": "127.0.0.1"}})
	_, key := p.keyOnPlan(t, "alerting", plans.LimitInput{Name: "daily", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 86400})
	rcv := newSignedReceiver(t)
	ctx := browser(t, 90*time.Second)
	signIn(t, ctx, p.URL, devEmail)
	do(t, ctx, "register a webhook",
		chromedp.Click(tid("nav-app-alerts")),
		chromedp.WaitVisible(tid("webhook-form")),
		chromedp.SendKeys(tid("webhook-url-input"), rcv.srv.URL+"/sluice"),
		chromedp.Click(tid("webhook-create")),
		chromedp.WaitVisible(tid("secret")),
	)
	secret, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="secret"]').value`))
	if err != nil || len(secret) < 40 {
		t.Fatalf("read the secret: %q %v", secret, err)
	}
	rcv.mu.Lock()
	rcv.secret = []byte(secret)
	rcv.mu.Unlock()
	screenshot(t, ctx, "webhook-secret")
	do(t, ctx, "send a test event",
		chromedp.Click(tid("secret-done")),
		chromedp.WaitVisible(tid("webhook-test")),
		chromedp.Click(tid("webhook-test")),
		chromedp.WaitVisible(tid("test-sent")),
	)
	if got := textOf(t, ctx, "delivery-status"); got != "200" {
		t.Errorf("the delivery log shows response %q, want 200", got)
	}
	if got := textOf(t, ctx, "delivery-event"); got != alerts.EventTest {
		t.Errorf("the delivery log shows event %q, want test", got)
	}
	screenshot(t, ctx, "delivery-log")
	if evs, invalid := rcv.got(); len(evs) != 1 || evs[0].Type != alerts.EventTest || invalid != 0 {
		t.Fatalf("the receiver got %+v (%d unsigned), want one signed test event", evs, invalid)
	}

	// Registering the webhook started the default rule: 80 % and 100 %.
	spend := func(n int) {
		for range n {
			if s := apiStatus(t, p.URL, "/api/search?q=alerts", key); s != http.StatusOK {
				t.Fatalf("GET /api/search: %d", s)
			}
		}
	}
	spend(8)
	if took, ok := eventually(20*time.Second, func() bool { return rcv.count(alerts.EventThreshold, 80) == 1 }); !ok {
		t.Fatalf("no 80%% alert within %v", took)
	}
	spend(2)
	if took, ok := eventually(20*time.Second, func() bool { return rcv.count(alerts.EventThreshold, 100) == 1 }); !ok {
		t.Fatalf("no 100%% alert within %v", took)
	}
	// Past the limit, a dozen more evaluator rounds fire nothing more.
	if s := apiStatus(t, p.URL, "/api/search?q=alerts", key); s != http.StatusTooManyRequests {
		t.Fatalf("11th request: %d, want 429", s)
	}
	time.Sleep(2500 * time.Millisecond)
	evs, invalid := rcv.got()
	if len(evs) != 3 || invalid != 0 || rcv.count(alerts.EventThreshold, 80) != 1 || rcv.count(alerts.EventThreshold, 100) != 1 {
		t.Fatalf("the receiver got %d events (%d unsigned), want the test, one 80%% and one 100%%: %+v", len(evs), invalid, evs)
	}
	do(t, ctx, "reload the log", chromedp.Navigate(p.URL+"/app/alerts"), chromedp.WaitVisible(tid("deliveries")))
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="delivery"]').length`))
	if err != nil || n != 3 {
		t.Fatalf("the delivery log lists %d deliveries (%v), want 3", n, err)
	}
	if got := textOf(t, ctx, "delivery-event"); got != alerts.EventThreshold {
		t.Errorf("the newest delivery is %q, want threshold.crossed", got)
	}
}
