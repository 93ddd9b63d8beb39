package apikeys

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// MaxScopeEntries bounds each list of a key's scope.
const MaxScopeEntries = 50

// scope is a validated ScopeInput in its stored form.
type scope struct {
	routes   []string
	cidrs    []netip.Prefix
	readOnly bool
}

// validateScope checks a scope: every route is one the protected API or a
// declared service serves (an entry without a method names a path some
// route has), every range parses. Ranges are stored masked ("10.1.2.3/8"
// is 10.0.0.0/8) and a bare address is one host.
func (s *Service) validateScope(ctx context.Context, in ScopeInput) (scope, []plans.FieldError, error) {
	out := scope{routes: []string{}, cidrs: []netip.Prefix{}, readOnly: in.ReadOnly}
	var errs []plans.FieldError
	var known []string
	for _, r := range in.Routes {
		r = strings.Join(strings.Fields(r), " ")
		if r == "" || slices.Contains(out.routes, r) {
			continue
		}
		if known == nil {
			var err error
			if known, err = plans.DeclaredRoutes(ctx, s.pool, s.routes); err != nil {
				return scope{}, nil, err
			}
		}
		if !routeKnown(known, r) {
			errs = append(errs, plans.FieldError{Field: "allowed_routes", Message: fmt.Sprintf("%q is no route the API serves (routes look like \"GET /api/items/{id}\", or \"/api/items/{id}\" for every method)", r)})
			continue
		}
		out.routes = append(out.routes, r)
	}
	for _, c := range in.CIDRs {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		p, err := parseRange(c)
		if err != nil {
			errs = append(errs, plans.FieldError{Field: "allowed_cidrs", Message: fmt.Sprintf("%q is no address range (write 203.0.113.0/24, 2001:db8::/48 or one address)", c)})
			continue
		}
		if !slices.Contains(out.cidrs, p) {
			out.cidrs = append(out.cidrs, p)
		}
	}
	if len(out.routes) > MaxScopeEntries {
		errs = append(errs, plans.FieldError{Field: "allowed_routes", Message: fmt.Sprintf("at most %d routes", MaxScopeEntries)})
	}
	if len(out.cidrs) > MaxScopeEntries {
		errs = append(errs, plans.FieldError{Field: "allowed_cidrs", Message: fmt.Sprintf("at most %d address ranges", MaxScopeEntries)})
	}
	return out, errs, nil
}

// routeKnown reports whether r names a served route: equal to one, or a
// method-less path that some route has.
func routeKnown(known []string, r string) bool {
	m, p := enforce.SplitRoute(r)
	for _, k := range known {
		km, kp := enforce.SplitRoute(k)
		if kp == p && (m == "" || km == "" || km == m) {
			return true
		}
	}
	return false
}

func parseRange(c string) (netip.Prefix, error) {
	if !strings.Contains(c, "/") {
		a, err := netip.ParseAddr(c)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(c)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

const setScope = `
UPDATE api_keys SET allowed_routes = $2, allowed_cidrs = $3, read_only = $4, version = version + 1
WHERE id = $1`

// SetScope replaces the key's scope (an operator narrowing, or widening, a
// developer's key). The change reaches every instance's snapshot through
// the key table's NOTIFY. Errors: *plans.ValidationError, ErrNotFound,
// ErrRevoked.
func (s *Service) SetScope(ctx context.Context, actor string, id int64, in ScopeInput) (Key, error) {
	sc, errs, err := s.validateScope(ctx, in)
	if err != nil {
		return Key{}, fmt.Errorf("set key scope: %w", err)
	}
	if len(errs) > 0 {
		return Key{}, &plans.ValidationError{Fields: errs}
	}
	return s.change(ctx, actor, id, "key.scope", func(tx pgx.Tx, _ Key) error {
		_, err := tx.Exec(ctx, setScope, id, sc.routes, sc.cidrs, sc.readOnly)
		return err
	})
}
