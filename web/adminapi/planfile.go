package adminapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/planfile"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/traffic"
)

// exportPlansFile is GET /plans-file?format=yaml|json: every plan, tier,
// service and route as a plans file (never a key or a secret).
func (a *api) exportPlansFile(w http.ResponseWriter, r *http.Request) {
	format, err := planfile.ParseFormat(r.URL.Query().Get("format"))
	if err != nil {
		a.fail(w, r, invalidParam("format", "must be yaml or json"))
		return
	}
	f, err := a.planfiles.Export(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	b, err := planfile.Encode(f, format)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ct, ext := "application/yaml", "yaml"
	if format == planfile.JSON {
		ct, ext = jsonContentType, "json"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="plans.%s"`, ext))
	_, _ = w.Write(b)
}

// planDiff is the answer of diff and apply.
type planDiff struct {
	planfile.Diff
	// Text is the diff as `portal plans diff` prints it.
	Text    string `json:"text"`
	Applied bool   `json:"applied"`
}

// diffPlansFile is POST /plans-file/diff?prune=: what applying the body
// (a YAML or JSON plans file) would change.
func (a *api) diffPlansFile(w http.ResponseWriter, r *http.Request) {
	a.applyPlansFile(w, r, true)
}

// applyPlansFileHandler is POST /plans-file/apply?prune=&dry_run=&base=.
func (a *api) applyPlansFileHandler(w http.ResponseWriter, r *http.Request) {
	a.applyPlansFile(w, r, false)
}

func (a *api) applyPlansFile(w http.ResponseWriter, r *http.Request, diffOnly bool) {
	q := r.URL.Query()
	var opts planfile.Options
	var errs []FieldError
	for name, dst := range map[string]*bool{"prune": &opts.Prune, "dry_run": &opts.DryRun} {
		if v := q.Get(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, FieldError{Field: name, Message: "must be true or false"})
			}
			*dst = b
		}
	}
	if len(errs) > 0 {
		a.fail(w, r, &validationError{fields: errs})
		return
	}
	opts.Base = q.Get("base")
	opts.DryRun = opts.DryRun || diffOnly
	opts.Actor = actor(r)
	p, err := decodePlansFile(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	d, err := a.planfiles.Apply(r.Context(), p, opts)
	if err != nil {
		a.fail(w, r, planFileError(err))
		return
	}
	writeJSON(w, http.StatusOK, planDiff{Diff: d, Text: d.String(), Applied: !opts.DryRun && !d.Empty()})
}

// decodePlansFile reads the body as a plans file named "request body".
func decodePlansFile(w http.ResponseWriter, r *http.Request) (*planfile.Parsed, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, planfile.MaxFileBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &requestError{status: http.StatusRequestEntityTooLarge, typ: typeTooLarge,
				title: "Request too large", detail: fmt.Sprintf("A plans file is at most %d bytes.", planfile.MaxFileBytes)}
		}
		return nil, err
	}
	p, err := planfile.Decode("request body", body)
	if err != nil {
		return nil, planFileError(err)
	}
	return p, nil
}

// planFileError turns a refused file into a validation problem, each field
// with its line, and a stale base into a 409.
func planFileError(err error) error {
	var fe *planfile.Error
	switch {
	case errors.As(err, &fe):
		fields := make([]FieldError, len(fe.Problems))
		for i, p := range fe.Problems {
			msg := p.Message
			if p.Line > 0 {
				msg = fmt.Sprintf("line %d: %s", p.Line, msg)
			}
			fields[i] = FieldError{Field: p.Field, Message: msg}
		}
		return &validationError{fields: fields}
	case errors.Is(err, planfile.ErrConflict):
		return fmt.Errorf("%w: %w", plans.ErrConflict, err)
	}
	return err
}

func invalidParam(name, msg string) error {
	return &validationError{fields: []FieldError{{Field: name, Message: msg}}}
}

// playgroundBody is a replay request: a preset, recorded traffic, or tiers
// over given arrivals.
type playgroundBody struct {
	// Preset names a synthetic scenario; Tiers, when also given, replace
	// its tier.
	Preset string `json:"preset"`
	// Recorded replays a route's recorded arrivals.
	Recorded   *recordedBody        `json:"recorded"`
	Tiers      []plans.LimitInput   `json:"tiers"`
	Algorithms []enforce.Algorithm  `json:"algorithms"`
	Arrivals   []playground.Arrival `json:"arrivals"`
}

// recordedBody chooses recorded traffic: a route, optionally some of its
// subjects, over the last Hours hours (default and at most 24).
type recordedBody struct {
	Route    string   `json:"route"`
	Subjects []string `json:"subjects"`
	Hours    int      `json:"hours"`
}

// replayAnswer is a report, with how the recorded traffic was sampled
// when it was replayed.
type replayAnswer struct {
	playground.Report
	Recorded *traffic.Recorded `json:"recorded,omitempty"`
}

type routeList struct {
	Items []string `json:"items"`
}

// listRecordedRoutes is GET /playground/routes: the routes with recorded
// traffic.
func (a *api) listRecordedRoutes(w http.ResponseWriter, r *http.Request) {
	routes := []string{}
	if a.traffic != nil {
		rs, err := a.traffic.Routes(r.Context())
		if err != nil {
			a.fail(w, r, err)
			return
		}
		routes = append(routes, rs...)
	}
	writeJSON(w, http.StatusOK, routeList{Items: routes})
}

type presetList struct {
	Items []playground.Preset `json:"items"`
}

func (a *api) listPresets(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, presetList{Items: playground.Presets()})
}

// replay is POST /playground: every algorithm side by side.
func (a *api) replay(w http.ResponseWriter, r *http.Request) {
	var body playgroundBody
	if err := decodeJSON(w, r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	sc := playground.Scenario{Tiers: body.Tiers, Algorithms: body.Algorithms, Arrivals: body.Arrivals}
	if body.Preset != "" {
		p, ok := playground.PresetBySlug(body.Preset)
		if !ok {
			a.fail(w, r, invalidParam("preset", "no such preset; GET "+Prefix+"/playground/presets lists them"))
			return
		}
		sc.Arrivals = p.Arrivals(a.now().Truncate(time.Minute))
		if len(sc.Tiers) == 0 {
			sc.Tiers = []plans.LimitInput{p.Tier}
		}
	}
	var recorded *traffic.Recorded
	if body.Recorded != nil {
		rb := body.Recorded
		switch {
		case a.traffic == nil:
			a.fail(w, r, invalidParam("recorded", "traffic recording is off (PORTAL_TRAFFIC_RECORDING=false)"))
			return
		case rb.Route == "":
			a.fail(w, r, invalidParam("recorded.route", "is required"))
			return
		case rb.Hours < 0 || rb.Hours > 24:
			a.fail(w, r, invalidParam("recorded.hours", "must be from 1 to 24 (0 means 24)"))
			return
		}
		hours := rb.Hours
		if hours == 0 {
			hours = 24
		}
		rec, err := a.traffic.Load(r.Context(), rb.Route, a.now().Add(-time.Duration(hours)*time.Hour))
		if err != nil {
			a.fail(w, r, err)
			return
		}
		sc.Arrivals = rec.Arrivals(rb.Subjects...)
		recorded = &rec
	}
	rep, err := a.replayer.Replay(r.Context(), sc)
	var ie *playground.InvalidError
	if errors.As(err, &ie) {
		field := ie.Field
		if recorded != nil && strings.HasPrefix(field, "arrivals") {
			field = "recorded" // the arrivals were the recording's, not the body's
		}
		a.fail(w, r, invalidParam(field, ie.Message))
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, replayAnswer{Report: rep, Recorded: recorded})
}
