package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/httplimit"
	"github.com/sluicehq/sluice/internal/gateway"
)

// throughGateway sends traffic to a gateway at base that asks Sluice before
// it proxies to api, and checks what clients and api see: exactly the
// limit admitted, the headers on admitted responses, the 429 with its body
// and Retry-After, the 401 for a bad key.
func throughGateway(t *testing.T, f *fixture, api *upstream, base string) {
	t.Helper()
	const sent = itemsLimit + 4
	admitted, rejected := 0, 0
	for i := range sent {
		res := get(t, "GET", base+"/items/"+strconv.Itoa(i), f.secret)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch res.StatusCode {
		case http.StatusOK:
			admitted++
			noInternalHeaders(t, "admitted", res)
			if string(body) != "served GET /items/"+strconv.Itoa(i) {
				t.Errorf("admitted body %q", body)
			}
			if got, want := res.Header.Get("X-RateLimit-Remaining"), strconv.Itoa(itemsLimit-admitted); got != want {
				t.Errorf("admitted %d: X-RateLimit-Remaining = %q, want %q", admitted, got, want)
			}
			for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
				if res.Header.Get(h) == "" {
					t.Errorf("admitted response without %s: %v", h, res.Header)
				}
			}
		case http.StatusTooManyRequests:
			rejected++
			noInternalHeaders(t, "429", res)
			var b struct {
				Error      string `json:"error"`
				RetryAfter int64  `json:"retry_after"`
				Limit      int64  `json:"limit"`
				Policy     string `json:"policy"`
			}
			if err := json.Unmarshal(body, &b); err != nil || b.Error != "rate_limit_exceeded" || b.Limit != itemsLimit || b.Policy != "shop-items" || b.RetryAfter < 1 {
				t.Errorf("429 body %q (%v)", body, err)
			}
			if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || int64(ra) != b.RetryAfter {
				t.Errorf("Retry-After = %q, body says %d", res.Header.Get("Retry-After"), b.RetryAfter)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("429 Content-Type = %q", ct)
			}
			if res.Header.Get("X-RateLimit-Remaining") != "0" {
				t.Errorf("429 X-RateLimit-Remaining = %q, want 0", res.Header.Get("X-RateLimit-Remaining"))
			}
		default:
			t.Fatalf("request %d: status %d, body %q", i, res.StatusCode, body)
		}
	}
	if admitted != itemsLimit || rejected != sent-itemsLimit {
		t.Errorf("admitted %d and rejected %d of %d, want exactly %d admitted", admitted, rejected, sent, itemsLimit)
	}
	if n := api.served.Load(); n != itemsLimit {
		t.Errorf("the upstream served %d requests, want exactly %d", n, itemsLimit)
	}

	// Over a degrade-mode tier the API is told, and so is the client.
	for i, want := range []string{"served GET /files/a/b", "served GET /files/a/b (degraded: shop-files)"} {
		// The client's own marker never reaches the API.
		req, _ := http.NewRequest("GET", base+"/files/a/b", nil)
		req.Header.Set("Authorization", "Bearer "+f.secret)
		req.Header.Set("Sluice-Degraded", "spoofed")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("files request %d: status %d body %q, want %q", i, res.StatusCode, body, want)
		}
		if got, wantHeader := res.Header.Get("Sluice-Degraded"), strings.TrimSuffix(strings.TrimPrefix(want, "served GET /files/a/b (degraded: "), ")"); i == 1 && got != wantHeader {
			t.Errorf("degraded response: Sluice-Degraded = %q, want %q", got, wantHeader)
		}
		if v, ok := res.Header["Sluice-Degraded"]; i == 0 && ok {
			t.Errorf("plain response carries Sluice-Degraded %q", v)
		}
	}

	// An admission that holds a concurrency slot carries its lease token
	// to the gateway, never to the client or the API.
	res := get(t, "GET", base+"/slots/1", f.secret)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != "served GET /slots/1" {
		t.Errorf("GET /slots/1: status %d body %q", res.StatusCode, body)
	}
	noInternalHeaders(t, "slot held", res)

	// A route without a tier passes; a bad key never reaches the API.
	res = get(t, "POST", base+"/orders", f.secret)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("POST /orders: status %d, want 200", res.StatusCode)
	}
	if v, ok := res.Header["X-Ratelimit-Limit"]; ok {
		t.Errorf("POST /orders has no limit but carries X-RateLimit-Limit %q", v)
	}
	identityThroughGateway(t, f, api, base)

	res = get(t, "GET", base+"/items/1", "sk_live_unknown")
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	var b struct{ Error string }
	if res.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &b) != nil || b.Error != "invalid_api_key" {
		t.Errorf("bad key: status %d body %q, want 401 invalid_api_key", res.StatusCode, body)
	}
	if v := res.Header.Values("WWW-Authenticate"); len(v) != 1 || v[0] != `Bearer error="invalid_token"` {
		t.Errorf("401 WWW-Authenticate %q, want it once", v)
	}
	noInternalHeaders(t, "401", res)
	if n := api.served.Load(); n != itemsLimit+6 {
		t.Errorf("the upstream served %d requests, want %d", n, itemsLimit+6)
	}

	if f.check.Load() == nil {
		return // the portal's own reverse proxy: no check to swap
	}

	// The portal decides without Redis, in its default failure mode
	// (local): the client is told its headers describe this instance's
	// counters.
	f.useCheck(f.outageCheck(enforce.FailLocal))
	res = get(t, "GET", base+"/items/1", f.secret)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get(httplimit.HeaderStoreDegraded) != "local" || res.Header.Get("X-RateLimit-Limit") != strconv.Itoa(itemsLimit) {
		t.Errorf("decided locally: status %d, %s %q, X-RateLimit-Limit %q; want 200, local, %d (body %q)", res.StatusCode,
			httplimit.HeaderStoreDegraded, res.Header.Get(httplimit.HeaderStoreDegraded), res.Header.Get("X-RateLimit-Limit"), itemsLimit, body)
	}
	noInternalHeaders(t, "local decision", res)

	// In the closed failure mode the portal refuses: 503, Retry-After and
	// the JSON body reach the client, and the API is not called.
	f.useCheck(f.outageCheck(enforce.FailClosed))
	res = get(t, "GET", base+"/items/1", f.secret)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	var unavailable struct{ Error string }
	if res.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &unavailable) != nil || unavailable.Error != "rate_limit_unavailable" {
		t.Errorf("closed: status %d body %q, want 503 rate_limit_unavailable", res.StatusCode, body)
	}
	if ra := res.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("closed: Retry-After %q, want 1", ra)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("closed: Content-Type %q", ct)
	}
	noInternalHeaders(t, "503", res)
	f.useCheck(gateway.NewCheck(f.catalogs(), f.mw, f.logger))
	if n := api.served.Load(); n != itemsLimit+7 {
		t.Errorf("the upstream served %d requests, want %d", n, itemsLimit+7)
	}
}

