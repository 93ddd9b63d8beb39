package web

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

const keyConflictMessage = "Someone else changed this key after you opened it, so your change was not saved. " +
	"The key as it is now is shown; apply your change again if it is still needed."

func keyPath(id int64) string { return "/admin/keys/" + strconv.FormatInt(id, 10) }

func (s *Server) keyPage(ctx context.Context, id int64) (views.KeyPage, error) {
	k, err := s.deps.Keys.Get(ctx, id)
	if err != nil {
		return views.KeyPage{}, err
	}
	all, err := s.deps.Plans.List(ctx)
	if err != nil {
		return views.KeyPage{}, err
	}
	return views.KeyPage{Key: k, Plans: all, Routes: s.tierRoutes(ctx), Now: s.now(), Expires: views.ExpiryDate(k.ExpiresAt),
		Instances: s.deps.Instances}, nil
}

func (s *Server) renderKeyPage(w http.ResponseWriter, r *http.Request, status int, v views.KeyPage) {
	s.render(w, r, status, views.KeyDetailPage(s.page(r, v.Key.Name, "keys"), v))
}

func (s *Server) keyShow(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	v, err := s.keyPage(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if r.URL.Query().Get("saved") != "" {
		v.Saved = "Saved."
	}
	s.renderKeyPage(w, r, http.StatusOK, v)
}

// keySetPlan gives the key a plan of its own, or returns it to its owner's.
func (s *Server) keySetPlan(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	planID, perr := formPlanID(r)
	if perr == nil {
		// ux2: an archived plan is offered to no key that is not on it.
		k, kerr := s.deps.Keys.Get(r.Context(), id)
		if kerr != nil {
			s.error(w, r, kerr)
			return
		}
		if perr = s.offeredPlan(r, planID, k.PlanID); perr != nil && !errors.Is(perr, errArchivedPlan) {
			s.error(w, r, perr)
			return
		}
	}
	var err error
	if perr == nil {
		_, err = s.deps.Keys.SetPlan(r.Context(), s.actor(r), id, planID)
		if err == nil {
			http.Redirect(w, r, keyPath(id)+"?saved=1", http.StatusSeeOther)
			return
		}
	}
	v, loadErr := s.keyPage(r.Context(), id)
	if loadErr != nil {
		s.error(w, r, loadErr)
		return
	}
	if perr != nil {
		v.PlanError = perr.Error()
		s.renderKeyPage(w, r, http.StatusUnprocessableEntity, v)
		return
	}
	if errs, ok := fieldErrors(err); ok {
		v.PlanError = strings.Join(slices.Sorted(maps.Values(errs)), "; ")
		s.renderKeyPage(w, r, http.StatusUnprocessableEntity, v)
		return
	}
	s.error(w, r, err)
}

// formPlanID reads the plan selector: blank means "no plan of its own".
func formPlanID(r *http.Request) (*int64, error) {
	v := strings.TrimSpace(r.PostFormValue("plan_id"))
	if v == "" {
		return nil, nil
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return nil, errors.New("choose a plan from the list")
	}
	return &id, nil
}

// keySetOverride adds an override, or replaces the one with the same name.
func (s *Server) keySetOverride(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	k, err := s.deps.Keys.Get(ctx, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	in, parseErrs, typed := tierInput(r)
	f := views.TierForm{Input: in, Errors: parseErrs, Typed: typed}
	if len(parseErrs) == 0 {
		overrides := slices.DeleteFunc(slices.Clone(k.Overrides), func(o plans.LimitInput) bool { return o.Name == in.Name })
		overrides = append(overrides, in)
		_, err = s.deps.Keys.SetOverrides(ctx, s.actor(r), id, formVersion(r), overrides)
		if err == nil {
			http.Redirect(w, r, keyPath(id)+"?saved=1", http.StatusSeeOther)
			return
		}
	}
	s.overrideFailed(w, r, id, f, err)
}

// keyDeleteOverride removes the named override.
func (s *Server) keyDeleteOverride(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	k, err := s.deps.Keys.Get(ctx, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	name := r.PostFormValue("name")
	overrides := slices.DeleteFunc(slices.Clone(k.Overrides), func(o plans.LimitInput) bool { return o.Name == name })
	_, err = s.deps.Keys.SetOverrides(ctx, s.actor(r), id, formVersion(r), overrides)
	if err == nil {
		http.Redirect(w, r, keyPath(id)+"?saved=1", http.StatusSeeOther)
		return
	}
	s.overrideFailed(w, r, id, views.TierForm{}, err)
}

func (s *Server) overrideFailed(w http.ResponseWriter, r *http.Request, id int64, f views.TierForm, err error) {
	v, loadErr := s.keyPage(r.Context(), id)
	if loadErr != nil {
		s.error(w, r, loadErr)
		return
	}
	v.Override = f
	switch errs, invalid := fieldErrors(err); {
	case err == nil && len(f.Errors) > 0:
		s.renderKeyPage(w, r, http.StatusUnprocessableEntity, v)
	case invalid:
		v.Override.Errors = errs
		s.renderKeyPage(w, r, http.StatusUnprocessableEntity, v)
	case errors.Is(err, apikeys.ErrConflict):
		v.Conflict = keyConflictMessage
		s.renderKeyPage(w, r, http.StatusConflict, v)
	default:
		s.error(w, r, err)
	}
}
