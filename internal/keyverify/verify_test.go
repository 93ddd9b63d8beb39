package keyverify

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/memstore"
	"github.com/sluicehq/sluice/internal/enforce/redisstore"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/internal/snapshot"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

const search = "GET /api/search"

// fixture is a plan "pro" (a plan-wide fixed window of 100 an hour, a
// search token bucket of burst 5, a shadow tier), a developer's key on it,
// a service with a token, and the handler over a store.
type fixture struct {
	t       *testing.T
	srv     *httptest.Server
	store   enforce.Store
	caller  enforce.Caller
	secret  string // the API key
	token   string // the service token
	v       validator.Validator
	vmu     sync.Mutex
	plan    plans.Plan
	devID   int64
	keyID   int64
	holder  *snapshot.Holder
	handler *Handler
}

func newFixture(t *testing.T, store enforce.Store, opts Options) *fixture {
	t.Helper()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	routes := []string{search, "GET /api/items/{id}"}
	pl, err := plans.NewService(pool, routes, logger).Create(ctx, "test", plans.PlanInput{Slug: "pro", Name: "Pro", Limits: []plans.LimitInput{
		{Name: "hourly", Algorithm: "fixed_window", Limit: 100, WindowSeconds: 3600},
		{Name: "search", Route: search, Algorithm: "token_bucket", Limit: 10, WindowSeconds: 60, Burst: 5},
		{Name: "items", Route: "GET /api/items/{id}", Algorithm: "fixed_window", Limit: 7, WindowSeconds: 60},
		{Name: "trial", Algorithm: "fixed_window", Mode: "shadow", Limit: 1, WindowSeconds: 60},
	}})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: "dev@example.com", Password: "correct horse battery", Role: users.RoleDeveloper, PlanID: &pl.ID})
	if err != nil {
		t.Fatal(err)
	}
	k, secret, err := apikeys.NewService(pool, routes, logger).Create(ctx, "test", apikeys.NewKey{UserID: dev.ID, Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	repo := services.NewRepo(pool)
	if _, err := repo.Create(ctx, "test", services.Input{Slug: "billing", Name: "Billing", Routes: []string{"GET /invoices/{id}"}}); err != nil {
		t.Fatal(err)
	}
	_, token, err := repo.CreateToken(ctx, "test", "billing", "verify")
	if err != nil {
		t.Fatal(err)
	}
	holder := snapshot.NewHolder(pool, logger, snapshot.Options{})
	if err := holder.Load(ctx); err != nil {
		t.Fatal(err)
	}
	caller, err := holder.ResolveKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(openAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	f := &fixture{t: t, store: store, caller: caller, secret: secret, token: token, v: v, plan: pl, devID: dev.ID, keyID: k.ID, holder: holder}
	f.handler = New(holder, enforce.NewEngine(store, enforce.EngineOptions{}), store, repo, opts)
	mux := http.NewServeMux()
	mux.Handle(Path, f.handler)
	mux.Handle(OpenAPIPath, OpenAPI())
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

// verify posts body with the service token (token "" sends none) and holds
// the answer to the OpenAPI document.
func (f *fixture) verify(token, body string) reply {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/keys/verify", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(bytes.NewReader(raw))
	vreq, _ := http.NewRequest(http.MethodPost, "/v1/keys/verify", strings.NewReader(body))
	vreq.Header = req.Header.Clone()
	f.vmu.Lock()
	ok, errs := f.v.ValidateHttpResponse(vreq, res)
	f.vmu.Unlock()
	if !ok {
		for _, e := range errs {
			f.t.Errorf("answer %d %s does not match openapi.json: %s: %s", res.StatusCode, raw, e.Message, e.Reason)
		}
	}
	return reply{status: res.StatusCode, header: res.Header, body: raw}
}

func (f *fixture) answer(route string) Answer {
	f.t.Helper()
	body, _ := json.Marshal(Request{Key: f.secret, Route: route})
	r := f.verify(f.token, string(body))
	if r.status != http.StatusOK {
		f.t.Fatalf("verify: %d %s", r.status, r.body)
	}
	var a Answer
	if err := json.Unmarshal(r.body, &a); err != nil {
		f.t.Fatal(err)
	}
	return a
}

// spend makes n real requests of the key on route through the engine.
func (f *fixture) spend(route string, n int) {
	f.t.Helper()
	var limits []enforce.Limit
	for _, l := range f.caller.Limits {
		if l.Route == "" || l.Route == route {
			limits = append(limits, l)
		}
	}
	for range n {
		d, err := f.store.Allow(context.Background(), enforce.Request{Subject: f.caller.Subject, Key: f.caller.Key, Route: route, Limits: limits})
		if err != nil || !d.Visible().Allowed {
			f.t.Fatalf("spend: %+v %v", d, err)
		}
	}
}

func remaining(a Answer) map[string]int64 {
	out := map[string]int64{}
	for _, l := range a.Limits {
		out[l.Policy] = l.Remaining
	}
	return out
}

func stores(t *testing.T) map[string]func() enforce.Store {
	return map[string]func() enforce.Store{
		"memory": func() enforce.Store {
			now := time.Now()
			return memstore.New(memstore.Options{Now: func() time.Time { return now }})
		},
		"redis": func() enforce.Store {
			rdb, prefix := testenv.Redis(t)
			s, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
}

func TestVerifyingConsumesNothing(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, newStore(), Options{})
			f.spend(search, 3)
			first := remaining(f.answer(search))
			if first["pro-search"] != 2 || first["pro-hourly"] != 97 {
				t.Fatalf("after 3 searches: %v, want search 2 of 5 and hourly 97 of 100", first)
			}
			const n = 40
			for i := range n {
				if got := remaining(f.answer(search)); got["pro-search"] != 2 || got["pro-hourly"] != 97 {
					t.Fatalf("verification %d: %v; verifying spent something", i+1, got)
				}
			}
			// The counters are the engine's: one real request spends one.
			f.spend(search, 1)
			if got := remaining(f.answer(search)); got["pro-search"] != 1 || got["pro-hourly"] != 96 {
				t.Errorf("after %d verifications and one search: %v, want search 1 and hourly 96", n, got)
			}
		})
	}
}

func TestVerifyAnswers(t *testing.T) {
	f := newFixture(t, stores(t)["memory"](), Options{})
	t.Run("EveryLimit", func(t *testing.T) {
		a := f.answer("")
		if !a.Valid || a.KeyID != f.keyID || a.DeveloperID != f.devID || a.Plan != "pro" || a.Route != "" {
			t.Errorf("answer %+v", a)
		}
		var names []string
		for _, l := range a.Limits {
			names = append(names, l.Policy)
		}
		if strings.Join(names, ",") != "pro-hourly,pro-search,pro-items" {
			t.Errorf("limits %v, want every tier but the shadow one", names)
		}
		for _, l := range a.Limits {
			if l.Policy == "pro-items" && (l.Limit != 7 || l.WindowSeconds != 60 || l.Remaining != 7 || l.Reset < time.Now().Unix()) {
				t.Errorf("items limit %+v", l)
			}
		}
	})
	t.Run("OneRoute", func(t *testing.T) {
		a := f.answer("GET /api/items/{id}")
		var names []string
		for _, l := range a.Limits {
			names = append(names, l.Policy)
		}
		if strings.Join(names, ",") != "pro-hourly,pro-items" || a.Route != "GET /api/items/{id}" {
			t.Errorf("limits %v for route %q, want the plan-wide one and the route's tier", names, a.Route)
		}
	})
	for _, tt := range []struct{ name, key string }{
		{"Malformed", "not-a-key"},
		{"Unknown", "sk_live_" + strings.Repeat("A", 43)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.verify(f.token, `{"key":"`+tt.key+`"}`)
			if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"valid":false,"limits":[]}` {
				t.Errorf("%d %s, want 200 valid false and nothing else", r.status, r.body)
			}
		})
	}
	t.Run("OpenAPIServed", func(t *testing.T) {
		res, err := http.Get(f.srv.URL + "/v1/openapi.json")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !bytes.Equal(b, openAPIDocument) {
			t.Errorf("openapi.json: %d", res.StatusCode)
		}
		doc, _ := libopenapi.NewDocument(openAPIDocument)
		v, _ := validator.NewValidator(doc)
		if ok, errs := v.ValidateDocument(); !ok {
			t.Errorf("the document is not valid OpenAPI 3.1: %v", errs)
		}
	})
}

func TestVerifyRefuses(t *testing.T) {
	f := newFixture(t, stores(t)["memory"](), Options{PerAddress: 1000})
	for _, tt := range []struct {
		name, token, body string
		status            int
		message           string
	}{
		{"NoToken", "", `{"key":"x"}`, http.StatusUnauthorized, "service token"},
		{"UnknownToken", "sluice_svc_nothing", `{"key":"x"}`, http.StatusUnauthorized, "unknown or revoked"},
		{"AKeyAsToken", f.secret, `{"key":"x"}`, http.StatusUnauthorized, "unknown or revoked"},
		{"NoKey", f.token, `{}`, http.StatusBadRequest, `"key" is required`},
		{"NotJSON", f.token, `key=x`, http.StatusBadRequest, "not a JSON object"},
		{"UnknownField", f.token, `{"key":"x","plan":"gold"}`, http.StatusBadRequest, "not a JSON object"},
		{"TwoObjects", f.token, `{"key":"x"}{"key":"y"}`, http.StatusBadRequest, "one JSON object"},
		{"BadRoute", f.token, `{"key":"x","route":"search"}`, http.StatusBadRequest, `"route" must be a route pattern`},
		{"TooLarge", f.token, `{"key":"` + strings.Repeat("x", 9000) + `"}`, http.StatusBadRequest, "larger than 8 KiB"},
		{"LongKey", f.token, `{"key":"` + strings.Repeat("x", 300) + `"}`, http.StatusBadRequest, "longer than any key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.verify(tt.token, tt.body)
			var e ErrorBody
			_ = json.Unmarshal(r.body, &e)
			if r.status != tt.status || !strings.Contains(e.Message, tt.message) {
				t.Errorf("%d %s, want %d saying %q", r.status, r.body, tt.status, tt.message)
			}
		})
	}
}

func TestAddressBlock(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7": "192.0.2.7", "::ffff:192.0.2.7": "192.0.2.7",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64", "2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
	} {
		if got := addressBlock(netip.MustParseAddr(in)); got != want {
			t.Errorf("addressBlock(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestVerifyIsRateLimited(t *testing.T) {
	t.Run("PerAddress", func(t *testing.T) {
		// A burst of a sixth of a minute's 60: 10 requests, then 429s,
		// whether they carry a token or not.
		f := newFixture(t, stores(t)["memory"](), Options{PerAddress: 60})
		admitted := 0
		for i := range 15 {
			token := f.token
			if i%2 == 0 {
				token = "sluice_svc_guess" + strconv.Itoa(i)
			}
			r := f.verify(token, `{"key":"x"}`)
			switch r.status {
			case http.StatusOK, http.StatusUnauthorized:
				admitted++
			case http.StatusTooManyRequests:
				if r.header.Get("Retry-After") == "" {
					t.Error("429 without Retry-After")
				}
			default:
				t.Fatalf("status %d", r.status)
			}
		}
		if admitted != 10 {
			t.Errorf("%d requests answered, want the burst of 10", admitted)
		}
	})
	t.Run("PerService", func(t *testing.T) {
		f := newFixture(t, stores(t)["memory"](), Options{PerService: 30, PerAddress: 6000})
		ok := 0
		for range 8 {
			if r := f.verify(f.token, `{"key":"x"}`); r.status == http.StatusOK {
				ok++
			} else if r.status != http.StatusTooManyRequests {
				t.Fatalf("status %d", r.status)
			}
		}
		if ok != 5 {
			t.Errorf("%d verifications answered, want the service's burst of 5", ok)
		}
	})
}
