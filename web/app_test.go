package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/billing"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/users"
)

// defaultPlan makes the plan new developers get: 10 searches per minute
// (fixed window) and 1000 requests per hour overall.
func (e *env) defaultPlan() plans.Plan {
	e.t.Helper()
	p, err := e.plans.Create(context.Background(), "test", plans.PlanInput{
		Slug: "starter", Name: "Starter", IsPublic: true, IsDefault: true,
		Limits: []plans.LimitInput{
			{Name: "search", Route: "GET /api/search", Algorithm: "fixed_window", Limit: 10, WindowSeconds: 60},
			{Name: "global", Algorithm: "sliding_window_log", Limit: 1000, WindowSeconds: 3600},
		},
	})
	if err != nil {
		e.t.Fatalf("create default plan: %v", err)
	}
	return p
}

// fromIP sends requests as if from addr, through the trusted local proxy.
func fromIP(addr string) http.Header { return http.Header{"X-Forwarded-For": {addr}} }

func TestSignUp(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	long := strings.Repeat("a", 250) + "@example.com"
	tests := []struct {
		name          string
		email         string
		password      string
		wantStatus    int
		wantEmailErr  string
		wantPassErr   string
		wantEmailBack string
	}{
		{"missing email", "", "a long enough password", 422, "is required", "", ""},
		{"malformed email", "not-an-address", "a long enough password", 422, "is not a valid address (expected name@example.com)", "", "not-an-address"},
		{"email with a display name", "Dev <dev2@example.com>", "a long enough password", 422, "is not a valid address (expected name@example.com)", "", "Dev <dev2@example.com>"},
		{"email too long", long, "a long enough password", 422, "must be at most 254 characters", "", long},
		{"missing password", "new@example.com", "", 422, "", "is required", "new@example.com"},
		{"password of 11 characters", "new@example.com", "elevenchars", 422, "", "must be at least 12 characters", "new@example.com"},
		{"password that is the email", "longaddress@example.com", "LongAddress@example.com", 422, "", "must not be your email address", "longaddress@example.com"},
		{"both wrong at once", "nope", "short", 422, "is not a valid address (expected name@example.com)", "must be at least 12 characters", "nope"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.anonymous()
			res := c.post("/signup", url.Values{"email": {tt.email}, "password": {tt.password}}, fromIP("198.51.100."+strconv.Itoa(i+1)))
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d, want %d", res.StatusCode, tt.wantStatus)
			}
			d := res.doc(t)
			if got := text(d, "error-email"); got != tt.wantEmailErr {
				t.Errorf("email error = %q, want %q", got, tt.wantEmailErr)
			}
			if got := text(d, "error-password"); got != tt.wantPassErr {
				t.Errorf("password error = %q, want %q", got, tt.wantPassErr)
			}
			if got, _ := d.Find(`[data-testid="signup-email"]`).Attr("value"); got != tt.wantEmailBack {
				t.Errorf("email field = %q, want %q", got, tt.wantEmailBack)
			}
			if v, _ := d.Find(`[data-testid="signup-password"]`).Attr("value"); v != "" {
				t.Error("the password was sent back in the form")
			}
		})
	}

	t.Run("a valid sign-up creates a developer on the default plan who then signs in", func(t *testing.T) {
		c := e.anonymous()
		res := c.post("/signup", url.Values{"email": {"fresh@example.com"}, "password": {"a long enough password"}}, fromIP("198.51.100.200"))
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/signin?signed_up=1&next=%2Fapp%2Fkeys" {
			t.Fatalf("status %d to %q, want 303 to sign in, then to the keys", res.StatusCode, res.Header.Get("Location"))
		}
		if res := c.post("/signin", url.Values{"email": {"fresh@example.com"}, "password": {"a long enough password"}}, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign in after sign-up: status %d", res.StatusCode)
		}
		u, err := e.users.ByEmail(context.Background(), "fresh@example.com")
		if err != nil {
			t.Fatal(err)
		}
		all, _ := e.plans.List(context.Background())
		var def int64
		for _, p := range all {
			if p.IsDefault {
				def = p.ID
			}
		}
		if u.Role != users.RoleDeveloper || u.PlanID == nil || *u.PlanID != def {
			t.Errorf("user = role %s plan %v, want developer on plan %d", u.Role, u.PlanID, def)
		}
		if res := c.get("/app/keys", nil); res.StatusCode != http.StatusOK {
			t.Errorf("GET /app/keys after sign-up: %d", res.StatusCode)
		}
	})
}

