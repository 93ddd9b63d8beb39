package web

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/plans"
)

// planArchive archives a plan: offered to nobody new, kept by those on it.
func (s *Server) planArchive(w http.ResponseWriter, r *http.Request) { s.planSetArchived(w, r, true) }

// planRestore offers an archived plan again.
func (s *Server) planRestore(w http.ResponseWriter, r *http.Request) { s.planSetArchived(w, r, false) }

func (s *Server) planSetArchived(w http.ResponseWriter, r *http.Request, archived bool) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	version, _ := strconv.Atoi(r.PostFormValue("version"))
	_, err := s.deps.Plans.SetArchived(r.Context(), s.actor(r), id, version, archived)
	var ve *plans.ValidationError
	switch {
	case err == nil:
		http.Redirect(w, r, planURL(id)+"?saved=1", http.StatusSeeOther)
		return
	case errors.As(err, &ve), errors.Is(err, plans.ErrConflict):
	default:
		s.error(w, r, err)
		return
	}
	v, perr := s.planPage(r.Context(), id)
	if perr != nil {
		s.error(w, r, perr)
		return
	}
	status := http.StatusUnprocessableEntity
	if ve != nil {
		v.ArchiveRefused = ve.Fields[0].Message
	} else {
		status = http.StatusConflict
		v.Conflict = "Someone else changed this plan first; it is shown as it is now. Try again."
	}
	s.renderPlanPage(w, r, status, v)
}

// offeredPlan refuses a plan id that names an archived plan, unless it is
// the one already chosen (current): archived plans are offered to nobody
// new. A nil id (no plan of its own) is always fine.
func (s *Server) offeredPlan(r *http.Request, id, current *int64) error {
	if id == nil || (current != nil && *current == *id) {
		return nil
	}
	p, err := s.deps.Plans.Get(r.Context(), *id)
	switch {
	case errors.Is(err, plans.ErrNotFound):
		return nil // the store reports an unknown plan in its own words
	case err != nil:
		return err
	case !p.Offered():
		return errArchivedPlan
	}
	return nil
}

// errArchivedPlan is the field message for choosing an archived plan.
var errArchivedPlan = errors.New("that plan is archived: restore it first, or choose another")

func planURL(id int64) string { return "/admin/plans/" + strconv.FormatInt(id, 10) }
