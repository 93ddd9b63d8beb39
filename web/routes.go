package web

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/sso"
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
	if s.deps.SSO != nil {
		mux.HandleFunc("GET /signin/sso", s.ssoStart)
		mux.HandleFunc("GET "+sso.CallbackPath, s.ssoCallback)
	}
	mux.HandleFunc("GET /reset/{token}", s.resetForm)
	mux.HandleFunc("POST /reset/{token}", s.resetPassword)
	mux.HandleFunc("GET /password/forgot", s.forgotForm)
	mux.HandleFunc("POST /password/forgot", s.forgot)
	mux.HandleFunc("GET /signup/sent", s.signUpSent)
	mux.HandleFunc("GET /signup/confirm/{token}", s.signUpConfirmForm)
	mux.HandleFunc("POST /signup/confirm/{token}", s.signUpConfirm)
	mux.Handle("POST /signout/everywhere", s.requireRole("", http.HandlerFunc(s.signOutEverywhere)))
	mux.Handle("GET /account", s.requireRole("", http.HandlerFunc(s.account)))
	mux.Handle("POST /account/password", s.requireRole("", http.HandlerFunc(s.changePassword)))

	mux.HandleFunc("/", s.notFound)
	// The addresses people type, and the ones the first-start message and
	// the README print, end in a slash; the pages live without it.
	for _, p := range []string{"/admin/", "/app/", "/docs/"} {
		mux.Handle("GET "+p+"{$}", http.RedirectHandler(strings.TrimSuffix(p, "/"), http.StatusMovedPermanently))
	}

	s.adminRoutes(mux, op)
	s.appRoutes(mux)

	csrf := http.NewCrossOriginProtection()
	return s.securityHeaders(s.checkQuery(csrf.Handler(s.withViewer(mux))))
}

// checkQuery refuses a query string whose text Postgres could not take
// (q=, actor= and every other parameter), naming the parameter, before a
// handler can run a query with it.
func (s *Server) checkQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkText(r.URL.Query()); err != nil {
			s.error(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// contentSecurityPolicy allows the dashboard's own scripts, styles and
// connections (htmx requests, the live views' event streams) and nothing
// else: no inline script or style (the htmx config turns off its injected
// indicator style), no framing, forms posting only here.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
	"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// hsts tells a browser that reached the portal over HTTPS to use nothing
// else for a year. Subdomains are left out: the portal cannot know whether
// its neighbours serve HTTPS.
const hsts = "max-age=31536000"

// securityHeaders sets headers every UI response carries, and
// Strict-Transport-Security when the request arrived over TLS, directly or
// through a trusted proxy that says so (never over plain HTTP, where a
// browser would ignore it and a man in the middle could strip it anyway).
func (s *Server) securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if s.secureRequest(r) {
			h.Set("Strict-Transport-Security", hsts)
		}
		h.Set("Content-Security-Policy", s.csp)
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
