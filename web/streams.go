package web

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Defaults of Deps.StreamsPerUser and Deps.StreamsMax.
const (
	DefaultStreamsPerUser = 3
	DefaultStreamsMax     = 256
)

// streamGate caps the live streams open at once, per user and in all: each
// holds a connection and reads the engine every second, so without a cap
// one browser script could open hundreds.
type streamGate struct {
	mu      sync.Mutex
	perUser map[int64]int
	total   int
	maxUser int
	maxAll  int
}

func newStreamGate(perUser, total int) *streamGate {
	if perUser <= 0 {
		perUser = DefaultStreamsPerUser
	}
	if total <= 0 {
		total = DefaultStreamsMax
	}
	return &streamGate{perUser: map[int64]int{}, maxUser: perUser, maxAll: total}
}

// open takes a stream slot for user, or answers 429 and returns false. The
// caller must call the returned release when the stream ends.
func (g *streamGate) open(w http.ResponseWriter, user int64) (release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var msg string
	switch {
	case g.perUser[user] >= g.maxUser:
		msg = fmt.Sprintf("You already have %d live views open, the most allowed; close one (another tab or window) and reload.", g.maxUser)
	case g.total >= g.maxAll:
		msg = "This server has as many live views open as it serves; try again in a minute."
	}
	if msg != "" {
		w.Header().Set("Retry-After", "10")
		http.Error(w, msg, http.StatusTooManyRequests)
		return nil, false
	}
	g.perUser[user]++
	g.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.perUser[user]--; g.perUser[user] <= 0 {
				delete(g.perUser, user)
			}
			g.total--
		})
	}, true
}

// viewShares lets every stream of one view (a developer's usage, one set
// of watched keys) share one computation per tick: N operators on the live
// page cost one set of reads a second, not N.
type viewShares struct {
	mu    sync.Mutex
	views map[string]*sharedView
}

// sharedView is one view's latest frame and the state its computation
// keeps between ticks, with how many streams watch it.
type sharedView struct {
	mu       sync.Mutex
	computed time.Time // monotonic: when last was computed
	last     []byte
	state    any
	watchers int
}

func newViewShares() *viewShares { return &viewShares{views: map[string]*sharedView{}} }

// watch attaches a stream to the view named key; call the returned func
// when the stream ends, which forgets the view after its last stream.
func (vs *viewShares) watch(key string) (*sharedView, func()) {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	v := vs.views[key]
	if v == nil {
		v = &sharedView{}
		vs.views[key] = v
	}
	v.watchers++
	return v, func() {
		vs.mu.Lock()
		defer vs.mu.Unlock()
		if v.watchers--; v.watchers == 0 {
			delete(vs.views, key)
		}
	}
}

// shareFor is how old a frame may be and still be sent: a little less than
// a tick, so a stream ticking every liveTick always gets a fresh frame
// while the other streams of its view, ticking in between, reuse it.
const shareFor = liveTick * 8 / 10

// frame returns the view's frame, computing it with compute unless another
// stream did less than shareFor ago. compute runs under the view's lock with
// the view's state, so one computation serves every waiting stream.
func (v *sharedView) frame(compute func(state *any) ([]byte, error)) ([]byte, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last != nil && time.Since(v.computed) < shareFor {
		return v.last, nil
	}
	start := time.Now()
	frame, err := compute(&v.state)
	if err != nil {
		return nil, err
	}
	v.last, v.computed = frame, start
	return frame, nil
}
