package planfile

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
)

// Op is what a change does to one service or plan.
type Op string

// The three operations of a diff.
const (
	OpCreate Op = "create"
	OpUpdate Op = "update"
	OpDelete Op = "delete"
)

// Change is what applying a file does to one service or plan.
type Change struct {
	Op   Op     `json:"op"`
	Kind string `json:"kind"` // "service" or "plan"
	Slug string `json:"slug"`
	// Fields lists, for an update, every field that changes; a tier is
	// named by its name: "limits[search].limit".
	Fields []FieldChange `json:"fields,omitempty"`
}

// FieldChange is one field's value before and after; From is nil for an
// added tier and To for a removed one.
type FieldChange struct {
	Field string `json:"field"`
	From  any    `json:"from"`
	To    any    `json:"to"`
}

// Diff is what applying a file would change, relative to the state whose
// fingerprint is Base.
type Diff struct {
	// Base is the fingerprint of the state the diff was computed against;
	// pass it back to Apply so that the diff that was reviewed is the diff
	// that is applied (optimistic concurrency).
	Base    string   `json:"base"`
	Changes []Change `json:"changes"`
}

// Empty reports whether applying the file would change nothing.
func (d Diff) Empty() bool { return len(d.Changes) == 0 }

// String is the diff for people: one line per created or deleted object,
// and per changed field.
func (d Diff) String() string {
	if d.Empty() {
		return "no changes\n"
	}
	var b strings.Builder
	sign := map[Op]string{OpCreate: "+", OpUpdate: "~", OpDelete: "-"}
	for _, c := range d.Changes {
		fmt.Fprintf(&b, "%s %s %s\n", sign[c.Op], c.Kind, c.Slug)
		for _, f := range c.Fields {
			switch {
			case f.From == nil:
				fmt.Fprintf(&b, "    + %s: %s\n", f.Field, show(f.To))
			case f.To == nil:
				fmt.Fprintf(&b, "    - %s: %s\n", f.Field, show(f.From))
			default:
				fmt.Fprintf(&b, "    ~ %s: %s -> %s\n", f.Field, show(f.From), show(f.To))
			}
		}
	}
	return b.String()
}

func show(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case Tier:
		var b strings.Builder
		switch x.Algorithm {
		case "quota":
			fmt.Fprintf(&b, "quota %d per %s", x.Limit, x.Period)
		case "concurrency":
			fmt.Fprintf(&b, "concurrency %d in flight", x.Limit)
		default:
			fmt.Fprintf(&b, "%s %d per %ds", x.Algorithm, x.Limit, x.WindowSeconds)
		}
		where := "plan-wide"
		if x.Route != "" {
			where = fmt.Sprintf("on %q", x.Route)
		}
		fmt.Fprintf(&b, " %s (", where)
		if x.Algorithm == "token_bucket" || x.Algorithm == "leaky_bucket" {
			fmt.Fprintf(&b, "burst %d, ", x.Burst)
		}
		if x.Algorithm != "concurrency" {
			fmt.Fprintf(&b, "cost %d, ", x.Cost)
		}
		if x.CountWhen != "" && x.CountWhen != "always" {
			fmt.Fprintf(&b, "counting %s only, ", x.CountWhen)
		}
		if x.CostHeader != "" {
			fmt.Fprintf(&b, "cost from %s, ", x.CostHeader)
		}
		fmt.Fprintf(&b, "%s, per %s", x.Mode, x.CountPer)
		if x.Precision != "" && x.Precision != string(enforce.PrecisionExact) {
			fmt.Fprintf(&b, ", %s", x.Precision)
		}
		b.WriteString(")")
		return b.String()
	}
	return fmt.Sprint(v)
}

// state is the store of record (or what a file makes of it) as the inputs
// that would create it, by slug.
type state struct {
	plans    map[string]plans.PlanInput
	services map[string]services.Input
}

func stateOf(f File) state {
	st := state{plans: map[string]plans.PlanInput{}, services: map[string]services.Input{}}
	for _, p := range f.Plans {
		st.plans[p.Input().Slug] = p.Input()
	}
	for _, s := range f.Services {
		st.services[s.Input().Slug] = s.Input()
	}
	return st
}

// final is the state after applying file to current: the file's objects
// replace theirs; objects the file leaves out are kept, or removed with
// prune; a plan the file makes the default (or anonymous) plan takes the
// role from a kept plan that had it.
func final(current state, file File, prune bool) state {
	want := stateOf(file)
	if !prune {
		for slug, s := range current.services {
			if _, ok := want.services[slug]; !ok {
				want.services[slug] = s
			}
		}
		claimsDefault, claimsAnon := false, false
		for _, p := range file.Plans {
			claimsDefault = claimsDefault || p.IsDefault
			claimsAnon = claimsAnon || p.IsAnonymous
		}
		for slug, p := range current.plans {
			if _, ok := want.plans[slug]; ok {
				continue
			}
			p.IsDefault = p.IsDefault && !claimsDefault
			p.IsAnonymous = p.IsAnonymous && !claimsAnon
			want.plans[slug] = p
		}
	}
	return want
}

