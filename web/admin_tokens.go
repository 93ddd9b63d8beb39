package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/internal/optokens"
	"github.com/sluicehq/sluice/views"
)

// tokensList shows the operator API tokens and the form to create one.
func (s *Server) tokensList(w http.ResponseWriter, r *http.Request) {
	s.renderTokens(w, r, http.StatusOK, views.TokenForm{}, nil, "")
}

func (s *Server) renderTokens(w http.ResponseWriter, r *http.Request, status int, f views.TokenForm, created *optokens.Token, secret string) {
	list, err := s.tokens.List(r.Context())
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.render(w, r, status, views.TokensPage(s.page(r, "API tokens", "tokens"), list, f, created, secret))
}

// tokenCreate makes a token acting for the signed-in operator and shows its
// secret once. The answer is the page itself, never a redirect, so the
// secret is in no URL and no later page (render sends no-store).
func (s *Server) tokenCreate(w http.ResponseWriter, r *http.Request) {
	if err := parseForm(w, r); err != nil {
		s.error(w, r, err)
		return
	}
	u, _ := s.currentUser(r)
	f := views.TokenForm{Name: r.PostFormValue("name"), Errors: views.FieldErrors{}}
	tok, secret, err := s.tokens.Create(r.Context(), s.actor(r), optokens.NewToken{UserID: u.ID, Name: f.Name})
	var ve *optokens.ValidationError
	if errors.As(err, &ve) {
		for _, fe := range ve.Fields {
			f.Errors[fe.Field] = fe.Message
		}
		s.renderTokens(w, r, http.StatusUnprocessableEntity, f, nil, "")
		return
	}
	if err != nil {
		s.error(w, r, err)
		return
	}
	s.log.Info("operator token created", "token_id", tok.ID, "user_id", u.ID)
	s.renderTokens(w, r, http.StatusCreated, views.TokenForm{}, &tok, secret)
}

// tokenRevoke revokes a token; revoking a revoked one changes nothing.
func (s *Server) tokenRevoke(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		s.error(w, r, fmt.Errorf("token id %q: %w", r.PathValue("id"), errNotFound))
		return
	}
	if _, err := s.tokens.Revoke(r.Context(), s.actor(r), id); errors.Is(err, optokens.ErrNotFound) {
		s.error(w, r, fmt.Errorf("token %d: %w", id, errNotFound))
		return
	} else if err != nil {
		s.error(w, r, err)
		return
	}
	http.Redirect(w, r, "/admin/tokens", http.StatusSeeOther)
}
