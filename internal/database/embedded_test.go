//go:build unix

package database_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/database"
)

// openDir returns a fresh directory every account can enter, as the embedded
// server needs when the test runs as root (t.TempDir is private to root).
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for p := dir; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func startEmbedded(t *testing.T, dataDir string) *database.Embedded {
	t.Helper()
	e, err := database.StartEmbedded(context.Background(), database.EmbeddedConfig{
		DataDir:  dataDir,
		NoSync:   true,
		Settings: map[string]string{"fsync": "off"},
	})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	return e
}

func queryInt(t *testing.T, url, sql string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestEmbedded runs one cluster through its life: first start, restart on the
// same data, and restart after the server was killed and its PID reused.
// When the test runs as root this is the path root takes: the server runs as
// "nobody".
func TestEmbedded(t *testing.T) {
	ctx := context.Background()
	dataDir := filepath.Join(openDir(t), "data")

	first := startEmbedded(t, dataDir)
	if _, err := execSQL(first.URL(), "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		fi, err := os.Stat(filepath.Join(dataDir, "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		nobody, _ := user.Lookup("nobody")
		if got := strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)); got != nobody.Uid {
			t.Errorf("cluster owned by uid %s, want nobody (%s)", got, nobody.Uid)
		}
	}
	if err := first.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "postgres", "postmaster.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("postmaster.pid after a clean stop: %v, want it gone", err)
	}

	t.Run("SecondStartReusesTheData", func(t *testing.T) {
		second := startEmbedded(t, dataDir)
		if second.URL() != first.URL() {
			t.Errorf("URL changed between starts (port or password not kept)")
		}
		if n := queryInt(t, second.URL(), "SELECT n FROM kept"); n != 42 {
			t.Errorf("row = %d, want 42", n)
		}
		if err := second.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	})

	t.Run("StartsAfterAKillWithTheStalePIDReused", func(t *testing.T) {
		third := startEmbedded(t, dataDir)
		pidFile := filepath.Join(dataDir, "postgres", "postmaster.pid")
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(b), "\n", 2)
		pid, _ := strconv.Atoi(lines[0])
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitGone(t, pid)
		_ = third.Stop(ctx)
		// The PID now names a live process that is not postgres: this test.
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"+lines[1]), 0o600); err != nil {
			t.Fatal(err)
		}
		fourth := startEmbedded(t, dataDir)
		if n := queryInt(t, fourth.URL(), "SELECT n FROM kept"); n != 42 {
			t.Errorf("row = %d, want 42", n)
		}
	})

	t.Run("RefusesADataDirInUse", func(t *testing.T) {
		running := startEmbedded(t, dataDir)
		_, err := database.StartEmbedded(ctx, database.EmbeddedConfig{DataDir: dataDir})
		if err == nil || !strings.Contains(err.Error(), "already running") {
			t.Errorf("second server on one data dir: error %v, want \"already running\"", err)
		}
		if n := queryInt(t, running.URL(), "SELECT 1"); n != 1 {
			t.Errorf("first server broken by the refused second")
		}
	})
}

func TestEmbeddedBadDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dir     string
		root    bool // only meaningful as root
		wantMsg string
	}{
		{"ErrDataDirUnderAFile", filepath.Join(file, "data"), false, "create"},
		{"ErrDataDirUnreachableByServerAccount", filepath.Join(t.TempDir(), "data"), true, "cannot enter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("the server account only exists when running as root")
			}
			_, err := database.StartEmbedded(context.Background(), database.EmbeddedConfig{DataDir: tt.dir})
			if !errors.Is(err, database.ErrDataDir) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error = %v, want ErrDataDir mentioning %q", err, tt.wantMsg)
			}
		})
	}
}

// TestEmbeddedAsNormalUser starts a cluster without the root-only account
// switch. As root it re-runs itself as user nobody to get there.
func TestEmbeddedAsNormalUser(t *testing.T) {
	if os.Getenv("SLUICE_TEST_CHILD_DATA_DIR") != "" {
		e := startEmbedded(t, os.Getenv("SLUICE_TEST_CHILD_DATA_DIR"))
		if n := queryInt(t, e.URL(), "SELECT 1"); n != 1 {
			t.Fatalf("SELECT 1 = %d", n)
		}
		return
	}
	if os.Geteuid() != 0 {
		e := startEmbedded(t, filepath.Join(t.TempDir(), "data"))
		if n := queryInt(t, e.URL(), "SELECT 1"); n != 1 {
			t.Fatalf("SELECT 1 = %d", n)
		}
		return
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("no user nobody to run as: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	dir := openDir(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "database.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, uid, gid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestEmbeddedAsNormalUser$", "-test.count=1", "-test.v")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "SLUICE_TEST_CHILD_DATA_DIR=" + filepath.Join(home, "data")}
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as user nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestEmbeddedAsNormalUser") {
		t.Fatalf("the test did not run as user nobody:\n%s", out)
	}
}

func execSQL(url, sql string) (int64, error) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, sql)
	return tag.RowsAffected(), err
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pid %d did not exit", pid)
}
