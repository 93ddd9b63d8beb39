package planfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/services"
)

// ErrConflict means the store of record changed since the diff the caller
// reviewed (its Base): compute the diff again and review it.
var ErrConflict = errors.New("plans were changed since the diff was computed")

// Store exports, diffs and applies plans files against Postgres.
type Store struct {
	pool   *pgxpool.Pool
	routes []string
	// reduced and checkDegrade are plans.Service's rule for degrade tiers
	// (plans.CheckReducedAnswers).
	reduced      []string
	checkDegrade bool
}

// NewStore returns a Store over pool. routes are the ServeMux patterns the
// portal itself serves, which a tier may name besides the routes services
// declare (what plans.NewService takes).
func NewStore(pool *pgxpool.Pool, routes []string) *Store {
	return &Store{pool: pool, routes: slices.Clone(routes)}
}

// WithReducedAnswers says which of the routes given to NewStore have a
// reduced answer, as plans.Service.WithReducedAnswers does: a file with a
// degrade tier on any other of them, or plan-wide, is refused. It returns s.
func (s *Store) WithReducedAnswers(routes []string) *Store {
	s.reduced, s.checkDegrade = slices.Clone(routes), true
	return s
}

// ForService returns a Store that accepts the tiers svc accepts: on the
// routes it was given and under its rule for degrade tiers.
func ForService(pool *pgxpool.Pool, svc *plans.Service) *Store {
	st := NewStore(pool, svc.Routes())
	if reduced, ok := svc.ReducedAnswers(); ok {
		st = st.WithReducedAnswers(reduced)
	}
	return st
}

// Export returns the file that describes every plan and service.
func (s *Store) Export(ctx context.Context) (File, error) {
	var f File
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		f, err = load(ctx, tx)
		return err
	})
	if err != nil {
		return File{}, fmt.Errorf("export plans: %w", err)
	}
	return f, nil
}

func load(ctx context.Context, db audit.DBTX) (File, error) {
	ps, err := plans.LoadAll(ctx, db)
	if err != nil {
		return File{}, err
	}
	ss, err := services.LoadAll(ctx, db)
	if err != nil {
		return File{}, err
	}
	return FromState(ps, ss), nil
}

