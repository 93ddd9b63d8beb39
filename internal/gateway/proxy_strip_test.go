package gateway

import (
	"net/http"
	"testing"
)

func TestStripConsoleCredentials(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want http.Header
	}{
		{"ConsoleCookiesAnyCase", http.Header{"Cookie": {"SLUICE_SESSION=a; theirs=1", "__Secure-sluice_x=b; __host-Sluice_Session=c; other=2"}},
			http.Header{"Cookie": {"theirs=1; other=2"}}},
		{"OnlyConsoleCookies", http.Header{"Cookie": {"sluice_session=a"}}, http.Header{}},
		{"OperatorToken", http.Header{"Authorization": {"Bearer sluice_op_abc"}, "X-Api-Key": {"sk_live_x"}},
			http.Header{"X-Api-Key": {"sk_live_x"}}},
		{"ServiceTokenAsAKey", http.Header{"X-Api-Key": {"sluice_svc_abc"}}, http.Header{}},
		{"TheCallersKeyStays", http.Header{"Authorization": {"Bearer sk_live_x"}}, http.Header{"Authorization": {"Bearer sk_live_x"}}},
		{"BasicStays", http.Header{"Authorization": {"Basic dTpw"}}, http.Header{"Authorization": {"Basic dTpw"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in.Clone()
			stripConsoleCredentials(h)
			if len(h) != len(tc.want) {
				t.Fatalf("got %v, want %v", h, tc.want)
			}
			for k, v := range tc.want {
				if got := h.Values(k); len(got) != len(v) || got[0] != v[0] {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}
