package web

import (
	"context"
	"net/http"
	"time"
)

// serveStream serves one server-sent-events stream for the signed-in user
// (at most StreamsPerUser of them): every liveTick it writes the frame the
// shared view named key computes (one computation per tick for all the
// streams watching it), until the browser goes away, a write fails, or
// keep answers false.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, key string, keep func(context.Context) bool, frame func(ctx context.Context, state *any) ([]byte, error)) {
	user, _ := s.currentUser(r)
	release, ok := s.streams.open(w, user.ID)
	if !ok {
		return
	}
	defer release()
	view, unwatch := s.shares.watch(key)
	defer unwatch()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	ctx := r.Context()
	tick := time.NewTicker(liveTick)
	defer tick.Stop()
	for {
		if keep != nil && !keep(ctx) {
			return
		}
		events, err := view.frame(func(state *any) ([]byte, error) { return frame(ctx, state) })
		if err != nil {
			return
		}
		// A stream outlives the server's write timeout; each push gets
		// its own deadline instead.
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := w.Write(events); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
