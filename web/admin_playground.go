package web

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/traffic"
	"github.com/sluicehq/sluice/views"
)

// playgroundPage shows the scenario form and, when asked (a GET form:
// a replay changes nothing, so it can be bookmarked), the replay.
func (s *Server) playgroundPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := views.PlaygroundPage{Presets: playground.Presets(), Preset: q.Get("preset"), Subjects: q.Get("subjects"), Errors: views.FieldErrors{}}
	if s.deps.Traffic != nil {
		routes, err := s.deps.Traffic.Routes(r.Context())
		if err != nil {
			s.error(w, r, err)
			return
		}
		v.Routes = routes
	}
	route, recorded := strings.CutPrefix(v.Preset, "recorded:")
	recorded = recorded && slices.Contains(v.Routes, route)
	preset, ok := playground.PresetBySlug(v.Preset)
	if !ok {
		preset = v.Presets[0]
		if !recorded {
			v.Preset = preset.Slug
		}
	}
	v.Tier = preset.Tier
	list, err := s.deps.Plans.List(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Plans = list
	// An existing tier, chosen as the starting point ("plan/tier").
	from := q.Get("from")
	if from != "" {
		v.From = from
		planSlug, tierName, _ := strings.Cut(from, "/")
		for _, pl := range list {
			for _, l := range pl.Limits {
				if pl.Slug == planSlug && l.Name == tierName {
					v.Tier = l.Input()
				}
			}
		}
	}
	// Synthetic arrivals name no route: the tier applies to all of them.
	v.Tier.Route = ""
	if recorded {
		v.Tier.Route = route
	}
	status := http.StatusOK
	if q.Has("preset") && from == "" {
		if a := q.Get("algorithm"); a != "" {
			v.Tier.Algorithm = a
		}
		for name, dst := range map[string]*int64{"limit": &v.Tier.Limit, "window_seconds": &v.Tier.WindowSeconds, "burst": &v.Tier.Burst} {
			if raw := q.Get(name); raw != "" {
				n, err := strconv.ParseInt(raw, 10, 64)
				if err != nil {
					v.Errors[name] = "must be a whole number"
					continue
				}
				*dst = n
			}
		}
		if v.Tier.Algorithm != "token_bucket" && v.Tier.Algorithm != "leaky_bucket" {
			v.Tier.Burst = 0
		}
	}
	if q.Has("preset") {
		for _, fe := range plans.ValidateLimit("", v.Tier, []string{v.Tier.Route}) {
			if _, seen := v.Errors[fe.Field]; !seen {
				v.Errors[fe.Field] = fe.Message
			}
		}
		if len(v.Errors) == 0 {
			sc := preset.Scenario(s.now().Truncate(time.Minute))
			sc.Tiers = []plans.LimitInput{v.Tier}
			if recorded {
				rec, err := s.deps.Traffic.Load(r.Context(), route, s.now().Add(-traffic.Retention))
				if err != nil {
					s.error(w, r, err)
					return
				}
				var only []string
				for _, sub := range strings.Split(v.Subjects, ",") {
					if sub = strings.TrimSpace(sub); sub != "" {
						only = append(only, sub)
					}
				}
				sc.Arrivals = rec.Arrivals(only...)
				v.Recorded = &rec
			}
			rep, err := s.replayer.Replay(r.Context(), sc)
			var ie *playground.InvalidError
			switch {
			case errors.As(err, &ie):
				// The form has no arrivals or per-tier fields: the tier's
				// own fields are named without the "tiers[0]." of the API.
				field := strings.TrimPrefix(ie.Field, "tiers[0].")
				switch {
				case strings.HasPrefix(field, "arrivals"):
					field = "preset"
				case field != "limit" && field != "window_seconds" && field != "burst":
					field = "tier"
				}
				v.Errors[field] = ie.Message
				status = http.StatusUnprocessableEntity
			case errors.Is(err, playground.ErrBusy):
				w.Header().Set("Retry-After", "1")
				s.error(w, r, err)
				return
			case err != nil:
				s.error(w, r, err)
				return
			default:
				v.Report = &rep
				var subjects []string
				for _, run := range rep.Runs {
					for _, l := range run.Limited {
						subjects = append(subjects, l.Subject)
					}
				}
				if v.SubjectNames, err = s.subjectNames(r.Context(), subjects); err != nil {
					s.error(w, r, err)
					return
				}
			}
		} else {
			status = http.StatusUnprocessableEntity
		}
	}
	s.render(w, r, status, views.PlaygroundView(s.page(r, "Playground", "playground"), v))
}

// playgroundSave adds the replayed tier to a plan, at the plan's current
// version, and shows the plan.
func (s *Server) playgroundSave(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	planID, err := strconv.ParseInt(r.PostFormValue("plan_id"), 10, 64)
	if err != nil {
		s.error(w, r, fmt.Errorf("playground save without a plan: %w", errBadRequest))
		return
	}
	num := func(name string) int64 {
		n, _ := strconv.ParseInt(r.PostFormValue(name), 10, 64)
		return n
	}
	in := plans.LimitInput{Name: r.PostFormValue("name"), Route: r.PostFormValue("route"), Algorithm: r.PostFormValue("algorithm"),
		Limit: num("limit"), WindowSeconds: num("window_seconds"), Burst: num("burst"), Cost: 1, Mode: "reject"}
	p, err := s.deps.Plans.Get(r.Context(), planID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	_, err = s.deps.Plans.AddLimit(r.Context(), s.actor(r), p.ID, p.Version, in)
	var ve *plans.ValidationError
	if errors.As(err, &ve) {
		msg := ve.Error()
		s.render(w, r, http.StatusUnprocessableEntity, views.ErrorPage(s.page(r, "Playground", "playground"), http.StatusUnprocessableEntity,
			"The tier was not saved: "+msg))
		return
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/plans/"+strconv.FormatInt(p.ID, 10), http.StatusSeeOther)
}
