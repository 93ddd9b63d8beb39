package plans

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/audit"
)

const setArchived = `
UPDATE plans SET archived_at = CASE WHEN $2 THEN COALESCE(archived_at, now()) END,
    version = version + 1, updated_at = now()
WHERE id = $1`

// SetArchived archives (true) or restores (false) the plan, provided version
// is still its version; audited as plan.archive or plan.restore. An archived
// plan is offered to nobody new (not at sign-up, not in the plan choices
// for keys and developers, not for an upgrade request), while the keys and
// developers on it keep it and its limits keep enforcing. The default and
// anonymous plans cannot be archived: mark another plan first.
// Errors: *ValidationError (field "archived"), ErrNotFound, ErrConflict.
func (s *Service) SetArchived(ctx context.Context, actor string, id int64, version int, archived bool) (Plan, error) {
	var after Plan
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := lockPlan(ctx, tx, id, version)
		if err != nil {
			return err
		}
		if archived && (before.IsDefault || before.IsAnonymous) {
			role := "default plan (new developers get it)"
			if before.IsAnonymous {
				role = "anonymous plan (callers without a key get it)"
			}
			return &ValidationError{Fields: []FieldError{{Field: "archived",
				Message: fmt.Sprintf("%s is the %s: mark another plan first", before.Name, role)}}}
		}
		if _, err := tx.Exec(ctx, setArchived, id, archived); err != nil {
			return fmt.Errorf("set archived: %w", err)
		}
		if after, err = getPlan(ctx, tx, "WHERE id = $1", id); err != nil {
			return err
		}
		action := "plan.archive"
		if !archived {
			action = "plan.restore"
		}
		return audit.Record(ctx, tx, actor, action, audit.ObjectPlan, strconv.FormatInt(id, 10),
			map[string]any{"archived_at": before.ArchivedAt}, map[string]any{"archived_at": after.ArchivedAt})
	})
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return Plan{}, ve
		}
		return Plan{}, fmt.Errorf("archive plan %d: %w", id, err)
	}
	return after, nil
}

// archivedRoles refuses to make an archived plan the default or anonymous
// plan: it would be offered again while marked as not offered.
func archivedRoles(before Plan, in PlanInput) error {
	if before.ArchivedAt == nil {
		return nil
	}
	var errs []FieldError
	if in.IsDefault && !before.IsDefault {
		errs = append(errs, FieldError{Field: "is_default", Message: "an archived plan cannot be the default: restore it first"})
	}
	if in.IsAnonymous && !before.IsAnonymous {
		errs = append(errs, FieldError{Field: "is_anonymous", Message: "an archived plan cannot be the anonymous plan: restore it first"})
	}
	if len(errs) > 0 {
		return &ValidationError{Fields: errs}
	}
	return nil
}

// Offered reports whether the plan may be chosen for someone new: it is not
// archived.
func (p Plan) Offered() bool { return p.ArchivedAt == nil }
