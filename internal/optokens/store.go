package optokens

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/pgtext"
)

// lastUsedEvery bounds writes to last_used_at: at most one per token per
// interval, however often the token is used.
const lastUsedEvery = time.Minute

// FieldError is one invalid field of a request, named as in the admin API's
// JSON ("name", "user_id").
type FieldError struct {
	Field   string
	Message string
}

// ValidationError lists every invalid field of a NewToken at once.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid operator token: " + strings.Join(parts, "; ")
}

// NewToken is what Create needs.
type NewToken struct {
	// UserID is the operator the token acts for; it must have the operator
	// role.
	UserID int64
	// Name says what the token is for ("ci deploy"), 1 to 100 characters.
	Name string
}

// Store keeps operator tokens in Postgres and authenticates presented
// secrets, including the bootstrap token.
type Store struct {
	pool *pgxpool.Pool
	// bootstrap is the hash of PORTAL_ADMIN_TOKEN; keeping only the hash
	// lets Authenticate compare fixed-length values in constant time.
	bootstrap    [32]byte
	hasBootstrap bool
}

// NewStore returns a Store over pool. bootstrapToken is PORTAL_ADMIN_TOKEN;
// empty disables the bootstrap token.
func NewStore(pool *pgxpool.Pool, bootstrapToken string) *Store {
	s := &Store{pool: pool}
	if bootstrapToken != "" {
		s.bootstrap = Hash(bootstrapToken)
		s.hasBootstrap = true
	}
	return s
}

const selectTokenColumns = `
SELECT t.id, t.user_id, u.email AS owner_email, t.name, t.prefix, t.revoked_at, t.last_used_at, t.created_at
FROM operator_tokens t JOIN users u ON u.id = t.user_id`

const authenticateQuery = `
SELECT t.id, t.user_id, t.last_used_at
FROM operator_tokens t JOIN users u ON u.id = t.user_id
WHERE t.hash = $1 AND t.revoked_at IS NULL AND u.role = 'operator'`

const touchQuery = `
UPDATE operator_tokens SET last_used_at = now()
WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => $2))`

// Authenticate returns the principal a presented secret stands for, or an
// error wrapping ErrInvalidToken. Tokens of users who lost the operator role
// stop working at once.
func (s *Store) Authenticate(ctx context.Context, secret string) (Principal, error) {
	h := Hash(secret)
	if s.hasBootstrap && subtle.ConstantTimeCompare(h[:], s.bootstrap[:]) == 1 {
		return Principal{Bootstrap: true}, nil
	}
	if !WellFormed(secret) {
		return Principal{}, ErrInvalidToken
	}
	var (
		p        Principal
		lastUsed *time.Time
	)
	err := s.pool.QueryRow(ctx, authenticateQuery, h[:]).Scan(&p.TokenID, &p.UserID, &lastUsed)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrInvalidToken
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate operator token: %w", err)
	}
	// Only write when the stored time is stale, so a busy script costs one
	// write a minute rather than one per call.
	if lastUsed == nil || time.Since(*lastUsed) >= lastUsedEvery {
		if _, err := s.pool.Exec(ctx, touchQuery, p.TokenID, lastUsedEvery.Seconds()); err != nil {
			return Principal{}, fmt.Errorf("record operator token use: %w", err)
		}
	}
	return p, nil
}

const operatorExistsQuery = `SELECT EXISTS (SELECT 1 FROM users WHERE id = $1 AND role = 'operator')`

const insertTokenQuery = `
INSERT INTO operator_tokens (user_id, name, hash, prefix) VALUES ($1, $2, $3, $4) RETURNING id`

