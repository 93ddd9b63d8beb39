package web

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/views"
)

// keysPageSize is how many keys one page of the list shows.
const keysPageSize = 50

// keysList lists keys, newest first, searchable by secret prefix, name or
// owner email, filterable by state. An htmx search gets the results only.
func (s *Server) keysList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	l := views.KeysList{
		Query:    strings.TrimSpace(q.Get("q")),
		State:    q.Get("state"),
		PageSize: keysPageSize,
		Now:      s.now(),
	}
	switch l.State {
	case "", apikeys.StateActive, apikeys.StateExpired, apikeys.StateRevoked:
	default:
		l.State = ""
	}
	if off, err := strconv.Atoi(q.Get("offset")); err == nil && off > 0 {
		l.Offset = off
	}
	keys, total, err := s.deps.Keys.List(r.Context(), apikeys.Filter{
		Query: l.Query, State: l.State, Limit: keysPageSize, Offset: l.Offset,
	})
	if err != nil {
		s.error(w, r, err)
		return
	}
	l.Keys, l.Total = keys, total
	if isHTMX(r) {
		s.render(w, r, http.StatusOK, views.KeysResults(l))
		return
	}
	s.render(w, r, http.StatusOK, views.KeysPage(s.page(r, "API keys", "keys"), l))
}
