package tests

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestImageUserStartsOnFreshVolume runs the portal as the image runs it,
// without a docker engine: as the Dockerfile's USER, with no
// PORTAL_SESSION_SECRET, on a data directory prepared as the Dockerfile
// prepares it (owned by that user, mode 0700: what a fresh volume mounted
// there starts as). It must start and keep its generated session secret
// there. The same start on a directory the user does not own, what the
// image gave it before, must fail. Switching users needs root; CI runs as
// root.
func TestImageUserStartsOnFreshVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running the portal as the image's user needs root; skipped")
	}
	uid, gid := imageUser(t)
	bin := binary(t)
	// The image user must reach the binary and the directories.
	for _, d := range []string{filepath.Dir(bin)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.MkdirTemp("", "sluice-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	dbURL := testenv.PostgresURL(t)

	t.Run("RootOwnedDirectoryFails", func(t *testing.T) {
		// A parent only root may write in, and no data directory yet.
		dir := filepath.Join(root, "root-owned", "sluice")
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := portalAs(bin, uid, gid, dbURL, dir)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "PORTAL_DATA_DIR") {
			t.Errorf("the image user started without a data directory of its own: err %v, output:\n%s", err, out)
		}
	})

	t.Run("ImageOwnedVolumeStarts", func(t *testing.T) {
		dir := filepath.Join(root, "var", "lib", "sluice")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{filepath.Join(root, "var"), filepath.Join(root, "var", "lib")} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := portalAs(bin, uid, gid, dbURL, dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr logTail
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		urls := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
					urls <- m[1]
				}
			}
			exited <- cmd.Wait()
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
			}
		})
		var url string
		select {
		case url = <-urls:
		case err := <-exited:
			t.Fatalf("the portal exited as uid %d: %v\n%s", uid, err, stderr.String())
		case <-time.After(time.Minute):
			t.Fatalf("the portal did not listen within a minute:\n%s", stderr.String())
		}
		res, err := http.Get(url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("/healthz: %d", res.StatusCode)
		}
		fi, err := os.Stat(filepath.Join(dir, "session.key"))
		if err != nil {
			t.Fatalf("no generated session secret in the volume: %v", err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || fi.Mode().Perm() != 0o600 {
			t.Errorf("session.key owned by %d with mode %v, want %d and 0600", st.Uid, fi.Mode().Perm(), uid)
		}
	})
}

// imageUser reads the Dockerfile's USER uid:gid.
func imageUser(t *testing.T) (uid, gid int) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindAllStringSubmatch(string(b), -1)
	if len(m) == 0 {
		t.Fatal("the Dockerfile has no numeric USER uid:gid")
	}
	last := m[len(m)-1]
	uid, _ = strconv.Atoi(last[1])
	gid, _ = strconv.Atoi(last[2])
	return uid, gid
}

// portalAs is the portal command run as uid:gid with dataDir and no
// session secret, as the image starts it.
func portalAs(bin string, uid, gid int, dbURL, dataDir string) *exec.Cmd {
	cmd := exec.Command(bin, "-no-demo")
	cmd.Env = portalEnv(map[string]string{
		"DATABASE_URL": dbURL, "PORTAL_ADDR": "127.0.0.1:0", "PORTAL_GRPC_ADDR": "127.0.0.1:0",
		"PORTAL_DATA_DIR": dataDir, "PORTAL_LOG_FORMAT": "json", "HOME": "/nonexistent", "PORTAL_METRICS_ADDR": "off",
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// logTail keeps a process's output for a failure message.
type logTail struct{ strings.Builder }

func (l *logTail) Write(p []byte) (int, error) { return l.Builder.Write(p) }
