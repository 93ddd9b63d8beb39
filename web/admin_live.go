package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/apikeys"
	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/views"
)

// maxLiveKeys bounds one live view: each key costs a Peek and a usage read
// per second.
const maxLiveKeys = 10

// liveTick is how often the live view pushes figures.
const liveTick = time.Second

// liveLimitsTTL is how long a stream reuses a key's limits before reading
// its plan again, so plan edits show within seconds.
const liveLimitsTTL = 5 * time.Second

// parseKeyIDs reads "12, 15 40" (or repeated key= parameters) into ids.
func parseKeyIDs(q url.Values) ([]int64, string, error) {
	raw := strings.Join(append(q["keys"], q["key"]...), ",")
	fields := strings.FieldsFunc(raw, func(r rune) bool { return r == ',' || r == ' ' })
	var ids []int64
	seen := map[int64]bool{}
	for _, f := range fields {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil || id <= 0 {
			return nil, raw, fmt.Errorf("%q is not a key id", f)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) > maxLiveKeys {
		return nil, raw, fmt.Errorf("watch at most %d keys at once", maxLiveKeys)
	}
	return ids, raw, nil
}

func streamURL(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return "/admin/live/stream?keys=" + url.QueryEscape(strings.Join(parts, ","))
}

// liveKeys is the live view's page: the first figures rendered at once, the
// rest pushed by the stream.
func (s *Server) liveKeys(w http.ResponseWriter, r *http.Request) {
	ids, raw, err := parseKeyIDs(r.URL.Query())
	p := s.page(r, "Live keys", "usage")
	p.SSE = true
	v := views.LivePage{Query: raw, Search: strings.TrimSpace(r.URL.Query().Get("q"))}
	if err != nil {
		v.Error = err.Error()
		s.render(w, r, http.StatusBadRequest, views.LiveKeysPage(p, v))
		return
	}
	if len(ids) == 0 && v.Search != "" {
		if ids, err = s.liveSearch(r.Context(), v.Search); err != nil {
			s.error(w, r, err)
			return
		}
		if len(ids) == 0 {
			v.Error = fmt.Sprintf("No active key matches %q.", v.Search)
		}
	}
	lv := newLiveView(s)
	for _, id := range ids {
		k, err := lv.figures(r.Context(), id)
		if errors.Is(err, apikeys.ErrNotFound) {
			v.Error = fmt.Sprintf("There is no key %d.", id)
			s.render(w, r, http.StatusNotFound, views.LiveKeysPage(p, v))
			return
		}
		v.Keys = append(v.Keys, k)
	}
	v.StreamURL = streamURL(ids)
	s.render(w, r, http.StatusOK, views.LiveKeysPage(p, v))
}

// liveStream pushes each watched key's figures every second as a
// Server-Sent Event named "key-<id>" whose data is the key's HTML fragment.
// An operator holds at most StreamsPerUser streams, and the streams
// watching the same keys share one computation per tick.
func (s *Server) liveStream(w http.ResponseWriter, r *http.Request) {
	ids, _, err := parseKeyIDs(r.URL.Query())
	if err != nil || len(ids) == 0 {
		http.Error(w, "name between 1 and 10 key ids in keys=", http.StatusBadRequest)
		return
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	s.serveStream(w, r, streamURL(sorted), nil, func(ctx context.Context, state *any) ([]byte, error) {
		// The view's liveView (its keys' limits, reread every few
		// seconds) is kept with the view, shared by its streams.
		lv, _ := (*state).(*liveView)
		if lv == nil {
			lv = newLiveView(s)
			*state = lv
		}
		var buf bytes.Buffer
		for _, id := range sorted {
			k, err := lv.figures(ctx, id)
			if err != nil && ctx.Err() != nil {
				return nil, err
			}
			var frag bytes.Buffer
			if err := views.LiveKeyFragment(k).Render(ctx, &frag); err != nil {
				return nil, err
			}
			writeEvent(&buf, views.LiveEvent(id), frag.Bytes())
		}
		return buf.Bytes(), nil
	})
}

// writeEvent writes one SSE event; every line of data gets its own "data:"
// prefix, as the format requires. The format ends a line at CR as well as
// LF, so a bare CR in the data (a key named "ci\revent: key-9") would start
// a field of its own and relabel the event; data is HTML, so each CR is
// written as its character reference instead.
func writeEvent(buf *bytes.Buffer, event string, data []byte) {
	buf.WriteString("event: ")
	buf.WriteString(event)
	buf.WriteByte('\n')
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		buf.WriteString("data: ")
		buf.Write(bytes.ReplaceAll(line, []byte{'\r'}, []byte("&#13;")))
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
}

// liveView computes watched keys' figures, reusing each key's limits for a
// few seconds.
type liveView struct {
	s      *Server
	cached map[int64]liveLimits
}

type liveLimits struct {
	at     time.Time
	key    apikeys.Key
	limits []enforce.Limit
}

func newLiveView(s *Server) *liveView {
	return &liveView{s: s, cached: map[int64]liveLimits{}}
}

// figures returns a key's live figures. Errors reading the engine are shown
// on the key rather than ending the view; an unknown key is an error.
func (lv *liveView) figures(ctx context.Context, id int64) (views.LiveKey, error) {
	s := lv.s
	now := s.now()
	c, ok := lv.cached[id]
	if !ok || now.Sub(c.at) > liveLimitsTTL {
		k, err := s.deps.Keys.Get(ctx, id)
		if err != nil {
			if !ok {
				return views.LiveKey{ID: id, Problem: "This key could not be read."}, err
			}
		} else {
			limits, err := s.keyLimits(ctx, k)
			if err != nil && !ok {
				return views.LiveKey{ID: id, Name: k.Name, Problem: "This key's limits could not be read."}, err
			}
			if err == nil {
				c = liveLimits{at: now, key: k, limits: limits}
				lv.cached[id] = c
			}
		}
	}
	k := c.key
	out := views.LiveKey{ID: k.ID, Name: k.Name, Owner: k.OwnerEmail, Prefix: k.Prefix, Plan: k.PlanSlug, State: k.State(now)}
	// The last hour is the developer's, all keys together: a developer's
	// keys share one subject and its usage series.
	subject := enforce.DeveloperSubject(k.UserID)
	if len(c.limits) > 0 {
		d, err := s.dashboard.Peek(ctx, enforce.Request{Subject: subject, Key: enforce.KeyScope(k.ID), Limits: c.limits})
		if err != nil {
			out.Problem = "The rate-limit store could not be read just now."
			s.log.Warn("live view peek", "key_id", k.ID, "err", err)
		}
		for i, l := range d.Layers {
			out.Limits = append(out.Limits, views.LiveLimit{
				Name: c.limits[i].Name, Route: c.limits[i].Route, Gauge: gaugeOf(l), ResetIn: l.ResetAfter,
			})
		}
	}
	points, err := s.deps.Usage.Usage(ctx, []string{subject}, now.Add(-usageWindow))
	if err != nil {
		out.Problem = "The usage series could not be read just now."
		s.log.Warn("live view usage", "key_id", k.ID, "err", err)
	}
	for _, p := range points {
		out.LastHour = out.LastHour.Add(views.Traffic{Admitted: p.Admitted, Rejected: p.Rejected})
	}
	return out, nil
}

// keyLimits is what the engine enforces for a key.
func (s *Server) keyLimits(ctx context.Context, k apikeys.Key) ([]enforce.Limit, error) {
	return s.deps.Plans.KeyLimits(ctx, k.PlanSlug, k.Overrides)
}
