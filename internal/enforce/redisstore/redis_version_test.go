package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/enforce"
	"github.com/sluicehq/sluice/internal/enforce/storetest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// redis6Error is how go-redis reports a Redis error reply.
type redis6Error string

func (e redis6Error) Error() string { return string(e) }
func (redis6Error) RedisError()     {}

// redis6 answers PEXPIRE with an option as Redis 6.2 does, passing every
// other command to the real server.
type redis6 struct{}

func (redis6) DialHook(next redis.DialHook) redis.DialHook { return next }
func (redis6) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "pexpire") && len(cmd.Args()) > 3 {
			err := redis6Error("ERR wrong number of arguments for 'pexpire' command")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (redis6) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestRedisStoreRefusesARedisWithoutPexpireGT(t *testing.T) {
	client, prefix := storetest.Redis(t)
	newTestRedisStore(t, client, Options{Prefix: prefix})
	old := storetest.InstanceClient(t)
	old.AddHook(redis6{})
	s, err := New(old, Options{Prefix: prefix})
	if err == nil {
		s.Close()
		t.Fatal("a Redis without PEXPIRE GT was accepted")
	}
	if !strings.Contains(err.Error(), "Redis 7.0 or later") {
		t.Errorf("error %q does not say what is required", err)
	}
	if n, _ := client.Exists(context.Background(), prefix+"{version-check}").Result(); n != 0 {
		t.Errorf("the check left its key behind")
	}
}

// A Redis down at start is not refused: the portal starts, its failure
// mode governs until Redis answers.
func TestRedisStoreStartsWhileRedisIsDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	s, err := New(c, Options{})
	if err != nil {
		t.Fatalf("with Redis down: %v", err)
	}
	s.Close()
}

// A Redis that was down at start is checked once it answers: one too old
// is refused with the reason, for every decision, instead of each failing
// on the script's PEXPIRE GT (which the hook would not even show here: the
// pipeline's own connection bypasses it, so without the check decisions
// would go on against the real server).
func TestRedisStoreChecksTheVersionOnceRedisComesUp(t *testing.T) {
	s, r := storeWhileRedisIsDown(t, redis6{})
	req := enforce.Request{Subject: "ip:1.2.3.4", Limits: []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute}}}
	if _, err := s.Allow(context.Background(), req); !errors.Is(err, enforce.ErrStoreUnavailable) {
		t.Fatalf("with Redis down: err %v, want ErrStoreUnavailable", err)
	}
	r.Restart(t)
	for i := range 2 {
		_, err := s.Allow(context.Background(), req)
		if !errors.Is(err, enforce.ErrStoreUnavailable) || !strings.Contains(fmt.Sprint(err), "Redis 7.0 or later") {
			t.Fatalf("decision %d once a too-old Redis answers: err %v, want it refused with the reason", i+1, err)
		}
	}
}

// The same with a Redis new enough: decisions go on once it answers.
func TestRedisStoreDecidesOnceRedisComesUp(t *testing.T) {
	s, r := storeWhileRedisIsDown(t)
	req := enforce.Request{Subject: "ip:1.2.3.4", Limits: []enforce.Limit{{Name: "l", Algorithm: enforce.FixedWindow, Limit: 10, Window: time.Minute}}}
	r.Restart(t)
	for i := range 3 {
		d, err := s.Allow(context.Background(), req)
		if err != nil || !d.Allowed || d.Layers[0].Remaining != int64(9-i) {
			t.Fatalf("decision %d once Redis answers: %+v, %v; want admitted with %d remaining", i+1, d, err, 9-i)
		}
	}
}

// storeWhileRedisIsDown starts a store on a private redis-server stopped
// before the store starts, its client carrying hooks; the caller restarts
// the server.
func storeWhileRedisIsDown(t *testing.T, hooks ...redis.Hook) (*Store, *testenv.PrivateRedis) {
	t.Helper()
	testenv.RealRedis(t, "a private redis-server, stopped and started")
	r := testenv.StartPrivateRedis(t)
	r.Stop()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	for _, h := range hooks {
		c.AddHook(h)
	}
	s, err := New(c, Options{DisableUsage: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("with Redis down: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, r
}
