package memstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/enforce"
)

func TestSubjectStateName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subject string
		inline  bool
	}{
		{"OneByte", "a", true},
		{"IPv4", "ip:203.0.113.7", true},
		{"LongestInline", "ip:255.255.255.255", true},
		{"ShortestLong", "ip:255.255.255.2550", false},
		{"Long", "ip:2001:db8:85a3::8a2e:370:7334/128" + strings.Repeat("x", 200), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(tc.subject) <= subjectInline; got != tc.inline {
				t.Fatalf("case %q: %d bytes, inline %v, want %v: the case is misnamed", tc.name, len(tc.subject), got, tc.inline)
			}
			sub := newSubjectState(strings.Clone(tc.subject), 42)
			if got := sub.inlineLen != 0; got != tc.inline {
				t.Errorf("held in place: %v, want %v", got, tc.inline)
			}
			if got := sub.long != nil; got == tc.inline {
				t.Errorf("held in a copy: %v, want %v", got, !tc.inline)
			}
			if got := sub.subject(); got != tc.subject {
				t.Errorf("subject() = %q, want %q", got, tc.subject)
			}
			if sub.last != 42 {
				t.Errorf("last = %d, want 42", sub.last)
			}
			if !sub.is(tc.subject) {
				t.Errorf("is(%q) = false, want true", tc.subject)
			}
			n := len(tc.subject)
			lastChanged := tc.subject[:n-1] + string(tc.subject[n-1]^1)
			firstChanged := string(tc.subject[0]^1) + tc.subject[1:]
			for _, other := range []string{"", tc.subject[:n-1], tc.subject + "x", lastChanged, firstChanged} {
				if sub.is(other) {
					t.Errorf("is(%q) = true, want false", other)
				}
			}
		})
	}
}

// TestMemoryStoreTellsNamesApart decides over subjects of every length
// around the inline bound, many sharing their first bytes, in one shard
// whose table is rebuilt several times as they arrive: each keeps its own
// state throughout.
func TestMemoryStoreTellsNamesApart(t *testing.T) {
	store := New(Options{Shards: 1})
	ctx := context.Background()
	limits := []enforce.Limit{{Name: "once", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour}}
	var subjects []string
	for i := range 300 {
		id := strconv.Itoa(i)
		for _, width := range []int{1, subjectInline - 1, subjectInline, subjectInline + 1, 3 * subjectInline} {
			// The id comes last, so subjects of one width share all but
			// their last bytes.
			subjects = append(subjects, strings.Repeat("s", max(width-len(id), 0))+id)
		}
	}
	seen := make(map[string]bool)
	var distinct []string
	for _, s := range subjects {
		if !seen[s] {
			seen[s] = true
			distinct = append(distinct, s)
		}
	}
	for _, s := range distinct {
		d, err := store.Allow(ctx, enforce.Request{Subject: strings.Clone(s), Route: "GET /x", Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("first request of %q rejected, want admitted: it found another subject's state", s)
		}
	}
	if got := store.Len(); got != len(distinct) {
		t.Errorf("Len() = %d, want %d", got, len(distinct))
	}
	for _, s := range distinct {
		d, err := store.Allow(ctx, enforce.Request{Subject: strings.Clone(s), Route: "GET /x", Limits: limits})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			t.Errorf("second request of %q admitted, want rejected: its state was not found", s)
		}
	}
	points, err := store.Usage(ctx, distinct, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != len(distinct) {
		t.Fatalf("Usage returned %d points, want one per subject, %d", len(points), len(distinct))
	}
	for _, p := range points {
		if p.Admitted != 1 || p.Rejected != 1 {
			t.Errorf("usage of %q: %d admitted, %d rejected, want 1 and 1", p.Subject, p.Admitted, p.Rejected)
		}
	}
}

// TestMemoryStoreKeepsItsOwnSubjectName: a caller may hand the store a
// subject whose bytes it reuses afterwards (a string over a request buffer,
// as a zero-copy parser gives); the store keeps a copy, so the subject's
// state stays its own.
func TestMemoryStoreKeepsItsOwnSubjectName(t *testing.T) {
	for _, tc := range []struct {
		name        string
		first, next string // of one length
	}{
		{"Inline", "ip:203.0.113.7", "ip:203.0.113.8"},
		{"Long", "ip:2001:db8::7/128-" + strings.Repeat("x", 20), "ip:2001:db8::8/128-" + strings.Repeat("x", 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := New(Options{})
			ctx := context.Background()
			limits := []enforce.Limit{{Name: "once", Algorithm: enforce.FixedWindow, Limit: 1, Window: time.Hour}}
			allowed := func(subject string) bool {
				t.Helper()
				d, err := store.Allow(ctx, enforce.Request{Subject: subject, Limits: limits})
				if err != nil {
					t.Fatal(err)
				}
				return d.Allowed
			}
			buf := []byte(tc.first)
			if !allowed(unsafe.String(&buf[0], len(buf))) {
				t.Fatalf("first request of %q rejected, want admitted", tc.first)
			}
			copy(buf, tc.next) // the caller's next request
			if allowed(strings.Clone(tc.first)) {
				t.Errorf("second request of %q admitted, want rejected: the store lost its state when the caller reused its bytes", tc.first)
			}
			if !allowed(strings.Clone(tc.next)) {
				t.Errorf("first request of %q rejected, want admitted: it found %q's state", tc.next, tc.first)
			}
		})
	}
}
