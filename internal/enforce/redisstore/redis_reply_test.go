package redisstore

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/enforce"
)

func TestParseReply(t *testing.T) {
	cases := []struct {
		name    string
		raw     string
		want    []replyValue
		wantErr string // substring; "" for none
		redis   bool   // the error is a Redis error reply
	}{
		{name: "Integers", raw: "*3\r\n:1712\r\n:-5\r\n:0\r\n", want: []replyValue{{n: 1712}, {n: -5}, {n: 0}}},
		{name: "EmptyArray", raw: "*0\r\n", want: nil},
		{name: "ErrorElement", raw: "*2\r\n:7\r\n-WRONGTYPE Operation against a key\r\n", want: []replyValue{{n: 7}, {err: replyError("WRONGTYPE Operation against a key")}}},
		{name: "TopLevelError", raw: "-NOSCRIPT No matching script. Please use EVAL.\r\n", wantErr: "NOSCRIPT", redis: true},
		{name: "NotAnArray", raw: "$3\r\nabc\r\n", wantErr: "want an array"},
		{name: "StringElement", raw: "*1\r\n$3\r\nabc\r\n", wantErr: "want an integer"},
		{name: "CutShort", raw: "*2\r\n:1\r\n", wantErr: "cut short"},
		{name: "BadInteger", raw: "*1\r\n:12x\r\n", wantErr: "bad integer"},
		{name: "Overflow", raw: "*1\r\n:99999999999999999999\r\n", wantErr: "bad integer"},
		{name: "BadHeader", raw: "*-1\r\n", wantErr: "bad array header"},
		{name: "Empty", raw: "", wantErr: "empty reply"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseReply([]byte(tc.raw), nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				if !slices.Equal(got, tc.want) {
					t.Fatalf("values %v, want %v", got, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			var rerr redis.Error
			if errors.As(err, &rerr) != tc.redis {
				t.Fatalf("error %v is a Redis error reply: %v, want %v", err, !tc.redis, tc.redis)
			}
			if tc.redis && !isNoScript(err) {
				t.Fatalf("error %v not recognised as NOSCRIPT", err)
			}
		})
	}
}

func TestRawReplyErrorsAreClassified(t *testing.T) {
	cases := []struct {
		name            string
		reply           string
		wantUnavailable bool
		wantRetried     bool
	}{
		{name: "LoadingIsAnOutageRetriedByTheClient", reply: "-LOADING Redis is loading the dataset in memory\r\n", wantUnavailable: true, wantRetried: true},
		{name: "ReadOnlyIsAnOutageRetriedByTheClient", reply: "-READONLY You can't write against a read only replica.\r\n", wantUnavailable: true, wantRetried: true},
		{name: "ScriptErrorIsABug", reply: "-ERR user_script:1: bad argument\r\n", wantUnavailable: false, wantRetried: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := redis.NewRawCmd(t.Context())
			cmd.SetVal([]byte(tc.reply))
			s := &Store{}
			r := s.read(newBatcher(1), []redis.Cmder{cmd}, 0)[0]
			if r.err == nil || !r.raw {
				t.Fatalf("reply %q: error %v (raw %v), want an error from a raw reply", tc.reply, r.err, r.raw)
			}
			if got := errors.Is(r.err, enforce.ErrStoreUnavailable); got != tc.wantUnavailable {
				t.Errorf("error %v: ErrStoreUnavailable %v, want %v", r.err, got, tc.wantUnavailable)
			}
			if got := retriedByClient(r.err); got != tc.wantRetried {
				t.Errorf("error %v: retried by the client %v, want %v", r.err, got, tc.wantRetried)
			}
		})
	}
}