// Create stores a new token for in.UserID and returns it with its secret.
// The secret is returned only here; it cannot be read back. Invalid input
// gives a *ValidationError naming every bad field.
func (s *Store) Create(ctx context.Context, actor string, in NewToken) (Token, string, error) {
	var fields []FieldError
	name := strings.TrimSpace(in.Name)
	if msg := pgtext.NameProblem(name); msg != "" {
		fields = append(fields, FieldError{Field: "name", Message: msg})
	} else if n := utf8.RuneCountInString(name); n < 1 || n > 100 {
		fields = append(fields, FieldError{Field: "name", Message: "must be 1 to 100 characters"})
	}
	if in.UserID <= 0 {
		fields = append(fields, FieldError{Field: "user_id", Message: "is required"})
	} else {
		var ok bool
		if err := s.pool.QueryRow(ctx, operatorExistsQuery, in.UserID).Scan(&ok); err != nil {
			return Token{}, "", fmt.Errorf("check token owner: %w", err)
		}
		if !ok {
			fields = append(fields, FieldError{Field: "user_id", Message: "must be an existing operator"})
		}
	}
	if len(fields) > 0 {
		return Token{}, "", &ValidationError{Fields: fields}
	}
	secret, err := Generate()
	if err != nil {
		return Token{}, "", err
	}
	h := Hash(secret)

	var tok Token
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, insertTokenQuery, in.UserID, name, h[:], PrefixOf(secret)).Scan(&id); err != nil {
			return fmt.Errorf("insert operator token: %w", err)
		}
		var err error
		if tok, err = getToken(ctx, tx, id); err != nil {
			return err
		}
		return audit.Record(ctx, tx, actor, "token.create", "token", strconv.FormatInt(id, 10), nil, tok)
	})
	if err != nil {
		return Token{}, "", err
	}
	return tok, secret, nil
}

const firstOperatorQuery = `SELECT id FROM users WHERE role = 'operator' ORDER BY id LIMIT 1`

// FirstOperator returns the id of the earliest operator account, the owner
// given to tokens created with the bootstrap token when no owner is named.
// It returns ErrNotFound when there is no operator.
func (s *Store) FirstOperator(ctx context.Context) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, firstOperatorQuery).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("find first operator: %w", err)
	}
	return id, nil
}

// querier is the part of pgx shared by a pool and a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func getToken(ctx context.Context, q querier, id int64) (Token, error) {
	rows, err := q.Query(ctx, selectTokenColumns+` WHERE t.id = $1`, id)
	if err != nil {
		return Token{}, fmt.Errorf("get operator token %d: %w", id, err)
	}
	tok, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Token])
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, ErrNotFound
	}
	if err != nil {
		return Token{}, fmt.Errorf("get operator token %d: %w", id, err)
	}
	return tok, nil
}

// Get returns one token, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (Token, error) {
	return getToken(ctx, s.pool, id)
}

// List returns every token, revoked ones included, newest first.
func (s *Store) List(ctx context.Context) ([]Token, error) {
	rows, err := s.pool.Query(ctx, selectTokenColumns+` ORDER BY t.id DESC`)
	if err != nil {
		return nil, fmt.Errorf("list operator tokens: %w", err)
	}
	toks, err := pgx.CollectRows(rows, pgx.RowToStructByName[Token])
	if err != nil {
		return nil, fmt.Errorf("list operator tokens: %w", err)
	}
	return toks, nil
}

const revokeTokenQuery = `UPDATE operator_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`

// Revoke makes a token unusable from the next request on and returns it.
// Revoking a revoked token changes nothing and is not an error, so retries
// are safe; an unknown id gives ErrNotFound.
func (s *Store) Revoke(ctx context.Context, actor string, id int64) (Token, error) {
	var tok Token
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := getToken(ctx, tx, id)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, revokeTokenQuery, id)
		if err != nil {
			return fmt.Errorf("revoke operator token %d: %w", id, err)
		}
		if tok, err = getToken(ctx, tx, id); err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		return audit.Record(ctx, tx, actor, "token.revoke", "token", strconv.FormatInt(id, 10), before, tok)
	})
	if err != nil {
		return Token{}, err
	}
	return tok, nil
}
