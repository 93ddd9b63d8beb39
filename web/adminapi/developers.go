package adminapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
	"github.com/sluicehq/sluice/internal/users"
)

type developerList struct {
	Items  []users.User `json:"items"`
	Limit  int          `json:"limit"`
	Offset int          `json:"offset"`
}

// listDevelopers lists developer accounts, filtered by ?q= (part of the
// email) and ?plan_id=, oldest first.
func (a *api) listDevelopers(w http.ResponseWriter, r *http.Request) {
	qr := newQueryReader(r)
	f := users.ListFilter{
		Role:          users.RoleDeveloper,
		EmailContains: qr.str("q"),
		Limit:         int(qr.int64Range("limit", 100, 1, 1000)),
		Offset:        int(qr.int64Range("offset", 0, 0, 1<<31-1)),
	}
	if planID := qr.int64Range("plan_id", 0, 1, 1<<62); planID > 0 {
		f.PlanID = &planID
	}
	if err := qr.err(); err != nil {
		a.fail(w, r, err)
		return
	}
	list, err := a.users.List(r.Context(), f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if list == nil {
		list = []users.User{}
	}
	writeJSON(w, http.StatusOK, developerList{Items: list, Limit: f.Limit, Offset: f.Offset})
}

// developerPlanBody moves a developer to a plan ("plan_id": null: the
// default plan); Version is the developer's version the client read.
type developerPlanBody struct {
	Version int        `json:"version"`
	PlanID  nullableID `json:"plan_id"`
}

func (a *api) setDeveloperPlan(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var body developerPlanBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	var fields []FieldError
	if body.Version < 1 {
		fields = append(fields, FieldError{Field: "version", Message: "is required: send the version you read"})
	}
	if !body.PlanID.Set {
		fields = append(fields, FieldError{Field: "plan_id", Message: "is required: a plan id, or null for the default plan"})
	}
	if len(fields) > 0 {
		a.fail(w, r, &validationError{fields: fields})
		return
	}
	var updated users.User
	err = pgx.BeginFunc(r.Context(), a.pool, func(tx pgx.Tx) error {
		repo := users.NewRepo(tx)
		before, err := repo.ByID(r.Context(), id)
		if err != nil {
			return err
		}
		if before.Role != users.RoleDeveloper {
			// Operators have no plan; to this endpoint they do not exist.
			return users.ErrNotFound
		}
		if updated, err = repo.SetPlan(r.Context(), id, body.PlanID.Value, body.Version); err != nil {
			return err
		}
		return recordUser(r.Context(), tx, actor(r), before, updated)
	})
	switch {
	case errors.Is(err, users.ErrUnknownPlan):
		a.fail(w, r, &validationError{fields: []FieldError{{Field: "plan_id", Message: "no plan has this id"}}})
		return
	case err != nil:
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, updated)
}

func recordUser(ctx context.Context, tx pgx.Tx, actor string, before, after users.User) error {
	return audit.Record(ctx, tx, actor, "user.set_plan", audit.ObjectUser, strconv.FormatInt(after.ID, 10), before, after)
}
