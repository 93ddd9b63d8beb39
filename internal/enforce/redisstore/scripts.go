package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts that read or write the subjects' state records share their
// layout and packing, scripts/record.lua. Redis's EVAL has no include, so
// each is sent as that text followed by its own body: one script, one SHA
// (EVALSHA of the whole), with no command more per call. Redis Functions
// (FUNCTION LOAD), which could hold the shared code once, are not used:
// miniredis, on which the tests run without a Redis, has none, and a
// Cluster needs them loaded on every master, new ones included, where a
// script is loaded again on NOSCRIPT by the node that lacks it.

//go:embed scripts/record.lua
var recordSource string

//go:embed scripts/decide.lua
var decideBody string

//go:embed scripts/adjust.lua
var adjustBody string

//go:embed scripts/refund.lua
var refundBody string

// decideScript is the decision script as Redis runs it (see Store.load).
var decideScript = recordSource + decideBody

// adjustScript and refundScript are run with EVALSHA, loaded again on
// NOSCRIPT by go-redis.
var (
	adjustScript = redis.NewScript(recordSource + adjustBody)
	refundScript = redis.NewScript(recordSource + refundBody)
)