// noInternalHeaders fails the test if a client's response carries a header
// meant for the gateway alone, or any header twice.
func noInternalHeaders(t *testing.T, what string, res *http.Response) {
	t.Helper()
	for _, h := range []string{gateway.HeaderError, gateway.HeaderRoute, gateway.HeaderLease, gateway.HeaderLeaseExpires} {
		if v, ok := res.Header[http.CanonicalHeaderKey(h)]; ok {
			t.Errorf("%s: the client got %s %q", what, h, v)
		}
	}
	for name, v := range res.Header {
		if len(v) > 1 {
			t.Errorf("%s: %s sent %d times: %q", what, name, len(v), v)
		}
	}
}

// identityThroughGateway sends a keyed and an anonymous request, each
// claiming someone else's identity, and checks that the API receives who
// really called: the key's id, developer and plan for the first, nothing of
// a key for the second, never the client's claims. Through a gateway (not
// the portal's own proxy, which passes the key on) the API never sees the
// key.
func identityThroughGateway(t *testing.T, f *fixture, api *upstream, base string) {
	t.Helper()
	spoof := func(req *http.Request) {
		req.Header.Set(gateway.HeaderKeyID, "999")
		req.Header.Set(gateway.HeaderDeveloperID, "999")
		req.Header.Set(gateway.HeaderPlan, "enterprise")
		req.Header.Set(gateway.HeaderKeyScope, `{"read_only":false}`)
	}
	for _, tc := range []struct {
		name string
		key  string
		want map[string]string // "" for absent
	}{
		{"Keyed", f.secret, map[string]string{
			gateway.HeaderKeyID:       strconv.FormatInt(f.key.ID, 10),
			gateway.HeaderDeveloperID: strconv.FormatInt(f.key.UserID, 10),
			gateway.HeaderPlan:        f.plan.Slug,
			gateway.HeaderKeyScope:    "",
		}},
		{"Anonymous", "", map[string]string{
			gateway.HeaderKeyID:       "",
			gateway.HeaderDeveloperID: "",
			gateway.HeaderPlan:        "", // the fixture has no anonymous plan
			gateway.HeaderKeyScope:    "",
		}},
	} {
		req, err := http.NewRequest("POST", base+"/orders", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.key != "" {
			req.Header.Set("X-API-Key", tc.key)
		}
		spoof(req)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(body) != "served POST /orders" {
			t.Fatalf("%s: status %d body %q, want the API's 200", tc.name, res.StatusCode, body)
		}
		got := api.lastHeader()
		for name, want := range tc.want {
			if v := got.Values(name); want == "" && len(v) != 0 || want != "" && (len(v) != 1 || v[0] != want) {
				t.Errorf("%s: the API got %s %q, want %q", tc.name, name, v, want)
			}
		}
		for _, name := range gateway.IdentityHeaders {
			if v, ok := res.Header[http.CanonicalHeaderKey(name)]; ok {
				t.Errorf("%s: the client got %s %q", tc.name, name, v)
			}
		}
		if f.check.Load() != nil {
			for _, name := range []string{"Authorization", "X-Api-Key"} {
				if v, ok := got[name]; ok {
					t.Errorf("%s: the API got the caller's %s %q", tc.name, name, v)
				}
			}
		}
	}
}
