package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"
)

// BenchmarkSignUpAnswer measures the time to answer a valid sign-up (no
// email configured) for a new address and for a registered one, side by
// side: each iteration sends one of each, alternating which goes first,
// and the medians of both are reported with their ratio. Each request
// comes from an address of its own, so the sign-up limit never answers.
//
//	go test -run '^$' -bench BenchmarkSignUpAnswer -benchtime 60x ./web
//
// Figures on the shared 2-core development machine, load average 32 (other
// engineers' builds and tests), -benchtime 60x -count 3: medians new /
// registered 181 / 162 ms, 95 / 89 ms, 34 / 37 ms; ratios 0.89, 0.93, 1.07.
// Both hash the password with argon2id, which is most of the answer.
func BenchmarkSignUpAnswer(b *testing.B) {
	e := newEnvWith(b, nil)
	e.defaultPlan()
	n := 0
	signUp := func(email string) time.Duration {
		n++
		c := e.anonymous()
		form := url.Values{"email": {email}, "password": {"another long passphrase"}}
		start := time.Now()
		res := c.post("/signup", form, fromIP(fmt.Sprintf("10.%d.%d.1", n/250, n%250)))
		took := time.Since(start)
		if res.StatusCode != http.StatusSeeOther {
			b.Fatalf("status %d", res.StatusCode)
		}
		return took
	}
	var fresh, taken []time.Duration
	i := 0
	for b.Loop() {
		i++
		if i%2 == 0 {
			fresh = append(fresh, signUp(fmt.Sprintf("new%d@example.com", i)))
			taken = append(taken, signUp(developerEmail))
		} else {
			taken = append(taken, signUp(developerEmail))
			fresh = append(fresh, signUp(fmt.Sprintf("new%d@example.com", i)))
		}
	}
	median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	mf, mt := median(fresh), median(taken)
	b.ReportMetric(float64(mf.Microseconds())/1000, "new-p50-ms")
	b.ReportMetric(float64(mt.Microseconds())/1000, "registered-p50-ms")
	b.ReportMetric(float64(mt)/float64(mf), "registered/new")
}
