// Package orgs holds organisations: the teams that consume an API. An
// organisation is a developer account (its keys, plan, quotas, alerts and
// usage, and so its rate-limit subject) shared with members, each with a
// role; owners invite people by email and remove them, and a member who
// leaves or is removed loses access at once while the keys stay.
//
// Every developer account has a personal organisation, of which it is the
// account and its holder the owner (made by the schema, whichever way the
// account was made).
package orgs

import (
	"context"
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

// Roles a member can have.
const (
	// RoleOwner does everything a member does, and invites, removes and
	// changes the roles of members.
	RoleOwner = "owner"
	// RoleMember manages the organisation's keys and alerts and sees its
	// usage.
	RoleMember = "member"
	// RoleReadOnly sees the organisation's keys and usage and changes
	// nothing.
	RoleReadOnly = "read_only"
)

// Roles lists the roles in the order forms offer them.
var Roles = []string{RoleMember, RoleReadOnly, RoleOwner}

// ValidRole reports whether role is one of Roles.
func ValidRole(role string) bool {
	return role == RoleOwner || role == RoleMember || role == RoleReadOnly
}

// Errors returned (possibly wrapped) by Repo.
var (
	ErrNotFound = errors.New("organisation not found")
	// ErrNotMember means the person is not (or no longer) a member of the
	// organisation: to them it does not exist.
	ErrNotMember = errors.New("not a member of the organisation")
	// ErrForbidden means the member's role does not allow the action.
	ErrForbidden = errors.New("the member's role does not allow this")
	// ErrInvitationInvalid means an invitation link is unknown, used or
	// expired.
	ErrInvitationInvalid = errors.New("invitation unknown, used or expired")
	// ErrWrongInvitee means the signed-in account's email is not the one
	// the invitation was sent to.
	ErrWrongInvitee = errors.New("invitation was sent to another email")
	// ErrAlreadyMember means the person is a member already.
	ErrAlreadyMember = errors.New("already a member")
	// ErrAccountHolder means the action would take the account holder out
	// of the organisation, or make them less than an owner: the
	// organisation is their account, its keys theirs.
	ErrAccountHolder = errors.New("the account holder stays the organisation's owner")
	// ErrNotDeveloper means only developer accounts join organisations.
	ErrNotDeveloper = errors.New("only developer accounts join organisations")
)

// Org is an organisation.
type Org struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	// AccountUserID is the developer account whose keys, plan and budget
	// are the organisation's; keys are issued to it.
	AccountUserID int64     `json:"account_user_id"`
	CreatedAt     time.Time `json:"created_at"`
}

// Membership is an organisation seen by one of its members.
type Membership struct {
	Org
	Role string `json:"role"`
}

// CanManageMembers reports whether the member may invite, remove and
// change roles.
func (m Membership) CanManageMembers() bool { return m.Role == RoleOwner }

// CanWrite reports whether the member may change the organisation's keys,
// alerts and plan requests.
func (m Membership) CanWrite() bool { return m.Role == RoleOwner || m.Role == RoleMember }

// Member is one person in an organisation.
type Member struct {
	UserID int64     `json:"user_id"`
	Email  string    `json:"email"`
	Role   string    `json:"role"`
	Since  time.Time `json:"since"`
	// Holder: the member is the organisation's account holder.
	Holder bool `json:"holder"`
}

// Repo reads and writes organisations.
type Repo struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// NewRepo returns a Repo over pool; now (nil for time.Now) dates
// invitations.
func NewRepo(pool *pgxpool.Pool, now func() time.Time) *Repo {
	if now == nil {
		now = time.Now
	}
	return &Repo{pool: pool, now: now}
}

const (
	orgColumns        = `o.id, o.name, o.account_user_id, o.created_at`
	selectMemberships = `SELECT ` + orgColumns + `, m.role FROM org_members m JOIN organisations o ON o.id = m.org_id
WHERE m.user_id = $1 ORDER BY (o.account_user_id = $1) DESC, o.name, o.id`
	selectMembership = `SELECT ` + orgColumns + `, m.role FROM org_members m JOIN organisations o ON o.id = m.org_id
WHERE m.org_id = $1 AND m.user_id = $2`
	selectMembers = `SELECT m.user_id, u.email, m.role, m.created_at, o.account_user_id = m.user_id
FROM org_members m JOIN users u ON u.id = m.user_id JOIN organisations o ON o.id = m.org_id
WHERE m.org_id = $1 ORDER BY m.created_at, m.user_id`
	selectOrg = `SELECT ` + orgColumns + ` FROM organisations o WHERE o.id = $1`
)

