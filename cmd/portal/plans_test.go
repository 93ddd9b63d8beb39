package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/traffic"
)

// TestPlansCommands runs export, diff and apply as an operator would: an
// edit is shown by diff, not written by --dry-run, written by apply, and
// the next export holds it.
func TestPlansCommands(t *testing.T) {
	env := baseEnv(t)
	env["DATABASE_URL"] = testenv.PostgresURL(t)
	ctx := context.Background()
	portal := func(args ...string) (string, error) {
		var out strings.Builder
		err := run(ctx, append([]string{"portal"}, args...), envOf(env), &out)
		return out.String(), err
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "plans.yaml")
	if out, err := portal("plans", "export", "-o", file); err != nil || out != "" {
		t.Fatalf("export: %v %q", err, out)
	}
	exported, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := portal("plans", "diff", file, "--prune"); err != nil || out != "no changes\n" {
		t.Fatalf("diff of the export: %v %q", err, out)
	}
	if !strings.Contains(string(exported), "name: Demo API") {
		t.Fatalf("export lacks the demo service:\n%s", exported)
	}
	edited := strings.Replace(string(exported), "name: Demo API", "name: Demo shop", 1)
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "~ service demo\n    ~ name: \"Demo API\" -> \"Demo shop\"\n"
	// A diff with changes prints them and fails, so a pipeline can gate
	// on it; its exit status is not that of an error.
	out, err := portal("plans", "diff", file)
	var coded interface{ ExitCode() int }
	if !errors.As(err, &coded) || coded.ExitCode() != ExitPendingChanges || out != want {
		t.Fatalf("diff of an edited file: %v %q, want exit status %d and the diff", err, out, ExitPendingChanges)
	}
	if out, err := portal("plans", "apply", "--dry-run", file); err != nil || out != want+"dry run: nothing written\n" {
		t.Fatalf("apply --dry-run: %v %q", err, out)
	}
	if out, err := portal("plans", "export"); err != nil || out != string(exported) {
		t.Fatalf("dry run changed the export: %v\n%s", err, out)
	}
	if out, err := portal("plans", "apply", file); err != nil || out != want+"applied 1 changes\n" {
		t.Fatalf("apply: %v %q", err, out)
	}
	if out, err := portal("plans", "export", "--format", "json"); err != nil || !strings.Contains(out, `"name": "Demo shop"`) {
		t.Fatalf("export after apply: %v\n%s", err, out)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nplans:\n  - slug: x\n    nmae: X\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = portal("plans", "apply", bad)
	if err == nil || !strings.Contains(err.Error(), bad+":4: plans[0].nmae: unknown field") {
		t.Fatalf("apply of a bad file: %v", err)
	}
	twoDocs := filepath.Join(dir, "two.yaml")
	if err := os.WriteFile(twoDocs, []byte(edited+"---\nversion: 1\nplans: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := portal("plans", "diff", twoDocs); err == nil || !strings.Contains(err.Error(), "a second YAML document") || errors.As(err, &coded) {
		t.Fatalf("diff of a file with two documents: %v", err)
	}
	for _, args := range [][]string{{"plans"}, {"plans", "sideways"}, {"plans", "apply"}, {"plans", "export", "--format", "toml"}} {
		if _, err := portal(args...); err == nil {
			t.Errorf("%v: no error", args)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%v: %v is not a usage error", args, err)
		}
	}
}

func TestPlaygroundCommand(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"portal", "playground", "--preset", "token-bucket-seed", "--algorithms", "token_bucket"}, envOf(baseEnv(t)), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "token_bucket *                  11         1         1") {
		t.Fatalf("output:\n%s", out.String())
	}
}

// TestPlaygroundCommandRecorded replays traffic recorded in Redis, as a
// serving portal with the same REDIS_URL and prefix would have written it.
func TestPlaygroundCommandRecorded(t *testing.T) {
	testenv.RealRedis(t, "BITFIELD") // the recorder's per-second counters
	rdb, prefix := testenv.Redis(t)
	rec := traffic.NewRecorder(traffic.NewRedisSink(rdb, prefix), traffic.Options{})
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	for range 15 {
		rec.Record("GET /api/search", "key:7", at)
	}
	rec.Flush(context.Background())
	env := baseEnv(t)
	env["REDIS_URL"] = testenv.RedisURL(t)
	env["PORTAL_REDIS_PREFIX"] = prefix
	var out strings.Builder
	err := run(context.Background(), []string{"portal", "playground", "--route", "GET /api/search", "--hours", "1",
		"--algorithm", "fixed_window", "--limit", "10", "--window-seconds", "60", "--burst", "0", "--algorithms", "fixed_window"}, envOf(env), &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fixed_window *                  10         5         1", "sampling: 1 subjects in full, 0 sampled"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	delete(env, "REDIS_URL")
	if err := run(context.Background(), []string{"portal", "playground", "--route", "GET /api/search"}, envOf(env), &out); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Errorf("without REDIS_URL: %v", err)
	}
}
