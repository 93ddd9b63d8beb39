package web

import "net/http"

// adminRoutes registers the operator dashboard's routes; op wraps a handler
// so only operators reach it.
func (s *Server) adminRoutes(mux *http.ServeMux, op func(http.HandlerFunc) http.Handler) {
}
