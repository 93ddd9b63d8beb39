package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/internal/orgs"
	"github.com/sluicehq/sluice/internal/users"
)

// A developer works in one organisation at a time, the one their session
// names (keyOrgID), else their personal one. Every page under /app then
// serves the organisation's account: its keys, plan, usage and alerts, so
// the developer portal's handlers, which read currentUser, need no change;
// the person themselves stays in the audit log (actor) and in the page's
// header (page).
const keyOrgID = "org"

// orgStateKey holds the orgState of a request under /app.
const orgStateKey ctxKey = viewerKey + 1

// orgState is the organisation a request acts in, and who acts.
type orgState struct {
	person     users.User
	membership orgs.Membership
}

// inOrg runs h in the signed-in developer's current organisation: the
// viewer becomes the organisation's account, and a request that changes
// something needs a role that may write (403 for read-only members),
// unless readOnlyOK.
func (s *Server) inOrg(h http.Handler, readOnlyOK bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		person, _ := s.currentUser(r)
		if s.orgs == nil {
			h.ServeHTTP(w, r)
			return
		}
		m, err := s.currentOrg(r, person)
		if err != nil {
			s.error(w, r, err)
			return
		}
		if !readOnlyOK && r.Method != http.MethodGet && r.Method != http.MethodHead && !m.CanWrite() {
			s.error(w, r, fmt.Errorf("%s %s as %s: %w", r.Method, r.URL.Path, m.Role, orgs.ErrForbidden))
			return
		}
		account := person
		if m.AccountUserID != person.ID {
			if account, err = s.deps.Users.ByID(r.Context(), m.AccountUserID); err != nil {
				s.error(w, r, err)
				return
			}
		}
		ctx := context.WithValue(r.Context(), viewerKey, viewerState{user: account, ok: true})
		ctx = context.WithValue(ctx, orgStateKey, orgState{person: person, membership: m})
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// currentOrg is the membership the person's session names, or their first
// (personal) one when it names none or one they have left.
func (s *Server) currentOrg(r *http.Request, person users.User) (orgs.Membership, error) {
	if sess, err := s.session(r); err == nil {
		if id, ok := sess.Values[keyOrgID].(int64); ok {
			m, err := s.orgs.Membership(r.Context(), id, person.ID)
			if err == nil {
				return m, nil
			}
			if !errors.Is(err, orgs.ErrNotMember) {
				return orgs.Membership{}, err
			}
		}
	}
	ms, err := s.orgs.Memberships(r.Context(), person.ID)
	if err != nil {
		return orgs.Membership{}, err
	}
	if len(ms) == 0 {
		// A developer with no organisation (the schema gives every one a
		// personal organisation, so only a hand-edited database): their own
		// account, as before organisations.
		return orgs.Membership{Org: orgs.Org{AccountUserID: person.ID, Name: person.Email}, Role: orgs.RoleOwner}, nil
	}
	return ms[0], nil
}

// setCurrentOrg makes orgID the organisation the session works in.
func (s *Server) setCurrentOrg(w http.ResponseWriter, r *http.Request, orgID int64) error {
	sess, err := s.session(r)
	if err != nil {
		return err
	}
	sess.Values[keyOrgID] = orgID
	if err := sess.Save(r, w); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	return nil
}

// person is the signed-in person: under /app, who acts in the
// organisation, not its account.
func (s *Server) person(r *http.Request) (users.User, bool) {
	if st, ok := r.Context().Value(orgStateKey).(orgState); ok {
		return st.person, true
	}
	return s.currentUser(r)
}

// membership is the organisation a request under /app acts in.
func (s *Server) membership(r *http.Request) (orgs.Membership, bool) {
	st, ok := r.Context().Value(orgStateKey).(orgState)
	return st.membership, ok
}

// stillMember reports whether the person a long-lived response (the usage
// stream) serves still belongs to the organisation it shows: asked before
// every push, so that a member who leaves or is removed stops seeing the
// organisation at once, not at their next page. A personal organisation
// cannot be left, so it costs no query.
func (s *Server) stillMember(ctx context.Context, r *http.Request) bool {
	st, ok := r.Context().Value(orgStateKey).(orgState)
	if !ok || s.orgs == nil || st.membership.AccountUserID == st.person.ID {
		return true
	}
	_, err := s.orgs.Membership(ctx, st.membership.ID, st.person.ID)
	return err == nil
}
