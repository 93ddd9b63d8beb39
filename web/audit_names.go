package web

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/audit"
)

// The audit log records ids ("user:6", plan 3); people read emails and
// names. One query resolves every id a page shows; an object deleted since
// keeps its id.
const selectAuditNames = `
SELECT 'user:' || id, email FROM users WHERE id = ANY($1)
UNION ALL
SELECT 'plan:' || id, name FROM plans WHERE id = ANY($2)
UNION ALL
SELECT 'key:' || id, name FROM api_keys WHERE id = ANY($3)
UNION ALL
SELECT 'token:' || id, name FROM operator_tokens WHERE id = ANY($4)
UNION ALL
SELECT 'limit:' || id, name FROM plan_limits WHERE id = ANY($5)
UNION ALL
SELECT 'service:' || id, slug FROM services WHERE id = ANY($6)
UNION ALL
SELECT 'organisation:' || id, name FROM organisations WHERE id = ANY($7)`

// auditNames maps "user:<id>", "plan:<id>", "key:<id>", "token:<id>",
// "limit:<id>", "service:<id>" and "organisation:<id>" of the entries' actors and objects to what
// a person recognises: an email, a name, a service's slug. A limit, plan or
// service deleted since is named by the name its entry recorded.
func (s *Server) auditNames(ctx context.Context, entries []audit.Entry) (map[string]string, error) {
	ids := map[string][]int64{}
	add := func(kind, id string) {
		if n, err := strconv.ParseInt(id, 10, 64); err == nil {
			ids[kind] = append(ids[kind], n)
		}
	}
	for _, e := range entries {
		if kind, id, ok := strings.Cut(e.Actor, ":"); ok {
			add(kind, id)
		}
		add(e.ObjectType, e.ObjectID)
	}
	out := map[string]string{}
	for _, e := range entries {
		recordedName(out, e)
	}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.deps.Pool.Query(ctx, selectAuditNames, ids[audit.ObjectUser], ids[audit.ObjectPlan], ids[audit.ObjectKey],
		ids[audit.ObjectToken], ids[audit.ObjectLimit], ids[audit.ObjectService], ids[audit.ObjectOrg])
	if err != nil {
		return nil, fmt.Errorf("audit names: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ref, name string
		if err := rows.Scan(&ref, &name); err != nil {
			return nil, fmt.Errorf("audit names: %w", err)
		}
		out[ref] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit names: %w", err)
	}
	return out, nil
}

// recordedName names the object of e by the name (a service: the slug) its
// entry recorded, for objects deleted since; the store's current name, read
// after, wins.
func recordedName(out map[string]string, e audit.Entry) {
	field := "name"
	switch e.ObjectType {
	case audit.ObjectLimit, audit.ObjectPlan:
	case audit.ObjectService:
		field = "slug"
	default:
		return
	}
	for _, raw := range []json.RawMessage{e.After, e.Before} {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			continue
		}
		var name string
		if json.Unmarshal(obj[field], &name) == nil && name != "" {
			out[e.ObjectType+":"+e.ObjectID] = name
			return
		}
	}
}
