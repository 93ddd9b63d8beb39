package database

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrDataDir is returned (wrapped) when the embedded server's data directory
// cannot be created, written or reached; the fix is another PORTAL_DATA_DIR.
var ErrDataDir = errors.New("data directory unusable")

// ErrNoCluster is returned (wrapped) by StartEmbedded with Existing and by
// RunningEmbedded when the data directory holds no cluster.
var ErrNoCluster = errors.New("no embedded postgres cluster")

// ErrNoBinaries is returned (wrapped) when no PostgreSQL binaries are
// installed and none could be downloaded.
var ErrNoBinaries = errors.New("no PostgreSQL binaries")

// EmbeddedConfig configures StartEmbedded.
type EmbeddedConfig struct {
	// DataDir holds everything the server keeps between runs: the cluster in
	// DataDir/postgres, its port and password in DataDir/postgres.json, and
	// its log in DataDir/postgres.log.
	DataDir string
	// Port is the TCP port on 127.0.0.1; 0 reuses the port recorded by the
	// previous start, or picks a free one on the first.
	Port int
	// Settings are extra postgres -c settings, e.g. {"fsync": "off"} for
	// throwaway test clusters.
	Settings map[string]string
	// NoSync skips initdb's final fsync. Only for clusters whose loss on a
	// power cut does not matter (tests).
	NoSync bool
	// Existing refuses to create a cluster: StartEmbedded returns
	// ErrNoCluster when DataDir holds none. For commands that work on a
	// portal's data, which must never silently start a second, empty
	// database.
	Existing bool
	// StartTimeout bounds initdb plus startup; 0 means 60 seconds.
	StartTimeout time.Duration
	Logger       *slog.Logger
}

// Embedded is a PostgreSQL server run as a child process of Sluice: the
// default store of record when no DATABASE_URL is configured.
//
// It runs the machine's own PostgreSQL binaries (initdb and postgres) rather
// than through pg_ctl, so Sluice can run them under an unprivileged account
// when it is itself root (Postgres refuses to run as root), can watch the
// process, and the process dies with Sluice even if Sluice is killed.
type Embedded struct {
	url     string
	pid     int
	logger  *slog.Logger
	exited  chan struct{} // closed when the postgres process has exited
	waitErr error         // valid once exited is closed
}

// embeddedState is what DataDir/postgres.json records between runs.
type embeddedState struct {
	Port     int    `json:"port"`
	Password string `json:"password"`
}

// maxLogBytes is the size past which postgres.log is rotated at start.
const maxLogBytes = 10 << 20

// The database Sluice uses inside the embedded cluster.
const embeddedDatabase = "sluice"

