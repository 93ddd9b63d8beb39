package database

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
)

// findBinaries returns a directory holding initdb and postgres: the
// machine's installation when there is one, else a one-time download into
// dataDir/pgbin.
func findBinaries(ctx context.Context, dataDir string, logger *slog.Logger) (string, error) {
	for _, dir := range candidateBinDirs(ctx, dataDir) {
		if hasBinaries(dir) {
			return dir, nil
		}
	}
	logger.Info("no local PostgreSQL binaries found, downloading them once", "into", filepath.Join(dataDir, "pgbin"))
	dir, err := downloadBinaries(dataDir)
	if err != nil {
		return "", fmt.Errorf("%w: none installed (looked in PATH, pg_config --bindir, /usr/lib/postgresql/*/bin, /usr/local/pgsql/bin, /usr/pgsql-*/bin, Homebrew) and the download failed: %v; install PostgreSQL (e.g. apt-get install postgresql) or set DATABASE_URL",
			ErrNoBinaries, err)
	}
	return dir, nil
}

// candidateBinDirs lists where PostgreSQL binaries are usually installed,
// most specific first; within a glob the newest major version comes first.
func candidateBinDirs(ctx context.Context, dataDir string) []string {
	var dirs []string
	if p, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.CommandContext(ctx, p, "--bindir").Output(); err == nil {
			dirs = append(dirs, strings.TrimSpace(string(out)))
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin",
		"/usr/pgsql-*/bin",
		"/opt/homebrew/opt/postgresql@*/bin",
		"/usr/local/opt/postgresql@*/bin",
	} {
		matches, _ := filepath.Glob(pattern)
		sort.Slice(matches, func(i, j int) bool { return versionIn(matches[i]) > versionIn(matches[j]) })
		dirs = append(dirs, matches...)
	}
	dirs = append(dirs, "/usr/local/pgsql/bin", "/opt/homebrew/bin", "/usr/local/bin",
		filepath.Join(dataDir, "pgbin", "bin"))
	return dirs
}

var versionRE = regexp.MustCompile(`(\d+)`)

// versionIn returns the first number in a path such as /usr/lib/postgresql/15/bin.
func versionIn(path string) int {
	n, _ := strconv.Atoi(versionRE.FindString(path))
	return n
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

var majorRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// binariesMajor returns the major version of the postgres binary in binDir.
func binariesMajor(ctx context.Context, binDir string) (int, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%w: %s/postgres --version: %v", ErrNoBinaries, binDir, err)
	}
	m := majorRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%w: cannot read the version in %q", ErrNoBinaries, strings.TrimSpace(string(out)))
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n, nil
}

// downloadBinaries fetches PostgreSQL with fergusstrange/embedded-postgres,
// which only offers download as part of starting a server: its Start
// downloads and unpacks into BinariesPath, then runs initdb and pg_ctl itself
// (which fails as root). Sluice keeps only the unpacked binaries and runs
// them its own way, whatever became of that start.
func downloadBinaries(dataDir string) (string, error) {
	binaries := filepath.Join(dataDir, "pgbin")
	scratch := filepath.Join(dataDir, "pgbin-runtime")
	defer os.RemoveAll(scratch)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := uint32(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	ep := embeddedpostgres.NewDatabase(embeddedpostgres.DefaultConfig().
		Version(embeddedpostgres.V16).
		Port(port).
		CachePath(filepath.Join(dataDir, "pgbin-cache")).
		RuntimePath(scratch).
		DataPath(filepath.Join(scratch, "data")).
		BinariesPath(binaries).
		Logger(nil))
	startErr := ep.Start()
	if startErr == nil {
		_ = ep.Stop()
	}
	dir := filepath.Join(binaries, "bin")
	if hasBinaries(dir) {
		return dir, nil
	}
	if startErr == nil {
		startErr = errors.New("the download held no initdb and postgres")
	}
	return "", startErr
}
