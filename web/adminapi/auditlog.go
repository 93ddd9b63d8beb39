package adminapi

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/audit"
)

type auditList struct {
	Items []audit.Entry `json:"items"`
	// NextBeforeID, when not null, is the before_id that fetches the next
	// (older) page.
	NextBeforeID *int64 `json:"next_before_id"`
}

// listAudit returns audit entries newest first, filtered by actor, object
// and time, paged backwards with before_id.
func (a *api) listAudit(w http.ResponseWriter, r *http.Request) {
	qr := newQueryReader(r)
	f := audit.Filter{
		Actor:      qr.str("actor"),
		ObjectType: qr.oneOf("object_type", audit.ObjectPlan, audit.ObjectLimit, audit.ObjectKey, audit.ObjectUser, audit.ObjectToken),
		ObjectID:   qr.str("object_id"),
		Since:      qr.time("since"),
		Until:      qr.time("until"),
		Limit:      int(qr.int64Range("limit", audit.DefaultLimit, 1, audit.MaxLimit)),
		BeforeID:   qr.int64Range("before_id", 0, 1, 1<<62),
	}
	if err := qr.err(); err != nil {
		a.fail(w, r, err)
		return
	}
	entries, err := audit.List(r.Context(), a.pool, f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := auditList{Items: entries}
	if out.Items == nil {
		out.Items = []audit.Entry{}
	}
	if len(entries) == f.Limit {
		last := entries[len(entries)-1].ID
		out.NextBeforeID = &last
	}
	writeJSON(w, http.StatusOK, out)
}