func TestSignUpRateLimitedPerAddress(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	for i := range 5 {
		res := e.anonymous().post("/signup", url.Values{"email": {"dev" + strconv.Itoa(i) + "@limit.example"}, "password": {"a long enough password"}}, fromIP("203.0.113.9"))
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-up %d: status %d, want 303", i+1, res.StatusCode)
		}
	}
	res := e.anonymous().post("/signup", url.Values{"email": {"sixth@limit.example"}, "password": {"a long enough password"}}, fromIP("203.0.113.9"))
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Fatalf("sixth sign-up: status %d Retry-After %q, want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if !strings.Contains(text(res.doc(t), "signup-limited"), "Too many sign-ups") {
		t.Error("the page does not say the address is limited")
	}
	if _, err := e.users.ByEmail(context.Background(), "sixth@limit.example"); err == nil {
		t.Error("the limited sign-up created a user")
	}
	if res := e.anonymous().post("/signup", url.Values{"email": {"other@limit.example"}, "password": {"a long enough password"}}, fromIP("203.0.113.10")); res.StatusCode != http.StatusSeeOther {
		t.Errorf("another address: status %d, want 303", res.StatusCode)
	}
}

func TestMyKeys(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	c := e.signedIn(developerEmail)

	t.Run("create shows the secret once, then only its prefix", func(t *testing.T) {
		created := c.post("/app/keys", url.Values{"name": {"backend"}, "expires": {time.Now().AddDate(0, 1, 0).Format(time.DateOnly)}}, nil)
		if created.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303 to the secret page", created.StatusCode)
		}
		if strings.Contains(created.Header.Get("Location"), "sk_") {
			t.Fatalf("the redirect %q carries the secret", created.Header.Get("Location"))
		}
		res := c.get(created.Header.Get("Location"), nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("secret page: status %d, want 200", res.StatusCode)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control = %q, want no-store", cc)
		}
		d := res.doc(t)
		secret, _ := d.Find(`[data-testid="secret"]`).Attr("value")
		if err := apikeys.Check(secret); err != nil {
			t.Fatalf("shown secret %q is not a key: %v", secret, err)
		}
		if count(d, "copy-secret") != 1 || !strings.Contains(text(d, "secret-warning"), "shown only this once") {
			t.Error("no copy button or no warning next to the secret")
		}
		if got := text(d, "secret-curl"); !strings.Contains(got, `"`+e.srv.URL+`/api/rate-limit-status"`) {
			t.Errorf("curl example %q does not call this host", got)
		}
		list := c.get("/app/keys", nil)
		if strings.Contains(list.body, secret) {
			t.Error("the key list shows the whole secret")
		}
		ld := list.doc(t)
		if got := text(ld, "my-key-prefix"); got != apikeys.PrefixOf(secret)+"…" {
			t.Errorf("listed prefix = %q, want %q", got, apikeys.PrefixOf(secret)+"…")
		}
		if text(ld, "my-key-state") != "active" {
			t.Errorf("state = %q", text(ld, "my-key-state"))
		}
	})

	tests := []struct {
		name      string
		form      url.Values
		wantField string
		wantMsg   string
	}{
		{"name is required", url.Values{"name": {" "}}, "error-name", "must be 1 to 100 characters"},
		{"name is at most 100 characters", url.Values{"name": {strings.Repeat("n", 101)}}, "error-name", "must be 1 to 100 characters"},
		{"expiry must be a date", url.Values{"name": {"x"}, "expires": {"soon"}}, "error-expires_at", "must be a date such as 2027-01-31"},
		{"expiry must be in the future", url.Values{"name": {"x"}, "expires": {"2020-01-01"}}, "error-expires_at", "must be in the future"},
		{"expiry at the end of time", url.Values{"name": {"x"}, "expires": {"9999-12-31"}}, "error-expires_at", "must be at most 10 years from now; leave it empty for a key that does not expire"},
		{"expiry past ten years", url.Values{"name": {"x"}, "expires": {time.Now().AddDate(10, 0, 2).Format(time.DateOnly)}}, "error-expires_at", "must be at most 10 years from now; leave it empty for a key that does not expire"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := c.post("/app/keys", tt.form, nil)
			if res.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422", res.StatusCode)
			}
			d := res.doc(t)
			if got := text(d, tt.wantField); got != tt.wantMsg {
				t.Errorf("%s = %q, want %q", tt.wantField, got, tt.wantMsg)
			}
			if count(d, "secret") != 0 {
				t.Error("a secret was shown for an invalid form")
			}
		})
	}

	t.Run("rotate with a grace shows a new secret and keeps the old one for the grace", func(t *testing.T) {
		k, old := e.createKey(e.dev.ID, "rotating")
		rotated := c.post("/app/keys/"+strconv.FormatInt(k.ID, 10)+"/rotate", url.Values{"grace_seconds": {"3600"}}, nil)
		if rotated.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303 to the secret page", rotated.StatusCode)
		}
		res := c.get(rotated.Header.Get("Location"), nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("secret page: status %d, want 200", res.StatusCode)
		}
		d := res.doc(t)
		secret, _ := d.Find(`[data-testid="secret"]`).Attr("value")
		if secret == old || apikeys.Check(secret) != nil {
			t.Fatalf("rotated secret %q is not a new key", secret)
		}
		if !strings.Contains(text(d, "rotate-grace-note"), "keeps working for 1h") {
			t.Errorf("grace note = %q", text(d, "rotate-grace-note"))
		}
		var oldExpires *time.Time
		if err := e.pool.QueryRow(context.Background(), `SELECT expires_at FROM api_key_secrets WHERE key_id = $1 AND prefix = $2`,
			k.ID, apikeys.PrefixOf(old)).Scan(&oldExpires); err != nil {
			t.Fatal(err)
		}
		if oldExpires == nil || time.Until(*oldExpires) < 59*time.Minute || time.Until(*oldExpires) > 61*time.Minute {
			t.Errorf("old secret expires at %v, want in about an hour", oldExpires)
		}
	})

	t.Run("rotate refuses a grace not offered", func(t *testing.T) {
		k, _ := e.createKey(e.dev.ID, "odd grace")
		if res := c.post("/app/keys/"+strconv.FormatInt(k.ID, 10)+"/rotate", url.Values{"grace_seconds": {"7"}}, nil); res.StatusCode != http.StatusBadRequest {
			t.Errorf("status %d, want 400", res.StatusCode)
		}
	})

	t.Run("revoke asks first, then revokes", func(t *testing.T) {
		k, _ := e.createKey(e.dev.ID, "doomed")
		path := "/app/keys/" + strconv.FormatInt(k.ID, 10) + "/revoke"
		confirm := c.get(path, nil)
		if confirm.StatusCode != http.StatusOK || count(confirm.doc(t), "revoke-confirm") != 1 {
			t.Fatalf("confirmation page: status %d", confirm.StatusCode)
		}
		if got, _ := e.keys.Get(context.Background(), k.ID); got.RevokedAt != nil {
			t.Fatal("showing the confirmation revoked the key")
		}
		res := c.post(path, nil, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303", res.StatusCode)
		}
		if got, _ := e.keys.Get(context.Background(), k.ID); got.RevokedAt == nil {
			t.Error("the key is not revoked")
		}
	})
}

