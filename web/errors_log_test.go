package web_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/web"
)

// An internal error on a page whose path carries a link's token logs the
// path with the token hidden: whoever reads the log must not be able to
// use the link.
func TestInternalErrorLogsNoToken(t *testing.T) {
	logs := &lockedBuffer{}
	e := newEnvWith(t, func(d *web.Deps) { d.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	// Every reset page now fails inside: its table is gone.
	if _, err := e.pool.Exec(t.Context(), `DROP TABLE password_resets CASCADE`); err != nil {
		t.Fatal(err)
	}
	const secret = "s3cr3tResetTokenValue"
	res := e.anonymous().get("/reset/"+secret, nil)
	if res.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", res.StatusCode)
	}
	line := logs.String()
	if !strings.Contains(line, "request failed") {
		t.Fatalf("no error logged: %q", line)
	}
	if strings.Contains(line, secret) {
		t.Errorf("the log holds the token: %q", line)
	}
	if !strings.Contains(line, "/reset/{token}") {
		t.Errorf("the log does not name the page: %q", line)
	}
}
