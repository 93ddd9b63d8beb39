package web

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/static"
)

// maxFormBytes bounds every form body; the largest form (a plan with its
// tiers) is far below it.
const maxFormBytes = 64 << 10

// routes is the UI's route table. State-changing routes are all POST and all
// pass through http.CrossOriginProtection, which rejects cross-site requests
// (Sec-Fetch-Site, or Origin not matching Host) and lets safe methods through.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	op := func(h http.HandlerFunc) http.Handler { return s.requireRole("operator", h) }

	mux.Handle("GET /static/{file}", staticHandler())
	// Browsers and feed readers ask for /favicon.ico whatever the page
	// links; a 404 there is noise in every log and console.
	mux.Handle("GET /favicon.ico", http.RedirectHandler("/static/"+static.Icon, http.StatusMovedPermanently))
	mux.HandleFunc("GET /{$}", s.home)
	mux.HandleFunc("GET /signin", s.signInForm)
	mux.HandleFunc("POST /signin", s.signIn)
	mux.HandleFunc("POST /signout", s.signOut)

	mux.HandleFunc("/", s.notFound)
	// The addresses people type, and the ones the first-start message and
	// the README print, end in a slash; the pages live without it.
	for _, p := range []string{"/admin/", "/app/", "/docs/"} {
		mux.Handle("GET "+p+"{$}", http.RedirectHandler(strings.TrimSuffix(p, "/"), http.StatusMovedPermanently))
	}

	s.adminRoutes(mux, op)
	s.appRoutes(mux)

	csrf := http.NewCrossOriginProtection()
	return securityHeaders(csrf.Handler(s.withViewer(mux)))
}

// contentSecurityPolicy allows the dashboard's own scripts, styles and
// connections (htmx requests, the live views' event streams) and nothing
// else: no inline script or style (the htmx config turns off its injected
// indicator style), no framing, forms posting only here.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// securityHeaders sets headers every UI response carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// home sends people where they work: operators to the dashboard, developers
// to their portal, everyone else to sign in.
func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	u, ok := s.currentUser(r)
	switch {
	case !ok:
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
	case u.Role == "operator":
		http.Redirect(w, r, "/admin", http.StatusSeeOther)
	default:
		http.Redirect(w, r, "/app", http.StatusSeeOther)
	}
}
