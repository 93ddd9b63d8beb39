package adminapi

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/optokens"
)

type tokenList struct {
	Items []optokens.Token `json:"items"`
}

func (a *api) listTokens(w http.ResponseWriter, r *http.Request) {
	toks, err := a.tokens.List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if toks == nil {
		toks = []optokens.Token{}
	}
	writeJSON(w, http.StatusOK, tokenList{Items: toks})
}

// createTokenBody names a new operator token. UserID defaults to the
// caller's own operator account; with the bootstrap token, which has none,
// to the first operator account.
type createTokenBody struct {
	Name   string `json:"name"`
	UserID int64  `json:"user_id"`
}

type tokenWithSecret struct {
	Token  optokens.Token `json:"token"`
	Secret string         `json:"secret"`
}

func (a *api) createToken(w http.ResponseWriter, r *http.Request) {
	var body createTokenBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if body.UserID == 0 {
		p := principal(r.Context())
		body.UserID = p.UserID
		if p.Bootstrap {
			id, err := a.tokens.FirstOperator(r.Context())
			if errors.Is(err, optokens.ErrNotFound) {
				a.fail(w, r, &validationError{fields: []FieldError{{Field: "user_id", Message: "is required: no operator account exists to own the token"}}})
				return
			}
			if err != nil {
				a.fail(w, r, err)
				return
			}
			body.UserID = id
		}
	}
	tok, secret, err := a.tokens.Create(r.Context(), actor(r), optokens.NewToken{UserID: body.UserID, Name: body.Name})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, tokenWithSecret{Token: tok, Secret: secret})
}

func (a *api) revokeToken(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	tok, err := a.tokens.Revoke(r.Context(), actor(r), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tok)
}
