package enforce

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
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
		d    Decision
		want RejectionBody
	}{
		{
			name: "NamesTheBindingLayer",
			d: Decision{Layers: []LayerResult{
				{Limit: Limit{Name: "pro-global", Limit: 10000, Window: time.Hour}, Allowed: true, Remaining: 5},
				{Limit: Limit{Name: "pro-search", Limit: 100, Window: time.Minute}, RetryAfter: 22100 * time.Millisecond},
			}},
			want: RejectionBody{Error: "rate_limit_exceeded", RetryAfter: 23, Limit: 100, Policy: "pro-search",
				Message: `Rate limit exceeded: policy "pro-search" allows 100 per minute. Retry in 23 s.`},
		},
		{
			name: "EscapesAnOddName",
			d: Decision{Layers: []LayerResult{
				{Limit: Limit{Name: `a"<b>`, Limit: 3, Window: 90 * time.Second}, RetryAfter: time.Millisecond},
			}},
			want: RejectionBody{Error: "rate_limit_exceeded", RetryAfter: 1, Limit: 3, Policy: `a"<b>`,
				Message: `Rate limit exceeded: policy "a\"<b>" allows 3 per 90 seconds. Retry in 1 s.`},
		},
		{
			name: "WithoutLayers",
			d:    Decision{},
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
