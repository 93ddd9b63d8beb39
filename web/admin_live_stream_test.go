package web_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseEvent is one Server-Sent Event as a browser's EventSource sees it.
type sseEvent struct{ name, data string }

// scanSSELines splits a stream at CRLF, CR or LF: every line end the
// event-stream format allows, as browsers apply it.
func scanSSELines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\r' {
			if i+1 == len(data) && !atEOF {
				return 0, nil, nil // a CR at the end may be half of a CRLF
			}
			if i+1 < len(data) && data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
		}
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// readEvents reads n events from an event stream, parsed as the HTML
// standard says.
func readEvents(t *testing.T, c *client, path string, n int) []sseEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.e.srv.URL+path, nil)
	res, err := c.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sc.Split(scanSSELines)
	var out []sseEvent
	var cur sseEvent
	var data []string
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		if line == "" {
			if data != nil {
				cur.data = strings.Join(data, "\n")
				out = append(out, cur)
			}
			cur, data = sseEvent{}, nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			cur.name = value
		case "data":
			data = append(data, value)
		}
	}
	if len(out) < n {
		t.Fatalf("got %d events, want %d", len(out), n)
	}
	return out
}

// A carriage return in a key's name must not relabel events on the live
// stream: EventSource ends lines at CR too.
func TestLiveStreamEncodesCarriageReturns(t *testing.T) {
	e := newEnv(t)
	victim, _ := e.createKey(e.dev.ID, "victim")
	evil, _ := e.createKey(e.dev.ID, "ci\revent: key-"+fmt.Sprint(victim.ID)+"\rdata: <b>forged</b>\r")
	c := e.signedIn(operatorEmail)
	events := readEvents(t, c, fmt.Sprintf("/admin/live/stream?keys=%d,%d", evil.ID, victim.ID), 4)
	// Each event must be named for the key whose card it carries, whatever
	// order the stream sends the keys in.
	seen := map[string]bool{}
	for i, ev := range events {
		var key int64
		at := strings.Index(ev.data, `data-key="`)
		if at < 0 {
			t.Fatalf("event %d carries no key card: %.200s", i, ev.data)
		}
		if _, err := fmt.Sscanf(ev.data[at+len(`data-key="`):], "%d", &key); err != nil {
			t.Fatalf("event %d: key card without a key id: %.200s", i, ev.data)
		}
		if want := fmt.Sprintf("key-%d", key); ev.name != want {
			t.Errorf("event %d named %q, but carries key %d's card", i, ev.name, key)
		}
		if strings.Contains(ev.data, "<b>forged</b>") {
			t.Errorf("event %d carries forged markup: %.200s", i, ev.data)
		}
		if key == evil.ID {
			if !strings.Contains(ev.data, "ci&#13;event: key-") {
				t.Errorf("the key's name is not in its event, CR encoded: %.300s", ev.data)
			}
		}
		seen[ev.name] = true
	}
	for _, id := range []int64{evil.ID, victim.ID} {
		if !seen[fmt.Sprintf("key-%d", id)] {
			t.Errorf("no event for key %d in %d events", id, len(events))
		}
	}
}
