package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/gateway"
)

func TestCheck(t *testing.T) {
	f := newFixture(t, nil)
	check := gateway.NewCheck(f.catalogs(), f.mw, f.logger)
	ask := func(set func(h http.Header)) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", gateway.CheckPath, nil)
		r.RemoteAddr = "127.0.0.1:5000"
		set(r.Header)
		w := httptest.NewRecorder()
		check.ServeHTTP(w, r)
		return w
	}
	traefik := func(method, uri, key string) func(http.Header) {
		return func(h http.Header) {
			h.Set("X-Forwarded-Method", method)
			h.Set("X-Forwarded-Uri", uri)
			h.Set("X-Forwarded-Host", "shop.example.com")
			h.Set("X-Forwarded-For", "203.0.113.7")
			if key != "" {
				h.Set("Authorization", "Bearer "+key)
			}
		}
	}

	t.Run("ExactlyTheLimitAdmitted", func(t *testing.T) {
		admitted := 0
		for i := range itemsLimit + 3 {
			var w *httptest.ResponseRecorder
			if i%2 == 0 { // nginx's headers and Traefik's count alike
				w = ask(func(h http.Header) {
					h.Set("X-Original-Method", "GET")
					h.Set("X-Original-URI", "/items/"+strconv.Itoa(i)+"?full=1")
					h.Set("X-API-Key", f.secret)
				})
			} else {
				w = ask(traefik("GET", "/items/"+strconv.Itoa(i), f.secret))
			}
			switch w.Code {
			case http.StatusOK:
				admitted++
				if got := w.Header().Get("X-RateLimit-Remaining"); got != strconv.Itoa(itemsLimit-admitted) {
					t.Errorf("request %d: X-RateLimit-Remaining = %q, want %d", i, got, itemsLimit-admitted)
				}
				for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
					if w.Header().Get(h) == "" {
						t.Errorf("request %d: admitted without %s", i, h)
					}
				}
				if got := w.Header().Get(gateway.HeaderRoute); got != "shop "+itemsRoute {
					t.Errorf("%s = %q", gateway.HeaderRoute, got)
				}
			case http.StatusTooManyRequests:
				var body struct {
					Error      string `json:"error"`
					RetryAfter int64  `json:"retry_after"`
					Policy     string `json:"policy"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != "rate_limit_exceeded" || body.Policy != "shop-items" || body.RetryAfter < 1 {
					t.Errorf("429 body %s", w.Body)
				}
				if w.Header().Get("Retry-After") == "" {
					t.Error("429 without Retry-After")
				}
				if w.Header().Get(gateway.HeaderError) != strings.TrimSpace(w.Body.String()) {
					t.Errorf("%s = %q, want the body %q", gateway.HeaderError, w.Header().Get(gateway.HeaderError), w.Body)
				}
			default:
				t.Fatalf("request %d: status %d, body %s", i, w.Code, w.Body)
			}
		}
		if admitted != itemsLimit {
			t.Errorf("admitted %d, want exactly %d", admitted, itemsLimit)
		}
	})

	t.Run("OtherRouteNotHeldToTheTier", func(t *testing.T) {
		w := ask(traefik("POST", "/orders", f.secret))
		if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") != "" {
			t.Errorf("status %d, X-RateLimit-Limit %q: want 200 without limits", w.Code, w.Header().Get("X-RateLimit-Limit"))
		}
	})

	t.Run("HeadCountsOnTheGetRoute", func(t *testing.T) {
		w := ask(traefik("HEAD", "/items/1", f.secret))
		if w.Code != http.StatusTooManyRequests {
			t.Errorf("HEAD after the GET tier is spent: status %d, want 429", w.Code)
		}
	})

	t.Run("BadKeyIs401", func(t *testing.T) {
		w := ask(traefik("GET", "/items/1", "sk_live_notakey"))
		if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("status %d, headers %v", w.Code, w.Header())
		}
		var body struct{ Error string }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error != "invalid_api_key" {
			t.Errorf("401 body %s", w.Body)
		}
	})

	t.Run("MissingOriginalIs400", func(t *testing.T) {
		w := ask(func(h http.Header) { h.Set("X-Forwarded-Uri", "/items/1") })
		if w.Code != http.StatusBadRequest || !json.Valid(w.Body.Bytes()) {
			t.Errorf("status %d body %s, want 400 JSON", w.Code, w.Body)
		}
	})

	t.Run("Every503CarriesRetryAfter", func(t *testing.T) {
		// An engine answer such as identity_unavailable sets no
		// Retry-After; the gateway passes the check's answer on as it is.
		down := gateway.NewCheck(f.catalogs(), enforcerFunc(func(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"identity_unavailable"}`))
		}), f.logger)
		r := httptest.NewRequest("GET", gateway.CheckPath, nil)
		traefik("GET", "/items/1", f.secret)(r.Header)
		w := httptest.NewRecorder()
		down.ServeHTTP(w, r)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
			t.Errorf("status %d, Retry-After %q: want 503 with Retry-After 1", w.Code, w.Header().Get("Retry-After"))
		}
		if got := w.Header().Get(gateway.HeaderError); got != `{"error":"identity_unavailable"}` {
			t.Errorf("%s = %q", gateway.HeaderError, got)
		}
	})
}

// enforcerFunc adapts a function to gateway.Enforcer.
type enforcerFunc func(w http.ResponseWriter, r *http.Request, route string, next http.Handler)

func (f enforcerFunc) Enforce(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	f(w, r, route, next)
}
