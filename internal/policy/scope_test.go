package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
)

// TestForRoutesKeepsWhatTheServiceEnforces sends a document cut by
// ForRoutes through JSON into a Resolver, as the guard package receives
// it: each key gets exactly its limits on the service's routes and the
// plan-wide ones, including a key whose own limits are all on another
// service (none, not its plan's).
func TestForRoutesKeepsWhatTheServiceEnforces(t *testing.T) {
	hash := func(s string) [32]byte { return sha256.Sum256([]byte(s)) }
	hexOf := func(s string) string { h := hash(s); return hex.EncodeToString(h[:]) }
	here, there := "GET /here/{id}", "GET /there/{id}"
	d := Document{Version: 3, Plans: map[string][]Limit{
		"basic": {{Name: "basic-here", Algorithm: "fixed_window", Limit: 5, WindowMS: 60000, Route: here},
			{Name: "basic-there", Algorithm: "fixed_window", Limit: 5, WindowMS: 60000, Route: there},
			{Name: "basic-all", Algorithm: "fixed_window", Limit: 50, WindowMS: 60000}},
	}, Keys: []Key{
		{Hash: hexOf("plain"), KeyID: 1, UserID: 1, Plan: "basic"},
		{Hash: hexOf("elsewhere"), KeyID: 2, UserID: 2, Plan: "basic",
			Limits: []Limit{{Name: "own-there", Algorithm: "fixed_window", Limit: 1, WindowMS: 60000, Route: there}}},
	}}
	b, err := json.Marshal(d.ForRoutes([]string{here}))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Plans["basic"]) != 3 || d.Keys[1].Limits == nil {
		t.Fatal("ForRoutes modified its document")
	}
	var got Document
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(nil)
	if err := r.Install(got); err != nil {
		t.Fatal(err)
	}
	for secret, want := range map[string]string{"plain": "basic-here,basic-all", "elsewhere": ""} {
		e, ok := r.current.Load().keys[hash(secret)]
		if !ok {
			t.Fatalf("key %q is gone", secret)
		}
		var names string
		for i, l := range e.caller.Limits {
			if i > 0 {
				names += ","
			}
			names += l.Name
		}
		if names != want {
			t.Errorf("key %q resolves to limits %q, want %q", secret, names, want)
		}
	}
}
