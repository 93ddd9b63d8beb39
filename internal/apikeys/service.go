package apikeys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/pgtext"
	"github.com/sluicehq/sluice/internal/plans"
)

// Bounds on a key's fields.
const (
	MaxNameLen   = 100
	MaxOverrides = plans.MaxLimitsPerPlan
	// MaxExpiryYears is how far ahead a key's expiry may be: further is a
	// typo or "never", which is no expiry at all (and a year past 9999
	// cannot even be written as JSON).
	MaxExpiryYears = 10
)

// expiryProblem says what is wrong with an expiry set now, or "".
func expiryProblem(at *time.Time, now time.Time) string {
	switch {
	case at == nil:
		return ""
	case !at.After(now):
		return "must be in the future"
	case at.After(now.AddDate(MaxExpiryYears, 0, 0)):
		return fmt.Sprintf("must be at most %d years from now; leave it empty for a key that does not expire", MaxExpiryYears)
	}
	return ""
}

// Service manages API keys in Postgres. Every change is audit-logged in the
// same transaction and announced to every instance by NOTIFY triggers.
type Service struct {
	pool    *pgxpool.Pool
	routes  []string
	logger  *slog.Logger
	maxKeys int
}

// DefaultKeysPerUser is how many active keys a developer may hold unless
// LimitKeysPerUser says otherwise.
const DefaultKeysPerUser = 20

// NewService returns a Service over pool; routes are the ServeMux patterns
// the protected API serves, against which overrides are validated.
func NewService(pool *pgxpool.Pool, routes []string, logger *slog.Logger) *Service {
	return &Service{pool: pool, routes: slices.Clone(routes), logger: logger, maxKeys: DefaultKeysPerUser}
}

// LimitKeysPerUser sets how many active (neither revoked nor expired) keys
// one developer may hold (PORTAL_KEYS_PER_DEVELOPER; n <= 0 keeps
// DefaultKeysPerUser) and returns s. Call it before s is used. The cap
// keeps a developer from minting keys faster than operators can see; their
// keys share the plan-wide limits whatever their number.
func (s *Service) LimitKeysPerUser(n int) *Service {
	if n > 0 {
		s.maxKeys = n
	}
	return s
}

// MaxKeysPerUser is the cap LimitKeysPerUser set.
func (s *Service) MaxKeysPerUser() int { return s.maxKeys }

// selectKeys reads keys with their owner, their current secret's prefix, the
// plan that applies to them (own, else owner's, else default) and when the
// last previous secret still in its rotation grace stops working.
const selectKeys = `
SELECT k.id, k.user_id, u.email AS owner_email, k.name,
       COALESCE((SELECT s.prefix FROM api_key_secrets s WHERE s.key_id = k.id ORDER BY s.id DESC LIMIT 1), '') AS prefix,
       k.plan_id, COALESCE(kp.slug, up.slug, dp.slug, '') AS plan_slug,
       k.overrides, k.expires_at, k.revoked_at, k.last_used_at, k.created_at, k.version,
       k.allowed_routes, k.allowed_cidrs, k.read_only,
       (SELECT max(s.expires_at) FROM api_key_secrets s
         WHERE s.key_id = k.id AND s.expires_at > now()) AS previous_secret_until
FROM api_keys k
JOIN users u ON u.id = k.user_id
LEFT JOIN plans kp ON kp.id = k.plan_id
LEFT JOIN plans up ON up.id = u.plan_id
LEFT JOIN plans dp ON dp.is_default`

func getKey(ctx context.Context, db audit.DBTX, tail string, args ...any) (Key, error) {
	rows, err := db.Query(ctx, selectKeys+" "+tail, args...)
	if err != nil {
		return Key{}, fmt.Errorf("get key: %w", err)
	}
	k, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Key])
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, fmt.Errorf("key %v: %w", args[0], ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("get key: %w", err)
	}
	return k, nil
}

// lockKey reads a key for update and refuses keys that can no longer change.
func lockKey(ctx context.Context, tx pgx.Tx, id int64, now time.Time) (Key, error) {
	k, err := getKey(ctx, tx, "WHERE k.id = $1 FOR UPDATE OF k", id)
	if err != nil {
		return Key{}, err
	}
	switch k.State(now) {
	case StateRevoked:
		return Key{}, fmt.Errorf("key %d: %w", id, ErrRevoked)
	case StateExpired:
		return Key{}, fmt.Errorf("key %d: %w", id, ErrExpired)
	}
	return k, nil
}

