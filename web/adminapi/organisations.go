package adminapi

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/orgs"
)

type organisationList struct {
	Items []orgs.Summary `json:"items"`
}

// listOrganisations lists every organisation by name.
func (a *api) listOrganisations(w http.ResponseWriter, r *http.Request) {
	list, err := orgs.NewRepo(a.pool, nil).List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if list == nil {
		list = []orgs.Summary{}
	}
	writeJSON(w, http.StatusOK, organisationList{Items: list})
}

type organisationDetail struct {
	Organisation orgs.Summary  `json:"organisation"`
	MemberList   []orgs.Member `json:"member_list"`
}

// getOrganisation returns one organisation and its members.
func (a *api) getOrganisation(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	repo := orgs.NewRepo(a.pool, nil)
	o, err := repo.Summary(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	members, err := repo.Members(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, organisationDetail{Organisation: o, MemberList: members})
}
