package adminapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/optokens"
)

type contextKey int

const (
	principalKey contextKey = iota
	requestIDKey
)

// wwwAuthenticate is sent with every 401, as RFC 6750 requires; error
// codes are added when a credential was presented but refused.
const wwwAuthenticate = `Bearer realm="sluice-admin"`

// authenticate admits a request only with a valid operator token (or the
// bootstrap token) in "Authorization: Bearer ..." and puts the principal
// in the request context for handlers to record as the actor.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header := r.Header.Get("Authorization")
		if header == "" {
			a.unauthorized(w, r, "", "This endpoint needs an operator token: send \"Authorization: Bearer sluice_op_...\".")
			return
		}
		scheme, secret, ok := strings.Cut(header, " ")
		secret = strings.TrimSpace(secret)
		if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
			a.unauthorized(w, r, "invalid_request", "The Authorization header must have the form \"Bearer <operator token>\".")
			return
		}
		p, err := a.tokens.Authenticate(r.Context(), secret)
		switch {
		case errors.Is(err, optokens.ErrInvalidToken):
			detail := "The operator token is unknown or revoked."
			// A developer's API key is the likeliest wrong credential; say so
			// plainly instead of leaving the caller to guess.
			if strings.HasPrefix(secret, "sk_") {
				detail = "This is a developer API key; the admin API accepts only operator tokens (sluice_op_...)."
			}
			a.unauthorized(w, r, "invalid_token", detail)
			return
		case err != nil:
			a.fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey, p)))
	})
}

func (a *api) unauthorized(w http.ResponseWriter, r *http.Request, code, detail string) {
	challenge := wwwAuthenticate
	if code != "" {
		challenge += `, error="` + code + `"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	writeProblem(w, r, Problem{
		Type: typeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail,
	})
}

// principal is the authenticated caller; authenticate guarantees it is set
// for every route that needs it.
func principal(ctx context.Context) optokens.Principal {
	p, _ := ctx.Value(principalKey).(optokens.Principal)
	return p
}

// actor is the audit log's name for the caller: "token:<id>" or "bootstrap".
func actor(r *http.Request) string {
	return principal(r.Context()).Actor()
}

// withRequestID gives every request an id, taken from a well-formed
// X-Request-Id header (set by a proxy in front) or generated, echoed in the
// response, quoted in problems and in the log line of an internal error.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// validRequestID keeps client-chosen ids short and printable, so they can be
// logged and echoed safely.
func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}
