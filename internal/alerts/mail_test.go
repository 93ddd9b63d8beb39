package alerts_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/alerts"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/mail"
	"github.com/sluicehq/sluice/internal/testenv"
)

func TestEmailAlertThroughSMTP(t *testing.T) {
	f := newFixture(t, testenv.Postgres(t), dailyWindow)
	ctx := context.Background()
	srv := testenv.SMTP(t, testenv.SMTPOptions{User: "alerts", Pass: "s3cret pass", FailRcpt: 1})
	mailer, err := mail.New(srv.URL(), "alerts@sluice.example", mail.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.svc.EnsureDefaultRule(ctx, f.dev.ID); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	store := memstore.New(memstore.Options{Now: func() time.Time { return frozen }})
	ev := f.evaluator(f.pool, store, true)
	w, err := alerts.NewWorker(f.pool, sessionSecret, alerts.WorkerOptions{Dialer: receiverDialer(), Mailer: mailer, RetryBase: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.spend(store, 8)
	if n := f.evaluate(ev); n != 1 {
		t.Fatalf("fired %d, want 1", n)
	}
	drain(t, f.pool, w)
	got := srv.Received()
	if len(got) != 1 {
		t.Fatalf("the SMTP server received %d mails, want 1 (after one 451)", len(got))
	}
	m := got[0]
	if !m.Authed || m.From != "alerts@sluice.example" || len(m.To) != 1 || m.To[0] != "dev@example.com" {
		t.Errorf("envelope: %+v", m)
	}
	if m.Header("Subject") != "Sluice: 80% of "+f.limits[0].Name+" used" ||
		!strings.Contains(m.Body(), "Used: 8 of 10 (80%)") {
		t.Errorf("message:\n%s", m.Data)
	}
	log, err := f.svc.Deliveries(ctx, f.dev.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || log[0].State != "delivered" || log[0].Attempts != 2 || log[0].LastStatus == nil ||
		*log[0].LastStatus != 250 || log[0].Destination != "dev@example.com" {
		t.Fatalf("delivery log: %+v", log)
	}
}
