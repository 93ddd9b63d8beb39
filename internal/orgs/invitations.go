package orgs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/users"
)

// InvitationTTL is how long an invitation link works.
const InvitationTTL = 7 * 24 * time.Hour

// Invitation is an invitation not yet accepted.
type Invitation struct {
	ID        int64     `json:"id"`
	OrgID     int64     `json:"org_id"`
	OrgName   string    `json:"org_name"`
	Email     string    `json:"email"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

func hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

const (
	insertInvitation = `
INSERT INTO org_invitations (org_id, email, role, token_hash, invited_by, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`
	// An address invited again gets the newer link only.
	endOlderInvitations = `DELETE FROM org_invitations WHERE org_id = $1 AND lower(email) = lower($2) AND accepted_at IS NULL`
	selectIsMember      = `SELECT EXISTS (SELECT 1 FROM org_members m JOIN users u ON u.id = m.user_id WHERE m.org_id = $1 AND lower(u.email) = lower($2))`
	invitationColumns   = `i.id, i.org_id, o.name, i.email, i.role, i.created_at, i.expires_at`
	selectPending       = `SELECT ` + invitationColumns + ` FROM org_invitations i JOIN organisations o ON o.id = i.org_id
WHERE i.org_id = $1 AND i.accepted_at IS NULL AND i.expires_at > $2 ORDER BY i.created_at, i.id`
	selectByToken = `SELECT ` + invitationColumns + ` FROM org_invitations i JOIN organisations o ON o.id = i.org_id
WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.expires_at > $2`
	// claimInvitation marks the link used in the statement that checks it,
	// so that it is accepted once.
	claimInvitation = `UPDATE org_invitations SET accepted_at = $2, accepted_by = $3
WHERE token_hash = $1 AND accepted_at IS NULL AND expires_at > $2
RETURNING id, org_id, email, role`
	insertMember = `INSERT INTO org_members (org_id, user_id, role) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	deleteInvite = `DELETE FROM org_invitations WHERE org_id = $1 AND id = $2 AND accepted_at IS NULL`
)

func scanInvitation(row pgx.Row) (Invitation, error) {
	var i Invitation
	err := row.Scan(&i.ID, &i.OrgID, &i.OrgName, &i.Email, &i.Role, &i.CreatedAt, &i.ExpiresAt)
	return i, err
}

// Invite makes an invitation to orgID for email with role, by byUserID,
// and returns its one-time token (returned only here; only its hash is
// kept) and the invitation. The address's older invitations to orgID end.
// The caller checks that byUserID may invite (Membership.CanManageMembers)
// and validates email; a member's address is ErrAlreadyMember.
func (r *Repo) Invite(ctx context.Context, orgID, byUserID int64, email, role string) (string, Invitation, error) {
	email = strings.TrimSpace(email)
	if !ValidRole(role) {
		return "", Invitation{}, fmt.Errorf("role %q: %w", role, ErrForbidden)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", Invitation{}, fmt.Errorf("invitation token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	now := r.now()
	inv := Invitation{OrgID: orgID, Email: email, Role: role, CreatedAt: now, ExpiresAt: now.Add(InvitationTTL)}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var member bool
		if err := tx.QueryRow(ctx, selectIsMember, orgID, email).Scan(&member); err != nil {
			return err
		}
		if member {
			return ErrAlreadyMember
		}
		if err := tx.QueryRow(ctx, selectOrg, orgID).Scan(new(int64), &inv.OrgName, new(int64), new(time.Time)); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		if _, err := tx.Exec(ctx, endOlderInvitations, orgID, email); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, insertInvitation, orgID, email, role, hash(token), byUserID, now, inv.ExpiresAt).Scan(&inv.ID); err != nil {
			return err
		}
		return audit.Record(ctx, tx, fmt.Sprintf("user:%d", byUserID), "organisation.invite", audit.ObjectOrg,
			strconv.FormatInt(orgID, 10), nil, map[string]any{"invitation_id": inv.ID, "email": email, "role": role, "expires_at": inv.ExpiresAt})
	})
	if err != nil {
		return "", Invitation{}, fmt.Errorf("invite to organisation %d: %w", orgID, err)
	}
	return token, inv, nil
}

// Pending are orgID's invitations not yet accepted nor expired.
func (r *Repo) Pending(ctx context.Context, orgID int64) ([]Invitation, error) {
	rows, err := r.pool.Query(ctx, selectPending, orgID, r.now())
	if err != nil {
		return nil, fmt.Errorf("invitations of organisation %d: %w", orgID, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Invitation, error) { return scanInvitation(row) })
	if err != nil {
		return nil, fmt.Errorf("invitations of organisation %d: %w", orgID, err)
	}
	return list, nil
}

// Revoke ends invitation id of orgID before it is accepted, by actor.
func (r *Repo) Revoke(ctx context.Context, actor string, orgID, id int64) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, deleteInvite, orgID, id)
		if err != nil {
			return fmt.Errorf("revoke invitation %d: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("revoke invitation %d: %w", id, ErrInvitationInvalid)
		}
		return audit.Record(ctx, tx, actor, "organisation.revoke_invitation", audit.ObjectOrg,
			strconv.FormatInt(orgID, 10), map[string]any{"invitation_id": id}, nil)
	})
}

// ByToken returns the usable invitation token opens, or
// ErrInvitationInvalid.
func (r *Repo) ByToken(ctx context.Context, token string) (Invitation, error) {
	inv, err := scanInvitation(r.pool.QueryRow(ctx, selectByToken, hash(token), r.now()))
	if errors.Is(err, pgx.ErrNoRows) {
		return Invitation{}, ErrInvitationInvalid
	}
	if err != nil {
		return Invitation{}, fmt.Errorf("invitation: %w", err)
	}
	return inv, nil
}

// Accept makes u a member of the organisation token invites to, with the
// invitation's role, and returns the membership. The link works once
// (ErrInvitationInvalid after), only for a developer account
// (ErrNotDeveloper) whose email is the invited one, compared
// case-insensitively (ErrWrongInvitee): a forwarded link lets no one else
// in. A member already keeps their role and the link is used up.
func (r *Repo) Accept(ctx context.Context, token string, u users.User) (Membership, error) {
	if u.Role != users.RoleDeveloper {
		return Membership{}, ErrNotDeveloper
	}
	var m Membership
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var id, orgID int64
		var email, role string
		err := tx.QueryRow(ctx, claimInvitation, hash(token), r.now(), u.ID).Scan(&id, &orgID, &email, &role)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrInvitationInvalid
		}
		if err != nil {
			return err
		}
		if !strings.EqualFold(strings.TrimSpace(email), strings.TrimSpace(u.Email)) {
			return ErrWrongInvitee // rolls the claim back: the invitee can still accept
		}
		if _, err := tx.Exec(ctx, insertMember, orgID, u.ID, role); err != nil {
			return err
		}
		if m, err = scanMembership(tx.QueryRow(ctx, selectMembership, orgID, u.ID)); err != nil {
			return err
		}
		return audit.Record(ctx, tx, fmt.Sprintf("user:%d", u.ID), "organisation.join", audit.ObjectOrg,
			strconv.FormatInt(orgID, 10), nil, map[string]any{"invitation_id": id, "user_id": u.ID, "role": m.Role})
	})
	if err != nil {
		return Membership{}, fmt.Errorf("accept invitation: %w", err)
	}
	return m, nil
}