// Get returns the key with the given id, or ErrNotFound.
func (s *Service) Get(ctx context.Context, id int64) (Key, error) {
	return getKey(ctx, s.pool, "WHERE k.id = $1", id)
}

// GetForUser returns the key if it belongs to userID, and ErrNotFound
// otherwise, so a developer cannot probe other developers' keys.
func (s *Service) GetForUser(ctx context.Context, userID, id int64) (Key, error) {
	return getKey(ctx, s.pool, "WHERE k.id = $1 AND k.user_id = $2", id, userID)
}

const (
	insertKey = `
INSERT INTO api_keys (user_id, name, plan_id, overrides, expires_at, allowed_routes, allowed_cidrs, read_only)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING id`
	insertSecret = `INSERT INTO api_key_secrets (key_id, hash, prefix) VALUES ($1, $2, $3)`
	// The owner's row is locked so that concurrent creations for one
	// developer are counted one after the other and cannot pass the cap
	// together.
	lockOwner        = `SELECT role FROM users WHERE id = $1 FOR UPDATE`
	countActiveOwned = `
SELECT count(*) FROM api_keys
WHERE user_id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`
)

// Create issues a key and returns it with its secret. The secret is shown
// this once: only its hash is stored. Errors: *plans.ValidationError (also
// when the owner is an operator: keys belong to developers), and
// ErrTooManyKeys when the owner already holds MaxKeysPerUser active keys.
func (s *Service) Create(ctx context.Context, actor string, in NewKey) (Key, string, error) {
	in.Name = strings.TrimSpace(in.Name)
	overrides := normalizedOverrides(in.Overrides)
	var errs []plans.FieldError
	if in.UserID <= 0 {
		errs = append(errs, plans.FieldError{Field: "user_id", Message: "is required"})
	}
	if msg := pgtext.NameProblem(in.Name); msg != "" {
		errs = append(errs, plans.FieldError{Field: "name", Message: msg})
	} else if n := utf8.RuneCountInString(in.Name); n < 1 || n > MaxNameLen {
		errs = append(errs, plans.FieldError{Field: "name", Message: fmt.Sprintf("must be 1 to %d characters", MaxNameLen)})
	}
	if msg := expiryProblem(in.ExpiresAt, time.Now()); msg != "" {
		errs = append(errs, plans.FieldError{Field: "expires_at", Message: msg})
	}
	overrideErrs, err := s.validateOverrides(ctx, overrides)
	if err != nil {
		return Key{}, "", fmt.Errorf("create key: %w", err)
	}
	errs = append(errs, overrideErrs...)
	sc, scopeErrs, err := s.validateScope(ctx, in.Scope)
	if err != nil {
		return Key{}, "", fmt.Errorf("create key: %w", err)
	}
	errs = append(errs, scopeErrs...)
	if len(errs) > 0 {
		return Key{}, "", &plans.ValidationError{Fields: errs}
	}
	secret, err := Generate()
	if err != nil {
		return Key{}, "", err
	}
	hash := Hash(secret)
	var created Key
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The owner's row is locked until the key is inserted: its role
		// cannot change meanwhile, and concurrent creations cannot pass the
		// key cap together. Keys belong to developers: an operator's key
		// would be limited by no plan of theirs and show up as nobody's
		// usage.
		var role string
		switch err := tx.QueryRow(ctx, lockOwner, in.UserID).Scan(&role); {
		case errors.Is(err, pgx.ErrNoRows):
			return &plans.ValidationError{Fields: []plans.FieldError{{Field: "user_id", Message: "no such user"}}}
		case err != nil:
			return fmt.Errorf("key owner: %w", err)
		case role != "developer":
			return &plans.ValidationError{Fields: []plans.FieldError{{Field: "user_id",
				Message: "is an operator account: API keys belong to developers"}}}
		}
		var held int
		if err := tx.QueryRow(ctx, countActiveOwned, in.UserID).Scan(&held); err != nil {
			return fmt.Errorf("count keys: %w", err)
		}
		if held >= s.maxKeys {
			return fmt.Errorf("user %d holds %d keys: %w", in.UserID, held, ErrTooManyKeys)
		}
		var id int64
		if err := tx.QueryRow(ctx, insertKey, in.UserID, in.Name, in.PlanID, overrides, in.ExpiresAt, sc.routes, sc.cidrs, sc.readOnly).Scan(&id); err != nil {
			return mapWriteError(err)
		}
		if _, err := tx.Exec(ctx, insertSecret, id, hash[:], PrefixOf(secret)); err != nil {
			return fmt.Errorf("insert secret: %w", err)
		}
		k, err := getKey(ctx, tx, "WHERE k.id = $1", id)
		if err != nil {
			return err
		}
		created = k
		return audit.Record(ctx, tx, actor, "key.create", audit.ObjectKey, strconv.FormatInt(id, 10), nil, k)
	})
	if err != nil {
		var ve *plans.ValidationError
		if errors.As(err, &ve) {
			return Key{}, "", ve
		}
		if errors.Is(err, ErrTooManyKeys) {
			return Key{}, "", err
		}
		return Key{}, "", fmt.Errorf("create key: %w", err)
	}
	return created, secret, nil
}

