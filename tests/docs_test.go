package tests

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docPages are the Markdown files whose links TestDocLinks checks: the
// README and every page under docs/.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pages {
		pages[i] = filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
	}
	return append([]string{"README.md"}, pages...)
}

var (
	// fence matches a fenced code block, whose text is not Markdown.
	fence = regexp.MustCompile("(?ms)^ *```.*?^ *```[^\n]*$")
	// codeSpan matches inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	// mdLink matches [text](target) and ![alt](target); the text may span
	// lines.
	mdLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	// heading matches an ATX heading (run on prose, outside code blocks).
	heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#* *$`)
	// mapRow matches a row of the README's map of the code.
	mapRow = regexp.MustCompile("^\\| `([^`]+)` \\|")
)

// prose is a Markdown file's text with its fenced code blocks blanked out:
// a "# comment" in a shell block is no heading, a bracket in code no link.
func prose(md string) string {
	return fence.ReplaceAllStringFunc(md, func(s string) string { return strings.Repeat("\n", strings.Count(s, "\n")) })
}

// slug is the anchor GitHub gives a heading: its text lowercased, inline
// markup dropped, every character but letters, digits, '-', '_' and spaces
// removed, spaces turned into hyphens.
func slug(text string) string {
	text = mdLink.ReplaceAllStringFunc(text, func(l string) string { return l[strings.Index(l, "[")+1 : strings.Index(l, "](")] })
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the anchors of a Markdown file's headings, numbering
// repeated ones as GitHub does (name, name-1, name-2...).
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(prose(md), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// relativeLinks returns the targets of a Markdown file's links that point
// into the repository (no scheme, not mailto).
func relativeLinks(md string) []string {
	var out []string
	text := codeSpan.ReplaceAllString(prose(md), "``")
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		out = append(out, target)
	}
	return out
}

// TestDocLinks keeps every relative link in README.md and docs/*.md
// pointing at a file or directory of the repository, and every #anchor at a
// heading of the file it names, so moving a page or renaming a heading
// cannot leave a dead link behind.
func TestDocLinks(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pageAnchors := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := pageAnchors[rel]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		pageAnchors[rel] = anchors(string(b))
		return pageAnchors[rel]
	}
	checked := 0
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range relativeLinks(string(b)) {
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			rel := page
			if file != "" {
				rel = path.Clean(path.Join(path.Dir(page), file))
				if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(file) {
					t.Errorf("%s: link %q leaves the repository", page, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
					t.Errorf("%s: link %q: no file %s", page, target, rel)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(rel, ".md") {
				t.Errorf("%s: link %q: an anchor in a file that is not Markdown", page, target)
				continue
			}
			if !anchorsOf(rel)[anchor] {
				t.Errorf("%s: link %q: %s has no heading #%s", page, target, rel, anchor)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d links found: is the link pattern still right?", checked)
	}
}

// TestDocsAreLinked keeps every page under docs/ reachable from the README,
// and every configuration under docs/gateways/ linked from a docs page
// (docs/gateways.md quotes none of them: readers open the tested files).
func TestDocsAreLinked(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range relativeLinks(string(b)) {
			file, _, _ := strings.Cut(target, "#")
			if file != "" {
				targets[path.Clean(path.Join(path.Dir(page), file))] = true
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	fromReadme := map[string]bool{}
	for _, target := range relativeLinks(string(readme)) {
		file, _, _ := strings.Cut(target, "#")
		fromReadme[path.Clean(file)] = true
	}
	for _, page := range docPages(t, root)[1:] {
		if !fromReadme[page] {
			t.Errorf("README.md does not link %s", page)
		}
	}
	configs, err := os.ReadDir(filepath.Join(root, "docs", "gateways"))
	if err != nil {
		t.Fatal(err)
	}
	if len(configs) == 0 {
		t.Fatal("docs/gateways is empty")
	}
	for _, c := range configs {
		if !targets["docs/gateways/"+c.Name()] {
			t.Errorf("no docs page links docs/gateways/%s", c.Name())
		}
	}
}

// TestREADMEMapsEveryPackage keeps the README's map of the code in step with
// the tree: every directory that go list ./... prints (Go files, outside
// testdata, hidden and _ directories and nested modules) has its row, and
// every row names such a directory.
func TestREADMEMapsEveryPackage(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != root {
			return filepath.SkipDir // another module
		}
		gofiles, _ := filepath.Glob(filepath.Join(p, "*.go"))
		if len(gofiles) > 0 && p != root {
			rel, _ := filepath.Rel(root, p)
			pkgs = append(pkgs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "## A map of the code")
	if start < 0 {
		t.Fatal("README.md has no section \"## A map of the code\"")
	}
	section := readme[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if m := mapRow.FindStringSubmatch(line); m != nil {
			rows = append(rows, m[1])
		}
	}
	for _, p := range pkgs {
		if !slices.Contains(rows, p) {
			t.Errorf("README.md's map of the code has no row for package %s", p)
		}
	}
	for _, r := range rows {
		if !slices.Contains(pkgs, r) {
			t.Errorf("README.md's map of the code has a row for %s, which is no package", r)
		}
	}
	if len(pkgs) < 30 {
		t.Errorf("found only %d packages: is the walk still right?", len(pkgs))
	}
}