func scanMembership(row pgx.Row) (Membership, error) {
	var m Membership
	err := row.Scan(&m.ID, &m.Name, &m.AccountUserID, &m.CreatedAt, &m.Role)
	return m, err
}

// Memberships are the organisations userID belongs to, their personal one
// first.
func (r *Repo) Memberships(ctx context.Context, userID int64) ([]Membership, error) {
	rows, err := r.pool.Query(ctx, selectMemberships, userID)
	if err != nil {
		return nil, fmt.Errorf("memberships of user %d: %w", userID, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Membership, error) { return scanMembership(row) })
	if err != nil {
		return nil, fmt.Errorf("memberships of user %d: %w", userID, err)
	}
	return list, nil
}

// Membership is orgID as userID's membership, or ErrNotMember (also for an
// organisation that does not exist: a non-member learns nothing).
func (r *Repo) Membership(ctx context.Context, orgID, userID int64) (Membership, error) {
	m, err := scanMembership(r.pool.QueryRow(ctx, selectMembership, orgID, userID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Membership{}, fmt.Errorf("organisation %d, user %d: %w", orgID, userID, ErrNotMember)
	}
	if err != nil {
		return Membership{}, fmt.Errorf("organisation %d, user %d: %w", orgID, userID, err)
	}
	return m, nil
}

// ByID returns organisation id, or ErrNotFound.
func (r *Repo) ByID(ctx context.Context, id int64) (Org, error) {
	var o Org
	err := r.pool.QueryRow(ctx, selectOrg, id).Scan(&o.ID, &o.Name, &o.AccountUserID, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Org{}, fmt.Errorf("organisation %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Org{}, fmt.Errorf("organisation %d: %w", id, err)
	}
	return o, nil
}

// Members are orgID's members, oldest first.
func (r *Repo) Members(ctx context.Context, orgID int64) ([]Member, error) {
	rows, err := r.pool.Query(ctx, selectMembers, orgID)
	if err != nil {
		return nil, fmt.Errorf("members of organisation %d: %w", orgID, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Member, error) {
		var m Member
		err := row.Scan(&m.UserID, &m.Email, &m.Role, &m.Since, &m.Holder)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("members of organisation %d: %w", orgID, err)
	}
	return list, nil
}

const (
	lockMember   = `SELECT m.role, o.account_user_id FROM org_members m JOIN organisations o ON o.id = m.org_id WHERE m.org_id = $1 AND m.user_id = $2 FOR UPDATE OF m`
	deleteMember = `DELETE FROM org_members WHERE org_id = $1 AND user_id = $2`
	updateRole   = `UPDATE org_members SET role = $3 WHERE org_id = $1 AND user_id = $2`
)

// Remove takes userID out of orgID, by actor (an owner, or the member
// themselves leaving): their access ends at once, the organisation's keys
// stay. The account holder cannot be removed (ErrAccountHolder).
func (r *Repo) Remove(ctx context.Context, actor string, orgID, userID int64) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var role string
		var holder int64
		err := tx.QueryRow(ctx, lockMember, orgID, userID).Scan(&role, &holder)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("remove user %d from organisation %d: %w", userID, orgID, ErrNotMember)
		}
		if err != nil {
			return fmt.Errorf("remove user %d from organisation %d: %w", userID, orgID, err)
		}
		if holder == userID {
			return fmt.Errorf("remove user %d from organisation %d: %w", userID, orgID, ErrAccountHolder)
		}
		if _, err := tx.Exec(ctx, deleteMember, orgID, userID); err != nil {
			return fmt.Errorf("remove user %d from organisation %d: %w", userID, orgID, err)
		}
		return audit.Record(ctx, tx, actor, "organisation.remove_member", audit.ObjectOrg, strconv.FormatInt(orgID, 10),
			map[string]any{"user_id": userID, "role": role}, nil)
	})
}

