package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/database"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/planfile"
	"github.com/sluicehq/sluice/internal/plans"
	"github.com/sluicehq/sluice/internal/playground"
	"github.com/sluicehq/sluice/internal/sampleapi"
	"github.com/sluicehq/sluice/internal/traffic"
)

const plansUsage = "plans export [--format yaml|json] [-o FILE] | diff [--prune] FILE | apply [--prune] [--dry-run] FILE"

// parseInterspersed parses fs over args allowing flags after positional
// arguments (`apply FILE --prune`), which flag.Parse alone stops at.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// runPlans is `portal plans export | diff | apply`: plans as code against
// the store of record the other settings name.
func runPlans(ctx context.Context, cfg Config, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("plans needs an action: " + plansUsage)}
	}
	action := args[0]
	fs := flag.NewFlagSet("plans "+action, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	format := fs.String("format", "yaml", "export format: yaml or json")
	out := fs.String("o", "", "write the export to this file instead of stdout")
	prune := fs.Bool("prune", false, "delete plans and services the file leaves out")
	dryRun := fs.Bool("dry-run", false, "check and print the diff, write nothing")
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return usageError{fmt.Errorf("plans %s: %w; usage: portal %s", action, err, plansUsage)}
	}
	var file string
	switch action {
	case "export":
		if len(pos) > 0 {
			return usageError{fmt.Errorf("plans export takes no argument (use -o FILE)")}
		}
	case "diff", "apply":
		if len(pos) != 1 {
			return usageError{fmt.Errorf("plans %s needs exactly one FILE (- for stdin)", action)}
		}
		file = pos[0]
	default:
		return usageError{fmt.Errorf("unknown plans action %q; usage: portal %s", action, plansUsage)}
	}
	f, err := planfile.ParseFormat(*format)
	if err != nil {
		return usageError{fmt.Errorf("plans export --format: %w", err)}
	}
	var parsed *planfile.Parsed
	if file != "" {
		// Read and check the file before opening the store, so a typo is
		// reported at once.
		data, err := readPlanFile(file)
		if err != nil {
			return err
		}
		if parsed, err = planfile.Decode(file, data); err != nil {
			return err
		}
	}

	// The command's output is the file or the diff: logs would mix into it.
	logger := slog.New(slog.DiscardHandler)
	st, err := openPortalStore(ctx, cfg, logger, false)
	if err != nil {
		return err
	}
	defer st.close()
	// Plans commands never migrate: a newer CLI run against a production
	// database must not change its schema as a side effect.
	if err := database.CheckSchema(ctx, st.pool); err != nil {
		return fmt.Errorf("plans: %w; run portal migrate up first", err)
	}
	store := planfile.NewStore(st.pool, protectedRoutes).WithReducedAnswers(sampleapi.ReducedAnswerRoutes())
	switch action {
	case "export":
		doc, err := store.Export(ctx)
		if err != nil {
			return err
		}
		b, err := planfile.Encode(doc, f)
		if err != nil {
			return err
		}
		if *out == "" {
			_, err = stdout.Write(b)
			return err
		}
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			return fmt.Errorf("plans export -o: %w", err)
		}
		return nil
	case "diff":
		d, err := store.Diff(ctx, parsed, *prune)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(stdout, d.String()); err != nil {
			return err
		}
		if !d.Empty() {
			return pendingChanges{len(d.Changes)}
		}
		return nil
	}
	d, err := store.Apply(ctx, parsed, planfile.Options{Prune: *prune, DryRun: *dryRun, Actor: "cli"})
	if err != nil {
		return err
	}
	if _, err := io.WriteString(stdout, d.String()); err != nil {
		return err
	}
	switch {
	case *dryRun:
		_, err = fmt.Fprintln(stdout, "dry run: nothing written")
	case d.Empty():
	default:
		_, err = fmt.Fprintf(stdout, "applied %d changes\n", len(d.Changes))
	}
	return err
}

// ExitPendingChanges is the exit status of `portal plans diff` when
// applying the file would change something, so a pipeline can tell "the
// portal already holds this file" (0) from "it does not" (3) and from an
// error (1) or a misused command (2).
const ExitPendingChanges = 3

// pendingChanges is the outcome of a diff that found changes: not a
// failure of the command, but not "nothing to do" either.
type pendingChanges struct{ n int }

func (p pendingChanges) Error() string {
	return fmt.Sprintf("plans diff: applying the file would make %d changes", p.n)
}

// ExitCode is the process's exit status for this outcome.
func (pendingChanges) ExitCode() int { return ExitPendingChanges }

func readPlanFile(name string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("plans: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, planfile.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("plans: read %s: %w", name, err)
	}
	return b, nil
}

const playgroundUsage = "playground [--preset SLUG | --route PATTERN [--subjects a,b] [--hours N]] [--algorithm A --limit N --window-seconds S --burst B] [--algorithms a,b,...] (without either: list the presets)"

