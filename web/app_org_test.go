package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/orgs"
	"github.com/sluicehq/sluice/internal/users"
)

// keyIDsOn are the keys the keys page lists.
func keyIDsOn(t *testing.T, c *client) []string {
	t.Helper()
	res := c.get("/app/keys", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("keys page: %d", res.StatusCode)
	}
	var ids []string
	res.doc(t).Find(`[data-testid="my-key"]`).Each(func(_ int, s *goquery.Selection) {
		ids = append(ids, s.AttrOr("data-key", ""))
	})
	return ids
}

// TestOrganisations: an owner invites by email, the invitee joins through
// the mailed link and then works on the organisation's keys; roles bound
// what members do; nobody reaches another organisation's keys; operators
// see organisations and change their plan (issue 37, item 1).
func TestOrganisations(t *testing.T) {
	e, smtp := newMailEnv(t)
	ctx := context.Background()
	repo := orgs.NewRepo(e.pool, nil)
	mk := func(email string) users.User {
		u, err := e.users.Create(ctx, users.NewUser{Email: email, Password: testPassword, Role: users.RoleDeveloper})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	invitee, outsider, intruder := mk("invitee@example.com"), mk("outsider@example.com"), mk("intruder@example.com")
	shared, _ := e.createKey(e.dev.ID, "shared")
	foreign, _ := e.createKey(outsider.ID, "foreign")
	ownerOrg, _ := repo.Memberships(ctx, e.dev.ID)
	outsiderOrg, _ := repo.Memberships(ctx, outsider.ID)
	owner := e.signedIn(developerEmail)
	member := e.signedIn("invitee@example.com")

	t.Run("OwnerInvitesByEmail", func(t *testing.T) {
		res := owner.post("/app/org/invitations", url.Values{"email": {"Invitee@example.com"}, "role": {orgs.RoleMember}}, nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/app/org?done=invited" {
			t.Fatalf("invite: %d: %s", res.StatusCode, res.body)
		}
		if d := owner.get("/app/org", nil).doc(t); count(d, "invitation") != 1 {
			t.Fatalf("%d pending invitations shown", count(d, "invitation"))
		}
	})
	link := linkIn(t, mailTo(t, smtp.WaitFor(t, 1), "Invitee@example.com"), "/invitations/")

	t.Run("ErrWrongInvitee", func(t *testing.T) {
		c := e.signedIn("intruder@example.com")
		if res := c.post(link+"/accept", nil, nil); res.StatusCode != http.StatusForbidden {
			t.Fatalf("another account accepting: %d", res.StatusCode)
		}
		if _, err := repo.Membership(ctx, ownerOrg[0].ID, intruder.ID); err == nil {
			t.Fatal("the intruder joined")
		}
	})
	t.Run("InviteeJoinsAndSeesTheKeys", func(t *testing.T) {
		d := member.get(link, nil).doc(t)
		if text(d, "invitation-org") != developerEmail || count(d, "invitation-accept") != 1 {
			t.Fatalf("invitation page: org %q", text(d, "invitation-org"))
		}
		res := member.post(link+"/accept", nil, nil)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/app/org?done=joined" {
			t.Fatalf("accept: %d", res.StatusCode)
		}
		if ids := keyIDsOn(t, member); len(ids) != 1 || ids[0] != strconv.FormatInt(shared.ID, 10) {
			t.Fatalf("member sees keys %v, want the organisation's %d", ids, shared.ID)
		}
		if res := member.post(link+"/accept", nil, nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("the link accepted twice: %d", res.StatusCode)
		}
	})
	t.Run("MemberCannotInvite", func(t *testing.T) {
		res := member.post("/app/org/invitations", url.Values{"email": {"friend@example.com"}, "role": {orgs.RoleOwner}}, nil)
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("member inviting: %d", res.StatusCode)
		}
		if res := member.post("/app/org/members/"+strconv.FormatInt(e.dev.ID, 10)+"/remove", nil, nil); res.StatusCode != http.StatusForbidden {
			t.Fatalf("member removing the owner: %d", res.StatusCode)
		}
		if res := member.post("/app/org/name", url.Values{"name": {"Taken over"}}, nil); res.StatusCode != http.StatusForbidden {
			t.Fatalf("member renaming: %d", res.StatusCode)
		}
	})
	t.Run("MemberCannotReachAnotherOrgsKeys", func(t *testing.T) {
		id := strconv.FormatInt(foreign.ID, 10)
		if res := member.post("/app/keys/"+id+"/revoke", nil, nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("revoking another organisation's key: %d", res.StatusCode)
		}
		if k, err := e.keys.Get(ctx, foreign.ID); err != nil || k.RevokedAt != nil {
			t.Fatalf("the foreign key: %+v, %v", k, err)
		}
		res := member.post("/app/org/switch", url.Values{"org_id": {strconv.FormatInt(outsiderOrg[0].ID, 10)}}, nil)
		if res.StatusCode != http.StatusNotFound {
			t.Fatalf("switching into another organisation: %d", res.StatusCode)
		}
	})
	t.Run("MemberKeyBelongsToTheOrganisation", func(t *testing.T) {
		if res := member.post("/app/keys", url.Values{"name": {"by member"}}, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("member creating a key: %d: %s", res.StatusCode, res.body)
		}
		list, _, err := e.keys.List(ctx, apikeys.Filter{UserID: e.dev.ID, Limit: 10})
		if err != nil || len(list) != 2 {
			t.Fatalf("the organisation's keys: %d, %v", len(list), err)
		}
		entries, err := audit.List(ctx, e.pool, audit.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 0 || entries[0].Action != "key.create" || entries[0].Actor != "user:"+strconv.FormatInt(invitee.ID, 10) {
			t.Fatalf("latest audit entry %+v, want key.create by the member", entries[0])
		}
	})
	t.Run("ReadOnlyMemberChangesNothing", func(t *testing.T) {
		res := owner.post("/app/org/members/"+strconv.FormatInt(invitee.ID, 10)+"/role", url.Values{"role": {orgs.RoleReadOnly}}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("owner setting the role: %d", res.StatusCode)
		}
		if res := member.post("/app/keys", url.Values{"name": {"read only"}}, nil); res.StatusCode != http.StatusForbidden {
			t.Fatalf("read-only member creating a key: %d", res.StatusCode)
		}
		if ids := keyIDsOn(t, member); len(ids) != 2 {
			t.Fatalf("read-only member sees %d keys, want 2", len(ids))
		}
	})
	t.Run("OperatorsSeeAndChangeThePlan", func(t *testing.T) {
		op := e.signedIn(operatorEmail)
		d := op.get("/admin/orgs", nil).doc(t)
		if count(d, "org-row") != 4 {
			t.Fatalf("%d organisations listed, want 4", count(d, "org-row"))
		}
		page := "/admin/orgs/" + strconv.FormatInt(ownerOrg[0].ID, 10)
		d = op.get(page, nil).doc(t)
		if count(d, "org-member-row") != 2 {
			t.Fatalf("%d members shown, want 2", count(d, "org-member-row"))
		}
		pro := e.createPlan("pro")
		version, _ := d.Find(`[data-testid="org-plan-form"] input[name="version"]`).Attr("value")
		res := op.post(page+"/plan", url.Values{"plan_id": {strconv.FormatInt(pro.ID, 10)}, "version": {version}}, nil)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("plan change: %d: %s", res.StatusCode, res.body)
		}
		if u, _ := e.users.ByID(ctx, e.dev.ID); u.PlanID == nil || *u.PlanID != pro.ID {
			t.Fatalf("the account's plan: %v", u.PlanID)
		}
		if res := member.get("/admin/orgs", nil); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a developer on the operators' list: %d", res.StatusCode)
		}
	})
	t.Run("RemovedMembersStreamEnds", func(t *testing.T) {
		other := mk("streamer@example.com")
		tok, _, err := repo.Invite(ctx, ownerOrg[0].ID, e.dev.ID, other.Email, orgs.RoleReadOnly)
		if err != nil {
			t.Fatal(err)
		}
		c := e.signedIn(other.Email)
		if res := c.post("/invitations/"+tok+"/accept", nil, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("accept: %d", res.StatusCode)
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, br := openStream(t, sctx, c, "/app/stream") // reads the first event
		if res := owner.post("/app/org/members/"+strconv.FormatInt(other.ID, 10)+"/remove", nil, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("remove: %d", res.StatusCode)
		}
		// The stream ends (EOF) instead of pushing the organisation's
		// figures on; at most the push under way when the removal landed
		// still arrives.
		for events := 0; ; {
			line, err := br.ReadString('\n')
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("the stream did not end: %v", err)
				}
				break
			}
			if line == "\n" {
				if events++; events > 1 {
					t.Fatal("the removed member's stream goes on pushing")
				}
			}
		}
	})
	t.Run("LeavingEndsAccessAtOnceAndKeysStay", func(t *testing.T) {
		if res := owner.post("/app/org/leave", nil, nil); res.StatusCode != http.StatusConflict {
			t.Fatalf("the account holder leaving: %d", res.StatusCode)
		}
		if res := member.post("/app/org/leave", nil, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("leave: %d", res.StatusCode)
		}
		// Back in their personal organisation, with none of its keys.
		if ids := keyIDsOn(t, member); len(ids) != 0 {
			t.Fatalf("after leaving the member sees keys %v", ids)
		}
		if res := member.post("/app/keys/"+strconv.FormatInt(shared.ID, 10)+"/revoke", nil, nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("revoking the organisation's key after leaving: %d", res.StatusCode)
		}
		if ids := keyIDsOn(t, owner); len(ids) != 2 {
			t.Fatalf("the organisation keeps %d keys, want 2", len(ids))
		}
		if strings.Contains(owner.get("/app/org", nil).body, "invitee@example.com") {
			t.Fatal("the member who left is still listed")
		}
	})
	t.Run("OwnerRenames", func(t *testing.T) {
		if res := owner.post("/app/org/name", url.Values{"name": {"   "}}, nil); res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("blank name: %d", res.StatusCode)
		}
		if res := owner.post("/app/org/name", url.Values{"name": {" Acme Ltd "}}, nil); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("rename: %d", res.StatusCode)
		}
		if got := text(owner.get("/app/org", nil).doc(t), "org-name"); got != "Acme Ltd" {
			t.Fatalf("name = %q", got)
		}
	})
}
