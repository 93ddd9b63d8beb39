package docs

import (
	"fmt"
	"strconv"
	"strings"
)

// Backoff is the advice every rendering gives on handling a refusal.
const Backoff = "On 429, wait the Retry-After header's seconds before retrying (the 429 body's " +
	"retry_after says the same). Without Retry-After (a 503, say), back off exponentially with full " +
	"jitter: before retry n wait a random time between 0 and min(cap, base × 2^n), e.g. base 100 ms and " +
	"cap 10 s, so that many clients refused at once do not come back at once. Cap the attempts. To " +
	"avoid 429s altogether, watch X-RateLimit-Remaining and, when it reaches 0, wait until " +
	"X-RateLimit-Reset (Unix seconds). The Go client github.com/sluicehq/sluice/client does all of this."

// Markdown renders m as a Markdown document (served at /docs/limits.md).
func Markdown(m Model) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Rate limits\n\n")
	p("Generated from the plans Sluice enforces; it changes when they change.\n\n")
	if m.Your != nil {
		p("Your plan: **%s** (`%s`).\n\n", mdInline(m.Your.Name), m.Your.Slug)
	}
	p("## Plans\n\n")
	for _, pl := range m.Plans {
		p("### %s (`%s`)%s\n\n", mdInline(pl.Name), pl.Slug, planMarks(pl))
		if pl.Description != "" {
			p("%s\n\n", mdBlock(pl.Description))
		}
		if len(pl.Global) > 0 {
			p("Plan-wide limits, spent by every request and shared by all of a developer's keys (without a key: per IPv4 address or IPv6 /64):\n\n")
			for _, l := range pl.Global {
				p("- `%s`: %s, %s.\n", l.Policy, l.Rate, algorithmTitle(l))
			}
			p("\n")
		}
	}

	p("## Endpoints\n\n")
	p("An endpoint's tiers count per API key; the plan-wide limits above count per developer, all keys together.\n\n")
	for _, e := range m.Endpoints {
		p("### `%s`\n\n%s\n\n", e.Route, e.Description)
		p("```sh\n%s\n```\n\n", e.Curl)
		if !e.Limited {
			p("This endpoint spends nothing.\n\n")
			continue
		}
		p("| plan | policy | limit | window | burst | cost | algorithm | over the limit |\n")
		p("|---|---|---|---|---|---|---|---|\n")
		for i, ep := range e.Plans {
			name := m.Plans[i].Slug
			if ep.Yours {
				name += " (yours)"
			}
			if len(ep.Limits) == 0 {
				p("| %s | none | unlimited | | | | | |\n", name)
			}
			for _, l := range ep.Limits {
				p("| %s | `%s` | %d | %s | %s | %d | %s | %s |\n", name, l.Policy, l.Limit, l.WindowText,
					burstText(l), l.Cost, l.Algorithm, l.Mode)
			}
		}
		p("\n")
		for i, ep := range e.Plans {
			if len(ep.Limits) == 0 {
				continue
			}
			p("#### %s on `%s`\n\n", mdInline(m.Plans[i].Name), e.Route)
			for _, l := range ep.Limits {
				p("- `%s` (%s): %s %s%s\n", l.Policy, l.Rate, l.Explanation, l.OverLimit, spaced(l.PrecisionText))
			}
			p("\n")
			if ex := ep.Examples; ex != nil {
				p("The first request's answer:\n\n")
				writeResponse(&b, ex.First)
				if ex.Over != nil && ex.Over != ex.Rejected {
					p("Request %d, over a limit:\n\n", ex.OverAfter+1)
					writeResponse(&b, *ex.Over)
				}
				if ex.Rejected != nil {
					p("Request %d, refused:\n\n", ex.RejectedAfter+1)
					writeResponse(&b, *ex.Rejected)
				}
			}
		}
	}

	p("## When you are refused\n\n%s\n\n", Backoff)
	p("## Your status: `GET /api/rate-limit-status`\n\n")
	p("Every limit that applies to you, with limit, window, remaining and reset, read without " +
		"spending anything. Your usage page in the portal shows the same numbers.\n\n")
	p("```sh\n%s\n```\n\n", m.Status.Curl)
	if m.Status.Example.Status != 0 {
		writeResponse(&b, m.Status.Example)
	}
	if len(m.Algorithms) > 0 {
		p("## Algorithms\n\n")
		for _, a := range m.Algorithms {
			p("- **%s** (`%s`): %s\n", a.Title, a.Algorithm, a.Text)
		}
		p("\n")
	}
	p("## Headers\n\n")
	p("- `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds): the limit " +
		"you will run into first.\n")
	p("- `RateLimit-Policy` and `RateLimit`: every limit of the request, in the IETF " +
		"draft-ietf-httpapi-ratelimit-headers syntax (`q` quota, `w` window seconds, `r` remaining, `t` seconds to reset).\n")
	p("- `Retry-After` (on 429): whole seconds to wait, at least 1.\n")
	p("- `Sluice-Degraded`: the answer is cached or reduced because you passed a degrade-mode limit.\n")
	p("- `Sluice-Queue-Delay-Ms`: how long the request (or job) waited its turn in a queue.\n")
	return b.String()
}

