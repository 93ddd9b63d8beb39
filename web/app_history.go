package web

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/history"
	"github.com/sluicehq/sluice/views"
)

var appHistoryTables = []historyTable{
	{"By key", "history-by-key", history.ByKey, narrowKey},
	{"By route", "history-by-route", history.ByRoute, narrowRoute},
}

// myHistory is a developer's usage history: their own keys only, per
// minute or hour, per key and route.
func (s *Server) myHistory(w http.ResponseWriter, r *http.Request) {
	if s.deps.History == nil {
		s.notFound(w, r)
		return
	}
	u, _ := s.currentUser(r)
	hq, err := s.parseHistoryQuery(r, u.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v, err := s.historyView(r.Context(), hq, "/app/history", appHistoryTables)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.Action, v.CSV = "/app/history", "/app/history.csv"
	if v.Keys, err = s.ownKeyChoices(r.Context(), u.ID); err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.HistoryPageView(s.page(r, "My usage history", "app-history"), v))
}

// ownKeyChoices are a developer's keys, for a page's key filter.
func (s *Server) ownKeyChoices(ctx context.Context, userID int64) ([]views.KeyChoice, error) {
	keys, _, err := s.deps.Keys.List(ctx, apikeys.Filter{UserID: userID, Limit: maxOwnKeys})
	if err != nil {
		return nil, err
	}
	out := make([]views.KeyChoice, 0, len(keys))
	for _, k := range keys {
		out = append(out, views.KeyChoice{ID: k.ID, Name: k.Name})
	}
	return out, nil
}

// myHistoryCSV downloads the rows behind the developer's history page.
func (s *Server) myHistoryCSV(w http.ResponseWriter, r *http.Request) {
	if s.deps.History == nil {
		s.notFound(w, r)
		return
	}
	u, _ := s.currentUser(r)
	hq, err := s.parseHistoryQuery(r, u.ID)
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.writeHistoryCSV(w, r, hq, "my-usage")
}
