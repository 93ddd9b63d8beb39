package views

import (
	"github.com/sluicehq/sluice/internal/docs"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/plans"
)

// PrecisionText is a stored tier's precision and its worst case with the
// portal's instances, as its row shows it.
func PrecisionText(l enforce.Limit, instances int) string {
	return docs.PrecisionBound(l, instances)
}

// PrecisionOption is one choice of the precision select.
func PrecisionOption(p enforce.Precision) string { return docs.PrecisionMeaning(p) }

// PrecisionFormText is what the form says under the precision select: the
// worst case of the tier as typed, when it is whole enough to have one,
// else what the choices trade.
func PrecisionFormText(in plans.LimitInput, instances int) string {
	l := in.Enforce("")
	if !l.Algorithm.Valid() || l.Limit < 1 || !l.Precision.Valid() || enforce.ValidatePrecision(l) != nil {
		return "leased and local trade exactness across instances for speed; each states its bound once the tier is saved"
	}
	return docs.PrecisionBound(l, instances)
}
