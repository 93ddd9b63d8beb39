package adminapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/billing"
)

// billingAnchorBody sets a developer's billing anchor, an RFC 3339 instant;
// null goes back to their sign-up.
type billingAnchorBody struct {
	BillingAnchor json.RawMessage `json:"billing_anchor"`
}

func (a *api) setBillingAnchor(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body billingAnchorBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	var anchor *time.Time
	switch raw := string(body.BillingAnchor); {
	case raw == "":
		a.fail(w, r, &validationError{fields: []FieldError{{Field: "billing_anchor", Message: "is required: an RFC 3339 instant, or null for the sign-up"}}})
		return
	case raw != "null":
		var t time.Time
		if err := json.Unmarshal(body.BillingAnchor, &t); err != nil {
			a.fail(w, r, &validationError{fields: []FieldError{{Field: "billing_anchor", Message: "must be an RFC 3339 instant such as 2026-01-31T10:00:00Z, or null"}}})
			return
		}
		anchor = &t
	}
	got, err := billing.SetAnchor(r.Context(), a.pool, actor(r), id, anchor)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, got)
}