// runPlayground is `portal playground`: replays a preset, or a route's
// recorded traffic (in Redis: REDIS_URL), against a tier, every algorithm
// side by side, and prints the counts.
func runPlayground(ctx context.Context, cfg Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("playground", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	preset := fs.String("preset", "", "the preset to replay")
	route := fs.String("route", "", "replay this route's recorded traffic")
	subjects := fs.String("subjects", "", "comma-separated subjects of the recorded traffic (default all)")
	hours := fs.Int("hours", 24, "how many hours of recorded traffic (1 to 24)")
	algos := fs.String("algorithms", "", "comma-separated algorithms to compare (default all)")
	algorithm := fs.String("algorithm", "", "the tier's algorithm (default the preset's)")
	limit := fs.Int64("limit", 0, "the tier's limit (default the preset's)")
	window := fs.Int64("window-seconds", 0, "the tier's window (default the preset's)")
	burst := fs.Int64("burst", -1, "the tier's burst (default the preset's)")
	pos, err := parseInterspersed(fs, args)
	if err != nil || len(pos) > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected argument %q", pos[0])
		}
		return usageError{fmt.Errorf("playground: %w; usage: portal %s", err, playgroundUsage)}
	}
	if *preset == "" && *route == "" {
		for _, p := range playground.Presets() {
			fmt.Fprintf(stdout, "%-24s %s\n", p.Slug, p.Name)
		}
		return nil
	}
	if *preset != "" && *route != "" {
		return usageError{errors.New("playground: --preset or --route, not both")}
	}
	if *hours < 1 || *hours > 24 {
		return usageError{fmt.Errorf("playground --hours %d: want 1 to 24", *hours)}
	}
	p := playground.Presets()[0]
	if *preset != "" {
		var ok bool
		if p, ok = playground.PresetBySlug(*preset); !ok {
			return usageError{fmt.Errorf("playground --preset %q: no such preset; run portal playground to list them", *preset)}
		}
	}
	tier := p.Tier
	if *algorithm != "" {
		tier.Algorithm = *algorithm
	}
	if *limit != 0 {
		tier.Limit = *limit
	}
	if *window != 0 {
		tier.WindowSeconds = *window
	}
	if *burst >= 0 {
		tier.Burst = *burst
	}
	sc := p.Scenario(time.Now().Truncate(time.Minute))
	var recorded *traffic.Recorded
	if *route != "" {
		if cfg.RedisURL == "" {
			return usageError{errors.New("playground --route: without REDIS_URL the recorded traffic lives in the serving portal's memory; replay it in the dashboard (/admin/playground) or the admin API")}
		}
		rdb, _, err := openRedis(ctx, cfg.RedisURL, cfg.RedisTimeout)
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		defer rdb.Close()
		rec, err := traffic.NewRecorder(traffic.NewRedisSink(rdb, cfg.RedisPrefix), traffic.Options{}).
			Load(ctx, *route, time.Now().Add(-time.Duration(*hours)*time.Hour))
		if err != nil {
			return err
		}
		var only []string
		if *subjects != "" {
			only = strings.Split(*subjects, ",")
		}
		sc.Arrivals = rec.Arrivals(only...)
		tier.Route = *route
		recorded = &rec
		p.Name = "Recorded traffic of " + *route
		p.Description = fmt.Sprintf("%d arrivals of %d subjects over the last %d hours", len(sc.Arrivals), len(rec.Series), *hours)
	}
	p.Tier = tier
	sc.Tiers = []plans.LimitInput{tier}
	if *algos != "" {
		for _, a := range strings.Split(*algos, ",") {
			algo := enforce.Algorithm(strings.TrimSpace(a))
			if !algo.Valid() {
				return usageError{fmt.Errorf("playground --algorithms: unknown algorithm %q", a)}
			}
			sc.Algorithms = append(sc.Algorithms, algo)
		}
	}
	rep, err := playground.Replay(ctx, sc)
	if errors.Is(err, playground.ErrInvalid) {
		return usageError{fmt.Errorf("playground: %w", err)}
	}
	if err != nil {
		return err
	}
	if err := printReport(stdout, p, rep); err != nil {
		return err
	}
	if recorded != nil {
		full, sampled := 0, 0
		for _, k := range recorded.Subjects {
			if k == traffic.KindFull {
				full++
			} else {
				sampled++
			}
		}
		_, err = fmt.Fprintf(stdout, "sampling: %d subjects in full, %d sampled (one in %d outside the busiest), %d arrivals of other subjects not recorded\n",
			full, sampled, recorded.SampleEvery, recorded.Unrecorded)
	}
	return err
}

func printReport(w io.Writer, p playground.Preset, rep playground.Report) error {
	fmt.Fprintf(w, "%s\n%s\ntier: %s %d per %ds, burst %d, cost %d\n\n", p.Name, p.Description,
		p.Tier.Algorithm, p.Tier.Limit, p.Tier.WindowSeconds, p.Tier.Burst, max(p.Tier.Cost, 1))
	fmt.Fprintf(w, "%-24s %9s %9s %9s\n", "algorithm", "admitted", "rejected", "limited")
	for _, r := range rep.Runs {
		name := string(r.Algorithm)
		if r.AsGiven {
			name += " *"
		}
		fmt.Fprintf(w, "%-24s %9d %9d %9d\n", name, r.Admitted, r.Rejected, r.LimitedSubjects)
	}
	_, err := fmt.Fprintln(w, "\n* the tier's own algorithm")
	return err
}
