package requestlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/requestlog"
	"github.com/sluicehq/sluice/internal/testenv"
)

// BenchmarkLog is the decision path's cost of logging one decision: a copy
// into the buffer under a mutex. A goroutine drains the buffer as Run
// would (without Postgres: Flush is not what is measured), so the buffer
// never fills and nothing is dropped; it samples nothing, so what Postgres
// sees is the maintenance once a minute.
func BenchmarkLog(b *testing.B) {
	w := requestlog.NewWriter(testenv.Postgres(b), requestlog.Options{AdmitSample: -1, RejectSample: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = w.Flush(ctx)
			}
		}
	}()
	e := entry(time.Now(), requestlog.Admitted, 1, 10)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.Log(e)
		}
	})
}
