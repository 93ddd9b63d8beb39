package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/sluicehq/sluice/internal/plans"
)

// TestPlanDeleteSaysWhoHoldsIt: a plan in use is not deleted and the page
// names the developers and keys on it; once they move, it is deleted; the
// default plan is refused; a clone copies the tiers under a free slug.
func TestPlanDeleteSaysWhoHoldsIt(t *testing.T) {
	e := newEnv(t)
	def := e.defaultPlan()
	gold := e.createPlan("gold", searchTier)
	c := e.signedIn(operatorEmail)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `UPDATE users SET plan_id = $1 WHERE id = $2`, gold.ID, e.dev.ID); err != nil {
		t.Fatal(err)
	}
	k, _ := e.createKey(e.dev.ID, "ci")
	if _, err := e.keys.SetPlan(ctx, "test", k.ID, &gold.ID); err != nil {
		t.Fatal(err)
	}
	del := func(id int64, confirm bool) response {
		form := url.Values{}
		if confirm {
			form.Set("confirm", "1")
		}
		return c.post(fmt.Sprintf("/admin/plans/%d/delete", id), form, nil)
	}

	t.Run("unconfirmed", func(t *testing.T) {
		res := del(gold.ID, false)
		if res.StatusCode != http.StatusConflict || !strings.Contains(text(res.doc(t), "delete-refused"), "Tick the box") {
			t.Errorf("status %d, %q", res.StatusCode, text(res.doc(t), "delete-refused"))
		}
	})
	t.Run("in use: says by whom", func(t *testing.T) {
		res := del(gold.ID, true)
		d := res.doc(t)
		if res.StatusCode != http.StatusConflict {
			t.Fatalf("status %d, want 409", res.StatusCode)
		}
		if got := text(d, "delete-holders-developers"); got != developerEmail {
			t.Errorf("developers named %q", got)
		}
		if got := text(d, "delete-holders-keys"); got != "ci ("+developerEmail+")" {
			t.Errorf("keys named %q", got)
		}
		if _, err := e.plans.Get(ctx, gold.ID); err != nil {
			t.Errorf("the plan in use is gone: %v", err)
		}
	})
	t.Run("the default plan", func(t *testing.T) {
		if res := del(def.ID, true); res.StatusCode != http.StatusConflict || !strings.Contains(text(res.doc(t), "delete-refused"), "default") {
			t.Errorf("status %d, %q", res.StatusCode, text(res.doc(t), "delete-refused"))
		}
	})
	t.Run("clone", func(t *testing.T) {
		for _, want := range []string{"gold-copy", "gold-copy-2"} {
			res := c.post(fmt.Sprintf("/admin/plans/%d/clone", gold.ID), nil, nil)
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("status %d", res.StatusCode)
			}
			cp, err := e.plans.GetBySlug(ctx, want)
			if err != nil {
				t.Fatalf("no plan %s: %v", want, err)
			}
			if cp.Name != "Copy of GOLD" || cp.IsPublic || cp.IsDefault || len(cp.Limits) != 1 || cp.Limits[0].Limit != searchTier.Limit || cp.Limits[0].Burst != searchTier.Burst {
				t.Errorf("copy %+v", cp)
			}
		}
	})
	t.Run("deleted once free", func(t *testing.T) {
		if _, err := e.keys.SetPlan(ctx, "test", k.ID, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `UPDATE users SET plan_id = NULL WHERE id = $1`, e.dev.ID); err != nil {
			t.Fatal(err)
		}
		res := del(gold.ID, true)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303", res.StatusCode)
		}
		if _, err := e.plans.Get(ctx, gold.ID); !errors.Is(err, plans.ErrNotFound) {
			t.Errorf("after delete: %v, want ErrNotFound", err)
		}
		if got := text(c.get(res.Header.Get("Location"), nil).doc(t), "plan-deleted"); got != "Plan GOLD deleted." {
			t.Errorf("confirmation %q", got)
		}
	})
}