const (
	// Rotation never lengthens an older secret's grace: a secret already
	// retiring keeps the earlier of its own end and the new one.
	retireSecrets = `
UPDATE api_key_secrets
SET expires_at = LEAST(COALESCE(expires_at, 'infinity'), now() + $2::interval)
WHERE key_id = $1 AND (expires_at IS NULL OR expires_at > now())`
	// Secrets retired for a day are of no use to anyone; dropping them keeps
	// the table and the snapshot small.
	deleteOldSecrets = `DELETE FROM api_key_secrets WHERE key_id = $1 AND expires_at < now() - interval '1 day'`
	bumpKey          = `UPDATE api_keys SET version = version + 1 WHERE id = $1`
)

// Rotate issues a new secret for the key, keeping its identity (counters,
// plan, overrides). The previous secrets stay valid for grace (0 to 24 h;
// 0 ends them at once). Errors: *plans.ValidationError, ErrNotFound,
// ErrRevoked, ErrExpired.
func (s *Service) Rotate(ctx context.Context, actor string, id int64, grace time.Duration) (Key, string, error) {
	if grace < 0 || grace > MaxGrace {
		return Key{}, "", &plans.ValidationError{Fields: []plans.FieldError{
			{Field: "grace_seconds", Message: fmt.Sprintf("must be from 0 to %d (24 hours)", int(MaxGrace/time.Second))}}}
	}
	secret, err := Generate()
	if err != nil {
		return Key{}, "", err
	}
	hash := Hash(secret)
	var rotated Key
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := lockKey(ctx, tx, id, time.Now())
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, retireSecrets, id, grace); err != nil {
			return fmt.Errorf("retire secrets: %w", err)
		}
		if _, err := tx.Exec(ctx, deleteOldSecrets, id); err != nil {
			return fmt.Errorf("delete old secrets: %w", err)
		}
		if _, err := tx.Exec(ctx, insertSecret, id, hash[:], PrefixOf(secret)); err != nil {
			return fmt.Errorf("insert secret: %w", err)
		}
		if _, err := tx.Exec(ctx, bumpKey, id); err != nil {
			return fmt.Errorf("bump key version: %w", err)
		}
		rotated, err = getKey(ctx, tx, "WHERE k.id = $1", id)
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, actor, "key.rotate", audit.ObjectKey, strconv.FormatInt(id, 10), before,
			struct {
				Key
				GraceSeconds int64 `json:"grace_seconds"`
			}{rotated, int64(grace / time.Second)})
	})
	if err != nil {
		return Key{}, "", fmt.Errorf("rotate key %d: %w", id, err)
	}
	return rotated, secret, nil
}

const revokeKey = `UPDATE api_keys SET revoked_at = now(), version = version + 1 WHERE id = $1`

