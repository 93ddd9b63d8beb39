// Package planfile is plans as code: every plan, tier, service and route as
// one YAML (or JSON) file keyed by slugs, in a stable order, so that limits
// can be reviewed like code. It exports the store of record as a file,
// decodes a file reporting each error with its line and field, computes what
// applying a file would change, and applies it in one transaction with one
// audit entry. API key secrets are never part of a file: keys are not.
package planfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
)

// FormatVersion is the only file format version this package reads and
// writes; a file names it in its version field.
const FormatVersion = 1

// File is a whole plans file.
type File struct {
	Version  int       `yaml:"version" json:"version"`
	Services []Service `yaml:"services" json:"services"`
	Plans    []Plan    `yaml:"plans" json:"plans"`
}

// Service is a declared service and its routes, keyed by slug.
type Service struct {
	Slug     string   `yaml:"slug" json:"slug"`
	Name     string   `yaml:"name" json:"name"`
	Hosts    []string `yaml:"hosts" json:"hosts"`
	Upstream string   `yaml:"upstream_url" json:"upstream_url"`
	Routes   []string `yaml:"routes" json:"routes"`
}

// Plan is a plan and its tiers, keyed by slug. Field names are those of the
// admin API's plan input, so an error names the same field in both.
type Plan struct {
	Slug        string `yaml:"slug" json:"slug"`
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description" json:"description"`
	IsDefault   bool   `yaml:"is_default" json:"is_default"`
	IsAnonymous bool   `yaml:"is_anonymous" json:"is_anonymous"`
	// IsPublic is a pointer so that a hand-written file that leaves it out
	// gets the dashboard's default (public), not false.
	IsPublic *bool  `yaml:"is_public,omitempty" json:"is_public,omitempty"`
	Limits   []Tier `yaml:"limits" json:"limits"`
}

// Tier is one limit tier of a plan, in the plan's display order. An export
// writes only the fields the tier's algorithm reads: no window for a quota
// (it renews by its period) or a concurrency limit, a burst only for the
// two buckets, no cost for a concurrency limit (one request, one slot).
type Tier struct {
	Name          string `yaml:"name" json:"name"`
	Route         string `yaml:"route" json:"route"`
	Algorithm     string `yaml:"algorithm" json:"algorithm"`
	Limit         int64  `yaml:"limit" json:"limit"`
	WindowSeconds int64  `yaml:"window_seconds,omitempty" json:"window_seconds,omitempty"`
	Burst         int64  `yaml:"burst,omitempty" json:"burst,omitempty"`
	Cost          int64  `yaml:"cost,omitempty" json:"cost,omitempty"`
	Mode          string `yaml:"mode" json:"mode"`
	// Period is a quota's renewal period (day, month or year); empty, and
	// left out, for the other algorithms.
	Period string `yaml:"period,omitempty" json:"period,omitempty"`
	// CountPer is whose state the tier counts: key or developer; left out
	// for the usual rule (per key on a route, per developer plan-wide).
	CountPer string `yaml:"count_per,omitempty" json:"count_per,omitempty"`
	// Precision is how exactly the tier is enforced across instances:
	// exact, leased or local; left out for exact, the default.
	Precision string `yaml:"precision,omitempty" json:"precision,omitempty"`
	// CountWhen is which responses the cost counts for: success or error;
	// left out for always.
	CountWhen string `yaml:"count_when,omitempty" json:"count_when,omitempty"`
	// CostHeader names a response header carrying the request's cost;
	// left out for none.
	CostHeader string `yaml:"cost_header,omitempty" json:"cost_header,omitempty"`
}

// Input is the plan as the plans package validates and stores it.
func (p Plan) Input() plans.PlanInput {
	in := plans.PlanInput{
		Slug:        strings.TrimSpace(p.Slug),
		Name:        strings.TrimSpace(p.Name),
		Description: p.Description,
		IsDefault:   p.IsDefault,
		IsAnonymous: p.IsAnonymous,
		IsPublic:    p.IsPublic == nil || *p.IsPublic,
		Limits:      make([]plans.LimitInput, len(p.Limits)),
	}
	for i, t := range p.Limits {
		in.Limits[i] = plans.LimitInput{
			Name: strings.TrimSpace(t.Name), Route: strings.TrimSpace(t.Route), Algorithm: t.Algorithm, Mode: t.Mode,
			Limit: t.Limit, WindowSeconds: t.WindowSeconds, Burst: t.Burst, Cost: t.Cost, Period: t.Period,
			CountPer: strings.TrimSpace(t.CountPer), Precision: strings.TrimSpace(t.Precision),
			CountWhen: strings.TrimSpace(t.CountWhen), CostHeader: t.CostHeader,
		}
	}
	// The documented defaults, filled as the plans package fills them, so
	// that a file that leaves them out and the export compare equal.
	return in.Normalized()
}