// Fingerprint identifies a state: equal files have equal fingerprints.
func Fingerprint(f File) string {
	b, err := Encode(f, JSON)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Options are the choices of an apply.
type Options struct {
	// Prune deletes the plans and services the file leaves out; without
	// it they are kept as they are.
	Prune bool
	// DryRun computes and checks everything and writes nothing.
	DryRun bool
	// Base, when set, is the Diff.Base the caller reviewed: the apply is
	// refused with ErrConflict if the state has changed since.
	Base string
	// Actor is recorded in the audit entry: "user:<id>", "token:<id>" or
	// "cli".
	Actor string
}

// Diff returns what applying p would change, checking it as Apply does.
func (s *Store) Diff(ctx context.Context, p *Parsed, prune bool) (Diff, error) {
	return s.Apply(ctx, p, Options{Prune: prune, DryRun: true})
}

// errDryRun ends a dry run's transaction with a rollback.
var errDryRun = errors.New("dry run")

// lockAll serialises applies with each other and with the dashboard's and
// API's edits of plans and services, so the state the diff is computed on
// is the state it is applied to.
const lockAll = `LOCK TABLE plans, plan_limits, services, service_routes IN SHARE ROW EXCLUSIVE MODE`

// Apply checks p against the store of record and, unless opts.DryRun,
// applies it in one transaction with one audit entry holding the whole
// diff. Any problem refuses the whole file, nothing written: an *Error
// (errors.Is ErrInvalid) naming file, line and field, or ErrConflict. An
// empty diff writes nothing, not even an audit entry.
func (s *Store) Apply(ctx context.Context, p *Parsed, opts Options) (Diff, error) {
	var d Diff
	// An apply locks the tables, so read committed sees one state; a dry
	// run takes no lock, so it reads one snapshot instead.
	txOpts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	if opts.DryRun {
		txOpts.IsoLevel = pgx.RepeatableRead
	}
	err := pgx.BeginTxFunc(ctx, s.pool, txOpts, func(tx pgx.Tx) error {
		if !opts.DryRun {
			if _, err := tx.Exec(ctx, lockAll); err != nil {
				return fmt.Errorf("lock plans: %w", err)
			}
		}
		cur, err := load(ctx, tx)
		if err != nil {
			return err
		}
		d.Base = Fingerprint(cur)
		if opts.Base != "" && opts.Base != d.Base {
			return ErrConflict
		}
		before := stateOf(cur)
		after := final(before, p.File, opts.Prune)
		if err := s.check(p, after); err != nil {
			return err
		}
		d.Changes = diff(before, after)
		if len(d.Changes) == 0 {
			return nil
		}
		if err := checkPrunable(ctx, tx, p.Name, d.Changes); err != nil {
			return err
		}
		if opts.DryRun {
			// Roll back: the prune check detaches dead keys, which a dry
			// run must not keep.
			return errDryRun
		}
		if err := write(ctx, tx, after, d.Changes); err != nil {
			return err
		}
		actor := opts.Actor
		if actor == "" {
			actor = "cli"
		}
		return audit.Record(ctx, tx, actor, "plans.apply", audit.ObjectPlan, "file", nil, struct {
			File    string   `json:"file"`
			Prune   bool     `json:"prune"`
			Base    string   `json:"base"`
			Changes []Change `json:"changes"`
		}{p.Name, opts.Prune, d.Base, d.Changes})
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	if err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			return Diff{}, fe
		}
		return Diff{}, fmt.Errorf("apply %s: %w", p.Name, err)
	}
	return d, nil
}

// check applies every rule of the plans and services packages to the
// file's objects, and the rules across objects (unique slugs, one default
// and one anonymous plan, no conflicting routes or shared hosts, tiers on
// declared routes), naming the line of each problem.
func (s *Store) check(p *Parsed, after state) error {
	var probs []Problem
	addFields := func(prefix string, err error) {
		var ve *plans.ValidationError
		if errors.As(err, &ve) {
			for _, fe := range ve.Fields {
				probs = append(probs, p.problem(prefix+fe.Field, "%s", fe.Message))
			}
		}
	}
	if p.File.Version != FormatVersion {
		probs = append(probs, p.problem("version", "must be %d", FormatVersion))
	}
	// Services: each on its own, then across all services the state
	// will hold; services the file does not name are checked first, so
	// a conflict is reported at the file's line.
	var mux services.Mux
	hosts := map[string]string{}
	fileSlugs := map[string]int{}
	for i, svc := range p.File.Services {
		if j, dup := fileSlugs[svc.Input().Slug]; dup {
			probs = append(probs, p.problem(fmt.Sprintf("services[%d].slug", i), "duplicates services[%d]", j))
			continue
		}
		fileSlugs[svc.Input().Slug] = i
	}
	for _, slug := range sortedKeys(after.services) {
		if _, inFile := fileSlugs[slug]; inFile {
			continue
		}
		for _, r := range after.services[slug].Routes {
			_ = mux.Add(r) // stored routes never conflict with each other
		}
		for _, h := range after.services[slug].Hosts {
			hosts[h] = slug
		}
	}
	routes := slices.Clone(s.routes)
	for i, svc := range p.File.Services {
		in := svc.Input()
		prefix := fmt.Sprintf("services[%d].", i)
		if err := services.Validate(in); err != nil {
			addFields(prefix, err)
			continue
		}
		for j, r := range in.Routes {
			if err := mux.Add(r); err != nil {
				probs = append(probs, p.problem(fmt.Sprintf("%sroutes[%d]", prefix, j), "conflicts with another service's route: %s", err.Error()))
			}
		}
		for j, h := range in.Hosts {
			if other, taken := hosts[h]; taken && other != in.Slug {
				probs = append(probs, p.problem(fmt.Sprintf("%shosts[%d]", prefix, j), "%q is a host of service %q", h, other))
			}
			hosts[h] = in.Slug
		}
	}
	for _, slug := range sortedKeys(after.services) {
		routes = append(routes, after.services[slug].Routes...)
	}
	planSlugs := map[string]int{}
	roles := map[string]int{}
	for i, pl := range p.File.Plans {
		in := pl.Input()
		prefix := fmt.Sprintf("plans[%d].", i)
		if j, dup := planSlugs[in.Slug]; dup {
			probs = append(probs, p.problem(prefix+"slug", "duplicates plans[%d]", j))
		}
		planSlugs[in.Slug] = i
		for field, claims := range map[string]bool{"is_default": in.IsDefault, "is_anonymous": in.IsAnonymous} {
			if !claims {
				continue
			}
			if j, taken := roles[field]; taken {
				probs = append(probs, p.problem(prefix+field, "plans[%d] is already marked %s: at most one plan", j, field))
			}
			roles[field] = i
		}
		addFields(prefix, plans.Validate(in, routes))
		if s.checkDegrade {
			addFields(prefix, plans.CheckReducedAnswers("limits", in.Limits, s.routes, s.reduced))
		}
	}
	// A service the file changes or prunes may drop a route that a plan
	// the file does not name still limits.
	for _, slug := range sortedKeys(after.plans) {
		if _, inFile := planSlugs[slug]; inFile {
			continue
		}
		for _, l := range after.plans[slug].Limits {
			if l.Route != "" && !slices.Contains(routes, l.Route) {
				probs = append(probs, Problem{File: p.Name, Field: "services",
					Message: fmt.Sprintf("route %q would be removed, but tier %s/%s (not in the file) limits it", l.Route, slug, l.Name)})
			}
		}
	}
	if len(probs) > 0 {
		slices.SortStableFunc(probs, func(a, b Problem) int { return a.Line - b.Line })
		return &Error{Problems: probs}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

const (
	// Keys that can never be used again do not hold a plan in place, as
	// in plans.Service.Delete.
	detachDeadKeys = `
UPDATE api_keys SET plan_id = NULL
WHERE plan_id = (SELECT id FROM plans WHERE slug = $1) AND (revoked_at IS NOT NULL OR expires_at <= now())`
	countPlanUsers = `
SELECT (SELECT count(*) FROM api_keys k JOIN plans p ON p.id = k.plan_id WHERE p.slug = $1),
       (SELECT count(*) FROM users u JOIN plans p ON p.id = u.plan_id WHERE p.slug = $1)`
)

// checkPrunable refuses to delete a plan that live keys or developers use.
func checkPrunable(ctx context.Context, tx pgx.Tx, name string, changes []Change) error {
	var probs []Problem
	for _, c := range changes {
		if c.Kind != "plan" || c.Op != OpDelete {
			continue
		}
		if _, err := tx.Exec(ctx, detachDeadKeys, c.Slug); err != nil {
			return fmt.Errorf("detach dead keys: %w", err)
		}
		var keys, devs int
		if err := tx.QueryRow(ctx, countPlanUsers, c.Slug).Scan(&keys, &devs); err != nil {
			return fmt.Errorf("count plan users: %w", err)
		}
		if keys > 0 || devs > 0 {
			probs = append(probs, Problem{File: name, Field: "plans", Message: fmt.Sprintf(
				"plan %q is not in the file, so --prune would delete it, but %d keys and %d developers use it: move them to another plan first, or add it to the file", c.Slug, keys, devs)})
		}
	}
	if len(probs) > 0 {
		return &Error{Problems: probs}
	}
	return nil
}

const (
	deleteRoutesOf = `DELETE FROM service_routes WHERE service_id = (SELECT id FROM services WHERE slug = $1)`
	deleteService  = `DELETE FROM services WHERE slug = $1`
	insertService  = `INSERT INTO services (slug, name, hosts, upstream_url) VALUES ($1, $2, $3, $4) RETURNING id`
	updateService  = `
UPDATE services SET name = $2, hosts = $3, upstream_url = $4, version = version + 1, updated_at = now()
WHERE slug = $1 RETURNING id`
	insertRoute = `INSERT INTO service_routes (service_id, pattern, position) VALUES ($1, $2, $3)`

	deletePlan = `DELETE FROM plans WHERE slug = $1`
	// Roles are given up before any plan claims them, because the schema
	// allows one default and one anonymous plan at every moment.
	releaseRoles = `
UPDATE plans SET is_default = is_default AND $2, is_anonymous = is_anonymous AND $3
WHERE slug = $1`
	insertPlan = `
INSERT INTO plans (slug, name, description, is_default, is_anonymous, is_public)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`
	updatePlan = `
UPDATE plans SET name = $2, description = $3, is_default = $4, is_anonymous = $5, is_public = $6,
    version = version + 1, updated_at = now()
WHERE slug = $1 RETURNING id`
)

// write applies changes: routes of changed and deleted services are
// removed first, so a route may move from one service to another; plans
// are deleted and give up their roles before others claim them.
func write(ctx context.Context, tx pgx.Tx, after state, changes []Change) error {
	for _, c := range changes {
		if c.Kind == "service" && c.Op != OpCreate {
			if _, err := tx.Exec(ctx, deleteRoutesOf, c.Slug); err != nil {
				return fmt.Errorf("delete routes of %q: %w", c.Slug, err)
			}
		}
	}
	for _, c := range changes {
		if c.Kind != "service" {
			continue
		}
		in := after.services[c.Slug]
		var id int64
		var err error
		switch c.Op {
		case OpDelete:
			_, err = tx.Exec(ctx, deleteService, c.Slug)
		case OpCreate:
			err = tx.QueryRow(ctx, insertService, in.Slug, in.Name, in.Hosts, in.Upstream).Scan(&id)
		case OpUpdate:
			err = tx.QueryRow(ctx, updateService, in.Slug, in.Name, in.Hosts, in.Upstream).Scan(&id)
		}
		if err != nil {
			return fmt.Errorf("%s service %q: %w", c.Op, c.Slug, err)
		}
		if c.Op == OpDelete {
			continue
		}
		for i, r := range in.Routes {
			if _, err := tx.Exec(ctx, insertRoute, id, r, i); err != nil {
				return fmt.Errorf("insert route %q: %w", r, err)
			}
		}
	}
	for _, c := range changes {
		if c.Kind != "plan" {
			continue
		}
		switch c.Op {
		case OpDelete:
			if _, err := tx.Exec(ctx, deletePlan, c.Slug); err != nil {
				return fmt.Errorf("delete plan %q: %w", c.Slug, describe(err))
			}
		case OpUpdate:
			in := after.plans[c.Slug]
			if _, err := tx.Exec(ctx, releaseRoles, c.Slug, in.IsDefault, in.IsAnonymous); err != nil {
				return fmt.Errorf("update plan %q: %w", c.Slug, err)
			}
		}
	}
	for _, c := range changes {
		if c.Kind != "plan" || c.Op == OpDelete {
			continue
		}
		in := after.plans[c.Slug]
		var id int64
		q := updatePlan
		if c.Op == OpCreate {
			q = insertPlan
		}
		if err := tx.QueryRow(ctx, q, in.Slug, in.Name, in.Description, in.IsDefault, in.IsAnonymous, in.IsPublic).Scan(&id); err != nil {
			return fmt.Errorf("%s plan %q: %w", c.Op, c.Slug, describe(err))
		}
		if err := plans.ReplaceLimits(ctx, tx, id, in.Limits); err != nil {
			return fmt.Errorf("write limits of %q: %w", c.Slug, describe(err))
		}
	}
	return nil
}

// describe adds the constraint's name to a Postgres error, which the
// checks above should make unreachable.
func describe(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.ConstraintName != "" {
		return fmt.Errorf("%w (constraint %s)", err, strings.TrimSpace(pgErr.ConstraintName))
	}
	return err
}
