package docs_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/testenv"
)

var routes = []string{sampleapi.RouteSearch, sampleapi.RouteItem, sampleapi.RouteCreateReport, sampleapi.RouteJob}

func testPlans() []plans.Plan {
	return []plans.Plan{
		{Slug: "free", Name: "Free", IsPublic: true, IsDefault: true, Limits: []plans.Limit{
			{Name: "global", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute},
			{Name: "search", Route: sampleapi.RouteSearch, Algorithm: enforce.SlidingWindowLog, Limit: 5, Window: time.Minute},
			{Name: "reports", Route: sampleapi.RouteCreateReport, Algorithm: enforce.LeakyBucket, Limit: 6, Window: time.Minute, Burst: 2, Mode: enforce.ModeQueue},
		}},
		{Slug: "pro", Name: "Pro", IsPublic: true, Limits: []plans.Limit{
			{Name: "search", Route: sampleapi.RouteSearch, Algorithm: enforce.TokenBucket, Limit: 60, Window: time.Minute, Burst: 10, Cost: 2, Mode: enforce.ModeDegrade},
		}},
		{Slug: "partner", Name: "Partner", IsPublic: false, Limits: []plans.Limit{
			{Name: "global", Algorithm: enforce.SlidingWindowCounter, Limit: 1000, Window: time.Hour},
		}},
	}
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name      string
		yourPlan  string
		wantPlans []string
		wantYour  string
	}{
		{"a visitor sees the public plans in order", "", []string{"free", "pro"}, ""},
		{"a developer sees their plan first", "pro", []string{"pro", "free"}, "pro"},
		{"a private plan is shown to its developer only", "partner", []string{"partner", "free", "pro"}, "partner"},
		{"an unknown plan is ignored", "gone", []string{"free", "pro"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := docs.Build(testPlans(), docs.Options{YourPlan: tt.yourPlan})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range m.Plans {
				got = append(got, p.Slug)
				if p.Yours != (p.Slug == tt.wantYour) {
					t.Errorf("plan %s Yours = %v", p.Slug, p.Yours)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.wantPlans, ",") {
				t.Errorf("plans = %v, want %v", got, tt.wantPlans)
			}
			gotYour := ""
			if m.Your != nil {
				gotYour = m.Your.Slug
			}
			if gotYour != tt.wantYour {
				t.Errorf("Your = %q, want %q", gotYour, tt.wantYour)
			}
			for _, e := range m.Endpoints {
				if len(e.Plans) != len(m.Plans) {
					t.Errorf("%s has %d plan columns, want %d", e.Route, len(e.Plans), len(m.Plans))
				}
				for i, ep := range e.Plans {
					if ep.Plan != m.Plans[i].Slug {
						t.Errorf("%s column %d is %s, want %s", e.Route, i, ep.Plan, m.Plans[i].Slug)
					}
				}
			}
		})
	}
}

// endpointPlan finds plan slug's entry on route.
func endpointPlan(t *testing.T, m docs.Model, route, slug string) docs.EndpointPlan {
	t.Helper()
	for _, e := range m.Endpoints {
		if e.Route != route {
			continue
		}
		for _, ep := range e.Plans {
			if ep.Plan == slug {
				return ep
			}
		}
	}
	t.Fatalf("no entry for plan %s on %s", slug, route)
	return docs.EndpointPlan{}
}