// Revoke ends the key at once, every secret of it included. Revoking a
// revoked key returns ErrRevoked; an expired key can still be revoked.
// Errors: ErrNotFound, ErrRevoked.
func (s *Service) Revoke(ctx context.Context, actor string, id int64) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := getKey(ctx, tx, "WHERE k.id = $1 FOR UPDATE OF k", id)
		if err != nil {
			return err
		}
		if before.RevokedAt != nil {
			return ErrRevoked
		}
		if _, err := tx.Exec(ctx, revokeKey, id); err != nil {
			return fmt.Errorf("revoke: %w", err)
		}
		after, err := getKey(ctx, tx, "WHERE k.id = $1", id)
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, actor, "key.revoke", audit.ObjectKey, strconv.FormatInt(id, 10), before, after)
	})
	if err != nil {
		return fmt.Errorf("revoke key %d: %w", id, err)
	}
	return nil
}

const setOverrides = `UPDATE api_keys SET overrides = $2, version = version + 1 WHERE id = $1`

// SetOverrides replaces the key's limit overrides, provided version is
// current. Field errors are named "overrides[i].<field>".
// Errors: *plans.ValidationError, ErrNotFound, ErrConflict, ErrRevoked.
func (s *Service) SetOverrides(ctx context.Context, actor string, id int64, version int, o []plans.LimitInput) (Key, error) {
	o = normalizedOverrides(o)
	errs, err := s.validateOverrides(ctx, o)
	if err != nil {
		return Key{}, fmt.Errorf("set overrides of key %d: %w", id, err)
	}
	if len(errs) > 0 {
		return Key{}, &plans.ValidationError{Fields: errs}
	}
	return s.change(ctx, actor, id, "key.overrides", func(tx pgx.Tx, k Key) error {
		if k.Version != version {
			return fmt.Errorf("key %d is at version %d, not %d: %w", id, k.Version, version, ErrConflict)
		}
		_, err := tx.Exec(ctx, setOverrides, id, o)
		return err
	})
}

const setPlan = `UPDATE api_keys SET plan_id = $2, version = version + 1 WHERE id = $1`

// SetPlan assigns the key its own plan; nil returns it to its owner's plan.
// Errors: *plans.ValidationError (no such plan), ErrNotFound, ErrRevoked.
func (s *Service) SetPlan(ctx context.Context, actor string, id int64, planID *int64) (Key, error) {
	return s.change(ctx, actor, id, "key.plan", func(tx pgx.Tx, k Key) error {
		_, err := tx.Exec(ctx, setPlan, id, planID)
		return mapWriteError(err)
	})
}

const setExpiry = `UPDATE api_keys SET expires_at = $2, version = version + 1 WHERE id = $1`

// SetExpiry sets, moves or (nil) removes when the key stops working; an
// expired key can be given a later expiry, which makes it work again. The
// change reaches every instance's snapshot through the key table's NOTIFY.
// Errors: *plans.ValidationError (expiry not in the future, or more than
// MaxExpiryYears ahead), ErrNotFound, ErrRevoked.
func (s *Service) SetExpiry(ctx context.Context, actor string, id int64, expiresAt *time.Time) (Key, error) {
	if msg := expiryProblem(expiresAt, time.Now()); msg != "" {
		return Key{}, &plans.ValidationError{Fields: []plans.FieldError{{Field: "expires_at", Message: msg}}}
	}
	return s.change(ctx, actor, id, "key.expiry", func(tx pgx.Tx, _ Key) error {
		_, err := tx.Exec(ctx, setExpiry, id, expiresAt)
		return err
	})
}

// change runs one edit of a revocable key and audits it.
func (s *Service) change(ctx context.Context, actor string, id int64, action string, edit func(pgx.Tx, Key) error) (Key, error) {
	var after Key
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := getKey(ctx, tx, "WHERE k.id = $1 FOR UPDATE OF k", id)
		if err != nil {
			return err
		}
		if before.RevokedAt != nil {
			return ErrRevoked
		}
		if err := edit(tx, before); err != nil {
			return err
		}
		after, err = getKey(ctx, tx, "WHERE k.id = $1", id)
		if err != nil {
			return err
		}
		return audit.Record(ctx, tx, actor, action, audit.ObjectKey, strconv.FormatInt(id, 10), before, after)
	})
	if err != nil {
		var ve *plans.ValidationError
		if errors.As(err, &ve) {
			return Key{}, ve
		}
		return Key{}, fmt.Errorf("%s %d: %w", action, id, err)
	}
	return after, nil
}

