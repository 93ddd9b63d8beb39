package httplimit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	cases := []struct {
		name string
		in   string
	}{
		{"Empty", ""},
		{"Plain", "pro-search"},
		{"QuotesAndBackslash", `policy "a\b"`},
		{"ControlCharacters", "\x00\x01\b\f\n\r\t\x1f"},
		{"HTMLSpecials", "<script>&</script>"},
		{"Delete", "\x7f"},
		{"MultiByte", "café ✓ 🚦"},
		{"LineSeparators", "a\u2028b\u2029c"},
		{"InvalidUTF8", "a\xffb\xc3"},
		{"TruncatedRuneAtEnd", "ok\xe2\x9c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendJSONString(nil, tc.in); string(got) != string(want) {
				t.Errorf("appendJSONString(%q) = %s, want %s", tc.in, got, want)
			}
			if got := appendJSONString([]byte("x"), []byte(tc.in)); string(got) != "x"+string(want) {
				t.Errorf("appendJSONString of bytes %q = %s, want x%s", tc.in, got, want)
			}
		})
	}
}

func TestRejectionBodyIsWhatEncodingJSONWrites(t *testing.T) {
	cases := []struct {
		name string
		d    enforce.Decision
		want RejectionBody
	}{
		{
			name: "NamesTheBindingLayer",
			d: enforce.Decision{Layers: []enforce.LayerResult{
				{Limit: enforce.Limit{Name: "pro-global", Limit: 10000, Window: time.Hour}, Allowed: true, Remaining: 5},
				{Limit: enforce.Limit{Name: "pro-search", Limit: 100, Window: time.Minute}, RetryAfter: 22100 * time.Millisecond},
			}},
			want: RejectionBody{Error: "rate_limit_exceeded", RetryAfter: 23, Limit: 100, Policy: "pro-search",
				Message: `Rate limit exceeded: policy "pro-search" allows 100 per minute. Retry in 23 s.`},
		},
		{
			name: "EscapesAnOddName",
			d: enforce.Decision{Layers: []enforce.LayerResult{
				{Limit: enforce.Limit{Name: `a"<b>`, Limit: 3, Window: 90 * time.Second}, RetryAfter: time.Millisecond},
			}},
			want: RejectionBody{Error: "rate_limit_exceeded", RetryAfter: 1, Limit: 3, Policy: `a"<b>`,
				Message: `Rate limit exceeded: policy "a\"<b>" allows 3 per 90 seconds. Retry in 1 s.`},
		},
		{
			name: "WithoutLayers",
			d:    enforce.Decision{},
			want: RejectionBody{Error: "rate_limit_exceeded", RetryAfter: 1, Message: "Rate limit exceeded. Retry in 1 s."},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeRejection(w, tc.d)
			want, err := json.Marshal(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.Body.String(); got != string(want)+"\n" {
				t.Errorf("body\n got %s\nwant %s", got, want)
			}
			if w.Code != 429 || w.Header().Get("Retry-After") != strconv.FormatInt(tc.want.RetryAfter, 10) ||
				w.Header().Get("Content-Type") != "application/json" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("status %d headers %v", w.Code, w.Header())
			}
		})
	}
}

