package docs_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"

	"github.com/sluicehq/sluice/internal/docs"
)

// hostile are plan names and descriptions an operator (or whoever got an
// operator's session) could save; each tries to become Markdown structure.
var hostile = []string{
	"Gold](https://evil.example) [click here",
	"[Gold](javascript:alert(1))",
	"<script>alert(1)</script>",
	"<img src=x onerror=alert(1)>",
	"**bold** _em_ `code` ~~gone~~",
	"| pipe | in | a | table |",
	"# Heading\n## Another",
	"line one\n\n    indented code\n> quote\n- list\n1. numbered",
	"https://evil.example/autolink <https://evil.example>",
	"&lt;b&gt; &amp; entity",
	"back\\slash\\",
	"cr\rsplits\r\nlines",
}

// TestMarkdownEscapesPlanText renders hostile plan text in /docs/limits.md
// and parses the result with a CommonMark (GFM) parser: the document must
// have exactly the structure it has for a plain name (so none of the text
// became a link, HTML, emphasis, code, a heading, a list or a table), and
// the plan's heading must read as the operator typed it.
func TestMarkdownEscapesPlanText(t *testing.T) {
	md := goldmark.New(goldmark.WithExtensions(extension.GFM))
	render := func(name string) (map[ast.NodeKind]int, string) {
		pd := docs.PlanDoc{Slug: "gold", Name: name, Description: name}
		src := []byte(docs.Markdown(docs.Model{Plans: []docs.PlanDoc{pd}, Your: &pd}))
		kinds := map[ast.NodeKind]int{}
		_ = ast.Walk(md.Parser().Parse(text.NewReader(src)), func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			if entering && n.Kind() != ast.KindText && n.Kind() != ast.KindString {
				kinds[n.Kind()]++
			}
			return ast.WalkContinue, nil
		})
		var out bytes.Buffer
		if err := md.Convert(src, &out); err != nil {
			t.Fatal(err)
		}
		return kinds, out.String()
	}
	plain, _ := render("Gold")
	for _, s := range hostile {
		t.Run(s, func(t *testing.T) {
			kinds, out := render(s)
			// Blank lines in a description still separate paragraphs.
			paragraphs := 0
			for _, p := range strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(s), "\n\n") {
				if strings.TrimSpace(p) != "" {
					paragraphs++
				}
			}
			kinds[ast.KindParagraph] -= paragraphs - 1
			for k, n := range kinds {
				if plain[k] != n {
					t.Errorf("%d %s nodes, %d with a plain name", n, k, plain[k])
				}
			}
			for k, n := range plain {
				if kinds[k] != n {
					t.Errorf("%d %s nodes, %d with a plain name", kinds[k], k, n)
				}
			}
			want := "<h3>" + htmlText(strings.Join(strings.Fields(s), " ")) + " (<code>gold</code>)</h3>"
			if !strings.Contains(out, want) {
				t.Errorf("no heading %q in\n%s", want, out)
			}
		})
	}
}

// htmlText escapes s as goldmark writes text.
func htmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
