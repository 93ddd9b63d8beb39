package web_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
	"github.com/sluicehq/sluice/web"
)

// testRoutes are the sample API's patterns that tiers may name.
var testRoutes = []string{"GET /api/search", "GET /api/items/{id}", "POST /api/reports"}

const (
	operatorEmail  = "op@example.com"
	developerEmail = "dev@example.com"
	testPassword   = "correct horse battery"
)

// env is one UI over a fresh database and memory store.
type env struct {
	t        testing.TB
	srv      *httptest.Server
	pool     *pgxpool.Pool
	plans    *plans.Service
	keys     *apikeys.Service
	users    *users.Repo
	store    *memstore.Store
	operator users.User
	dev      users.User
	health   *healthSwitch
}

// healthSwitch is a dependency check a test can fail on purpose.
type healthSwitch struct{ err error }

func (h *healthSwitch) check(context.Context) error { return h.err }

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith is newEnv with a chance to change the UI's dependencies (a
// clock, say) before the server is built.
func newEnvWith(t testing.TB, change func(*web.Deps)) *env {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The counters' clock stands still at the test's start: the tiers here
	// are windows of a minute, and a test whose requests straddle a
	// window's end (one in sixty that start at hh:mm:59) would see its
	// count reset between spending and reading.
	frozen := time.Now()
	e := &env{
		t:      t,
		pool:   pool,
		plans:  plans.NewService(pool, testRoutes, logger).WithReducedAnswers(sampleapi.ReducedAnswerRoutes()),
		keys:   apikeys.NewService(pool, testRoutes, logger),
		users:  users.NewRepo(pool),
		store:  memstore.New(memstore.Options{Now: func() time.Time { return frozen }}),
		health: &healthSwitch{},
	}
	var err error
	if e.operator, err = e.users.Create(ctx, users.NewUser{Email: operatorEmail, Password: testPassword, Role: users.RoleOperator}); err != nil {
		t.Fatalf("create operator: %v", err)
	}
	if e.dev, err = e.users.Create(ctx, users.NewUser{Email: developerEmail, Password: testPassword, Role: users.RoleDeveloper}); err != nil {
		t.Fatalf("create developer: %v", err)
	}
	deps := web.Deps{
		Logger:         logger,
		SessionSecret:  []byte("0123456789abcdef0123456789abcdef-test"),
		Users:          e.users,
		Pool:           pool,
		Plans:          e.plans,
		Keys:           e.keys,
		Limiter:        e.store,
		Usage:          e.store,
		Health:         []web.HealthCheck{{Name: "Redis", Check: e.health.check}},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	}
	if change != nil {
		change(&deps)
	}
	ui := web.New(deps)
	e.srv = httptest.NewServer(ui)
	t.Cleanup(e.srv.Close)
	return e
}

// client is a browser-like client: a cookie jar, no redirects followed.
type client struct {
	e    *env
	http *http.Client
}

func (e *env) anonymous() *client {
	jar, _ := cookiejar.New(nil)
	return &client{e: e, http: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}}
}

// signedIn returns a client signed in as email.
func (e *env) signedIn(email string) *client {
	e.t.Helper()
	c := e.anonymous()
	res := c.post("/signin", url.Values{"email": {email}, "password": {testPassword}}, nil)
	if res.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("sign in as %s: status %d", email, res.StatusCode)
	}
	return c
}

// response is a finished request with its body read.
type response struct {
	*http.Response
	body string
}

// doc parses the body. An htmx fragment is parsed as the content of a
// <template>, as htmx does, so that rows and table bodies survive parsing.
func (r response) doc(t testing.TB) *goquery.Document {
	t.Helper()
	if strings.HasPrefix(strings.TrimSpace(r.body), "<!doctype") || strings.HasPrefix(strings.TrimSpace(r.body), "<!DOCTYPE") {
		d, err := goquery.NewDocumentFromReader(strings.NewReader(r.body))
		if err != nil {
			t.Fatalf("parse HTML: %v", err)
		}
		return d
	}
	ctx := &html.Node{Type: html.ElementNode, Data: "template", DataAtom: atom.Template}
	nodes, err := html.ParseFragment(strings.NewReader(r.body), ctx)
	if err != nil {
		t.Fatalf("parse HTML fragment: %v", err)
	}
	root := &html.Node{Type: html.DocumentNode}
	for _, n := range nodes {
		root.AppendChild(n)
	}
	return goquery.NewDocumentFromNode(root)
}

func (c *client) do(req *http.Request) response {
	c.e.t.Helper()
	res, err := c.http.Do(req)
	if err != nil {
		c.e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		c.e.t.Fatalf("read body: %v", err)
	}
	return response{Response: res, body: string(b)}
}

func (c *client) get(path string, header http.Header) response {
	c.e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.e.srv.URL+path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	return c.do(req)
}

func (c *client) post(path string, form url.Values, header http.Header) response {
	c.e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, c.e.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	return c.do(req)
}

var htmx = http.Header{"Hx-Request": {"true"}}

// text returns the trimmed text of the first element with the test id.
func text(d *goquery.Document, testID string) string {
	return strings.TrimSpace(d.Find(`[data-testid="` + testID + `"]`).First().Text())
}

func count(d *goquery.Document, testID string) int {
	return d.Find(`[data-testid="` + testID + `"]`).Length()
}

// createPlan makes a plan with the given tiers through the service.
func (e *env) createPlan(slug string, tiers ...plans.LimitInput) plans.Plan {
	e.t.Helper()
	p, err := e.plans.Create(context.Background(), "test", plans.PlanInput{Slug: slug, Name: strings.ToUpper(slug), IsPublic: true, Limits: tiers})
	if err != nil {
		e.t.Fatalf("create plan %s: %v", slug, err)
	}
	return p
}

func (e *env) createKey(userID int64, name string) (apikeys.Key, string) {
	e.t.Helper()
	k, secret, err := e.keys.Create(context.Background(), "test", apikeys.NewKey{UserID: userID, Name: name})
	if err != nil {
		e.t.Fatalf("create key: %v", err)
	}
	return k, secret
}

var searchTier = plans.LimitInput{Name: "search", Route: "GET /api/search", Algorithm: "token_bucket", Limit: 10, WindowSeconds: 60, Burst: 20, Cost: 1}