// Page-size bounds for List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// MaxTotal bounds how far List counts. Counting every match of a broad
// filter reads every matching key, which at 100,000 keys costs far more than
// the page itself. When more than max(MaxTotal, Offset+Limit) keys match,
// List reports one more than that bound instead of the exact number: show a
// total above MaxTotal as "more than MaxTotal"; it still says whether a next
// page follows (Offset+len(page) < total).
const MaxTotal = 10_000

// List returns one page of the keys matching f, newest first, and the total
// number matching (exact up to MaxTotal, see there). A Query that is a
// whole, well-formed secret also finds the key by its hash, so an operator
// can paste a leaked key to find it.
// Errors: *plans.ValidationError (unknown state).
//
// A key matches Query through its name, its owner's email or one of its
// secrets; an OR across those tables defeats every index, so each is its own
// branch, cut to the newest Offset+Limit keys before the branches are merged.
// The page's ids come first and only those keys are then read in full (owner,
// plan, current prefix). The queries run in pgx's exec mode, an unnamed
// statement Postgres plans with the actual values: a cached generic plan
// could use neither the prefix index for LIKE nor real selectivities.
func (s *Service) List(ctx context.Context, f Filter) ([]Key, int, error) {
	switch f.State {
	case "", StateActive, StateExpired, StateRevoked:
	default:
		return nil, 0, &plans.ValidationError{Fields: []plans.FieldError{
			{Field: "state", Message: "must be active, expired or revoked"}}}
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultPageSize
	}
	limit = min(limit, MaxPageSize)
	// Far past any real list; keeps Offset+Limit+1 from overflowing.
	offset := min(max(f.Offset, 0), math.MaxInt32)
	var base listQuery
	branches := base.branches(f.UserID, f.State, strings.TrimSpace(f.Query))

	// Each query adds its own arguments after the branches' shared ones.
	pq := listQuery{args: slices.Clone(base.args)}
	lim, off := pq.arg(limit), pq.arg(offset)
	var pageSQL string
	if len(branches) == 1 {
		pageSQL = branches[0] + " ORDER BY id DESC LIMIT " + lim + " OFFSET " + off
	} else {
		// The page's keys are among the newest Offset+Limit of each branch.
		n := pq.arg(offset + limit)
		parts := make([]string, len(branches))
		for i, b := range branches {
			parts[i] = "(" + b + " ORDER BY id DESC LIMIT " + n + ")"
		}
		pageSQL = "SELECT id FROM (" + strings.Join(parts, " UNION ") + ") m ORDER BY id DESC LIMIT " + lim + " OFFSET " + off
	}
	rows, err := s.pool.Query(ctx, selectKeys+" JOIN ("+pageSQL+") page ON page.id = k.id ORDER BY k.id DESC",
		append([]any{pgx.QueryExecModeExec}, pq.args...)...)
	if err != nil {
		return nil, 0, fmt.Errorf("list keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[Key])
	if err != nil {
		return nil, 0, fmt.Errorf("list keys: %w", err)
	}

	cq := listQuery{args: slices.Clone(base.args)}
	countSQL := countKeys(branches, cq.arg(max(MaxTotal, offset+limit)+1))
	var total int
	if err := s.pool.QueryRow(ctx, countSQL, append([]any{pgx.QueryExecModeExec}, cq.args...)...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count keys: %w", err)
	}
	return keys, total, nil
}

// listQuery builds List's SQL and collects its arguments.
type listQuery struct {
	args []any
}

// arg adds v to the arguments and returns its placeholder.
func (q *listQuery) arg(v any) string {
	q.args = append(q.args, v)
	return "$" + strconv.Itoa(len(q.args))
}

// branches returns SELECTs of matching key ids (column id) whose union is
// the set of keys List matches: one without a query, else one per way a key
// can match it.
func (q *listQuery) branches(userID int64, state, query string) []string {
	var conds []string
	if userID != 0 {
		conds = append(conds, "k.user_id = "+q.arg(userID))
	}
	switch state {
	case StateRevoked:
		conds = append(conds, "k.revoked_at IS NOT NULL")
	case StateExpired:
		conds = append(conds, "k.revoked_at IS NULL AND k.expires_at <= now()")
	case StateActive:
		conds = append(conds, "k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())")
	}
	where := func(c ...string) string {
		c = append(c, conds...)
		if len(c) == 0 {
			return ""
		}
		return " WHERE " + strings.Join(c, " AND ")
	}
	if query == "" {
		return []string{"SELECT k.id FROM api_keys k" + where()}
	}
	// Secrets are searched on their own table; api_keys is joined only to
	// filter, since reading it costs as much again when a prefix is common.
	secrets := "FROM api_key_secrets s"
	if len(conds) > 0 {
		secrets += " JOIN api_keys k ON k.id = s.key_id"
	}
	pattern := q.arg("%" + escapeLike(query) + "%")
	// A query longer than a stored prefix (a whole secret, say) is matched
	// by its start, cut at a character boundary so that it stays valid UTF-8.
	prefix := query
	for len(prefix) > PrefixLen {
		_, size := utf8.DecodeLastRuneInString(prefix)
		prefix = prefix[:len(prefix)-size]
	}
	out := []string{
		"SELECT k.id FROM api_keys k" + where("k.name ILIKE "+pattern+` ESCAPE '\'`),
		"SELECT k.id FROM api_keys k JOIN users u ON u.id = k.user_id" + where("u.email ILIKE "+pattern+` ESCAPE '\'`),
		// a key has several secrets while an old one's grace runs
		"SELECT DISTINCT s.key_id AS id " + secrets + where("s.prefix LIKE "+q.arg(escapeLike(prefix)+"%")+` ESCAPE '\'`),
	}
	if Check(query) == nil {
		h := Hash(query)
		out = append(out, "SELECT s.key_id AS id "+secrets+where("s.hash = "+q.arg(h[:])))
	}
	return out
}

// countKeys returns SQL counting the union of branches up to the bound
// placeholder. It counts each branch up to bound first, since one branch
// reaching it settles the answer without deduplicating every match, and only
// otherwise counts their union.
func countKeys(branches []string, bound string) string {
	capped := func(b string) string { return "(SELECT count(*) FROM (" + b + " LIMIT " + bound + ") c)" }
	if len(branches) == 1 {
		return "SELECT " + capped(branches[0])
	}
	counts := make([]string, len(branches))
	for i, b := range branches {
		counts[i] = capped(b)
	}
	return "SELECT CASE WHEN greatest(" + strings.Join(counts, ", ") + ") >= " + bound + " THEN " + bound +
		" ELSE (SELECT count(*) FROM (" + strings.Join(branches, " UNION ") + ") u) END"
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

func normalizedOverrides(o []plans.LimitInput) []plans.LimitInput {
	out := make([]plans.LimitInput, len(o))
	for i, l := range o {
		if l.Cost == 0 {
			l.Cost = 1
		}
		if l.Mode == "" {
			l.Mode = "reject"
		}
		l.Name = strings.TrimSpace(l.Name)
		l.Route = strings.TrimSpace(l.Route)
		out[i] = l
	}
	return out
}

// validateOverrides checks overrides; their routes may be the ones given to
// NewService or any route a service declares (read only when an override
// names another).
func (s *Service) validateOverrides(ctx context.Context, o []plans.LimitInput) ([]plans.FieldError, error) {
	var errs []plans.FieldError
	if len(o) > MaxOverrides {
		errs = append(errs, plans.FieldError{Field: "overrides", Message: fmt.Sprintf("at most %d overrides", MaxOverrides)})
	}
	routes := s.routes
	for _, l := range o {
		if l.Route != "" && !slices.Contains(routes, l.Route) {
			var err error
			if routes, err = plans.DeclaredRoutes(ctx, s.pool, s.routes); err != nil {
				return nil, err
			}
			break
		}
	}
	return append(errs, plans.ValidateLimits("overrides", o, routes)...), nil
}

// mapWriteError turns foreign-key violations into field errors: the caller
// named a user or plan that does not exist.
func mapWriteError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
		return err
	}
	switch pgErr.ConstraintName {
	case "api_keys_user_id_fkey":
		return &plans.ValidationError{Fields: []plans.FieldError{{Field: "user_id", Message: "no such user"}}}
	case "api_keys_plan_id_fkey":
		return &plans.ValidationError{Fields: []plans.FieldError{{Field: "plan_id", Message: "no such plan"}}}
	}
	return err
}
