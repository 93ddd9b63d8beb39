package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/database"
)

// startEmbedded starts a Postgres server for this test binary alone, in
// <tmp>/sluice-testenv-<uid>/<pid>. Test binaries of one `go test ./...` run
// in parallel, so each gets its own cluster. Nothing stops it explicitly: the
// server gets SIGINT when the test binary exits (Linux parent-death signal),
// and the next run removes directories of binaries that are gone.
func startEmbedded() (string, error) {
	root := filepath.Join(os.TempDir(), "sluice-testenv-"+strconv.Itoa(os.Getuid()))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("embedded postgres: %w", err)
	}
	// Under root the server runs as nobody, which must be able to enter.
	if err := os.Chmod(root, 0o755); err != nil {
		return "", fmt.Errorf("embedded postgres: %w", err)
	}
	removeDeadSiblings(root)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := database.StartEmbedded(ctx, database.EmbeddedConfig{
		DataDir: filepath.Join(root, strconv.Itoa(os.Getpid())),
		NoSync:  true,
		// Throwaway clusters: durability costs time and buys nothing here.
		Settings: map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return "", fmt.Errorf("no Postgres server found (set TEST_DATABASE_URL, or run one on 127.0.0.1:5432) and the embedded one failed: %w", err)
	}
	// The maintenance database of the cluster, from which test databases
	// are created.
	return withDatabase(e.URL(), "postgres")
}

// removeDeadSiblings deletes data directories of test binaries that exited.
func removeDeadSiblings(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.Signal(0)) == nil {
			continue
		}
		_ = os.RemoveAll(filepath.Join(root, e.Name()))
	}
}