// TestSignUpChoosesAPublicPlan: with more than one public plan the sign-up
// form offers them, the default selected; the choice is the developer's
// plan; a private or unknown plan is refused with the field named.
func TestSignUpChoosesAPublicPlan(t *testing.T) {
	e := newEnv(t)
	def := e.defaultPlan()
	pro := e.createPlan("pro", searchTier) // public
	secret, err := e.plans.Create(context.Background(), "test", plans.PlanInput{Slug: "partner", Name: "Partner"})
	if err != nil {
		t.Fatal(err)
	}
	c := e.anonymous()
	d := c.get("/signup", nil).doc(t)
	var offered []string
	d.Find(`[data-testid="signup-plan-choice"] option`).Each(func(_ int, s *goquery.Selection) {
		v, _ := s.Attr("value")
		if _, sel := s.Attr("selected"); sel {
			v += "*"
		}
		offered = append(offered, v)
	})
	want := []string{fmt.Sprint(def.ID) + "*", fmt.Sprint(pro.ID)}
	slices.Sort(offered)
	slices.Sort(want)
	if fmt.Sprint(offered) != fmt.Sprint(want) {
		t.Errorf("offered %v, want %v (default selected, the private plan absent)", offered, want)
	}
	for _, bad := range []int64{secret.ID, 999999} {
		res := c.post("/signup", url.Values{"email": {"new@example.com"}, "password": {testPassword}, "plan_id": {fmt.Sprint(bad)}}, fromIP("198.51.100.7"))
		if res.StatusCode != http.StatusUnprocessableEntity || text(res.doc(t), "error-plan_id") != "is not a plan you can choose" {
			t.Errorf("plan %d: status %d, error %q", bad, res.StatusCode, text(res.doc(t), "error-plan_id"))
		}
	}
	res := c.post("/signup", url.Values{"email": {"new@example.com"}, "password": {testPassword}, "plan_id": {fmt.Sprint(pro.ID)}}, fromIP("198.51.100.7"))
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign up on pro: status %d", res.StatusCode)
	}
	u, err := e.users.ByEmail(context.Background(), "new@example.com")
	if err != nil || u.PlanID == nil || *u.PlanID != pro.ID {
		t.Errorf("new developer's plan %v, %v; want pro %d", u.PlanID, err, pro.ID)
	}
}

// TestLiveViewFindsKeys: the live view watches the keys found by a prefix,
// a name or an owner's email, and says so when none matches.
func TestLiveViewFindsKeys(t *testing.T) {
	e := newEnv(t)
	e.defaultPlan()
	a, secretA := e.createKey(e.dev.ID, "billing backend")
	b, _ := e.createKey(e.dev.ID, "search worker")
	c := e.signedIn(operatorEmail)
	watched := func(q string) []string {
		var ids []string
		c.get("/admin/live?q="+url.QueryEscape(q), nil).doc(t).Find(`[data-testid="live-key"]`).Each(func(_ int, s *goquery.Selection) {
			id, _ := s.Attr("data-key")
			ids = append(ids, id)
		})
		slices.Sort(ids)
		return ids
	}
	both := []string{fmt.Sprint(a.ID), fmt.Sprint(b.ID)}
	slices.Sort(both)
	for _, tt := range []struct {
		q    string
		want []string
	}{
		{secretA[:12], []string{fmt.Sprint(a.ID)}},
		{"worker", []string{fmt.Sprint(b.ID)}},
		{developerEmail, both},
	} {
		if got := watched(tt.q); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("q=%q watches %v, want %v", tt.q, got, tt.want)
		}
	}
	res := c.get("/admin/live?q=nothing-like-this", nil)
	if got := text(res.doc(t), "live-error"); got != `No active key matches "nothing-like-this".` {
		t.Errorf("no match: %q", got)
	}
}
