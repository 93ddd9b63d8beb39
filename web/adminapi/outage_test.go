package adminapi

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/testenv"
)

// pgProxy forwards TCP connections to a Postgres server until cut, when it
// closes every connection and stops listening: to the pool behind it,
// Postgres is down (connections reset, new ones refused).
type pgProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func startPGProxy(t *testing.T, target string) *pgProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{l: l, target: target}
	go p.serve()
	t.Cleanup(p.stop)
	return p
}

func (p *pgProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { io.Copy(up, c); up.Close() }()
		go func() { io.Copy(c, up); c.Close() }()
	}
}

func (p *pgProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.l.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// newEnvBehindProxy is newEnv with the pool reaching its database through
// a pgProxy, so the test can take Postgres away.
func newEnvBehindProxy(t *testing.T) (*env, *pgProxy) {
	t.Helper()
	direct := testenv.Postgres(t)
	cc := direct.Config().ConnConfig
	proxy := startPGProxy(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	cfg := direct.Config().Copy()
	host, port, _ := net.SplitHostPort(proxy.l.Addr().String())
	n, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := &env{
		t: t, pool: pool, logs: logs, v: openAPIValidator(t),
		plans:  plans.NewService(pool, testRoutes, logger),
		keys:   apikeys.NewService(pool, testRoutes, logger),
		tokens: optokens.NewStore(pool, testBootstrap),
		store:  memstore.New(memstore.Options{}),
	}
	e.srv = httptest.NewServer(New(Deps{
		Plans: e.plans, Keys: e.keys, Tokens: e.tokens, Store: e.store, Pool: pool, Logger: logger,
	}))
	t.Cleanup(e.srv.Close)
	return e, proxy
}

func TestPostgresOutageAnswers503(t *testing.T) {
	e, proxy := newEnvBehindProxy(t)
	_, operatorToken := e.operator("op@example.com")
	res := e.do("POST", Prefix+"/plans", testBootstrap, map[string]any{"slug": "pro", "name": "Pro"})
	if res.status != http.StatusCreated {
		t.Fatalf("create a plan with Postgres up: %d %s", res.status, res.body)
	}
	var plan struct {
		ID int64 `json:"id"`
	}
	res.decode(t, &plan)

	proxy.stop()
	requests := []struct {
		name, method, path, token string
		body                      any
	}{
		{"ListPlans", "GET", "/plans", testBootstrap, nil},
		{"GetPlan", "GET", "/plans/" + itoa(plan.ID), testBootstrap, nil},
		{"CreatePlan", "POST", "/plans", testBootstrap, map[string]any{"slug": "team", "name": "Team"}},
		{"ListKeys", "GET", "/keys", testBootstrap, nil},
		{"ListDevelopers", "GET", "/developers", testBootstrap, nil},
		{"ListAudit", "GET", "/audit", testBootstrap, nil},
		{"ListTokens", "GET", "/tokens", testBootstrap, nil},
		// An operator token is looked up in Postgres before any handler.
		{"OperatorTokenCheck", "GET", "/plans", operatorToken, nil},
	}
	for _, rq := range requests {
		t.Run(rq.name, func(t *testing.T) {
			res := e.do(rq.method, Prefix+rq.path, rq.token, rq.body)
			if res.status != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503: %s", res.status, res.body)
			}
			if got := res.header.Get("Retry-After"); got != strconv.Itoa(postgresRetryAfter) {
				t.Errorf("Retry-After = %q, want %d", got, postgresRetryAfter)
			}
			if p := res.problem(t); p.Type != typeUnavailable {
				t.Errorf("problem type %q, want %q", p.Type, typeUnavailable)
			}
		})
	}
}
