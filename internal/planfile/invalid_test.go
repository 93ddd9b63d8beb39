package planfile_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/planfile"
)

// plan is a valid one-plan file whose lines the cases below edit; its
// lines are numbered in the comments.
const plan = `version: 1
plans:
  - slug: gold
    name: Gold
    limits:
      - name: search
        route: GET /api/search
        algorithm: token_bucket
        limit: 10
        window_seconds: 60
`

func TestInvalidFiles(t *testing.T) {
	s, pool := seeded(t)
	ctx := context.Background()
	cases := []struct {
		name  string
		file  string
		line  int
		field string
		msg   string
	}{
		{"Syntax", "version: 1\nplans: [\n  {slug: a\n", 2, "", "not valid YAML"},
		{"Empty", "", 1, "", "empty"},
		{"NotAMapping", "- 1\n", 1, "", "must be object, not array"},
		{"Version", strings.Replace(plan, "version: 1", "version: 2", 1), 1, "version", "1"},
		{"UnknownField", strings.Replace(plan, "    name: Gold\n", "    name: Gold\n    colour: gold\n", 1), 5, "plans[0].colour", `unknown field "colour"`},
		{"MissingName", strings.Replace(plan, "    name: Gold\n", "", 1), 3, "plans[0].name", "is required"},
		{"WindowNotANumber", strings.Replace(plan, "window_seconds: 60", "window_seconds: sixty", 1), 10, "plans[0].limits[0].window_seconds", "must be integer, not string"},
		{"UnknownAlgorithm", strings.Replace(plan, "token_bucket", "magic", 1), 8, "plans[0].limits[0].algorithm", "token_bucket"},
		{"LimitZero", strings.Replace(plan, "limit: 10", "limit: 0", 1), 9, "plans[0].limits[0].limit", "must be at least 1, not 0"},
		{"BadSlug", strings.Replace(plan, "slug: gold", "slug: Gold!", 1), 3, "plans[0].slug", "does not match"},
		{"DuplicateKey", strings.Replace(plan, "    name: Gold\n", "    name: Gold\n    name: Gilt\n", 1), 5, "plans[0].name", "appears twice"},
		{"Alias", "version: 1\nplans: &p []\nservices: *p\n", 3, "services", "aliases"},
		{"UndeclaredRoute", strings.Replace(plan, "GET /api/search", "GET /nowhere", 1), 7, "plans[0].limits[0].route", "unknown route"},
		{"CostOverLimit", strings.Replace(plan, "window_seconds: 60\n", "window_seconds: 60\n        cost: 11\n", 1), 11, "plans[0].limits[0].cost", "must not exceed the limit"},
		{"DuplicatePlan", plan + "  - slug: gold\n    name: Gold again\n", 11, "plans[1].slug", "duplicates plans[0]"},
		{"TwoDefaults", "version: 1\nplans:\n  - slug: a\n    name: A\n    is_default: true\n  - slug: b\n    name: B\n    is_default: true\n", 8, "plans[1].is_default", "at most one plan"},
		{"RouteWithoutMethod", "version: 1\nservices:\n  - slug: shop\n    name: Shop\n    routes:\n      - /cart\n", 6, "services[0].routes[0]", "needs a method"},
		{"RouteOfAnotherService", "version: 1\nservices:\n  - slug: shop\n    name: Shop\n    routes:\n      - GET /invoices/{id}\n", 6, "services[0].routes[0]", "conflicts with another service's route"},
		{"HostOfAnotherService", "version: 1\nservices:\n  - slug: shop\n    name: Shop\n    hosts: [billing.example.com]\n", 5, "services[0].hosts[0]", `host of service "billing"`},
		{"SecondDocument", plan + "---\n" + strings.Replace(plan, "gold", "silver", 1), 12, "", "a second YAML document"},
		{"DuplicateQuota", plan + "      - name: day\n        algorithm: quota\n        period: day\n        limit: 5\n      - name: daily\n        algorithm: quota\n        period: day\n        limit: 9\n", 15, "plans[0].limits[2].route", "same route, algorithm and period"},
		{"DuplicateLimitName", plan + "      - name: search\n        algorithm: fixed_window\n        limit: 5\n        window_seconds: 1\n", 11, "plans[0].limits[1].name", "duplicates the name"},
	}
	before := export(t, s, planfile.JSON)
	audits := auditCount(t, pool)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := planfile.Decode("bad.yaml", []byte(c.file))
			if err == nil {
				_, err = s.Apply(ctx, p, planfile.Options{})
			}
			var fe *planfile.Error
			if !errors.As(err, &fe) || !errors.Is(err, planfile.ErrInvalid) {
				t.Fatalf("want a *planfile.Error, got %v", err)
			}
			got := fe.Problems[0]
			if got.File != "bad.yaml" || got.Line != c.line || got.Field != c.field || !strings.Contains(got.Message, c.msg) {
				t.Errorf("first problem %+v, want bad.yaml line %d field %q message containing %q (all: %v)", got, c.line, c.field, c.msg, err)
			}
		})
	}
	if after := export(t, s, planfile.JSON); !bytes.Equal(before, after) {
		t.Error("a refused file changed the state")
	}
	if n := auditCount(t, pool); n != audits {
		t.Errorf("refused files wrote %d audit entries", n-audits)
	}
}

// FuzzDecode checks that no input makes the decoder panic, and that what it
// accepts encodes and decodes again to the same file. The seed corpus is
// in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(plan))
	seeds, _ := filepath.Glob("testdata/*.yaml") // hand-written examples, if any
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := planfile.Decode("fuzz.yaml", data)
		if err != nil {
			var fe *planfile.Error
			if !errors.As(err, &fe) || len(fe.Problems) == 0 {
				t.Fatalf("error is not a *planfile.Error with problems: %v", err)
			}
			return
		}
		for _, format := range []planfile.Format{planfile.YAML, planfile.JSON} {
			b, err := planfile.Encode(p.File, format)
			if err != nil {
				t.Fatal(err)
			}
			q, err := planfile.Decode("again", b)
			if err != nil {
				t.Fatalf("re-decoding the %s encoding of an accepted file: %v\n%s", format, err, b)
			}
			b2, _ := planfile.Encode(q.File, format)
			if !bytes.Equal(b, b2) {
				t.Fatalf("%s encoding is not stable:\n%s\n---\n%s", format, b, b2)
			}
		}
	})
}
