// Package pgsession keeps browser sessions in Postgres behind gorilla's
// sessions.Store interface, so that ending a session ends it everywhere at
// once: a copied cookie stops working the moment its row is deleted (at
// sign-out, "sign out everywhere", a password change), not when the cookie
// would have expired.
//
// The cookie carries only a random 256-bit identifier. The table stores a
// keyed hash of it (HMAC-SHA-256 with the session secret), so a copy of the
// table cannot be turned back into cookies, and changing the secret ends
// every session.
package pgsession

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/gob"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/sessions"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is the part of pgx the store needs.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Options configure a Store.
type Options struct {
	// Cookie is the default for new sessions' cookies; MaxAge (seconds) is
	// also how long the server keeps a session.
	Cookie sessions.Options
	// UserKey is the session value that holds the signed-in user's id (an
	// int64); the store records it so EndUser can find a user's sessions.
	UserKey any
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Store is a sessions.Store on Postgres (the sessions table of migration
// 000003).
type Store struct {
	db   DBTX
	key  []byte
	opts Options
}

// New returns a store on db whose identifiers are hashed with secret (at
// least 32 bytes).
func New(db DBTX, secret []byte, opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sluice session id"))
	return &Store{db: db, key: m.Sum(nil), opts: opts}
}

var _ sessions.Store = (*Store)(nil)

// Get returns the request's session named name, loading it once per
// request (gorilla's registry caches it).
func (s *Store) Get(r *http.Request, name string) (*sessions.Session, error) {
	return sessions.GetRegistry(r).Get(s, name)
}

const selectSession = `SELECT data FROM sessions WHERE id_hash = $1 AND expires_at > $2`

// New returns the session the request's cookie names, or a new empty one
// (IsNew) when there is no cookie, or its session has ended or expired. An
// error means the store could not be read.
func (s *Store) New(r *http.Request, name string) (*sessions.Session, error) {
	sess := sessions.NewSession(s, name)
	opts := s.opts.Cookie
	sess.Options = &opts
	sess.IsNew = true
	c, err := r.Cookie(name)
	if err != nil || !validID(c.Value) {
		return sess, nil
	}
	var data []byte
	err = s.db.QueryRow(r.Context(), selectSession, s.hash(c.Value), s.opts.Now()).Scan(&data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return sess, nil
	case err != nil:
		return sess, fmt.Errorf("load session: %w", err)
	}
	values := map[any]any{}
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&values); err != nil {
		// A row written by an incompatible version: start over.
		return sess, nil
	}
	sess.ID, sess.Values, sess.IsNew = c.Value, values, false
	return sess, nil
}

const (
	upsertSession = `
INSERT INTO sessions (id_hash, user_id, data, expires_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (id_hash) DO UPDATE SET user_id = $2, data = $3, expires_at = $4`
	deleteSession = `DELETE FROM sessions WHERE id_hash = $1`
	// pruneSessions drops expired rows; run when a session starts, it
	// keeps the table at about the number of live sessions.
	pruneSessions = `DELETE FROM sessions WHERE expires_at <= $1`
)

// Save writes the session and sets its cookie. A negative MaxAge ends the
// session: its row is deleted and the cookie expired.
func (s *Store) Save(r *http.Request, w http.ResponseWriter, sess *sessions.Session) error {
	ctx := r.Context()
	opts := sess.Options
	if opts == nil {
		o := s.opts.Cookie
		opts = &o
	}
	if opts.MaxAge < 0 {
		if sess.ID != "" {
			if _, err := s.db.Exec(ctx, deleteSession, s.hash(sess.ID)); err != nil {
				return fmt.Errorf("end session: %w", err)
			}
		}
		http.SetCookie(w, sessions.NewCookie(sess.Name(), "", opts))
		return nil
	}
	now := s.opts.Now()
	if sess.ID == "" {
		id, err := newID()
		if err != nil {
			return err
		}
		sess.ID = id
		if _, err := s.db.Exec(ctx, pruneSessions, now); err != nil {
			return fmt.Errorf("prune sessions: %w", err)
		}
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(sess.Values); err != nil {
		return fmt.Errorf("encode session: %w", err)
	}
	var userID *int64
	if id, ok := sess.Values[s.opts.UserKey].(int64); ok {
		userID = &id
	}
	maxAge := time.Duration(opts.MaxAge) * time.Second
	if maxAge == 0 {
		// A browser-session cookie still ends on the server in a day.
		maxAge = 24 * time.Hour
	}
	if _, err := s.db.Exec(ctx, upsertSession, s.hash(sess.ID), userID, buf.Bytes(), now.Add(maxAge)); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	http.SetCookie(w, sessions.NewCookie(sess.Name(), sess.ID, opts))
	return nil
}

// Renew ends sess's current identifier and leaves it without one, so the
// next Save stores its values under a fresh identifier: do it whenever the
// session's privileges change (sign-in, a role change), so an identifier
// known before cannot ride along.
func (s *Store) Renew(ctx context.Context, sess *sessions.Session) error {
	if sess.ID != "" {
		if _, err := s.db.Exec(ctx, deleteSession, s.hash(sess.ID)); err != nil {
			return fmt.Errorf("renew session: %w", err)
		}
	}
	sess.ID, sess.IsNew = "", true
	return nil
}

const deleteUserSessions = `DELETE FROM sessions WHERE user_id = $1 AND id_hash <> $2`

// EndUser ends every session of the user except the one identified by
// keep ("" ends them all), and returns how many it ended.
func (s *Store) EndUser(ctx context.Context, userID int64, keep string) (int64, error) {
	keepHash := make([]byte, sha256.Size) // matches no row
	if keep != "" {
		keepHash = s.hash(keep)
	}
	tag, err := s.db.Exec(ctx, deleteUserSessions, userID, keepHash)
	if err != nil {
		return 0, fmt.Errorf("end sessions of user %d: %w", userID, err)
	}
	return tag.RowsAffected(), nil
}

func (s *Store) hash(id string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id))
	return m.Sum(nil)
}

const idBytes = 32

func newID() (string, error) {
	b := make([]byte, idBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("session id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// validID reports whether v could be an identifier this store issued, so a
// garbage cookie costs no query.
func validID(v string) bool {
	b, err := base64.RawURLEncoding.DecodeString(v)
	return err == nil && len(b) == idBytes
}