func TestMyKeysOtherDevelopersKeysAreNotFound(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	other, err := e.users.Create(context.Background(), users.NewUser{Email: "other@example.com", Password: testPassword, Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := e.createKey(other.ID, "theirs")
	c := e.signedIn(developerEmail)
	id := strconv.FormatInt(theirs.ID, 10)
	tests := []struct {
		name   string
		method string
		path   string
		form   url.Values
	}{
		{"revoke confirmation", http.MethodGet, "/app/keys/" + id + "/revoke", nil},
		{"revoke", http.MethodPost, "/app/keys/" + id + "/revoke", nil},
		{"rotate", http.MethodPost, "/app/keys/" + id + "/rotate", url.Values{"grace_seconds": {"0"}}},
		{"a key id that does not exist", http.MethodPost, "/app/keys/999999/revoke", nil},
		{"a key id that is not a number", http.MethodGet, "/app/keys/abc/revoke", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res response
			if tt.method == http.MethodGet {
				res = c.get(tt.path, nil)
			} else {
				res = c.post(tt.path, tt.form, nil)
			}
			if res.StatusCode != http.StatusNotFound {
				t.Errorf("status %d, want 404", res.StatusCode)
			}
			if strings.Contains(res.body, "theirs") || strings.Contains(res.body, theirs.Prefix) {
				t.Error("the answer reveals the other developer's key")
			}
		})
	}
	after, err := e.keys.Get(context.Background(), theirs.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.RevokedAt != nil || after.Version != theirs.Version || after.Prefix != theirs.Prefix {
		t.Errorf("the other developer's key changed: %+v", after)
	}
	if list := c.get("/app/keys", nil); strings.Contains(list.body, theirs.Prefix) {
		t.Error("the key list shows another developer's key")
	}
}

func TestAppPagesNeedADeveloper(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name       string
		c          *client
		path       string
		wantStatus int
	}{
		{"a visitor is sent to sign in", e.anonymous(), "/app", http.StatusSeeOther},
		{"a visitor is sent to sign in from the keys", e.anonymous(), "/app/keys", http.StatusSeeOther},
		{"an operator is refused the usage page", e.signedIn(operatorEmail), "/app", http.StatusForbidden},
		{"an operator is refused the keys page", e.signedIn(operatorEmail), "/app/keys", http.StatusForbidden},
		{"the docs are public", e.anonymous(), "/docs", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if res := tt.c.get(tt.path, nil); res.StatusCode != tt.wantStatus {
				t.Errorf("GET %s: %d, want %d", tt.path, res.StatusCode, tt.wantStatus)
			}
		})
	}
}

