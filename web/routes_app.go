package web

import "net/http"

// appRoutes registers the developer portal's routes (/app, /docs, /signup).
func (s *Server) appRoutes(mux *http.ServeMux) {}
