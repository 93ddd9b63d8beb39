package httplimit

import (
	"context"
	"net/http"
)

type originalMethodKey struct{}

// WithOriginalMethod returns ctx carrying the method of the request a
// gateway asks about (forward auth's X-Forwarded-Method): the method a
// key's scope is checked on, where the request the middleware sees is the
// gateway's own check.
func WithOriginalMethod(ctx context.Context, method string) context.Context {
	return context.WithValue(ctx, originalMethodKey{}, method)
}

// requestMethod is the method a key's scope is checked on: the original
// request's when a gateway named it, else r's own.
func requestMethod(r *http.Request) string {
	if m, ok := r.Context().Value(originalMethodKey{}).(string); ok {
		return m
	}
	return r.Method
}
