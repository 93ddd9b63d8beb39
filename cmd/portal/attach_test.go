package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsBesideARunningPortal runs the README's set-up (no
// DATABASE_URL: an embedded Postgres in the data directory) and, while it
// serves, the plans and users commands on the same data directory: they
// use the portal's own database (an applied edit is what the serving
// portal shows), and on a data directory without a database they fail
// naming it instead of creating a second, empty one.
func TestCommandsBesideARunningPortal(t *testing.T) {
	dir := t.TempDir()
	for p := dir; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"PORTAL_ADDR": "127.0.0.1:0", "PORTAL_DATA_DIR": filepath.Join(dir, "data"), "PORTAL_METRICS_ADDR": "127.0.0.1:0"}
	running := startPortal(t, env)
	ctx := context.Background()
	portal := func(env map[string]string, args ...string) (string, error) {
		var out strings.Builder
		err := run(ctx, append([]string{"portal"}, args...), envOf(env), &out)
		return out.String(), err
	}

	exported, err := portal(env, "plans", "export")
	if err != nil {
		t.Fatalf("plans export beside the running portal: %v", err)
	}
	if !strings.Contains(exported, "name: Demo API") {
		t.Fatalf("the export is not the running portal's (no demo service):\n%s", exported)
	}
	file := filepath.Join(dir, "plans.yaml")
	edited := strings.Replace(exported, "name: Free\n", "name: Gratis\n", 1)
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := portal(env, "plans", "apply", file); err != nil || !strings.Contains(out, "applied 1 changes") {
		t.Fatalf("plans apply beside the running portal: %v %q", err, out)
	}
	if out, err := portal(env, "plans", "diff", file); err != nil || out != "no changes\n" {
		t.Fatalf("plans diff after the apply: %v %q", err, out)
	}
	if status, body := get(t, running.url+"/docs"); status != 200 || !strings.Contains(body, "Gratis") {
		t.Errorf("the serving portal does not show the applied edit: %d", status)
	}
	out, err := portal(env, "users", "reset-password", defaultAdminEmail)
	if err != nil || !strings.Contains(out, "new password for "+defaultAdminEmail) {
		t.Fatalf("users reset-password beside the running portal: %v %q", err, out)
	}

	elsewhere := map[string]string{"PORTAL_DATA_DIR": filepath.Join(dir, "other")}
	for _, args := range [][]string{{"plans", "export"}, {"users", "reset-password", defaultAdminEmail}} {
		_, err := portal(elsewhere, args...)
		if err == nil || !strings.Contains(err.Error(), "no portal database in PORTAL_DATA_DIR "+elsewhere["PORTAL_DATA_DIR"]) {
			t.Errorf("%v on a data directory without a database: %v", args, err)
		}
	}
	if _, err := os.Stat(filepath.Join(elsewhere["PORTAL_DATA_DIR"], "postgres")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a command created a database in a data directory that had none: %v", err)
	}
}