// spend sends n decisions for key k on route through the UI's store, as the
// API middleware would, with the limits the snapshot would give the key.
func (e *env) spend(k apikeys.Key, p plans.Plan, route string, n int) {
	e.t.Helper()
	var limits []enforce.Limit
	for _, l := range p.Limits {
		if l.Route == "" || l.Route == route {
			limits = append(limits, l.Enforce(p.Slug))
		}
	}
	for range n {
		if _, err := e.store.Allow(context.Background(), enforce.Request{Subject: enforce.DeveloperSubject(k.UserID), Key: enforce.KeyScope(k.ID), Route: route, Limits: limits}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func TestMyUsage(t *testing.T) {
	tests := []struct {
		name         string
		searches     int
		wantUsed     string
		wantBanner   string
		wantAdmitted string
		wantRejected string
	}{
		{"fresh key", 0, "0", "", "", ""},
		{"below 80 percent", 7, "7", "", "7", "0"},
		{"at 80 percent", 8, "8", "usage-banner-80", "8", "0"},
		{"over the limit", 13, "10", "usage-banner-100", "10", "3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			p := e.defaultPlan()
			k, _ := e.createKey(e.dev.ID, "backend")
			e.spend(k, p, "GET /api/search", tt.searches)
			res := e.signedIn(developerEmail).get("/app", nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			d := res.doc(t)
			row := d.Find(`[data-testid="usage-limit"][data-policy="starter-search"]`)
			if got := strings.TrimSpace(row.Find(`[data-testid="usage-used"]`).Text()); got != tt.wantUsed {
				t.Errorf("used = %q, want %q", got, tt.wantUsed)
			}
			if got := strings.TrimSpace(row.Find(`[data-testid="usage-max"]`).Text()); got != "10" {
				t.Errorf("limit = %q, want 10", got)
			}
			for _, b := range []string{"usage-banner-80", "usage-banner-100"} {
				if want := b == tt.wantBanner; (count(d, b) == 1) != want {
					t.Errorf("banner %s shown = %v, want %v", b, !want, want)
				}
			}
			route := d.Find(`[data-testid="usage-route"][data-route="GET /api/search"]`)
			if got := strings.TrimSpace(route.Find(`[data-testid="usage-route-admitted"]`).Text()); got != tt.wantAdmitted {
				t.Errorf("chart admitted = %q, want %q", got, tt.wantAdmitted)
			}
			if got := strings.TrimSpace(route.Find(`[data-testid="usage-route-rejected"]`).Text()); got != tt.wantRejected {
				t.Errorf("chart rejected = %q, want %q", got, tt.wantRejected)
			}
			if tt.searches == 0 && count(d, "usage-no-traffic") != 1 {
				t.Error("a key without traffic shows no 'no requests' note")
			}
		})
	}
}

func TestMyUsageStream(t *testing.T) {
	e := newEnv(t)
	p := e.defaultPlan()
	k, _ := e.createKey(e.dev.ID, "backend")
	c := e.signedIn(developerEmail)
	e.spend(k, p, "GET /api/search", 4)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/app/stream", nil)
	res, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	// Two events: the second must show a decision made after the first.
	var events []string
	var cur strings.Builder
	for sc.Scan() && len(events) < 2 {
		line := sc.Text()
		switch {
		case line == "":
			events = append(events, cur.String())
			cur.Reset()
			if len(events) == 1 {
				e.spend(k, p, "GET /api/search", 1)
			}
		case strings.HasPrefix(line, "event: "):
			if line != "event: usage" {
				t.Errorf("event line %q, want event: usage", line)
			}
		case strings.HasPrefix(line, "data: "):
			cur.WriteString(strings.TrimPrefix(line, "data: "))
		}
	}
	if len(events) != 2 {
		t.Fatalf("got %d events: %v", len(events), sc.Err())
	}
	for i, want := range []string{">4</span> of <span", ">5</span> of <span"} {
		if !strings.Contains(events[i], `data-testid="usage-used"`+want) {
			t.Errorf("event %d does not show %q used: %s", i+1, want, events[i])
		}
	}
}

func TestDocsPages(t *testing.T) {
	e := newEnv(t)
	p := e.defaultPlan()
	e.createPlan("private-partner", searchTier) // public by the helper
	all, _ := e.plans.List(context.Background())
	for _, pl := range all {
		if pl.Slug == "private-partner" {
			in := pl.Input()
			in.IsPublic = false
			if _, err := e.plans.Update(context.Background(), "test", pl.ID, pl.Version, in); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("a visitor sees the public plans, no private one", func(t *testing.T) {
		d := e.anonymous().get("/docs", nil).doc(t)
		var plansShown []string
		d.Find(`[data-testid="docs-plan"]`).Each(func(_ int, s *goquery.Selection) {
			plansShown = append(plansShown, s.AttrOr("data-plan", ""))
		})
		if strings.Join(plansShown, ",") != "starter" {
			t.Errorf("plans = %v, want [starter]", plansShown)
		}
		if count(d, "docs-your-plan") != 0 {
			t.Error("a visitor is told about 'their' plan")
		}
		if count(d, "docs-429") == 0 || !strings.Contains(d.Find(`[data-testid="docs-429"]`).Text(), `"error": "rate_limit_exceeded"`) {
			t.Error("no 429 example body")
		}
	})

	t.Run("a developer on a private plan sees it first", func(t *testing.T) {
		var partner plans.Plan
		all, _ := e.plans.List(context.Background())
		for _, pl := range all {
			if pl.Slug == "private-partner" {
				partner = pl
			}
		}
		u, _ := e.users.ByID(context.Background(), e.dev.ID)
		if _, err := e.users.SetPlan(context.Background(), u.ID, &partner.ID, u.Version); err != nil {
			t.Fatal(err)
		}
		defer func() {
			u, _ := e.users.ByID(context.Background(), e.dev.ID)
			_, _ = e.users.SetPlan(context.Background(), u.ID, nil, u.Version)
		}()
		d := e.signedIn(developerEmail).get("/docs", nil).doc(t)
		first := d.Find(`[data-testid="docs-plan"]`).First().AttrOr("data-plan", "")
		if first != "private-partner" || !strings.Contains(text(d, "docs-your-plan"), "PRIVATE-PARTNER") {
			t.Errorf("first plan %q, banner %q; want the developer's private plan first", first, text(d, "docs-your-plan"))
		}
	})

	get := func() (html, md, oa string) {
		c := e.anonymous()
		h := c.get("/docs", nil)
		m := c.get("/docs/limits.md", nil)
		o := c.get("/docs/openapi.json", nil)
		if m.Header.Get("Content-Type") != "text/markdown; charset=utf-8" || o.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("content types %q, %q", m.Header.Get("Content-Type"), o.Header.Get("Content-Type"))
		}
		if !json.Valid([]byte(o.body)) {
			t.Fatal("openapi.json is not JSON")
		}
		return h.body, m.body, o.body
	}
	html1, md1, oa1 := get()
	in := p.Input()
	in.Limits[0].Limit = 37
	if _, err := e.plans.Update(context.Background(), "test", p.ID, p.Version, in); err != nil {
		t.Fatal(err)
	}
	html2, md2, oa2 := get()
	tests := []struct {
		name          string
		before, after string
		wantBefore    string
		wantAfter     string
	}{
		{"the HTML follows a plan change", html1, html2, `data-testid="docs-limit-value">10<`, `data-testid="docs-limit-value">37<`},
		{"the Markdown follows a plan change", md1, md2, "| starter | `starter-search` | 10 |", "| starter | `starter-search` | 37 |"},
		{"the OpenAPI follows a plan change", searchLimitOf(t, oa1), searchLimitOf(t, oa2), "starter-search=10", "starter-search=37"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(tt.before, tt.wantBefore) || strings.Contains(tt.before, tt.wantAfter) {
				t.Errorf("before the change: want %q and not %q", tt.wantBefore, tt.wantAfter)
			}
			if !strings.Contains(tt.after, tt.wantAfter) || strings.Contains(tt.after, tt.wantBefore) {
				t.Errorf("after the change: want %q and not %q", tt.wantAfter, tt.wantBefore)
			}
		})
	}
}

// searchLimitOf reads the starter plan's search tier from the x-ratelimit
// extension of GET /api/search in an OpenAPI document, as "policy=limit".
func searchLimitOf(t *testing.T, doc string) string {
	t.Helper()
	var d struct {
		Paths map[string]map[string]struct {
			XRateLimit []struct {
				Plan   string `json:"plan"`
				Limits []struct {
					Policy string `json:"policy"`
					Limit  int64  `json:"limit"`
				} `json:"limits"`
			} `json:"x-ratelimit"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rl := range d.Paths["/api/search"]["get"].XRateLimit {
		for _, l := range rl.Limits {
			if rl.Plan == "starter" {
				out = append(out, l.Policy+"="+strconv.FormatInt(l.Limit, 10))
			}
		}
	}
	return strings.Join(out, ",")
}

// TestMyKeysCap: a developer at the key cap is told so on the keys page,
// with a 409, and no key is created.
func TestMyKeysCap(t *testing.T) {
	e := newEnv(t)
	e.keys.LimitKeysPerUser(2)
	c := e.signedIn(developerEmail)
	for i := range 2 {
		// A created key redirects to the page that shows its secret once.
		if res := c.post("/app/keys", url.Values{"name": {"k" + strconv.Itoa(i)}}, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("key %d: status %d", i+1, res.StatusCode)
		}
	}
	res := c.post("/app/keys", url.Values{"name": {"one too many"}}, nil)
	if res.StatusCode != http.StatusConflict {
		t.Fatalf("3rd key: status %d, want 409", res.StatusCode)
	}
	d := res.doc(t)
	if msg := text(d, "error-keys"); !strings.Contains(msg, "2 active keys") || !strings.Contains(msg, "Revoke") {
		t.Fatalf("3rd key: error %q, want the cap and what to do", msg)
	}
	if count(d, "secret") != 0 {
		t.Fatalf("the refused key's page shows a secret")
	}
	keys, _, err := e.keys.List(context.Background(), apikeys.Filter{UserID: e.dev.ID})
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys stored = %d (%v), want 2", len(keys), err)
	}
}

func TestMyUsageShowsTheAllowanceAndItsRenewal(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, err := e.plans.Create(ctx, "test", plans.PlanInput{
		Slug: "metered", Name: "Metered", IsPublic: true, IsDefault: true,
		Limits: []plans.LimitInput{
			{Name: "monthly", Algorithm: "quota", Period: "month", Limit: 5},
			{Name: "trial", Algorithm: "fixed_window", Mode: "shadow", Limit: 1, WindowSeconds: 60},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	anchor := time.Date(2020, 1, 31, 10, 0, 0, 0, time.UTC)
	if _, err := billing.SetAnchor(ctx, e.pool, "test", e.dev.ID, &anchor); err != nil {
		t.Fatal(err)
	}
	k, _ := e.createKey(e.dev.ID, "backend")
	var limits []enforce.Limit
	for _, l := range p.Limits {
		limits = append(limits, l.Enforce(p.Slug))
	}
	for range 2 {
		d, err := e.store.Allow(ctx, enforce.Request{Subject: enforce.DeveloperSubject(e.dev.ID), Key: enforce.KeyScope(k.ID), Limits: limits, Anchor: anchor})
		if err != nil || !d.Allowed {
			t.Fatalf("Allow: %+v %v", d, err)
		}
	}
	// The renewal, found the slow way: the first 31st (or last day of a
	// shorter month) at 10:00 UTC after now.
	now := time.Now().UTC()
	var renews time.Time
	for m := 0; ; m++ {
		first := time.Date(2020, time.Month(1+m), 1, 10, 0, 0, 0, time.UTC)
		last := first.AddDate(0, 1, -1)
		if c := last; c.After(now) {
			renews = c
			break
		}
	}
	d := e.signedIn(developerEmail).get("/app", nil).doc(t)
	row := d.Find(`[data-testid="usage-limit"][data-policy="metered-monthly"]`)
	if got := strings.TrimSpace(row.Find(`[data-testid="usage-used"]`).Text()); got != "2" {
		t.Errorf("used = %q, want 2", got)
	}
	want := "2 of 5 this month, renews on " + renews.Format("2 January 2006, 15:04 UTC")
	if got := strings.TrimSpace(row.Find(`[data-testid="usage-renews"]`).Text()); got != want {
		t.Errorf("renewal = %q, want %q", got, want)
	}
	if n := d.Find(`[data-testid="usage-limit"][data-policy="metered-trial"]`).Length(); n != 0 {
		t.Errorf("the shadow tier is shown %d times, want never", n)
	}
}
