package orgs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/orgs"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/users"
)

func developer(t *testing.T, pool *pgxpool.Pool, email string) users.User {
	t.Helper()
	u, err := users.NewRepo(pool).Create(context.Background(), users.NewUser{Email: email, Password: "a long passphrase here", Role: users.RoleDeveloper})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func personal(t *testing.T, repo *orgs.Repo, u users.User) orgs.Membership {
	t.Helper()
	ms, err := repo.Memberships(context.Background(), u.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].AccountUserID != u.ID {
		t.Fatalf("user %d has no personal organisation first: %+v", u.ID, ms)
	}
	return ms[0]
}

func TestPersonalOrganisation(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	repo := orgs.NewRepo(pool, nil)
	t.Run("EveryNewDeveloperOwnsOne", func(t *testing.T) {
		u := developer(t, pool, "ada@example.com")
		m := personal(t, repo, u)
		if m.Name != "ada@example.com" || m.Role != orgs.RoleOwner || !m.CanManageMembers() || !m.CanWrite() {
			t.Fatalf("personal organisation = %+v", m)
		}
	})
	t.Run("OperatorsHaveNone", func(t *testing.T) {
		op, err := users.NewRepo(pool).Create(ctx, users.NewUser{Email: "op@example.com", Password: "a long passphrase here", Role: users.RoleOperator})
		if err != nil {
			t.Fatal(err)
		}
		if ms, err := repo.Memberships(ctx, op.ID); err != nil || len(ms) != 0 {
			t.Fatalf("operator's organisations: %+v, %v", ms, err)
		}
		// An operator made a developer gets one then.
		if _, err := pool.Exec(ctx, `UPDATE users SET role = 'developer' WHERE id = $1`, op.ID); err != nil {
			t.Fatal(err)
		}
		personal(t, repo, users.User{ID: op.ID})
	})
}

func TestInvitations(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	repo := orgs.NewRepo(pool, func() time.Time { return now })
	owner := developer(t, pool, "owner@example.com")
	org := personal(t, repo, owner)
	invitee := developer(t, pool, "Invitee@Example.com")
	stranger := developer(t, pool, "stranger@example.com")

	token, inv, err := repo.Invite(ctx, org.ID, owner.ID, "invitee@example.com", orgs.RoleMember)
	if err != nil {
		t.Fatal(err)
	}
	if inv.OrgName != org.Name || inv.ExpiresAt != now.Add(orgs.InvitationTTL) {
		t.Fatalf("invitation = %+v", inv)
	}
	t.Run("PendingListed", func(t *testing.T) {
		list, err := repo.Pending(ctx, org.ID)
		if err != nil || len(list) != 1 || list[0].Email != "invitee@example.com" || list[0].Role != orgs.RoleMember {
			t.Fatalf("pending = %+v, %v", list, err)
		}
	})
	t.Run("ErrWrongInvitee", func(t *testing.T) {
		if _, err := repo.Accept(ctx, token, stranger); !errors.Is(err, orgs.ErrWrongInvitee) {
			t.Fatalf("err = %v", err)
		}
		if _, err := repo.Membership(ctx, org.ID, stranger.ID); !errors.Is(err, orgs.ErrNotMember) {
			t.Fatalf("the stranger joined: %v", err)
		}
	})
	t.Run("AcceptedOnce", func(t *testing.T) {
		m, err := repo.Accept(ctx, token, invitee)
		if err != nil || m.ID != org.ID || m.Role != orgs.RoleMember || m.CanManageMembers() || !m.CanWrite() {
			t.Fatalf("accept = %+v, %v", m, err)
		}
		if _, err := repo.Accept(ctx, token, invitee); !errors.Is(err, orgs.ErrInvitationInvalid) {
			t.Fatalf("second accept: %v", err)
		}
		members, err := repo.Members(ctx, org.ID)
		if err != nil || len(members) != 2 || !members[0].Holder || members[1].UserID != invitee.ID || members[1].Holder {
			t.Fatalf("members = %+v, %v", members, err)
		}
	})
	t.Run("ErrAlreadyMember", func(t *testing.T) {
		if _, _, err := repo.Invite(ctx, org.ID, owner.ID, "INVITEE@example.com", orgs.RoleOwner); !errors.Is(err, orgs.ErrAlreadyMember) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("Expired", func(t *testing.T) {
		late, _, err := repo.Invite(ctx, org.ID, owner.ID, "stranger@example.com", orgs.RoleReadOnly)
		if err != nil {
			t.Fatal(err)
		}
		later := orgs.NewRepo(pool, func() time.Time { return now.Add(orgs.InvitationTTL + time.Second) })
		if _, err := later.Accept(ctx, late, stranger); !errors.Is(err, orgs.ErrInvitationInvalid) {
			t.Fatalf("expired accept: %v", err)
		}
	})
	t.Run("ErrNotDeveloper", func(t *testing.T) {
		if _, err := repo.Accept(ctx, token, users.User{ID: 999, Email: "invitee@example.com", Role: users.RoleOperator}); !errors.Is(err, orgs.ErrNotDeveloper) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("RoleChangedAndAccountHolderKept", func(t *testing.T) {
		if err := repo.SetRole(ctx, "user:1", org.ID, invitee.ID, orgs.RoleReadOnly); err != nil {
			t.Fatal(err)
		}
		if m, _ := repo.Membership(ctx, org.ID, invitee.ID); m.Role != orgs.RoleReadOnly || m.CanWrite() {
			t.Fatalf("after SetRole: %+v", m)
		}
		if err := repo.SetRole(ctx, "user:1", org.ID, owner.ID, orgs.RoleMember); !errors.Is(err, orgs.ErrAccountHolder) {
			t.Fatalf("demoting the holder: %v", err)
		}
		if err := repo.Remove(ctx, "user:1", org.ID, owner.ID); !errors.Is(err, orgs.ErrAccountHolder) {
			t.Fatalf("removing the holder: %v", err)
		}
	})
	t.Run("RemovedLosesAccess", func(t *testing.T) {
		if err := repo.Remove(ctx, "user:1", org.ID, invitee.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Membership(ctx, org.ID, invitee.ID); !errors.Is(err, orgs.ErrNotMember) {
			t.Fatalf("still a member: %v", err)
		}
		if err := repo.Remove(ctx, "user:1", org.ID, invitee.ID); !errors.Is(err, orgs.ErrNotMember) {
			t.Fatalf("removing twice: %v", err)
		}
	})
	t.Run("ListedForOperators", func(t *testing.T) {
		list, err := repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var found *orgs.Summary
		for i := range list {
			if list[i].ID == org.ID {
				found = &list[i]
			}
		}
		if len(list) != 3 || found == nil || found.AccountEmail != "owner@example.com" || found.Members != 1 {
			t.Fatalf("list = %+v", list)
		}
	})
}
