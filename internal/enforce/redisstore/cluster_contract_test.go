package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
)

// TestStoreContractOnACluster runs the contract every store keeps over a
// three-node Redis Cluster, where every request's keys share its
// subject's hash tag and each subject's decision is its own script call.
func TestStoreContractOnACluster(t *testing.T) {
	client := startRedisCluster(t)
	n := 0
	storetest.Run(t, storetest.Kind{Name: "RedisCluster", New: func(t *testing.T, clock *storetest.Clock) enforce.Store {
		n++
		return newTestRedisStore(t, client, Options{Prefix: fmt.Sprintf("contract%d:", n), Now: clock.Now, Timeout: 5 * time.Second})
	}})
}
