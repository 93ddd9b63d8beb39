package adminapi

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/snapshot"
)

// TestRevocationThroughTheAPIReachesAnotherInstance revokes keys through the
// admin API and measures how long the revocation takes to be enforced by a
// second instance (its own snapshot Holder on the same database): from the
// API's answer to the instance's snapshot dropping the key, after which the
// instance answers 401. It logs the median and maximum over 20 tries; the
// figures are reported, not asserted, because this machine's load varies.
func TestRevocationThroughTheAPIReachesAnotherInstance(t *testing.T) {
	e := newEnv(t)
	_, token := e.operator("op@example.com")
	other := newProtectedAPI(t, e)

	var gold planView
	e.do("POST", Prefix+"/plans", token, validPlan()).decode(t, &gold)
	dev := e.user("dev@example.com", "developer", &gold.ID)

	const tries = 20
	var took []time.Duration
	for i := range tries {
		var created keyWithSecret
		res := e.do("POST", Prefix+"/keys", token, map[string]any{"user_id": dev.ID, "name": "k" + itoa(int64(i))})
		if res.status != http.StatusCreated {
			t.Fatalf("create key: %d %s", res.status, res.body)
		}
		res.decode(t, &created)
		id := created.Key.ID
		other.waitFor(t, "the new key", func(s *snapshot.Snapshot) bool { _, ok := s.KeyCaller(id); return ok })
		if status, body := other.call(t, created.Secret); status != http.StatusOK {
			t.Fatalf("live key on the other instance: %d %s", status, body)
		}

		if res := e.do("POST", Prefix+"/keys/"+itoa(id)+"/revoke", token, nil); res.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", res.status, res.body)
		}
		d := other.waitFor(t, "the revocation", func(s *snapshot.Snapshot) bool { _, ok := s.KeyCaller(id); return !ok })
		if status, _ := other.call(t, created.Secret); status != http.StatusUnauthorized {
			t.Fatalf("revoked key on the other instance: %d, want 401", status)
		}
		took = append(took, d)
	}
	slices.Sort(took)
	t.Logf("revocation via the admin API enforced by another instance: median %v, max %v over %d tries",
		took[tries/2], took[tries-1], tries)
}
