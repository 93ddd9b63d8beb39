package gateway

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/sluicehq/sluice/internal/enforce"
)

// The caller's identity, on an admitted check's answer (and on the
// reverse proxy's request to the upstream), for the gateway to copy onto
// the request it proxies: the upstream learns who called without seeing,
// or having to look up, the key's secret. The secret itself is never among
// them.
const (
	// HeaderKeyID is the API key's id, absent for an anonymous caller.
	HeaderKeyID = "Sluice-Key-Id"
	// HeaderDeveloperID is the id of the developer who owns the key,
	// absent for an anonymous caller.
	HeaderDeveloperID = "Sluice-Developer-Id"
	// HeaderPlan is the slug of the plan whose limits applied (the
	// anonymous plan's for a caller without a key).
	HeaderPlan = "Sluice-Plan"
	// HeaderKeyScope is the key's scope as JSON, with the admin API's
	// field names ({"allowed_routes":[...],"allowed_cidrs":[...],
	// "read_only":true}, empty parts left out); absent when the key may be
	// used for everything.
	HeaderKeyScope = "Sluice-Key-Scope"
)

// IdentityHeaders are every identity header, in the order the shipped
// gateway configurations copy them. A gateway that copies them must also
// drop a client's own headers of these names, or a client could claim to
// be someone else (the shipped configurations do).
var IdentityHeaders = []string{HeaderKeyID, HeaderDeveloperID, HeaderPlan, HeaderKeyScope}

// setIdentity writes caller's identity into h, replacing whatever h held
// under those names (a client's own claims).
func setIdentity(h http.Header, caller enforce.Caller) {
	for _, name := range IdentityHeaders {
		h.Del(name)
	}
	if caller.Plan != "" {
		h.Set(HeaderPlan, caller.Plan)
	}
	if caller.KeyID == 0 {
		return
	}
	h.Set(HeaderKeyID, strconv.FormatInt(caller.KeyID, 10))
	h.Set(HeaderDeveloperID, strconv.FormatInt(caller.UserID, 10))
	if s := caller.Scope; !s.Unrestricted() {
		b, err := json.Marshal(struct {
			Routes   []string       `json:"allowed_routes,omitempty"`
			CIDRs    []netip.Prefix `json:"allowed_cidrs,omitempty"`
			ReadOnly bool           `json:"read_only,omitempty"`
		}{s.Routes, s.CIDRs, s.ReadOnly})
		if err == nil {
			h.Set(HeaderKeyScope, string(b))
		}
	}
}