// headerDecisions are decisions whose rate-limit fields the tests below
// compare, each with the limits it was decided on.
func headerDecisions() []struct {
	name   string
	limits []enforce.Limit
	d      enforce.Decision
} {
	global := enforce.Limit{Name: "pro-global", Algorithm: enforce.TokenBucket, Limit: 10000, Window: time.Hour}
	search := enforce.Limit{Name: "pro-search", Algorithm: enforce.FixedWindow, Limit: 100, Window: time.Minute, Route: "GET /search"}
	odd := enforce.Limit{Name: `we"ird\name`, Algorithm: enforce.SlidingWindowCounter, Limit: 7, Window: 1500 * time.Millisecond}
	slots := enforce.Limit{Name: "pro-slots", Algorithm: enforce.Concurrency, Limit: 4}
	at := time.Unix(1_700_000_000, 250_000_000)
	return []struct {
		name   string
		limits []enforce.Limit
		d      enforce.Decision
	}{
		{"OneLayer", []enforce.Limit{global}, enforce.Decision{Allowed: true, At: at, Layers: []enforce.LayerResult{
			{Limit: global, Allowed: true, Remaining: 9312, ResetAfter: 1800 * time.Second},
		}}},
		{"SecondLayerBinds", []enforce.Limit{global, search}, enforce.Decision{Allowed: true, At: at, Layers: []enforce.LayerResult{
			{Limit: global, Allowed: true, Remaining: 9312, ResetAfter: 1800 * time.Second},
			{Limit: search, Allowed: true, Remaining: 37, ResetAfter: 22500 * time.Millisecond},
		}}},
		{"Rejected", []enforce.Limit{global, search}, enforce.Decision{At: at, Layers: []enforce.LayerResult{
			{Limit: global, Allowed: true, Remaining: 9312, ResetAfter: 1800 * time.Second},
			{Limit: search, Remaining: -3, ResetAfter: 22500 * time.Millisecond, RetryAfter: 2 * time.Second},
		}}},
		{"EscapedNameAndConcurrency", []enforce.Limit{odd, slots}, enforce.Decision{Allowed: true, At: at, Layers: []enforce.LayerResult{
			{Limit: odd, Allowed: true, Remaining: 6, ResetAfter: 1500 * time.Millisecond},
			{Limit: slots, Allowed: true, Remaining: 3},
		}}},
	}
}

func TestFixedHeadersWriteTheSameFields(t *testing.T) {
	for _, tc := range headerDecisions() {
		t.Run(tc.name, func(t *testing.T) {
			fixed := newFixedHeaders(tc.limits)
			if fixed == nil {
				t.Fatal("no fixed parts for limits without quotas or shadows")
			}
			plain, cached := http.Header{}, http.Header{}
			writeLimitHeaders(plain, tc.d, tc.d.At, nil, new([limitHeaderCount]string))
			writeLimitHeaders(cached, tc.d, tc.d.At, fixed, new([limitHeaderCount]string))
			if len(plain) != limitHeaderCount || !reflect.DeepEqual(plain, cached) {
				t.Errorf("fields differ\nformatted %q\n    fixed %q", plain, cached)
			}
		})
	}
	t.Run("NoneForQuotasAndShadows", func(t *testing.T) {
		quota := []enforce.Limit{{Name: "q", Algorithm: enforce.Quota, Limit: 5, Period: enforce.PeriodMonth}}
		shadow := []enforce.Limit{{Name: "s", Algorithm: enforce.FixedWindow, Limit: 5, Window: time.Minute, Mode: enforce.ModeShadow}}
		if newFixedHeaders(quota) != nil || newFixedHeaders(shadow) != nil || newFixedHeaders(nil) != nil {
			t.Error("fixed parts for limits whose fields depend on the decision")
		}
	})
}

func TestLimitHeadersOfTwoLayers(t *testing.T) {
	tc := headerDecisions()[1]
	h := http.Header{}
	writeLimitHeaders(h, tc.d, tc.d.At, newFixedHeaders(tc.limits), new([limitHeaderCount]string))
	want := http.Header{
		"X-Ratelimit-Limit":     {"100"},
		"X-Ratelimit-Remaining": {"37"},
		"X-Ratelimit-Reset":     {"1700000023"},
		"Ratelimit-Policy":      {`"pro-global";q=10000;w=3600, "pro-search";q=100;w=60`},
		"Ratelimit":             {`"pro-global";r=9312;t=1800, "pro-search";r=37;t=23`},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("fields\n got %q\nwant %q", h, want)
	}
}

// BenchmarkWriteLimitHeaders measures the rate-limit fields of a decision
// of two layers, formatted whole ("formatted") and from the fixed parts
// the middleware caches per route ("fixed").
//
//	go test -run '^$' -bench BenchmarkWriteLimitHeaders -benchmem ./internal/enforce/
func BenchmarkWriteLimitHeaders(b *testing.B) {
	tc := headerDecisions()[1]
	for _, bc := range []struct {
		name  string
		fixed *fixedHeaders
	}{{"formatted", nil}, {"fixed", newFixedHeaders(tc.limits)}} {
		b.Run(bc.name, func(b *testing.B) {
			h := http.Header{}
			var vals [limitHeaderCount]string
			b.ReportAllocs()
			for b.Loop() {
				clear(h)
				writeLimitHeaders(h, tc.d, tc.d.At, bc.fixed, &vals)
			}
		})
	}
}