// Input is the service as the services package validates and stores it.
func (s Service) Input() services.Input {
	in := services.Input{
		Slug:     strings.TrimSpace(s.Slug),
		Name:     strings.TrimSpace(s.Name),
		Upstream: strings.TrimSpace(s.Upstream),
		Hosts:    []string{},
		Routes:   []string{},
	}
	for _, h := range s.Hosts {
		in.Hosts = append(in.Hosts, strings.ToLower(strings.TrimSpace(h)))
	}
	for _, r := range s.Routes {
		in.Routes = append(in.Routes, strings.TrimSpace(r))
	}
	return in
}

// FromState is the file that describes ps and ss: services and plans by
// slug, tiers in display order.
func FromState(ps []plans.Plan, ss []services.Service) File {
	f := File{Version: FormatVersion, Services: []Service{}, Plans: []Plan{}}
	for _, s := range ss {
		f.Services = append(f.Services, Service{
			Slug: s.Slug, Name: s.Name, Hosts: nonNil(s.Hosts), Upstream: s.Upstream, Routes: nonNil(s.Routes),
		})
	}
	for _, p := range ps {
		public := p.IsPublic
		fp := Plan{
			Slug: p.Slug, Name: p.Name, Description: p.Description,
			IsDefault: p.IsDefault, IsAnonymous: p.IsAnonymous, IsPublic: &public, Limits: []Tier{},
		}
		for _, l := range p.Limits {
			t := Tier{
				Name: l.Name, Route: l.Route, Algorithm: string(l.Algorithm), Limit: l.Limit,
				Cost: l.Cost, Mode: string(l.Mode), Period: string(l.Period), CostHeader: l.CostHeader,
			}
			if l.CountWhen != enforce.CountAlways {
				t.CountWhen = string(l.CountWhen)
			}
			if plans.UsesWindow(l.Algorithm) {
				t.WindowSeconds = int64(l.Window / time.Second)
			}
			if plans.UsesBurst(l.Algorithm) {
				t.Burst = l.Burst
			}
			if l.Algorithm == enforce.Concurrency {
				t.Cost = 0
			}
			// Only a tier that departs from the usual rule says whose
			// state it counts, so files written before count_per stay
			// as they were.
			if c := l.Input().CountPer; c != plans.DefaultCountPer(l.Route) {
				t.CountPer = c
			}
			// Likewise only a tier that is not exact says its precision.
			if l.Precision.OrExact() != enforce.PrecisionExact {
				t.Precision = string(l.Precision)
			}
			fp.Limits = append(fp.Limits, t)
		}
		f.Plans = append(f.Plans, fp)
	}
	slices.SortFunc(f.Services, func(a, b Service) int { return strings.Compare(a.Slug, b.Slug) })
	slices.SortFunc(f.Plans, func(a, b Plan) int { return strings.Compare(a.Slug, b.Slug) })
	return f
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

// Format is how a file is written.
type Format string

// The formats Encode writes; Decode reads both.
const (
	YAML Format = "yaml"
	JSON Format = "json"
)

// ParseFormat accepts "yaml", "yml" and "json".
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "yaml", "yml", "":
		return YAML, nil
	case "json":
		return JSON, nil
	}
	return "", fmt.Errorf("unknown format %q: want yaml or json", s)
}

// Encode writes f in format. The output is a pure function of f, so the same
// state always exports to the same bytes.
func Encode(f File, format Format) ([]byte, error) {
	return EncodeWithSchema(f, format, "")
}

// EncodeWithSchema is Encode, with a YAML file's first line naming
// schemaURL (the portal's /docs/plans.schema.json) for editors with the
// YAML language server; without a URL the line says where the schema is.
func EncodeWithSchema(f File, format Format, schemaURL string) ([]byte, error) {
	if format == JSON {
		b, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode plans file: %w", err)
		}
		return append(b, '\n'), nil
	}
	var buf bytes.Buffer
	if schemaURL != "" {
		buf.WriteString("# yaml-language-server: $schema=" + schemaURL + "\n")
	} else {
		buf.WriteString("# Sluice plans file; its JSON Schema is the portal's /docs/plans.schema.json\n")
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("encode plans file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode plans file: %w", err)
	}
	return buf.Bytes(), nil
}
