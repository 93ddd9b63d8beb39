package web

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/views"
)

// keyRevokeConfirm asks before revoking.
func (s *Server) keyRevokeConfirm(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	k, err := s.deps.Keys.Get(r.Context(), id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	if k.RevokedAt != nil {
		http.Redirect(w, r, keyPath(id), http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, views.KeyRevokePage(s.page(r, "Revoke "+k.Name, "keys"), k))
}

// keyRevoke revokes the key; every instance stops accepting it once its
// snapshot rebuilds (within a second). Revoking twice is harmless.
func (s *Server) keyRevoke(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	err = s.deps.Keys.Revoke(r.Context(), s.actor(r), id)
	if err != nil && !errors.Is(err, apikeys.ErrRevoked) {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, keyPath(id)+"?saved=1", http.StatusSeeOther)
}