// StartEmbedded starts (creating on first use) the PostgreSQL cluster in
// cfg.DataDir and returns once it accepts connections. Call Stop to shut it
// down; if the calling process dies first, the server receives SIGINT and
// stops by itself (on Linux).
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if cfg.Existing {
		if err := clusterExists(dataDir); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: create %s: %v", ErrDataDir, dataDir, err)
	}
	if err := checkWritable(dataDir); err != nil {
		return nil, err
	}
	account, err := serverAccount(dataDir)
	if err != nil {
		return nil, err
	}

	binDir, err := findBinaries(ctx, dataDir, cfg.Logger)
	if err != nil {
		return nil, err
	}
	major, err := binariesMajor(ctx, binDir)
	if err != nil {
		return nil, err
	}

	state, err := loadState(dataDir)
	if err != nil {
		return nil, err
	}
	pgData := filepath.Join(dataDir, "postgres")
	if _, err := os.Stat(filepath.Join(pgData, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		state.Password = randomHex(24)
		if err := initCluster(ctx, binDir, dataDir, pgData, state.Password, account, cfg); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if err := checkClusterVersion(pgData, major); err != nil {
		return nil, err
	}
	if err := clearStalePID(pgData); err != nil {
		return nil, err
	}

	port, err := choosePort(cfg.Port, state.Port, cfg.Logger)
	if err != nil {
		return nil, err
	}
	state.Port = port
	if err := saveState(dataDir, state); err != nil {
		return nil, err
	}

	e, err := launch(binDir, pgData, dataDir, port, account, cfg)
	if err != nil {
		return nil, err
	}
	adminURL := embeddedURL(port, state.Password, "postgres")
	if err := e.waitReady(ctx, adminURL, dataDir); err != nil {
		e.stopQuickly()
		return nil, err
	}
	if err := ensureDatabase(ctx, adminURL, embeddedDatabase); err != nil {
		e.stopQuickly()
		return nil, err
	}
	e.url = embeddedURL(port, state.Password, embeddedDatabase)
	cfg.Logger.Info("embedded postgres ready", "data_dir", pgData, "addr", fmt.Sprintf("127.0.0.1:%d", port), "postgres_major", major)
	return e, nil
}

// clusterExists returns nil when dataDir holds a cluster, else ErrNoCluster
// (wrapped, naming the directory).
func clusterExists(dataDir string) error {
	_, err := os.Stat(filepath.Join(dataDir, "postgres", "PG_VERSION"))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w in %s", ErrNoCluster, dataDir)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	return nil
}

// RunningEmbedded returns the connection URL of Sluice's database on the
// embedded server that another process (a serving portal) runs on the
// cluster in dataDir, so a command run beside that portal uses the same
// database rather than failing on the lock or starting a second server.
// running is false when the cluster exists but no server runs on it;
// ErrNoCluster (wrapped) when dataDir holds no cluster. The URL contains
// the password: never log it.
func RunningEmbedded(dataDir string) (url string, running bool, err error) {
	dataDir, err = filepath.Abs(dataDir)
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if err := clusterExists(dataDir); err != nil {
		return "", false, err
	}
	// postmaster.pid: the server's pid on line 1, its port on line 4.
	b, err := os.ReadFile(filepath.Join(dataDir, "postgres", "postmaster.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return "", false, nil // a server still writing its pid file, or a stale one
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 || !isPostgresProcess(pid) {
		return "", false, nil
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil || port <= 0 {
		return "", false, fmt.Errorf("%w: %s/postgres/postmaster.pid names no port", ErrDataDir, dataDir)
	}
	st, err := loadState(dataDir)
	if err != nil {
		return "", false, err
	}
	if st.Password == "" {
		return "", false, fmt.Errorf("%w: %s/postgres.json holds no password", ErrDataDir, dataDir)
	}
	return embeddedURL(port, st.Password, embeddedDatabase), true, nil
}

// URL is the connection URL of Sluice's database on the server. It contains
// the password: never log it.
func (e *Embedded) URL() string { return e.url }

// Stop shuts the server down with a fast shutdown (SIGINT: open
// transactions are rolled back, data is checkpointed). If ctx ends first it
// escalates to an immediate shutdown (SIGQUIT) and then to SIGKILL.
func (e *Embedded) Stop(ctx context.Context) error {
	proc, err := os.FindProcess(e.pid)
	if err != nil {
		return fmt.Errorf("stop embedded postgres: %w", err)
	}
	select {
	case <-e.exited:
		return nil
	default:
	}
	_ = proc.Signal(os.Interrupt)
	select {
	case <-e.exited:
		e.logger.Info("embedded postgres stopped")
		return nil
	case <-ctx.Done():
	}
	_ = proc.Signal(syscall.SIGQUIT)
	select {
	case <-e.exited:
		return fmt.Errorf("stop embedded postgres: fast shutdown timed out, used immediate shutdown: %w", ctx.Err())
	case <-time.After(5 * time.Second):
	}
	_ = proc.Kill()
	<-e.exited
	return fmt.Errorf("stop embedded postgres: killed after shutdown timed out: %w", ctx.Err())
}

// stopQuickly stops a server that failed to start, bounded in time.
func (e *Embedded) stopQuickly() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Stop(ctx)
}

// checkWritable proves dir accepts new files.
func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".write-test-*")
	if err != nil {
		return fmt.Errorf("%w: %s is not writable: %v", ErrDataDir, dir, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// initCluster runs initdb into a scratch directory and renames it into place,
// so a failed or interrupted initdb never leaves a half-made cluster behind.
func initCluster(ctx context.Context, binDir, dataDir, pgData, password string, account *account, cfg EmbeddedConfig) error {
	scratch, err := os.MkdirTemp(dataDir, "postgres.init-")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	defer os.RemoveAll(scratch)
	// initdb must create PGDATA itself (or find it empty); keep it one level
	// below the scratch directory so the rename below is atomic.
	target := filepath.Join(scratch, "data")
	pwFile := filepath.Join(scratch, "pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if err := account.own(scratch, pwFile); err != nil {
		return err
	}
	args := []string{"-D", target, "-U", "postgres", "--auth=scram-sha-256", "--pwfile=" + pwFile,
		"--encoding=UTF8", "--locale=C"}
	if cfg.NoSync {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), args...)
	cmd.Env = serverEnv()
	cmd.Dir = scratch
	cmd.SysProcAttr = account.sysProcAttr()
	cfg.Logger.Info("creating embedded postgres cluster", "data_dir", pgData)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, lastLines(string(out), 5))
	}
	if err := os.Remove(pwFile); err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if err := os.RemoveAll(pgData); err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if err := os.Rename(target, pgData); err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	return nil
}

// launch starts postgres in the background. The process is started from a
// goroutine locked to its OS thread that lives until postgres exits: Linux
// delivers the parent-death signal when the *thread* that forked the child
// ends, so the thread must not be retired while postgres runs.
func launch(binDir, pgData, dataDir string, port int, account *account, cfg EmbeddedConfig) (*Embedded, error) {
	logPath := filepath.Join(dataDir, "postgres.log")
	// Keep one previous log: the server's log is only read when it fails.
	if fi, err := os.Stat(logPath); err == nil && fi.Size() > maxLogBytes {
		_ = os.Rename(logPath, logPath+".1")
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	args := []string{"-D", pgData, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		// TCP only: no socket directory to create, own or keep short.
		"-c", "unix_socket_directories=",
	}
	for k, v := range cfg.Settings {
		args = append(args, "-c", k+"="+v)
	}
	cmd := exec.Command(filepath.Join(binDir, "postgres"), args...)
	cmd.Env = serverEnv()
	cmd.Dir = pgData
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = account.sysProcAttr()
	setParentDeathSignal(cmd.SysProcAttr)

	e := &Embedded{logger: cfg.Logger, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: when this goroutine returns the thread exits,
		// which is harmless once postgres is gone.
		if err := cmd.Start(); err != nil {
			_ = logFile.Close()
			started <- err
			return
		}
		started <- nil
		e.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(e.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	e.pid = cmd.Process.Pid
	return e, nil
}

// waitReady polls until the server accepts a connection, failing early with
// the server's last log lines if it exits.
func (e *Embedded) waitReady(ctx context.Context, adminURL, dataDir string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		connCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(connCtx, adminURL)
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-e.exited:
			return fmt.Errorf("embedded postgres exited during startup (%v): %s", e.waitErr, logTail(dataDir))
		case <-ctx.Done():
			return fmt.Errorf("embedded postgres did not accept connections in time: %s", logTail(dataDir))
		case <-tick.C:
		}
	}
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("embedded postgres: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("embedded postgres: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("embedded postgres: create database %s: %w", name, err)
	}
	return nil
}

func embeddedURL(port int, password, database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("postgres", password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

func loadState(dataDir string) (embeddedState, error) {
	var st embeddedState
	b, err := os.ReadFile(filepath.Join(dataDir, "postgres.json"))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: %s/postgres.json is corrupt: %v", ErrDataDir, dataDir, err)
	}
	return st, nil
}

// saveState writes postgres.json atomically; it holds the password, so only
// the owner may read it.
func saveState(dataDir string, st embeddedState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dataDir, "postgres.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dataDir, "postgres.json")); err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	return nil
}

// choosePort returns the configured port if free, else the recorded one if
// still free, else a fresh free port.
func choosePort(configured, recorded int, logger *slog.Logger) (int, error) {
	if configured != 0 {
		if !portFree(configured) {
			return 0, fmt.Errorf("embedded postgres: port %d on 127.0.0.1 is in use", configured)
		}
		return configured, nil
	}
	if recorded != 0 && portFree(recorded) {
		return recorded, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("embedded postgres: find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	if recorded != 0 {
		logger.Warn("embedded postgres port taken, moving", "old_port", recorded, "new_port", port)
	}
	return port, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// clearStalePID removes a postmaster.pid left by a server that was killed.
// Postgres removes one whose PID is dead, but refuses when the PID now
// belongs to an unrelated process, which is common after a container restart
// (PIDs restart from 1). A live process that really is postgres is reported.
func clearStalePID(pgData string) error {
	pidFile := filepath.Join(pgData, "postmaster.pid")
	f, err := os.Open(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	line, _ := bufio.NewReader(f).ReadString('\n')
	_ = f.Close()
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err == nil && pid > 0 && isPostgresProcess(pid) {
		return fmt.Errorf("embedded postgres in %s is already running (pid %d): another portal uses this data directory; stop it or choose another PORTAL_DATA_DIR", pgData, pid)
	}
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: remove stale %s: %v", ErrDataDir, pidFile, err)
	}
	return nil
}

// checkClusterVersion refuses to start binaries of one major version on a
// cluster made by another, which postgres would reject with a cryptic error.
func checkClusterVersion(pgData string, major int) error {
	b, err := os.ReadFile(filepath.Join(pgData, "PG_VERSION"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrDataDir, err)
	}
	have, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%w: %s/PG_VERSION is corrupt", ErrDataDir, pgData)
	}
	if have != major {
		return fmt.Errorf("embedded postgres: the cluster in %s was made by PostgreSQL %d but the installed binaries are %d; install PostgreSQL %d, or move that directory away to start empty (or pg_upgrade it)",
			pgData, have, major, have)
	}
	return nil
}

// serverEnv is the environment of initdb and postgres: nothing from ours
// (PG* variables would redirect them), a fixed locale so startup does not
// depend on the machine's.
func serverEnv() []string {
	return []string{"LC_ALL=C", "LANG=C", "PATH=" + os.Getenv("PATH")}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func logTail(dataDir string) string {
	b, err := os.ReadFile(filepath.Join(dataDir, "postgres.log"))
	if err != nil {
		return "(no postgres.log)"
	}
	return lastLines(string(b), 5)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
