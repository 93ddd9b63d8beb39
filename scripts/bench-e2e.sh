#!/usr/bin/env bash
# End-to-end benchmark of the sample API with wrk, on 127.0.0.1 only:
#   bare        GET /api/items/{id} without rate limiting
#   sluice      the same behind enforce.Middleware + RedisStore (two layers)
#   redis_rate  the same behind a plain go-redis/redis_rate middleware
#   memory      (optional row) the middleware on the in-memory store
# Runs are interleaved (bare, sluice, redis_rate, bare, ...) so that load
# from other processes on a shared machine spreads over every mode; the table
# gives the median of RUNS runs and the spread (max-min)/median.
#
# Uses its own redis-server on a free port below 32768 (never the shared one),
# killed at exit. Bounded: RUNS x 3 modes x DURATION (default 3 x 3 x 10 s).
#
#   scripts/bench-e2e.sh                 # defaults below
#   RUNS=5 DURATION=15s scripts/bench-e2e.sh
#   MODES="bare sluice memory sluice_nousage sluice_failover redis_rate" scripts/bench-e2e.sh
set -euo pipefail

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
MODES=${MODES:-"bare sluice redis_rate"}

cd "$(dirname "$0")/.."
for tool in wrk redis-server redis-cli go curl; do
	command -v "$tool" >/dev/null || { echo "bench-e2e: $tool is required" >&2; exit 1; }
done

work=$(mktemp -d)
server_pid=""
redis_pid=""
cleanup() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
	[ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

free_port() {
	local p
	for _ in $(seq 50); do
		p=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "bench-e2e: no free port" >&2
	exit 1
}

go build -o "$work/benchserver" ./internal/sampleapi/cmd/benchserver

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
	>"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 100); do
	redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
	sleep 0.05
done

http_port=$(free_port)
url="http://127.0.0.1:$http_port/api/items/42"

# server_args MODE maps a table row to benchserver flags; the extra rows
# sluice_nousage and sluice_failover (MODES="...") isolate the cost of the
# usage counters and of the FailoverStore.
server_args() {
	case "$1" in
	sluice_nousage) echo "-mode sluice -usage=false" ;;
	sluice_failover) echo "-mode sluice -failover" ;;
	*) echo "-mode $1" ;;
	esac
}

# one_run MODE prints "rps p50_ms p99_ms" for one wrk run against a fresh server.
one_run() {
	# shellcheck disable=SC2046
	"$work/benchserver" $(server_args "$1") -addr "127.0.0.1:$http_port" \
		-redis "redis://127.0.0.1:$redis_port/0" -prefix "bench:$1:" >"$work/server.log" 2>&1 &
	server_pid=$!
	for _ in $(seq 100); do
		curl -fsS -o /dev/null "$url" 2>/dev/null && break
		sleep 0.05
	done
	# Warm up connections, pools and the CPU governor; not measured.
	wrk -t"$THREADS" -c"$CONNS" -d2s "$url" >/dev/null
	redis-cli -p "$redis_port" config resetstat >/dev/null
	wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$url" >"$work/wrk.out"
	# Script calls per request: proves the decisions really went to Redis
	# (1 for redis_rate, 0 for bare; below 1 for sluice, whose store
	# coalesces the concurrent decisions of the one subject every request
	# here shares, about 12 per call).
	redis-cli -p "$redis_port" info commandstats |
		awk -F'[:=,]' '/^cmdstat_evalsha:/ { print $3 }' >"$work/calls"
	kill "$server_pid"
	wait "$server_pid" 2>/dev/null || true
	server_pid=""
	awk '
		function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
		/Requests\/sec:/ { rps = $2 }
		/^ +50%/ { p50 = ms($2) }
		/^ +99%/ { p99 = ms($2) }
		/Non-2xx/ { bad = $NF }
		/requests in/ { total = $1 }
		END {
			getline calls < "'"$work/calls"'"
			printf "%.0f %.3f %.3f %s %.2f\n", rps, p50, p99, (bad == "" ? 0 : bad), (total ? calls / total : 0)
		}
	' "$work/wrk.out"
}

echo "wrk -t$THREADS -c$CONNS -d$DURATION $url, $RUNS runs per mode, $(nproc) cores"
for run in $(seq "$RUNS"); do
	for mode in $MODES; do
		result=$(one_run "$mode")
		echo "run $run $mode: req/s p50ms p99ms non2xx redis-calls/request = $result"
		echo "$mode $result" >>"$work/results"
	done
done

echo
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, rps, p50, p99, bad, calls = line.split()
    rows.setdefault(mode, []).append((float(rps), float(p50), float(p99), int(bad), float(calls)))
bare = statistics.median(r[0] for r in rows["bare"]) if "bare" in rows else None
print(f"{'mode':<15} {'req/s median':>12} {'spread':>7} {'p50 ms':>7} {'p99 ms':>7} {'vs bare':>8} {'calls/req':>9}  runs (req/s)")
for mode, rs in rows.items():
    rps = [r[0] for r in rs]
    med = statistics.median(rps)
    spread = (max(rps) - min(rps)) / med * 100
    p50 = statistics.median(r[1] for r in rs)
    p99 = statistics.median(r[2] for r in rs)
    ratio = f"{med / bare * 100:.0f} %" if bare else "-"
    bad = sum(r[3] for r in rs)
    note = f"  NON-2XX: {bad}" if bad else ""
    calls = statistics.median(r[4] for r in rs)
    print(f"{mode:<15} {med:>12.0f} {spread:>6.0f}% {p50:>7.2f} {p99:>7.2f} {ratio:>8} {calls:>9.2f}  {' '.join(f'{x:.0f}' for x in rps)}{note}")
PY
