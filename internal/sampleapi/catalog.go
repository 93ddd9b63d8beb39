package sampleapi

import (
	"slices"
	"strconv"
	"strings"
)

// Item is one entry of the sample catalogue.
type Item struct {
	ID          int    `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
	// PriceCents avoids floating-point money even in a demo.
	PriceCents int `json:"price_cents"`
}

// catalogue is an immutable, deterministic list of items. Searching it is
// real work (every item is scanned and scored), which is what makes
// GET /api/search the expensive endpoint.
type catalogue struct {
	items []Item
	// text holds each item's lower-cased searchable text, built once.
	text []string
}

var (
	adjectives = []string{"amber", "brisk", "coastal", "dusky", "early", "frosted", "golden", "hollow", "iron", "jade", "keen", "lunar", "mossy", "northern", "opal", "quiet", "rustic", "silver", "tidal", "vivid"}
	materials  = []string{"oak", "slate", "copper", "linen", "glass", "wool", "cedar", "brass", "clay", "steel"}
	nouns      = []string{"lantern", "kettle", "compass", "ledger", "satchel", "teapot", "sextant", "trowel", "barometer", "clock", "easel", "globe", "hammock", "inkwell", "journal"}
	uses       = []string{"for the workshop", "for long voyages", "for the garden", "for quiet evenings", "for the studio", "for field notes", "for the kitchen"}
)

// newCatalogue builds n items from the word lists, the same on every run.
func newCatalogue(n int) *catalogue {
	c := &catalogue{items: make([]Item, n), text: make([]string, n)}
	for i := range n {
		a := adjectives[i%len(adjectives)]
		m := materials[(i/len(adjectives))%len(materials)]
		o := nouns[(i*7)%len(nouns)]
		u := uses[(i*3)%len(uses)]
		it := Item{
			ID:          i + 1,
			Name:        a + " " + m + " " + o,
			Description: "A " + a + " " + o + " in " + m + ", " + u + ". Model " + strconv.Itoa(1000+i) + ".",
			PriceCents:  500 + (i*7919)%20000,
		}
		c.items[i] = it
		c.text[i] = strings.ToLower(it.Name + " " + it.Description)
	}
	return c
}

// get returns the item with id, if any.
func (c *catalogue) get(id int) (Item, bool) {
	if id < 1 || id > len(c.items) {
		return Item{}, false
	}
	return c.items[id-1], true
}

// search scores the first `scan` items against the query's words (a word
// in the name counts three times as much as one in the description) and
// returns the best `limit` matches, best first, with the number of matches.
func (c *catalogue) search(query string, scan, limit int) ([]Item, int) {
	words := strings.Fields(strings.ToLower(query))
	if len(words) == 0 {
		return []Item{}, 0
	}
	type hit struct{ idx, score int }
	var hits []hit
	scan = min(scan, len(c.items))
	for i := range scan {
		score := 0
		name := c.text[i][:len(c.items[i].Name)]
		for _, w := range words {
			score += strings.Count(c.text[i], w)
			score += 2 * strings.Count(name, w)
		}
		if score > 0 {
			hits = append(hits, hit{i, score})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int {
		if a.score != b.score {
			return b.score - a.score
		}
		return a.idx - b.idx
	})
	out := make([]Item, 0, min(limit, len(hits)))
	for _, h := range hits[:min(limit, len(hits))] {
		out = append(out, c.items[h.idx])
	}
	return out, len(hits)
}
