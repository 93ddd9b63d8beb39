package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/pgtext"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/views"
)

// textProblem says what stops s from being stored or queried as text (a NUL
// byte, invalid UTF-8), or "".
func textProblem(s string) string { return pgtext.Problem(s) }

// formInt reads an integer field; a blank field is 0 and anything that is
// not a whole number in range is reported as a field error. typed keeps the
// text as it came, so a refused form shows what was typed ("1.5", a huge
// number), never what parsing made of it (0, 9223372036854775807).
func formInt(r *http.Request, name string, errs views.FieldErrors, typed map[string]string) int64 {
	v := strings.TrimSpace(r.PostFormValue(name))
	typed[name] = v
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		errs[name] = "is too large"
		return 0
	case err != nil:
		errs[name] = "must be a whole number"
		return 0
	}
	return n
}

// tierInput reads a tier form. errs collects fields that are not even
// numbers; the domain validation reports everything else. typed is the
// numeric fields as typed, for showing a refused form again.
func tierInput(r *http.Request) (plans.LimitInput, views.FieldErrors, map[string]string) {
	errs := views.FieldErrors{}
	typed := map[string]string{}
	in := plans.LimitInput{
		Name:      strings.TrimSpace(r.PostFormValue("name")),
		Route:     r.PostFormValue("route"),
		Algorithm: r.PostFormValue("algorithm"),
		Mode:      r.PostFormValue("mode"),
		Period:    r.PostFormValue("period"),
		CountPer:  r.PostFormValue("count_per"),
		Precision: r.PostFormValue("precision"),

		CountWhen:  r.PostFormValue("count_when"),
		CostHeader: r.PostFormValue("cost_header"),
	}
	in.Limit = formInt(r, "limit", errs, typed)
	in.WindowSeconds = formInt(r, "window_seconds", errs, typed)
	in.Burst = formInt(r, "burst", errs, typed)
	in.Cost = formInt(r, "cost", errs, typed)
	// A blank cost is the documented default of 1; a typed 0 would be
	// saved as 1 without a word, so it is refused instead.
	if typed["cost"] == "0" {
		errs["cost"] = "must be at least 1 (leave it blank for 1)"
	}
	return in, errs, typed
}

// planInput reads the plan-fields form.
func planInput(r *http.Request) plans.PlanInput {
	return plans.PlanInput{
		Slug:        strings.TrimSpace(r.PostFormValue("slug")),
		Name:        strings.TrimSpace(r.PostFormValue("name")),
		Description: strings.TrimSpace(r.PostFormValue("description")),
		IsPublic:    r.PostFormValue("is_public") != "",
		IsDefault:   r.PostFormValue("is_default") != "",
		IsAnonymous: r.PostFormValue("is_anonymous") != "",
	}
}

// formVersion is the version an edit was made against. htmx row forms send
// the page's current version as plan_version (it follows every inline save);
// plain forms send the version the page was rendered with.
func formVersion(r *http.Request) int {
	v := r.PostFormValue("plan_version")
	if v == "" {
		v = r.PostFormValue("version")
	}
	n, _ := strconv.Atoi(v)
	return n
}

// fieldErrors turns a validation error into messages keyed by form field.
// A tier's fields arrive as "limits[3].limit" or "limit": the form only has
// the last part. It reports false for any other error.
func fieldErrors(err error) (views.FieldErrors, bool) {
	var ve *plans.ValidationError
	if !errors.As(err, &ve) {
		return nil, false
	}
	out := views.FieldErrors{}
	for _, f := range ve.Fields {
		name := f.Field
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			name = name[i+1:]
		}
		if strings.HasPrefix(name, "limits[") || strings.HasPrefix(name, "overrides[") || name == "limits" || name == "overrides" {
			name = "form"
		}
		if prev, ok := out[name]; ok {
			out[name] = prev + "; " + f.Message
		} else {
			out[name] = f.Message
		}
	}
	return out, true
}

// pathID reads a numeric path wildcard; anything else is a 404.
func pathID(r *http.Request, name string) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, errNotFound
	}
	return id, nil
}

// postedID is the start of every POST to a record's own path: its {id}
// (a 404 when it is not one) and the parsed form. It answers the error
// itself and returns false when the handler should stop.
func (s *Server) postedID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return 0, false
	}
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return 0, false
	}
	return id, true
}
