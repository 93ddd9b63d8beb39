package web

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// The engine's subjects ("dev:2", "key:7", "ip:203.0.113.9") are internal;
// people read a developer's email, a key's name and an address.
const selectSubjectNames = `
SELECT 'dev:' || id, email FROM users WHERE id = ANY($1)
UNION ALL
SELECT 'key:' || k.id, k.name || ' (' || u.email || ')' FROM api_keys k JOIN users u ON u.id = k.user_id WHERE k.id = ANY($2)`

// subjectNames labels each of subjects as a person reads it: "developer
// ada@example.com", "key ci (ada@example.com)", "address 203.0.113.9". A
// subject of no known kind (a preset's synthetic caller) is kept as it is,
// and one whose developer or key is gone is named by its kind and number.
func (s *Server) subjectNames(ctx context.Context, subjects []string) (map[string]string, error) {
	out := map[string]string{}
	var devs, keys []int64
	for _, subj := range subjects {
		kind, rest, _ := strings.Cut(subj, ":")
		n, err := strconv.ParseInt(rest, 10, 64)
		switch {
		case kind == "ip":
			out[subj] = "address " + rest
		case kind == "dev" && err == nil:
			out[subj] = "developer #" + rest
			devs = append(devs, n)
		case kind == "key" && err == nil:
			out[subj] = "key #" + rest
			keys = append(keys, n)
		default:
			out[subj] = subj
		}
	}
	if len(devs)+len(keys) == 0 {
		return out, nil
	}
	rows, err := s.deps.Pool.Query(ctx, selectSubjectNames, devs, keys)
	if err != nil {
		return nil, fmt.Errorf("subject names: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var subj, name string
		if err := rows.Scan(&subj, &name); err != nil {
			return nil, fmt.Errorf("subject names: %w", err)
		}
		kind := "developer "
		if strings.HasPrefix(subj, "key:") {
			kind = "key "
		}
		out[subj] = kind + name
	}
	return out, rows.Err()
}
