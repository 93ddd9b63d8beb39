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
// not a number is reported as a field error with the number left at 0.
func formInt(r *http.Request, name string, errs views.FieldErrors) int64 {
	v := strings.TrimSpace(r.PostFormValue(name))
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		errs[name] = "must be a whole number"
	}
	return n
}

// tierInput reads a tier form. errs collects fields that are not even
// numbers; the domain validation reports everything else.
func tierInput(r *http.Request) (plans.LimitInput, views.FieldErrors) {
	errs := views.FieldErrors{}
	in := plans.LimitInput{
		Name:      strings.TrimSpace(r.PostFormValue("name")),
		Route:     r.PostFormValue("route"),
		Algorithm: r.PostFormValue("algorithm"),
		Mode:      r.PostFormValue("mode"),
		Period:    r.PostFormValue("period"),
	}
	in.Limit = formInt(r, "limit", errs)
	in.WindowSeconds = formInt(r, "window_seconds", errs)
	in.Burst = formInt(r, "burst", errs)
	in.Cost = formInt(r, "cost", errs)
	return in, errs
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
