package web

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sluicehq/sluice/internal/plans"
)

// maxHoldersShown bounds the names a refused delete lists.
const maxHoldersShown = 20

// planDelete deletes a plan no one holds; while developers or live keys
// are on it, the plan page says which, so the operator can move them first.
func (s *Server) planDelete(w http.ResponseWriter, r *http.Request) {
	id, ok := s.postedID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	p, err := s.deps.Plans.Get(ctx, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	var refusal string
	switch {
	case r.PostFormValue("confirm") == "":
		refusal = "Tick the box to confirm: deleting a plan cannot be undone."
	case p.IsDefault || p.IsAnonymous:
		refusal = "This is the default or the anonymous plan: mark another plan as such first."
	default:
		err = s.deps.Plans.Delete(ctx, s.actor(r), id)
		switch {
		case err == nil:
			http.Redirect(w, r, "/admin/plans?deleted="+url.QueryEscape(p.Name), http.StatusSeeOther)
			return
		case errors.Is(err, plans.ErrInUse):
			refusal = "This plan is in use, so it was not deleted. Move these to another plan first."
		default:
			s.error(w, r, err)
			return
		}
	}
	v, err := s.planPage(ctx, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	v.DeleteRefused = refusal
	if v.Holders, err = s.deps.Plans.Holders(ctx, id, maxHoldersShown); err != nil {
		s.error(w, r, err)
		return
	}
	s.renderPlanPage(w, r, http.StatusConflict, v)
}

// planClone copies a plan and its tiers under a free slug ("<slug>-copy",
// "<slug>-copy-2", ...), private and neither default nor anonymous, and
// opens the copy.
func (s *Server) planClone(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.error(w, r, err)
		return
	}
	ctx := r.Context()
	p, err := s.deps.Plans.Get(ctx, id)
	if err != nil {
		s.error(w, r, err)
		return
	}
	in := p.Input()
	in.Name = "Copy of " + p.Name
	in.IsDefault, in.IsAnonymous, in.IsPublic = false, false, false
	for n := 1; n <= 20; n++ {
		in.Slug = p.Slug + "-copy"
		if n > 1 {
			in.Slug += "-" + strconv.Itoa(n)
		}
		c, err := s.deps.Plans.Create(ctx, s.actor(r), in)
		switch {
		case err == nil:
			http.Redirect(w, r, "/admin/plans/"+strconv.FormatInt(c.ID, 10)+"?saved=1", http.StatusSeeOther)
			return
		case errors.Is(err, plans.ErrSlugTaken):
			continue
		default:
			s.error(w, r, err)
			return
		}
	}
	s.error(w, r, errors.Join(errBadRequest, errors.New("twenty copies of this plan exist already")))
}