// diff lists the changes from a to b, services first, each kind by slug.
func diff(a, b state) []Change {
	out := []Change{}
	for _, slug := range unionKeys(a.services, b.services) {
		from, inA := a.services[slug]
		to, inB := b.services[slug]
		switch {
		case !inA:
			out = append(out, Change{Op: OpCreate, Kind: "service", Slug: slug})
		case !inB:
			out = append(out, Change{Op: OpDelete, Kind: "service", Slug: slug})
		default:
			if fs := serviceFields(from, to); len(fs) > 0 {
				out = append(out, Change{Op: OpUpdate, Kind: "service", Slug: slug, Fields: fs})
			}
		}
	}
	for _, slug := range unionKeys(a.plans, b.plans) {
		from, inA := a.plans[slug]
		to, inB := b.plans[slug]
		switch {
		case !inA:
			out = append(out, Change{Op: OpCreate, Kind: "plan", Slug: slug})
		case !inB:
			out = append(out, Change{Op: OpDelete, Kind: "plan", Slug: slug})
		default:
			if fs := planFields(from, to); len(fs) > 0 {
				out = append(out, Change{Op: OpUpdate, Kind: "plan", Slug: slug, Fields: fs})
			}
		}
	}
	return out
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func serviceFields(a, b services.Input) []FieldChange {
	var fs []FieldChange
	add := func(field string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			fs = append(fs, FieldChange{Field: field, From: x, To: y})
		}
	}
	add("name", a.Name, b.Name)
	add("hosts", a.Hosts, b.Hosts)
	add("upstream_url", a.Upstream, b.Upstream)
	add("routes", a.Routes, b.Routes)
	return fs
}

func planFields(a, b plans.PlanInput) []FieldChange {
	var fs []FieldChange
	add := func(field string, x, y any) {
		if !reflect.DeepEqual(x, y) {
			fs = append(fs, FieldChange{Field: field, From: x, To: y})
		}
	}
	add("name", a.Name, b.Name)
	add("description", a.Description, b.Description)
	add("is_default", a.IsDefault, b.IsDefault)
	add("is_anonymous", a.IsAnonymous, b.IsAnonymous)
	add("is_public", a.IsPublic, b.IsPublic)
	names := func(ls []plans.LimitInput) []string {
		out := make([]string, len(ls))
		for i, l := range ls {
			out[i] = l.Name
		}
		return out
	}
	find := func(ls []plans.LimitInput, name string) (plans.LimitInput, bool) {
		i := slices.IndexFunc(ls, func(l plans.LimitInput) bool { return l.Name == name })
		if i < 0 {
			return plans.LimitInput{}, false
		}
		return ls[i], true
	}
	for _, l := range a.Limits {
		if _, ok := find(b.Limits, l.Name); !ok {
			fs = append(fs, FieldChange{Field: "limits[" + l.Name + "]", From: tierOf(l)})
		}
	}
	for _, l := range b.Limits {
		old, ok := find(a.Limits, l.Name)
		if !ok {
			fs = append(fs, FieldChange{Field: "limits[" + l.Name + "]", To: tierOf(l)})
			continue
		}
		p := "limits[" + l.Name + "]."
		add(p+"route", old.Route, l.Route)
		add(p+"algorithm", old.Algorithm, l.Algorithm)
		add(p+"limit", old.Limit, l.Limit)
		add(p+"window_seconds", old.WindowSeconds, l.WindowSeconds)
		add(p+"burst", old.Burst, l.Burst)
		add(p+"cost", old.Cost, l.Cost)
		add(p+"mode", old.Mode, l.Mode)
		add(p+"period", old.Period, l.Period)
		add(p+"count_per", old.CountPer, l.CountPer)
		add(p+"count_when", old.CountWhen, l.CountWhen)
		add(p+"cost_header", old.CostHeader, l.CostHeader)
		add(p+"precision", old.Precision, l.Precision)
	}
	// Order is what the dashboard and the docs show; a reorder alone is
	// a change too.
	common := func(from, other []string) []string {
		return slices.DeleteFunc(slices.Clone(from), func(n string) bool { return !slices.Contains(other, n) })
	}
	an, bn := names(a.Limits), names(b.Limits)
	if x, y := common(an, bn), common(bn, an); !slices.Equal(x, y) {
		fs = append(fs, FieldChange{Field: "limits (order)", From: strings.Join(x, ", "), To: strings.Join(y, ", ")})
	}
	return fs
}

func tierOf(l plans.LimitInput) Tier {
	return Tier{Name: l.Name, Route: l.Route, Algorithm: l.Algorithm, Limit: l.Limit,
		WindowSeconds: l.WindowSeconds, Burst: l.Burst, Cost: l.Cost, Mode: l.Mode, Period: l.Period,
		CountPer: l.CountPer, Precision: l.Precision, CountWhen: l.CountWhen, CostHeader: l.CostHeader}
}