// mdInline makes operator-written text (a plan's name) literal inline
// Markdown: every ASCII punctuation character is backslash-escaped, which
// CommonMark defines as the character itself, so no link, emphasis, HTML,
// table cell or heading can be started; line breaks become spaces.
func mdInline(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		if r == '\r' || r == '\n' || r == '\t' || r == ' ' {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		switch {
		case r < 0x20 || r == 0x7f:
			// other control characters have no place in a heading
		case r < 0x80 && strings.ContainsRune(mdPunctuation, r):
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdPunctuation is CommonMark's escapable ASCII punctuation.
const mdPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// mdBlock makes a description literal Markdown paragraphs: each line is
// escaped as inline text and loses its indentation (four spaces would start
// a code block); blank lines still separate paragraphs.
func mdBlock(s string) string {
	lines := strings.Split(strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n"), "\n")
	for i, l := range lines {
		lines[i] = mdInline(strings.TrimSpace(l))
	}
	return strings.Join(lines, "\n")
}

func writeResponse(b *strings.Builder, r Response) {
	fmt.Fprintf(b, "```http\nHTTP/1.1 %d %s\n", r.Status, statusText(r.Status))
	for _, h := range r.Headers {
		fmt.Fprintf(b, "%s: %s\n", h.Name, h.Value)
	}
	if r.Body != "" {
		fmt.Fprintf(b, "\n%s\n", r.Body)
	}
	b.WriteString("```\n\n")
}

func statusText(code int) string {
	switch code {
	case 200:
		return "OK"
	case 202:
		return "Accepted"
	case 429:
		return "Too Many Requests"
	}
	return strconv.Itoa(code)
}

func planMarks(p PlanDoc) string {
	var marks []string
	if p.Yours {
		marks = append(marks, "your plan")
	}
	if p.IsDefault {
		marks = append(marks, "default for new developers")
	}
	if p.IsAnonymous {
		marks = append(marks, "callers without a key")
	}
	if len(marks) == 0 {
		return ""
	}
	return ": " + strings.Join(marks, ", ")
}

func algorithmTitle(l LimitDoc) string {
	return algorithmDoc(l.Algorithm).Title
}

// burstText is the burst column: what Burst means for the algorithm.
func burstText(l LimitDoc) string {
	switch l.Algorithm {
	case "token_bucket":
		if l.Burst == 0 {
			return strconv.FormatInt(l.Limit, 10)
		}
		return strconv.FormatInt(l.Burst, 10)
	case "leaky_bucket":
		return strconv.FormatInt(l.Burst, 10) + " queued"
	}
	return "n/a"
}

// spaced is s after a space, or nothing for an empty s.
func spaced(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}