// SetRole gives userID the role in orgID, by actor (an owner). The account
// holder stays an owner (ErrAccountHolder).
func (r *Repo) SetRole(ctx context.Context, actor string, orgID, userID int64, role string) error {
	if !ValidRole(role) {
		return fmt.Errorf("role %q: %w", role, ErrForbidden)
	}
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var before string
		var holder int64
		err := tx.QueryRow(ctx, lockMember, orgID, userID).Scan(&before, &holder)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("role of user %d in organisation %d: %w", userID, orgID, ErrNotMember)
		}
		if err != nil {
			return fmt.Errorf("role of user %d in organisation %d: %w", userID, orgID, err)
		}
		if holder == userID && role != RoleOwner {
			return fmt.Errorf("role of user %d in organisation %d: %w", userID, orgID, ErrAccountHolder)
		}
		if _, err := tx.Exec(ctx, updateRole, orgID, userID, role); err != nil {
			return fmt.Errorf("role of user %d in organisation %d: %w", userID, orgID, err)
		}
		return audit.Record(ctx, tx, actor, "organisation.set_role", audit.ObjectOrg, strconv.FormatInt(orgID, 10),
			map[string]any{"user_id": userID, "role": before}, map[string]any{"user_id": userID, "role": role})
	})
}

// Summary is an organisation as the operators' list shows it.
type Summary struct {
	Org
	AccountEmail string `json:"account_email"`
	// PlanID and PlanName are the account's plan (nil and "" for none).
	PlanID   *int64 `json:"plan_id"`
	PlanName string `json:"plan_name"`
	Members  int    `json:"members"`
}

const (
	selectSummaryColumns = `
SELECT ` + orgColumns + `, u.email, u.plan_id, coalesce(p.name, ''),
       (SELECT count(*) FROM org_members m WHERE m.org_id = o.id)
FROM organisations o JOIN users u ON u.id = o.account_user_id LEFT JOIN plans p ON p.id = u.plan_id`
	selectSummaries = selectSummaryColumns + ` ORDER BY o.name, o.id`
	selectSummary   = selectSummaryColumns + ` WHERE o.id = $1`
)

func scanSummary(row pgx.Row) (Summary, error) {
	var s Summary
	err := row.Scan(&s.ID, &s.Name, &s.AccountUserID, &s.CreatedAt, &s.AccountEmail, &s.PlanID, &s.PlanName, &s.Members)
	return s, err
}

// Summary is organisation id as the operators see it, or ErrNotFound.
func (r *Repo) Summary(ctx context.Context, id int64) (Summary, error) {
	s, err := scanSummary(r.pool.QueryRow(ctx, selectSummary, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Summary{}, fmt.Errorf("organisation %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Summary{}, fmt.Errorf("organisation %d: %w", id, err)
	}
	return s, nil
}

// List is every organisation, by name, for the operators.
func (r *Repo) List(ctx context.Context) ([]Summary, error) {
	rows, err := r.pool.Query(ctx, selectSummaries)
	if err != nil {
		return nil, fmt.Errorf("list organisations: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Summary, error) { return scanSummary(row) })
	if err != nil {
		return nil, fmt.Errorf("list organisations: %w", err)
	}
	return list, nil
}

// ValidateName says what is wrong with an organisation's name, or "".
func ValidateName(name string) string {
	switch {
	case strings.TrimSpace(name) == "":
		return "is required"
	case utf8.RuneCountInString(name) > 100:
		return "must be at most 100 characters"
	}
	return pgtext.NameProblem(name)
}

const (
	lockName   = `SELECT name FROM organisations WHERE id = $1 FOR UPDATE`
	updateName = `UPDATE organisations SET name = $2 WHERE id = $1`
)

// Rename names orgID name (trimmed), by actor (an owner). The caller
// checks the name with ValidateName first; a name it refuses is an error
// here too.
func (r *Repo) Rename(ctx context.Context, actor string, orgID int64, name string) error {
	name = strings.TrimSpace(name)
	if msg := ValidateName(name); msg != "" {
		return fmt.Errorf("organisation name %s", msg)
	}
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var before string
		err := tx.QueryRow(ctx, lockName, orgID).Scan(&before)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("rename organisation %d: %w", orgID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("rename organisation %d: %w", orgID, err)
		}
		if _, err := tx.Exec(ctx, updateName, orgID, name); err != nil {
			return fmt.Errorf("rename organisation %d: %w", orgID, err)
		}
		return audit.Record(ctx, tx, actor, "organisation.rename", audit.ObjectOrg, strconv.FormatInt(orgID, 10),
			map[string]any{"name": before}, map[string]any{"name": name})
	})
}
