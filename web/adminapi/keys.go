package adminapi

import (
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/plans"
)

// keyView is a key as the API returns it: never with a secret, with its
// state computed now.
type keyView struct {
	apikeys.Key
	State string `json:"state"`
}

func (a *api) view(k apikeys.Key) keyView {
	// Empty lists, not null, so clients can iterate without a check.
	if k.Overrides == nil {
		k.Overrides = []plans.LimitInput{}
	}
	if k.AllowedRoutes == nil {
		k.AllowedRoutes = []string{}
	}
	if k.AllowedCIDRs == nil {
		k.AllowedCIDRs = []netip.Prefix{}
	}
	return keyView{Key: k, State: k.State(a.now())}
}

type keyList struct {
	Items  []keyView `json:"items"`
	Total  int       `json:"total"`
	Limit  int       `json:"limit"`
	Offset int       `json:"offset"`
}

func (a *api) listKeys(w http.ResponseWriter, r *http.Request) {
	qr := newQueryReader(r)
	f := apikeys.Filter{
		Query:  qr.str("q"),
		UserID: qr.int64Range("user_id", 0, 1, 1<<62),
		State:  qr.oneOf("state", apikeys.StateActive, apikeys.StateExpired, apikeys.StateRevoked),
		Limit:  int(qr.int64Range("limit", 50, 1, 500)),
		Offset: int(qr.int64Range("offset", 0, 0, 1<<31-1)),
	}
	if err := qr.err(); err != nil {
		a.fail(w, r, err)
		return
	}
	ks, total, err := a.keys.List(r.Context(), f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := keyList{Items: make([]keyView, len(ks)), Total: total, Limit: f.Limit, Offset: f.Offset}
	for i, k := range ks {
		out.Items[i] = a.view(k)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) getKey(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	k, err := a.keys.Get(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.view(k))
}

// createKeyBody issues a key for a developer.
type createKeyBody struct {
	UserID int64  `json:"user_id"`
	Name   string `json:"name"`
	// PlanID null or absent: the owner's plan.
	PlanID *int64 `json:"plan_id"`
	// ExpiresAt is read as text and parsed here, so a malformed timestamp
	// is reported under its field (encoding/json's time errors name none).
	ExpiresAt *string     `json:"expires_at"`
	Overrides []limitBody `json:"overrides"`
	apikeys.ScopeInput
}

// expiresAt parses the optional RFC 3339 expiry.
func (b createKeyBody) expiresAt() (*time.Time, error) {
	if b.ExpiresAt == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *b.ExpiresAt)
	if err != nil {
		return nil, &validationError{fields: []FieldError{{Field: "expires_at",
			Message: "must be an RFC 3339 timestamp such as 2027-01-31T12:00:00Z"}}}
	}
	return &t, nil
}

// keyWithSecret is the only response that carries a secret: the creation or
// rotation that produced it.
type keyWithSecret struct {
	Key    keyView `json:"key"`
	Secret string  `json:"secret"`
}

func (a *api) createKey(w http.ResponseWriter, r *http.Request) {
	var body createKeyBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	expires, err := body.expiresAt()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	k, secret, err := a.keys.Create(r.Context(), actor(r), apikeys.NewKey{
		UserID: body.UserID, Name: body.Name, PlanID: body.PlanID,
		ExpiresAt: expires, Overrides: limitInputs(body.Overrides), Scope: body.ScopeInput,
	})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", Prefix+"/keys/"+strconv.FormatInt(k.ID, 10))
	writeJSON(w, http.StatusCreated, keyWithSecret{Key: a.view(k), Secret: secret})
}

// rotateBody sets how long the previous secret keeps working.
type rotateBody struct {
	GraceSeconds int64 `json:"grace_seconds"`
}

func (a *api) rotateKey(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body rotateBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	// Checked here so the error names this API's field, whatever the
	// domain package calls its parameter.
	if body.GraceSeconds < 0 || body.GraceSeconds > int64(apikeys.MaxGrace/time.Second) {
		a.fail(w, r, &validationError{fields: []FieldError{{
			Field: "grace_seconds", Message: "must be from 0 to " + strconv.FormatInt(int64(apikeys.MaxGrace/time.Second), 10),
		}}})
		return
	}
	k, secret, err := a.keys.Rotate(r.Context(), actor(r), id, time.Duration(body.GraceSeconds)*time.Second)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, keyWithSecret{Key: a.view(k), Secret: secret})
}

func (a *api) revokeKey(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.keys.Revoke(r.Context(), actor(r), id); err != nil {
		a.fail(w, r, err)
		return
	}
	k, err := a.keys.Get(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.view(k))
}

// overridesBody replaces a key's limit overrides; Version is the key's
// version the client read.
type overridesBody struct {
	Version int `json:"version"`
	// Overrides must be present: a forgotten field must not silently
	// remove every override ([] does that on purpose).
	Overrides *[]limitBody `json:"overrides"`
}

func (a *api) setKeyOverrides(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body overridesBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := requireVersion(body.Version); err != nil {
		a.fail(w, r, err)
		return
	}
	if body.Overrides == nil {
		a.fail(w, r, &validationError{fields: []FieldError{{Field: "overrides",
			Message: "is required: an array of limits, or [] to remove every override"}}})
		return
	}
	k, err := a.keys.SetOverrides(r.Context(), actor(r), id, body.Version, limitInputs(*body.Overrides))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.view(k))
}

// keyScopeBody is a key's whole scope; every field must be present, so a
// forgotten field cannot silently widen the key.
type keyScopeBody struct {
	Routes   *[]string `json:"allowed_routes"`
	CIDRs    *[]string `json:"allowed_cidrs"`
	ReadOnly *bool     `json:"read_only"`
}

func (a *api) setKeyScope(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body keyScopeBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	var missing []FieldError
	if body.Routes == nil {
		missing = append(missing, FieldError{Field: "allowed_routes", Message: "is required: route patterns, or [] for every route"})
	}
	if body.CIDRs == nil {
		missing = append(missing, FieldError{Field: "allowed_cidrs", Message: "is required: address ranges, or [] for any address"})
	}
	if body.ReadOnly == nil {
		missing = append(missing, FieldError{Field: "read_only", Message: "is required: true or false"})
	}
	if len(missing) > 0 {
		a.fail(w, r, &validationError{fields: missing})
		return
	}
	k, err := a.keys.SetScope(r.Context(), actor(r), id, apikeys.ScopeInput{Routes: *body.Routes, CIDRs: *body.CIDRs, ReadOnly: *body.ReadOnly})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.view(k))
}

// keyPlanBody assigns a key its own plan; "plan_id": null returns it to its
// owner's plan. The field must be present, so a forgotten field cannot
// silently clear the assignment.
type keyPlanBody struct {
	PlanID nullableID `json:"plan_id"`
}

func (a *api) setKeyPlan(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body keyPlanBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if !body.PlanID.Set {
		a.fail(w, r, &validationError{fields: []FieldError{{Field: "plan_id", Message: "is required: a plan id, or null for the owner's plan"}}})
		return
	}
	k, err := a.keys.SetPlan(r.Context(), actor(r), id, body.PlanID.Value)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.view(k))
}
