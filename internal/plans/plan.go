// Package plans holds Sluice's plans and their limit tiers: the domain types,
// the validation rules, and the Postgres repository behind them. A plan's
// limits are either plan-wide (Route "") or per-endpoint tiers keyed by the
// ServeMux pattern the protected API serves.
package plans

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
)

// Errors returned (wrapped) by the Service. Validation problems are reported
// as *ValidationError instead.
var (
	// ErrNotFound means no plan or limit has the given id or slug.
	ErrNotFound = errors.New("plan not found")
	// ErrConflict means the version the caller read is stale: someone else
	// changed the plan since. Re-read it and apply the edit again.
	ErrConflict = errors.New("plan was changed by someone else")
	// ErrSlugTaken means another plan already uses the slug.
	ErrSlugTaken = errors.New("plan slug already taken")
	// ErrInUse means the plan cannot be deleted because API keys or developers
	// use it, or because it is the default or anonymous plan.
	ErrInUse = errors.New("plan is in use")
)

// Plan is a named set of limits that applies to the developers and keys
// assigned to it.
type Plan struct {
	ID          int64  `json:"id" db:"id"`
	Slug        string `json:"slug" db:"slug"`
	Name        string `json:"name" db:"name"`
	Description string `json:"description" db:"description"`
	// IsDefault marks the plan new developers get (at most one plan).
	IsDefault bool `json:"is_default" db:"is_default"`
	// IsAnonymous marks the plan for callers without a key (at most one plan).
	IsAnonymous bool `json:"is_anonymous" db:"is_anonymous"`
	// IsPublic lists the plan in the generated docs' comparison.
	IsPublic bool `json:"is_public" db:"is_public"`
	// Version is what an edit must name (optimistic concurrency); every change
	// to the plan or one of its limits increments it.
	Version int `json:"version" db:"version"`
	// ArchivedAt is when an operator archived the plan (SetArchived): it is
	// then offered to nobody new, while those on it keep it and its limits
	// keep enforcing. Nil while the plan is offered.
	ArchivedAt *time.Time `json:"archived_at" db:"archived_at"`
	CreatedAt  time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at" db:"updated_at"`
	// Limits are in their display order (Position).
	Limits []Limit `json:"limits" db:"-"`
}

// Limit is one limit tier of a plan.
type Limit struct {
	ID int64 `json:"id"`
	// Name is unique within the plan; clients see "<plan>-<name>" in the
	// RateLimit-Policy header.
	Name string `json:"name"`
	// Route is the ServeMux pattern the tier applies to, "" for plan-wide.
	Route     string            `json:"route"`
	Algorithm enforce.Algorithm `json:"algorithm"`
	Limit     int64             `json:"limit"`
	// Window is serialised as window_seconds.
	Window time.Duration `json:"-"`
	Burst  int64         `json:"burst"`
	Cost   int64         `json:"cost"`
	// CountWhen is which responses the cost counts for: always (the
	// default), success (1xx-3xx) or error (4xx-5xx), settled after the
	// response by the ways in that see it.
	CountWhen enforce.CountWhen `json:"count_when"`
	// CostHeader names a response header whose whole-number value is the
	// request's cost, settled after the response ("" for none).
	CostHeader string       `json:"cost_header"`
	Mode       enforce.Mode `json:"mode"`
	// Period is a quota's renewal period (day, month or year), "" for the
	// other algorithms.
	Period enforce.Period `json:"period"`
	// CountPer is whose state the tier counts: CountPerKey (each API key on
	// its own) or CountPerDeveloper (all of a developer's keys together).
	CountPer string `json:"count_per"`
	// Precision is how exactly the tier is enforced across instances:
	// exact (stored for every tier that does not ask), leased or local.
	Precision enforce.Precision `json:"precision"`
	Position  int               `json:"position"`
}

// Whose state a tier counts (Limit.CountPer, LimitInput.CountPer).
const (
	CountPerKey       = "key"
	CountPerDeveloper = "developer"
)

// DefaultCountPer is the usual rule for a tier on route: an endpoint tier counts per key, a
// plan-wide limit binds the developer, all keys together.
func DefaultCountPer(route string) string {
	if route != "" {
		return CountPerKey
	}
	return CountPerDeveloper
}

