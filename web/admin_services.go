package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/services"
	"github.com/sluicehq/sluice/views"
)

// withServices answers 503 when the UI runs without a store of record
// (the services live there).
func (s *Server) withServices(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.services == nil {
			s.error(w, r, errUnavailable)
			return
		}
		h(w, r)
	}
}

// servicesList shows every declared service and the form to declare one.
func (s *Server) servicesList(w http.ResponseWriter, r *http.Request) {
	s.renderServices(w, r, http.StatusOK, views.ServiceForm{})
}

func (s *Server) renderServices(w http.ResponseWriter, r *http.Request, status int, f views.ServiceForm) {
	list, err := s.services.List(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, status, views.ServicesPage(s.page(r, "Services", "services"), list, f))
}

func (s *Server) serviceCreate(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	f := serviceForm(r)
	svc, err := s.services.Create(r.Context(), s.actor(r), serviceInput(f))
	if status, ok := serviceFormErrors(err, &f); ok {
		s.renderServices(w, r, status, f)
		return
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/services/"+svc.Slug, http.StatusSeeOther)
}

func (s *Server) serviceShow(w http.ResponseWriter, r *http.Request) {
	svc, err := s.services.Get(r.Context(), r.PathValue("slug"))
	if err != nil {
		s.error(w, r, err)
		return
	}
	f := views.ServiceFormOf(svc)
	f.ServedAt = s.serviceURL(r, svc)
	s.render(w, r, http.StatusOK, views.ServicePage(s.page(r, svc.Name, "services"), f))
}

// serviceURL is where a proxied service is called (Deps.ServiceURL), ""
// for one that is not proxied or reachable nowhere.
func (s *Server) serviceURL(r *http.Request, svc services.Service) string {
	if s.deps.ServiceURL == nil || svc.Upstream == "" {
		return ""
	}
	return s.deps.ServiceURL(r, s.publicBase(r), svc)
}

func (s *Server) serviceUpdate(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	f := serviceForm(r)
	version, err := strconv.Atoi(r.PostFormValue("version"))
	if err != nil || version < 1 {
		s.error(w, r, fmt.Errorf("service form without a version: %w", errBadRequest))
		return
	}
	f.Version = version
	svc, err := s.services.Update(r.Context(), s.actor(r), r.PathValue("slug"), version, serviceInput(f))
	if status, ok := serviceFormErrors(err, &f); ok {
		s.render(w, r, status, views.ServicePage(s.page(r, f.Name, "services"), f))
		return
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/services/"+svc.Slug, http.StatusSeeOther)
}

func (s *Server) serviceDelete(w http.ResponseWriter, r *http.Request) {
	if err := s.services.Delete(r.Context(), s.actor(r), r.PathValue("slug")); err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/services", http.StatusSeeOther)
}

func serviceForm(r *http.Request) views.ServiceForm {
	return views.ServiceForm{
		Slug: strings.TrimSpace(r.PostFormValue("slug")), Name: strings.TrimSpace(r.PostFormValue("name")),
		Hosts: r.PostFormValue("hosts"), Upstream: strings.TrimSpace(r.PostFormValue("upstream_url")),
		Routes: r.PostFormValue("routes"),
	}
}

func serviceInput(f views.ServiceForm) services.Input {
	return services.Input{Slug: f.Slug, Name: f.Name, Hosts: lines(f.Hosts), Upstream: f.Upstream, Routes: lines(f.Routes)}
}

// lines splits a textarea into its non-blank lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// serviceFormErrors puts a refused save's errors on the form: field
// errors (a route's or host's named by its line), a taken slug, a stale
// version or a route a tier still names.
func serviceFormErrors(err error, f *views.ServiceForm) (int, bool) {
	if fe, ok := fieldErrors(err); ok {
		f.Errors = views.FieldErrors{}
		for name, msg := range fe {
			f.Errors[name] = msg
		}
		// fieldErrors keeps "routes[2]" as it is: show it on the textarea,
		// by line.
		for name, msg := range fe {
			for _, list := range []string{"routes", "hosts"} {
				if i, ok := strings.CutPrefix(name, list+"["); ok {
					n, _ := strconv.Atoi(strings.TrimSuffix(i, "]"))
					line := fmt.Sprintf("line %d: %s", n+1, msg)
					if prev, ok := f.Errors[list]; ok {
						line = prev + "; " + line
					}
					f.Errors[list] = line
					delete(f.Errors, name)
				}
			}
		}
		return http.StatusUnprocessableEntity, true
	}
	switch {
	case errors.Is(err, services.ErrSlugTaken):
		f.Errors = views.FieldErrors{"slug": "is already used by another service"}
		return http.StatusConflict, true
	case errors.Is(err, services.ErrConflict):
		f.Errors = views.FieldErrors{"form": "Someone else saved this service after you opened it; reload it and apply your change again."}
		return http.StatusConflict, true
	case errors.Is(err, services.ErrRouteInUse):
		f.Errors = views.FieldErrors{"routes": "a plan's tier names a route you removed; change that tier first"}
		return http.StatusConflict, true
	}
	return 0, false
}
