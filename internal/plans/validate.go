package plans

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/pgtext"
)

// FieldError is one invalid field of an input.
type FieldError struct {
	// Field is the JSON path of the field, e.g. "slug" or
	// "limits[2].window_seconds".
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every invalid field of an input at once, so a form or
// API client can show them all together. Nothing was written.
type ValidationError struct {
	Fields []FieldError `json:"fields"`
}

// Error lists every field error on one line, for logs; show Fields to users.
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// Has reports whether field is among the errors; handy for tests and forms.
func (e *ValidationError) Has(field string) bool {
	for _, f := range e.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}

// Bounds enforced by Validate; the schema's CHECK constraints agree.
const (
	MaxNameLen        = 100
	MaxDescriptionLen = 2000
	MaxLimitsPerPlan  = 50
	MinWindowSeconds  = 1
	MaxWindowSeconds  = 31 * 24 * 60 * 60
	MaxCost           = 1_000_000
	// MaxLimit bounds limit and burst. The Redis script computes in
	// doubles, exact for whole numbers up to 2^53; a trillion keeps every
	// count, and a count plus a cost, far inside that (at 2^63-1 requests
	// were admitted while the headers said Remaining: 0).
	MaxLimit = 1_000_000_000_000
	// MaxBucketRate bounds a bucket algorithm's rate, limit per second: the
	// buckets keep time in microseconds, so one unit of cost must take at
	// least one microsecond to refill or leak for their counts to stay
	// whole.
	MaxBucketRate = 1_000_000
)

var (
	slugPattern      = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	limitNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
)

// Validate checks a plan input against every rule and returns a
// *ValidationError listing all invalid fields, or nil. routes are the
// ServeMux patterns the protected API serves; a tier's route must be one of
// them or "" (plan-wide).
func Validate(in PlanInput, routes []string) error {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if !slugPattern.MatchString(in.Slug) {
		add("slug", "must be 1 to 63 lowercase letters, digits or dashes, starting with a letter or digit")
	}
	if msg := pgtext.NameProblem(in.Name); msg != "" {
		add("name", "%s", msg)
	} else if n := utf8.RuneCountInString(strings.TrimSpace(in.Name)); n < 1 || n > MaxNameLen {
		add("name", "must be 1 to %d characters", MaxNameLen)
	}
	if msg := pgtext.Problem(in.Description); msg != "" {
		add("description", "%s", msg)
	} else if utf8.RuneCountInString(in.Description) > MaxDescriptionLen {
		add("description", "must be at most %d characters", MaxDescriptionLen)
	}
	if len(in.Limits) > MaxLimitsPerPlan {
		add("limits", "at most %d limits per plan", MaxLimitsPerPlan)
	}
	errs = append(errs, ValidateLimits("limits", in.Limits, routes)...)
	names := make([]string, len(in.Limits))
	for i, l := range in.Limits {
		names[i] = strings.TrimSpace(l.Name)
	}
	errs = append(errs, PolicyConflicts("limits", strings.TrimSpace(in.Slug), names)...)
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}

// ValidateLimits checks a list of limits (a plan's tiers, or a key's
// overrides) under the JSON path field, including duplicates among them.
func ValidateLimits(field string, limits []LimitInput, routes []string) []FieldError {
	var errs []FieldError
	type shape struct {
		route, algorithm, countPer, period string
		window                             int64
	}
	names := map[string]int{}
	shapes := map[shape]int{}
	for i, l := range limits {
		prefix := fmt.Sprintf("%s[%d].", field, i)
		errs = append(errs, ValidateLimit(prefix, l, routes)...)
		l = l.normalized()
		if j, dup := names[l.Name]; dup && l.Name != "" {
			errs = append(errs, FieldError{Field: prefix + "name",
				Message: fmt.Sprintf("duplicates the name of %s[%d]", field, j)})
		} else {
			names[l.Name] = i
		}
		// A quota's period is its window: a day and a month quota on one
		// route are two tiers, not one twice.
		s := shape{l.Route, l.Algorithm, l.CountPer, l.Period, l.WindowSeconds}
		if j, dup := shapes[s]; dup {
			what := "window"
			if l.Algorithm == string(enforce.Quota) {
				what = "period"
			}
			errs = append(errs, FieldError{Field: prefix + "route",
				Message: fmt.Sprintf("duplicates %s[%d]: same route, algorithm and %s", field, j, what)})
		} else {
			shapes[s] = i
		}
	}
	return errs
}

// ValidateLimit checks one limit; prefix is prepended to field names (e.g.
// "limits[2]." or "" for a single submitted tier).
func ValidateLimit(prefix string, l LimitInput, routes []string) []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: prefix + field, Message: fmt.Sprintf(format, args...)})
	}
	l = l.normalized()
	if !limitNamePattern.MatchString(l.Name) {
		add("name", "must be 1 to 63 lowercase letters, digits, dashes or underscores, starting with a letter or digit")
	}
	if l.Route != "" && !slices.Contains(routes, l.Route) {
		add("route", "unknown route %q: must be one the API serves, or empty for plan-wide", l.Route)
	}
	algo := enforce.Algorithm(l.Algorithm)
	if !algo.Valid() {
		add("algorithm", "unknown algorithm %q: must be one of %s", l.Algorithm, algorithmList())
	}
	mode := enforce.Mode(l.Mode)
	switch {
	case !mode.Valid():
		add("mode", "unknown mode %q: must be reject, queue, degrade or shadow", l.Mode)
	case mode == enforce.ModeQueue && algo != enforce.LeakyBucket && algo != enforce.Concurrency:
		add("mode", "queue mode needs the leaky_bucket algorithm (a queue by rate) or concurrency (a wait for a free slot)")
	}
	if l.CountPer != CountPerKey && l.CountPer != CountPerDeveloper {
		add("count_per", "unknown value %q: must be key or developer", l.CountPer)
	}
	errs = append(errs, validateSettle(prefix, l, algo)...)
	if msg := precisionProblem(l); msg != "" {
		add("precision", "%s", msg)
	}
	switch period := enforce.Period(l.Period); {
	case algo == enforce.Quota && !period.Valid():
		add("period", "a quota needs a period: day, month or year")
	case algo != enforce.Quota && l.Period != "":
		add("period", "must be empty: only the quota algorithm renews by period")
	}
	switch {
	case l.Limit < 1:
		add("limit", "must be at least 1")
	case l.Limit > MaxLimit:
		add("limit", "must be at most %d", int64(MaxLimit))
	}
	if l.WindowSeconds < MinWindowSeconds || l.WindowSeconds > MaxWindowSeconds {
		add("window_seconds", "must be from %d second to %d (31 days)", MinWindowSeconds, MaxWindowSeconds)
	}
	windowOK := l.WindowSeconds >= MinWindowSeconds && l.WindowSeconds <= MaxWindowSeconds
	bucket := algo == enforce.TokenBucket || algo == enforce.LeakyBucket
	if bucket && windowOK && l.Limit >= 1 && l.Limit <= MaxLimit && l.Limit > MaxBucketRate*l.WindowSeconds {
		add("limit", "must be at most %d per second for %s (%d over %d seconds)",
			int64(MaxBucketRate), algo, MaxBucketRate*l.WindowSeconds, l.WindowSeconds)
	}
	switch algo {
	case enforce.TokenBucket:
		if l.Burst != 0 && l.Burst < l.Cost {
			add("burst", "must be 0 (the limit) or at least the cost")
		}
	case enforce.LeakyBucket:
		if l.Burst < 0 {
			add("burst", "must not be negative")
		}
	}
	if bucket && l.Burst > 0 && windowOK && l.Limit >= 1 {
		// A full bucket (a full queue) must refill (drain) within the
		// longest window, or its state outlives every bound above.
		maxBurst := min(int64(MaxLimit), maxSpan(l.Limit, l.WindowSeconds))
		if l.Burst > maxBurst {
			add("burst", "must be at most %d: a full bucket must refill within 31 days at %d per %d seconds",
				maxBurst, l.Limit, l.WindowSeconds)
		}
	}
	switch algo {
	case enforce.TokenBucket, enforce.LeakyBucket:
	default:
		if l.Burst != 0 && algo.Valid() {
			add("burst", "must be 0: only token_bucket and leaky_bucket use a burst")
		}
	}
	switch {
	case algo == enforce.Concurrency && l.Cost != 1:
		add("cost", "must be 1: a request in flight holds one slot of a concurrency limit")
	case l.Cost < 1 || l.Cost > MaxCost:
		add("cost", "must be from 1 to %d", MaxCost)
	case l.Limit >= 1 && l.Cost > l.Limit:
		add("cost", "must not exceed the limit")
	}
	return errs
}

