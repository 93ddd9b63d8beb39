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

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/planfile"
	"github.com/sluicehq/sluice/internal/playground"
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
	st, err := openStore(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer st.close()
	if err := prepareSchema(ctx, cfg, st.pool, logger); err != nil {
		return err
	}
	store := planfile.NewStore(st.pool, protectedRoutes)
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
		_, err = io.WriteString(stdout, d.String())
		return err
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

const playgroundUsage = "playground [--preset SLUG] [--algorithms a,b,...] (without --preset: list the presets)"

// runPlayground is `portal playground`: replays a preset against its tier,
// every algorithm side by side, and prints the counts. It needs no store.
func runPlayground(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("playground", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	preset := fs.String("preset", "", "the preset to replay")
	algos := fs.String("algorithms", "", "comma-separated algorithms to compare (default all)")
	pos, err := parseInterspersed(fs, args)
	if err != nil || len(pos) > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected argument %q", pos[0])
		}
		return usageError{fmt.Errorf("playground: %w; usage: portal %s", err, playgroundUsage)}
	}
	if *preset == "" {
		for _, p := range playground.Presets() {
			fmt.Fprintf(stdout, "%-24s %s\n", p.Slug, p.Name)
		}
		return nil
	}
	p, ok := playground.PresetBySlug(*preset)
	if !ok {
		return usageError{fmt.Errorf("playground --preset %q: no such preset; run portal playground to list them", *preset)}
	}
	sc := p.Scenario(time.Now().Truncate(time.Minute))
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
	if err != nil {
		return err
	}
	return printReport(stdout, p, rep)
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