func headerOf(r docs.Response, name string) string {
	for _, h := range r.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// TestExamplesComeFromTheMiddleware checks the recorded examples against
// what the limits imply, one case per mode.
func TestExamplesComeFromTheMiddleware(t *testing.T) {
	m, err := docs.Build(testPlans(), docs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reset := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC).Unix() // the frozen clock's minute ends
	tests := []struct {
		name            string
		route, plan     string
		wantPolicies    []string
		wantFirstLimit  string
		wantFirstRemain string
		wantOverAfter   int
		wantOverHeader  string
		wantRejected    bool
		wantRejectAfter int
		wantBodyPolicy  string
	}{
		{
			name: "reject mode refuses the request after the limit", route: sampleapi.RouteSearch, plan: "free",
			wantPolicies: []string{"free-search", "free-global"}, wantFirstLimit: "5", wantFirstRemain: "4",
			wantOverAfter: 5, wantRejected: true, wantRejectAfter: 5, wantBodyPolicy: "free-search",
		},
		{
			name: "degrade mode serves degraded answers, and nothing else limits them", route: sampleapi.RouteSearch, plan: "pro",
			wantPolicies: []string{"pro-search"}, wantFirstLimit: "60", wantFirstRemain: "8", // cost units: 10 tokens less 2
			wantOverAfter: 5, wantOverHeader: httplimit.HeaderDegraded,
		},
		{
			name: "queue mode delays, then refuses past the queue", route: sampleapi.RouteCreateReport, plan: "free",
			wantPolicies: []string{"free-reports", "free-global"}, wantFirstLimit: "6", wantFirstRemain: "2",
			wantOverAfter: 1, wantOverHeader: httplimit.HeaderQueueDelay, wantRejected: true, wantRejectAfter: 3, wantBodyPolicy: "free-reports",
		},
		{
			name: "a plan-wide limit alone governs an endpoint without a tier", route: sampleapi.RouteItem, plan: "free",
			wantPolicies: []string{"free-global"}, wantFirstLimit: "100", wantFirstRemain: "99",
			wantOverAfter: 100, wantRejected: true, wantRejectAfter: 100, wantBodyPolicy: "free-global",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := endpointPlan(t, m, tt.route, tt.plan)
			var policies []string
			for _, l := range ep.Limits {
				policies = append(policies, l.Policy)
			}
			if strings.Join(policies, ",") != strings.Join(tt.wantPolicies, ",") {
				t.Errorf("policies = %v, want %v", policies, tt.wantPolicies)
			}
			ex := ep.Examples
			if ex == nil {
				t.Fatal("no examples")
			}
			if got := headerOf(ex.First, "X-RateLimit-Limit"); got != tt.wantFirstLimit {
				t.Errorf("first X-RateLimit-Limit = %q, want %q", got, tt.wantFirstLimit)
			}
			if got := headerOf(ex.First, "X-RateLimit-Remaining"); got != tt.wantFirstRemain {
				t.Errorf("first X-RateLimit-Remaining = %q, want %q", got, tt.wantFirstRemain)
			}
			if ex.Over == nil || ex.OverAfter != tt.wantOverAfter {
				t.Fatalf("over-limit example after %d requests (%v), want after %d", ex.OverAfter, ex.Over != nil, tt.wantOverAfter)
			}
			if tt.wantOverHeader != "" && headerOf(*ex.Over, tt.wantOverHeader) == "" {
				t.Errorf("over-limit answer lacks %s: %+v", tt.wantOverHeader, ex.Over.Headers)
			}
			if (ex.Rejected != nil) != tt.wantRejected {
				t.Fatalf("rejected example present = %v, want %v", ex.Rejected != nil, tt.wantRejected)
			}
			if !tt.wantRejected {
				return
			}
			if ex.RejectedAfter != tt.wantRejectAfter || ex.Rejected.Status != 429 {
				t.Errorf("rejected with %d after %d requests, want 429 after %d", ex.Rejected.Status, ex.RejectedAfter, tt.wantRejectAfter)
			}
			if headerOf(*ex.Rejected, "Retry-After") == "" {
				t.Error("429 example lacks Retry-After")
			}
			var body httplimit.RejectionBody
			if err := json.Unmarshal([]byte(ex.Rejected.Body), &body); err != nil {
				t.Fatalf("429 body %q: %v", ex.Rejected.Body, err)
			}
			if body.Error != "rate_limit_exceeded" || body.Policy != tt.wantBodyPolicy || body.RetryAfter < 1 {
				t.Errorf("429 body = %+v, want policy %s", body, tt.wantBodyPolicy)
			}
			if tt.plan == "free" && tt.route == sampleapi.RouteItem {
				if got := headerOf(*ex.Rejected, "X-RateLimit-Reset"); got != jsonInt(reset) {
					t.Errorf("fixed window X-RateLimit-Reset = %s, want the minute's end %d", got, reset)
				}
			}
		})
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestOpenAPIIsValid31(t *testing.T) {
	m, err := docs.Build(testPlans(), docs.Options{BaseURL: "https://api.example.com", YourPlan: "partner"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := docs.OpenAPI(m)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Errorf("version = %q, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("invalid OpenAPI 3.1: %s: %s", e.Message, e.Reason)
		}
	}
	model, buildErrs := doc.BuildV3Model()
	if buildErrs != nil {
		t.Fatalf("build model: %v", buildErrs)
	}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			ext, ok := op.Extensions.Get("x-ratelimit")
			if path == "/api/rate-limit-status" {
				continue
			}
			if !ok || ext == nil {
				t.Errorf("%s %s lacks x-ratelimit", method, path)
				continue
			}
			if _, ok := op.Responses.Codes.Get("429"); !ok {
				t.Errorf("%s %s does not document 429", method, path)
			}
		}
	}
}

// openAPILimits decodes the x-ratelimit of one operation.
func openAPILimits(t *testing.T, raw []byte, path, method string) []struct {
	Plan   string `json:"plan"`
	Limits []struct {
		Policy string `json:"policy"`
		Limit  int64  `json:"limit"`
	} `json:"limits"`
} {
	t.Helper()
	var doc struct {
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
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Paths[path][method].XRateLimit
}

// TestDocsFollowPlanChanges edits a plan through the plans service on a real
// database and checks that the Markdown and OpenAPI outputs follow.
func TestDocsFollowPlanChanges(t *testing.T) {
	ctx := context.Background()
	svc := plans.NewService(testenv.Postgres(t), routes, slog.New(slog.DiscardHandler))
	in := plans.PlanInput{Slug: "starter", Name: "Starter", IsPublic: true, Limits: []plans.LimitInput{
		{Name: "search", Route: sampleapi.RouteSearch, Algorithm: "fixed_window", Limit: 30, WindowSeconds: 60},
	}}
	p, err := svc.Create(ctx, "test", in)
	if err != nil {
		t.Fatal(err)
	}
	render := func() (string, []byte) {
		t.Helper()
		all, err := svc.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := docs.Build(all, docs.Options{})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := docs.OpenAPI(m)
		if err != nil {
			t.Fatal(err)
		}
		return docs.Markdown(m), raw
	}
	md1, oa1 := render()

	in.Limits[0].Limit = 45
	in.Limits[0].Algorithm = "token_bucket"
	in.Limits[0].Burst = 9
	if _, err := svc.Update(ctx, "test", p.ID, p.Version, in); err != nil {
		t.Fatal(err)
	}
	md2, oa2 := render()

	tests := []struct {
		name   string
		before string
		after  string
		want   []string
	}{
		{"markdown shows the new limit", md1, md2, []string{"| starter | `starter-search` | 45 | minute | 9 | 1 | token_bucket | reject |", "A bucket holding up to 9 tokens"}},
		{"markdown shows the old limit before", md2, md1, []string{"| starter | `starter-search` | 30 | minute | n/a | 1 | fixed_window | reject |"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before == tt.after {
				t.Fatal("output did not change with the plan")
			}
			for _, w := range tt.want {
				if !strings.Contains(tt.after, w) {
					t.Errorf("output lacks %q", w)
				}
				if strings.Contains(tt.before, w) {
					t.Errorf("the other version also has %q", w)
				}
			}
		})
	}
	t.Run("openapi shows the new limit", func(t *testing.T) {
		limitOf := func(raw []byte) int64 {
			for _, rl := range openAPILimits(t, raw, "/api/search", "get") {
				if rl.Plan == "starter" && len(rl.Limits) == 1 && rl.Limits[0].Policy == "starter-search" {
					return rl.Limits[0].Limit
				}
			}
			t.Fatal("no starter-search in x-ratelimit")
			return 0
		}
		if before, after := limitOf(oa1), limitOf(oa2); before != 30 || after != 45 {
			t.Errorf("x-ratelimit limit went %d -> %d, want 30 -> 45", before, after)
		}
	})
}

// TestLimitsInWords checks what the docs say about each algorithm and mode,
// with the limit's own numbers.
func TestLimitsInWords(t *testing.T) {
	tests := []struct {
		name           string
		limit          plans.Limit
		wantRate       string
		wantWindow     string
		wantExplainHas []string
		wantOverLimit  string
		// wantBurst is how many back-to-back requests the engine admits
		// plainly, which the words promise.
		wantBurst int
	}{
		{"fixed window", plans.Limit{Name: "a", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute},
			"100 per minute", "minute", []string{"fixed windows of one minute", "all 100 at once", "up to 200 within a moment"}, "Refused: 429", 100},
		{"sliding log", plans.Limit{Name: "a", Algorithm: enforce.SlidingWindowLog, Limit: 10, Window: time.Hour},
			"10 per hour", "hour", []string{"during the last hour", "after a burst of 10 you wait a full hour"}, "Refused: 429", 10},
		{"sliding counter", plans.Limit{Name: "a", Algorithm: enforce.SlidingWindowCounter, Limit: 30, Window: 5 * time.Minute},
			"30 per 5 minutes", "5 minutes", []string{"burst up to 30", "returns gradually"}, "Refused: 429", 30},
		{"token bucket with cost and degrade", plans.Limit{Name: "a", Algorithm: enforce.TokenBucket, Limit: 60, Window: time.Minute, Burst: 10, Cost: 2, Mode: enforce.ModeDegrade},
			"60 per minute; each request costs 2, so 30 requests", "minute", []string{"up to 10 tokens", "burst of 5 requests", "one request every 2s"}, "Degraded: 200", 5},
		{"token bucket without burst holds the limit", plans.Limit{Name: "a", Algorithm: enforce.TokenBucket, Limit: 20, Window: 10 * time.Second},
			"20 per 10 seconds", "10 seconds", []string{"up to 20 tokens", "one every 500ms"}, "Refused: 429", 20},
		{"leaky bucket queueing", plans.Limit{Name: "a", Algorithm: enforce.LeakyBucket, Limit: 6, Window: time.Minute, Burst: 2, Mode: enforce.ModeQueue},
			"6 per minute", "minute", []string{"one every 10s", "up to 2 requests may wait", "Sluice-Queue-Delay-Ms"}, "Queued:", 1},
		{"concurrency", plans.Limit{Name: "a", Algorithm: enforce.Concurrency, Limit: 3, Window: time.Minute},
			"3 concurrent requests", "—", []string{"At most 3 of your requests in flight", `qu="concurrent-requests"`}, "Refused: 429", 0},
		{"concurrency queueing", plans.Limit{Name: "a", Algorithm: enforce.Concurrency, Limit: 3, Window: time.Minute, Mode: enforce.ModeQueue},
			"3 concurrent requests", "—", []string{"waits for a slot to free"}, "Queued: you wait for a free slot", 0},
		{"leaky bucket policing", plans.Limit{Name: "a", Algorithm: enforce.LeakyBucket, Limit: 2, Window: time.Second, Burst: 3},
			"2 per second", "second", []string{"one every 500ms", "a burst of up to 4 passes back to back"}, "Refused: 429", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.limit.Route = sampleapi.RouteSearch
			m, err := docs.Build([]plans.Plan{{Slug: "p", Name: "P", IsPublic: true, Limits: []plans.Limit{tt.limit}}}, docs.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ep := endpointPlan(t, m, sampleapi.RouteSearch, "p")
			if len(ep.Limits) != 1 {
				t.Fatalf("%d limits on search, want 1", len(ep.Limits))
			}
			l := ep.Limits[0]
			if l.Policy != "p-a" || l.Rate != tt.wantRate || l.WindowText != tt.wantWindow {
				t.Errorf("policy %q rate %q window %q; want p-a, %q, %q", l.Policy, l.Rate, l.WindowText, tt.wantRate, tt.wantWindow)
			}
			for _, w := range tt.wantExplainHas {
				if !strings.Contains(l.Explanation, w) {
					t.Errorf("explanation lacks %q: %s", w, l.Explanation)
				}
			}
			if !strings.HasPrefix(l.OverLimit, tt.wantOverLimit) {
				t.Errorf("over-limit text %q, want it to start %q", l.OverLimit, tt.wantOverLimit)
			}
			got := -1
			if ep.Examples != nil {
				got = ep.Examples.OverAfter
			}
			if got != tt.wantBurst {
				t.Errorf("the engine admitted a burst of %d, the words promise %d", got, tt.wantBurst)
			}
		})
	}
}