// precisionProblem is why l may not have its precision, or "": the rules
// are enforce.ValidatePrecision's, told without its "limit <name>:" prefix
// since the field error already names the tier.
func precisionProblem(l LimitInput) string {
	if !enforce.Precision(l.Precision).Valid() {
		return fmt.Sprintf("unknown precision %q: must be exact, leased or local", l.Precision)
	}
	el := l.limit(0, 0).Enforce("")
	err := enforce.ValidatePrecision(el)
	if err == nil {
		return ""
	}
	msg := err.Error()
	if _, rule, ok := strings.Cut(msg, fmt.Sprintf("limit %q: ", el.Name)); ok {
		return rule
	}
	return msg
}

// maxSpan is the most units refilled in MaxWindowSeconds at limit per
// window seconds, without overflowing.
func maxSpan(limit, windowSeconds int64) int64 {
	windows := MaxWindowSeconds / windowSeconds
	if limit > MaxLimit/max(windows, 1) {
		return MaxLimit
	}
	return limit * windows
}

func algorithmList() string {
	names := make([]string, len(enforce.Algorithms))
	for i, a := range enforce.Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

// CheckReducedAnswers refuses a degrade-mode tier where over-limit callers
// would get the full answer marked as reduced: on one of own (the routes
// the portal itself serves) that is not in reduced (those with a reduced
// answer), or plan-wide while some route in own has none. Routes services
// declare may degrade: their upstream gets the Sluice-Degraded mark and
// decides. field is the JSON path of the list ("limits"), or "" for a
// single tier whose own field names are reported. It returns a
// *ValidationError, or nil.
func CheckReducedAnswers(field string, limits []LimitInput, own, reduced []string) error {
	var errs []FieldError
	var without []string
	for _, r := range own {
		if !slices.Contains(reduced, r) {
			without = append(without, r)
		}
	}
	offer := "no route has one"
	if len(reduced) > 0 {
		offer = "only " + strings.Join(reduced, ", ") + " has one"
	}
	for i, l := range limits {
		l = l.normalized()
		if enforce.Mode(l.Mode) != enforce.ModeDegrade {
			continue
		}
		name := "mode"
		if field != "" {
			name = fmt.Sprintf("%s[%d].mode", field, i)
		}
		switch {
		case l.Route == "" && len(without) > 0:
			errs = append(errs, FieldError{Field: name, Message: fmt.Sprintf(
				"degrade needs a route with a reduced answer, and a plan-wide tier also covers %s, which has none (%s): use reject, or put the tier on such a route",
				strings.Join(without, ", "), offer)})
		case slices.Contains(without, l.Route):
			errs = append(errs, FieldError{Field: name, Message: fmt.Sprintf(
				"degrade needs a route with a reduced answer: %s has none (%s), so over-limit callers would get the full answer; use reject",
				l.Route, offer)})
		}
	}
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}

// joinValidation merges the field errors of several validations into one
// *ValidationError; any other error is returned as it is.
func joinValidation(errs ...error) error {
	var fields []FieldError
	for _, err := range errs {
		if err == nil {
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return err
		}
		fields = append(fields, ve.Fields...)
	}
	if len(fields) > 0 {
		return &ValidationError{Fields: fields}
	}
	return nil
}
