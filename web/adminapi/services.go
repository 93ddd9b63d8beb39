package adminapi

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/services"
)

// serviceBody is a service as clients send it to create or replace one.
type serviceBody struct {
	Slug     string   `json:"slug"`
	Name     string   `json:"name"`
	Hosts    []string `json:"hosts"`
	Upstream string   `json:"upstream_url"`
	Routes   []string `json:"routes"`
}

func (b serviceBody) input() services.Input {
	return services.Input{Slug: b.Slug, Name: b.Name, Hosts: b.Hosts, Upstream: b.Upstream, Routes: b.Routes}
}

type serviceUpdateBody struct {
	Version int `json:"version"`
	serviceBody
}

type serviceList struct {
	Items []services.Service `json:"items"`
}

type serviceTokenBody struct {
	Name string `json:"name"`
}

type serviceTokenWithSecret struct {
	services.Token
	// Secret is shown once; only its hash is stored.
	Secret string `json:"secret"`
}

func (a *api) listServices(w http.ResponseWriter, r *http.Request) {
	ss, err := a.services.List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if ss == nil {
		ss = []services.Service{}
	}
	writeJSON(w, http.StatusOK, serviceList{Items: ss})
}

func (a *api) getService(w http.ResponseWriter, r *http.Request) {
	s, err := a.services.Get(r.Context(), r.PathValue("slug"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (a *api) createService(w http.ResponseWriter, r *http.Request) {
	var body serviceBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	s, err := a.services.Create(r.Context(), actor(r), body.input())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", Prefix+"/services/"+s.Slug)
	writeJSON(w, http.StatusCreated, s)
}

func (a *api) updateService(w http.ResponseWriter, r *http.Request) {
	var body serviceUpdateBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := requireVersion(body.Version); err != nil {
		a.fail(w, r, err)
		return
	}
	s, err := a.services.Update(r.Context(), actor(r), r.PathValue("slug"), body.Version, body.input())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (a *api) deleteService(w http.ResponseWriter, r *http.Request) {
	if err := a.services.Delete(r.Context(), actor(r), r.PathValue("slug")); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) createServiceToken(w http.ResponseWriter, r *http.Request) {
	var body serviceTokenBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	t, secret, err := a.services.CreateToken(r.Context(), actor(r), r.PathValue("slug"), body.Name)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, serviceTokenWithSecret{Token: t, Secret: secret})
}

func (a *api) revokeServiceToken(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.services.RevokeToken(r.Context(), actor(r), r.PathValue("slug"), id); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
