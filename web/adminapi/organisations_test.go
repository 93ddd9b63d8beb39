package adminapi

import (
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/internal/orgs"
)

func TestOrganisations(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	var gold planView
	e.do("POST", Prefix+"/plans", token, validPlan()).decode(t, &gold)
	ann := e.user("ann@example.com", "developer", &gold.ID)
	e.user("bob@example.org", "developer", nil)

	var list organisationList
	res := e.do("GET", Prefix+"/organisations", token, nil)
	if res.status != http.StatusOK {
		t.Fatalf("list: %d", res.status)
	}
	res.decode(t, &list)
	if len(list.Items) != 2 || list.Items[0].Name != "ann@example.com" || list.Items[0].AccountUserID != ann.ID ||
		list.Items[0].PlanID == nil || *list.Items[0].PlanID != gold.ID || list.Items[0].Members != 1 || list.Items[1].Name != "bob@example.org" {
		t.Fatalf("organisations = %+v", list.Items)
	}
	t.Run("OneWithItsMembers", func(t *testing.T) {
		var d organisationDetail
		res := e.do("GET", Prefix+"/organisations/"+itoa(list.Items[0].ID), token, nil)
		if res.status != http.StatusOK {
			t.Fatalf("get: %d", res.status)
		}
		res.decode(t, &d)
		if d.Organisation.ID != list.Items[0].ID || len(d.MemberList) != 1 || d.MemberList[0].UserID != ann.ID ||
			d.MemberList[0].Role != orgs.RoleOwner || !d.MemberList[0].Holder {
			t.Fatalf("organisation = %+v", d)
		}
	})
	t.Run("NotFound", func(t *testing.T) {
		if res := e.do("GET", Prefix+"/organisations/999999", token, nil); res.status != http.StatusNotFound {
			t.Fatalf("unknown organisation: %d", res.status)
		}
	})
	t.Run("Unauthorized", func(t *testing.T) {
		if res := e.do("GET", Prefix+"/organisations", "", nil); res.status != http.StatusUnauthorized {
			t.Fatalf("without a token: %d", res.status)
		}
	})
}
