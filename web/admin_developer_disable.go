package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/users"
)

// developerDisable stops every key of a developer at once; developerEnable
// restores them. Both are audited in the same transaction as the change.
func (s *Server) developerDisable(w http.ResponseWriter, r *http.Request) {
	s.setDeveloperDisabled(w, r, true)
}

func (s *Server) developerEnable(w http.ResponseWriter, r *http.Request) {
	s.setDeveloperDisabled(w, r, false)
}

func (s *Server) setDeveloperDisabled(w http.ResponseWriter, r *http.Request, disabled bool) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	action := "user.enable"
	if disabled {
		action = "user.disable"
	}
	type state struct {
		DisabledAt *time.Time `json:"disabled_at"`
	}
	err = pgx.BeginFunc(r.Context(), s.deps.Pool, func(tx pgx.Tx) error {
		repo := users.NewRepo(tx)
		before, err := repo.DisabledSince(r.Context(), []int64{id})
		if err != nil {
			return err
		}
		since, err := repo.SetDisabled(r.Context(), id, disabled)
		if err != nil {
			return err
		}
		var was *time.Time
		if at, ok := before[id]; ok {
			was = &at
		}
		return audit.Record(r.Context(), tx, s.actor(r), action, audit.ObjectUser, strconv.FormatInt(id, 10), state{was}, state{since})
	})
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("developer "+action[len("user."):]+"d", "user_id", id)
	http.Redirect(w, r, "/admin/developers?saved="+action[len("user."):], http.StatusSeeOther)
}