// MarshalJSON writes the window as whole seconds, the unit LimitInput takes,
// so a Limit read from the API can be sent back as an input unchanged.
func (l Limit) MarshalJSON() ([]byte, error) {
	type plain Limit
	return json.Marshal(struct {
		plain
		WindowSeconds int64 `json:"window_seconds"`
	}{plain(l), int64(l.Window / time.Second)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *Limit) UnmarshalJSON(b []byte) error {
	type plain Limit
	var v struct {
		plain
		WindowSeconds int64 `json:"window_seconds"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = Limit(v.plain)
	l.Window = time.Duration(v.WindowSeconds) * time.Second
	return nil
}

// PolicyName is the name clients see for limit name in plan planSlug, and
// the name of its counters: "<planSlug>-<name>", so that two plans'
// counters never collide, except that a name the operator already began
// with the plan's slug is shown as typed: "team-day" in plan "team" is
// "team-day", not "team-team-day". PolicyConflicts keeps two tiers of a plan
// from meeting on one name ("day" and "team-day" in plan "team").
func PolicyName(planSlug, limitName string) string {
	if limitName == planSlug || strings.HasPrefix(limitName, planSlug+"-") {
		return limitName
	}
	return planSlug + "-" + limitName
}

// PolicyConflicts returns a problem for every tier (by index, field
// prefix + "name") whose policy name in plan planSlug is another tier's.
func PolicyConflicts(prefix, planSlug string, names []string) []FieldError {
	var errs []FieldError
	seen := map[string]int{}
	for i, n := range names {
		policy := PolicyName(planSlug, n)
		if j, dup := seen[policy]; dup && names[j] != n {
			errs = append(errs, FieldError{Field: fmt.Sprintf("%s[%d].name", prefix, i),
				Message: fmt.Sprintf("clients would see it as %q, the name of %s[%d] (%q) too: choose another name", policy, prefix, j, names[j])})
			continue
		}
		seen[policy] = i
	}
	return errs
}

// Enforce converts the tier into the engine's limit, named
// "<planSlug>-<name>" so that two plans' counters never collide.
func (l Limit) Enforce(planSlug string) enforce.Limit {
	return enforce.Limit{
		Name:      PolicyName(planSlug, l.Name),
		Algorithm: l.Algorithm,
		Limit:     l.Limit,
		Window:    l.Window,
		Burst:     l.Burst,
		Cost:      l.Cost,
		Mode:      l.Mode,
		Period:    l.Period,
		Route:     l.Route,
		// Settled after the response (enforce.Settle); the engine's
		// limit leaves the default (always) unsaid.
		CountWhen:  countWhen(l.CountWhen),
		CostHeader: l.CostHeader,
		// By default a plan-wide limit binds the developer, all keys
		// together, and an endpoint tier counts per key; a tier may say
		// otherwise (CountPer).
		PerKey: l.countPer() == CountPerKey,
		// The engine's zero precision is exact, so an exact tier's limit
		// is the one it always was.
		Precision: enginePrecision(l.Precision),
	}
}

// enginePrecision is p as the engine takes it: "" for exact.
func enginePrecision(p enforce.Precision) enforce.Precision {
	if p.OrExact() == enforce.PrecisionExact {
		return ""
	}
	return p

}

// countWhen is the engine's CountWhen for a tier's: "" for always.
func countWhen(c enforce.CountWhen) enforce.CountWhen {
	if c == enforce.CountAlways {
		return ""
	}
	return c
}

// countPer is CountPer with the usual rule filled in for rows stored
// without one.
func (l Limit) countPer() string {
	if l.CountPer == "" {
		return DefaultCountPer(l.Route)
	}
	return l.CountPer
}

// Input returns the tier as the input that would create it.
func (l Limit) Input() LimitInput {
	return LimitInput{
		Name:          l.Name,
		Route:         l.Route,
		Algorithm:     string(l.Algorithm),
		Mode:          string(l.Mode),
		Limit:         l.Limit,
		WindowSeconds: int64(l.Window / time.Second),
		Burst:         l.Burst,
		Cost:          l.Cost,
		Period:        string(l.Period),
		CountPer:      l.countPer(),
		Precision:     string(l.Precision.OrExact()),
		CountWhen:     string(l.CountWhen),
		CostHeader:    l.CostHeader,
	}
}

// Input returns the plan as the input that would create it, for edits that
// change one field and submit the rest unchanged.
func (p Plan) Input() PlanInput {
	in := PlanInput{
		Slug:        p.Slug,
		Name:        p.Name,
		Description: p.Description,
		IsDefault:   p.IsDefault,
		IsAnonymous: p.IsAnonymous,
		IsPublic:    p.IsPublic,
		Limits:      make([]LimitInput, len(p.Limits)),
	}
	for i, l := range p.Limits {
		in.Limits[i] = l.Input()
	}
	return in
}

// PlanInput is what an operator submits to create or replace a plan.
type PlanInput struct {
	Slug        string       `json:"slug"`
	Name        string       `json:"name"`
	Description string       `json:"description"`
	IsDefault   bool         `json:"is_default"`
	IsAnonymous bool         `json:"is_anonymous"`
	IsPublic    bool         `json:"is_public"`
	Limits      []LimitInput `json:"limits"`
}

// LimitInput is one submitted limit tier; also the shape of a key's limit
// override. Cost 0 means 1 and Mode "" means "reject"; everything else must
// be given.
type LimitInput struct {
	Name          string `json:"name"`
	Route         string `json:"route"`
	Algorithm     string `json:"algorithm"`
	Mode          string `json:"mode"`
	Limit         int64  `json:"limit"`
	WindowSeconds int64  `json:"window_seconds"`
	Burst         int64  `json:"burst"`
	Cost          int64  `json:"cost"`
	// Period is a quota's renewal period: day, month or year; "" for the
	// other algorithms. A quota ignores WindowSeconds (stored as a day).
	Period string `json:"period,omitempty"`
	// CountPer is whose state the tier counts: "key" (each API key on its
	// own) or "developer" (all of a developer's keys together); "" means
	// per key for an endpoint tier and per developer for a plan-wide one.
	CountPer string `json:"count_per,omitempty"`
	// Precision is how exactly the tier is enforced across instances:
	// "exact" (the default, also for ""), "leased" or "local";
	// enforce.ValidatePrecision says which algorithms may have which.
	Precision string `json:"precision,omitempty"`
	// CountWhen is which responses the cost counts for: "always" (the
	// default, also ""), "success" (1xx-3xx) or "error" (4xx-5xx).
	CountWhen string `json:"count_when,omitempty"`
	// CostHeader names a response header whose whole-number value is the
	// request's cost; "" for none.
	CostHeader string `json:"cost_header,omitempty"`
}

// normalized fills the documented defaults.
func (in LimitInput) normalized() LimitInput {
	if in.Cost == 0 {
		in.Cost = 1
	}
	if in.Mode == "" {
		in.Mode = string(enforce.ModeReject)
	}
	in.Name = strings.TrimSpace(in.Name)
	in.Route = strings.TrimSpace(in.Route)
	in.CountPer = strings.TrimSpace(in.CountPer)
	in.CountWhen = strings.TrimSpace(in.CountWhen)
	if in.CountWhen == "" {
		in.CountWhen = string(enforce.CountAlways)
	}
	if h := strings.TrimSpace(in.CostHeader); h != "" && validHeaderName(h) {
		// Header names are case-insensitive: one spelling, so a file
		// and the form compare equal.
		in.CostHeader = textproto.CanonicalMIMEHeaderKey(h)
	} else {
		in.CostHeader = h
	}
	if in.CountPer == "" {
		in.CountPer = DefaultCountPer(in.Route)
	}
	in.Precision = strings.TrimSpace(in.Precision)
	if in.Precision == "" {
		in.Precision = string(enforce.PrecisionExact)
	}
	if w, fixed := fixedWindow(enforce.Algorithm(in.Algorithm)); fixed {
		in.WindowSeconds = int64(w / time.Second)
	}
	return in
}

// fixedWindow is the window stored for an algorithm that has no use for
// one: a quota renews by its period, a concurrency limit counts requests in
// flight. Whatever was submitted (or stored by an older version) is
// replaced by it, so two tiers that decide alike compare equal and a plans
// file need not name a window for them.
func fixedWindow(a enforce.Algorithm) (time.Duration, bool) {
	switch a {
	case enforce.Quota:
		return 24 * time.Hour, true
	case enforce.Concurrency:
		return time.Minute, true
	}
	return 0, false
}

// UsesWindow reports whether the algorithm reads a tier's window (every
// algorithm but quota and concurrency).
func UsesWindow(a enforce.Algorithm) bool {
	_, fixed := fixedWindow(a)
	return !fixed
}

// UsesBurst reports whether the algorithm reads a tier's burst.
func UsesBurst(a enforce.Algorithm) bool {
	return a == enforce.TokenBucket || a == enforce.LeakyBucket
}

// Enforce converts a (valid) input, such as a key's override, into the
// engine's limit named "<planSlug>-<name>".
//
// An input is a key's own override, so its state counts per key (PerKey)
// whatever its CountPer says.
func (in LimitInput) Enforce(planSlug string) enforce.Limit {
	l := in.limit(0, 0).Enforce(planSlug)
	l.PerKey = true
	return l
}

// limit is the tier the input describes, with defaults filled.
func (in LimitInput) limit(id int64, position int) Limit {
	in = in.normalized()
	return Limit{
		ID:        id,
		Name:      in.Name,
		Route:     in.Route,
		Algorithm: enforce.Algorithm(in.Algorithm),
		Limit:     in.Limit,
		Window:    time.Duration(in.WindowSeconds) * time.Second,
		Burst:     in.Burst,
		Cost:      in.Cost,
		Mode:      enforce.Mode(in.Mode),
		Period:    enforce.Period(in.Period),
		CountPer:  in.CountPer,
		Precision: enforce.Precision(in.Precision),
		Position:  position,

		CountWhen:  enforce.CountWhen(in.CountWhen),
		CostHeader: in.CostHeader,
	}
}

// PlanCounts is how many API keys and developers are assigned a plan
// directly (a plan with either cannot be deleted), and how many are on it in
// effect: those plus keys through their developer and, for the default
// plan, everyone without a plan of their own.
type PlanCounts struct {
	Keys             int `json:"keys"`
	Developers       int `json:"developers"`
	KeysOnPlan       int `json:"keys_on_plan"`
	DevelopersOnPlan int `json:"developers_on_plan"`
}

// Normalized is the input as it is validated and stored: names trimmed,
// every limit's documented defaults filled and the window of a quota or
// concurrency limit fixed. Two inputs that store the same plan are equal
// once normalized.
func (in PlanInput) Normalized() PlanInput { return in.normalized() }

// normalized fills the documented defaults of every limit.
func (in PlanInput) normalized() PlanInput {
	in.Slug = strings.TrimSpace(in.Slug)
	in.Name = strings.TrimSpace(in.Name)
	limits := make([]LimitInput, len(in.Limits))
	for i, l := range in.Limits {
		limits[i] = l.normalized()
	}
	in.Limits = limits
	return in
}

// EnforceLimits converts every tier of the plan into the engine's limits,
// in display order.
func (p Plan) EnforceLimits() []enforce.Limit {
	out := make([]enforce.Limit, len(p.Limits))
	for i, l := range p.Limits {
		out[i] = l.Enforce(p.Slug)
	}
	return out
}

// ApplyOverrides returns a key's limits: base (its plan's EnforceLimits)
// with each override replacing the same-named limit, or added after them
// if the plan has no limit of that name. This is the rule the snapshot
// enforces; views that show a key's limits should use it too. base is
// returned as is when there are no overrides, and never modified.
func ApplyOverrides(planSlug string, base []enforce.Limit, overrides []LimitInput) []enforce.Limit {
	if len(overrides) == 0 {
		return base
	}
	limits := slices.Clone(base)
	for _, o := range overrides {
		l := o.Enforce(planSlug)
		if i := slices.IndexFunc(limits, func(x enforce.Limit) bool { return x.Name == l.Name }); i >= 0 {
			limits[i] = l
		} else {
			limits = append(limits, l)
		}
	}
	return limits
}
