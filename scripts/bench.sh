#!/usr/bin/env bash
# End-to-end benchmark of the portal binary as it is built and run: wrk on
# GET /api/items/1, on 127.0.0.1 only, with these contenders:
#
#   redis  anon     anonymous caller, two limits (plan-wide and the route's
#                   tier, token buckets too high to reject), Redis store
#   redis  anon-off the same caller and route on a plan without limits
#   redis  key      a caller with an API key on the limited plan
#   redis  key-off  a key on a plan without limits
#   memory ...      the same four on a portal without REDIS_URL (memory store)
#
# "share" is each limited contender's req/s over its unlimited twin's, on
# the same portal process, so it is what the limits cost in the product.
# Contenders are interleaved round by round so that load from other
# processes on a shared machine spreads over all of them; the tables give
# medians over ROUNDS and the range. cpu us/req is the portal process's user
# plus system CPU time over the requests wrk completed; "CPU share" is the
# unlimited twin's CPU per request over the contender's, the share of the
# route's throughput a portal that has the cores to itself keeps, which the
# load of other processes moves much less than req/s.
#
# The script builds ./cmd/portal, starts its own redis-server on a free port
# below 32768 (never the shared one), and creates one database per portal on
# the Postgres at BENCH_DATABASE_URL, dropped at exit. Needs go, wrk, curl,
# psql, redis-server, redis-cli, python3.
#
#   scripts/bench.sh                              # defaults below
#   ROUNDS=7 DURATION=10s scripts/bench.sh
#   STORES=redis CONTENDERS="anon anon-off" scripts/bench.sh
#   PROFILE=anon scripts/bench.sh   # also a 10 s CPU profile of the redis
#                                   # portal under that contender (pprof on
#                                   # PORTAL_DEBUG_ADDR), path printed
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
STORES=${STORES:-"redis memory"}
CONTENDERS=${CONTENDERS:-"anon anon-off key key-off"}
PROFILE=${PROFILE:-}
BENCH_DATABASE_URL=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}

cd "$(dirname "$0")/.."
for tool in go wrk curl psql redis-server redis-cli python3; do
	command -v "$tool" >/dev/null || { echo "bench: $tool is required" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
dbs=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
	for d in "${dbs[@]}"; do psql -q "$BENCH_DATABASE_URL" -c "DROP DATABASE IF EXISTS $d" >/dev/null 2>&1 || true; done
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
	echo "bench: no free port" >&2
	exit 1
}

wait_for() {
	for _ in $(seq 600); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench: $1 did not answer; see $2" >&2
	cat "$2" >&2
	exit 1
}

echo "building the portal..."
go build -o "$work/portal" ./cmd/portal

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
	>"$work/redis.log" 2>&1 &
pids+=($!)
wait_for_redis() {
	for _ in $(seq 100); do
		redis-cli -p "$redis_port" ping >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "bench: redis-server did not start" >&2
	exit 1
}
wait_for_redis

token="bench_admin_token_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
limits='[{"name":"global","algorithm":"token_bucket","limit":1000000,"window_seconds":1,"burst":1000000},
	{"name":"items","route":"GET /api/items/{id}","algorithm":"token_bucket","limit":1000000,"window_seconds":1,"burst":1000000}]'

# admin STORE METHOD PATH BODY calls the admin API of STORE's portal.
admin() {
	curl -fsS -X "$2" -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
		${4:+-d "$4"} "http://127.0.0.1:${port[$1]}/admin/api/v1$3"
}

declare -A port debug_port pid_of key_on key_off bench_plan open_plan
# start_portal STORE starts a portal on a fresh database and sets up the
# plans, a developer and two keys through its admin API and sign-up form.
start_portal() {
	local store=$1 db
	db="sluice_bench_${store}_$$"
	psql -q "$BENCH_DATABASE_URL" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
	dbs+=("$db")
	port[$store]=$(free_port)
	debug_port[$store]=$(free_port)
	local dburl
	dburl=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' \
		"$BENCH_DATABASE_URL" "$db")
	mkdir -p "$work/$store"
	(
		export DATABASE_URL=$dburl PORTAL_ADDR=127.0.0.1:${port[$store]} PORTAL_DEMO=false
		export PORTAL_ADMIN_TOKEN=$token PORTAL_DATA_DIR=$work/$store PORTAL_LOG_LEVEL=warn
		export PORTAL_DEBUG_ADDR=127.0.0.1:${debug_port[$store]}
		if [ "$store" = redis ]; then export REDIS_URL=redis://127.0.0.1:$redis_port/0; else unset REDIS_URL; fi
		exec "$work/portal" >"$work/$store.log" 2>&1
	) &
	pid_of[$store]=$!
	pids+=("${pid_of[$store]}")
	wait_for "http://127.0.0.1:${port[$store]}/readyz" "$work/$store.log"
	open_plan[$store]=$(admin "$store" POST /plans '{"slug":"open","name":"Open"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	bench_plan[$store]=$(admin "$store" POST /plans "{\"slug\":\"bench\",\"name\":\"Bench\",\"is_default\":true,\"is_anonymous\":true,\"limits\":$limits}" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	curl -fsS -o /dev/null -d 'email=bench@example.com&password=correct-horse-battery-staple-9' "http://127.0.0.1:${port[$store]}/signup"
	local dev
	dev=$(admin "$store" GET /developers | python3 -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["id"])')
	key_on[$store]=$(admin "$store" POST /keys "{\"user_id\":$dev,\"name\":\"limited\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
	key_off[$store]=$(admin "$store" POST /keys "{\"user_id\":$dev,\"name\":\"open\",\"plan_id\":${open_plan[$store]}}" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
}

# anonymous_plan STORE limited|open gives the anonymous role to one plan and
# waits until the portal enforces it (the snapshot reloads on a change).
anonymous_plan() {
	local store=$1 want=$2 id body version
	if [ "$want" = limited ]; then
		id=${bench_plan[$store]}
		body="\"slug\":\"bench\",\"name\":\"Bench\",\"is_default\":true,\"is_anonymous\":true,\"limits\":$limits"
	else
		id=${open_plan[$store]}
		body='"slug":"open","name":"Open","is_anonymous":true'
	fi
	# Updates name the version they replace (optimistic locking).
	version=$(admin "$store" GET "/plans/$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
	admin "$store" PUT "/plans/$id" "{\"version\":$version,$body}" >/dev/null
	for _ in $(seq 200); do
		local has
		has=$(curl -fsS -o /dev/null -D - "http://127.0.0.1:${port[$store]}/api/items/1" | grep -ci '^ratelimit-policy:' || true)
		if { [ "$want" = limited ] && [ "$has" = 1 ]; } || { [ "$want" = open ] && [ "$has" = 0 ]; }; then
			return 0
		fi
		sleep 0.05
	done
	echo "bench: the anonymous plan did not switch to $want on $store" >&2
	exit 1
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# one_run STORE CONTENDER prints "rps p50_ms p99_ms non2xx cpu_us_per_req".
one_run() {
	local store=$1 c=$2 url hdr=()
	url="http://127.0.0.1:${port[$store]}/api/items/1"
	case "$c" in
	anon) anonymous_plan "$store" limited ;;
	anon-off) anonymous_plan "$store" open ;;
	key) hdr=(-H "Authorization: Bearer ${key_on[$store]}") ;;
	key-off) hdr=(-H "Authorization: Bearer ${key_off[$store]}") ;;
	esac
	# Warm up connections, pools and the CPU governor; not measured.
	wrk -t"$THREADS" -c"$CONNS" -d1s "${hdr[@]}" "$url" >/dev/null
	local before after
	before=$(cpu_ticks "${pid_of[$store]}")
	wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "${hdr[@]}" "$url" >"$work/wrk.out"
	after=$(cpu_ticks "${pid_of[$store]}")
	awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" '
		function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
		/Requests\/sec:/ { rps = $2 }
		/^ +50%/ { p50 = ms($2) }
		/^ +99%/ { p99 = ms($2) }
		/Non-2xx/ { bad = $NF }
		/requests in/ { total = $1 }
		END { printf "%.0f %.3f %.3f %s %.1f\n", rps, p50, p99, (bad == "" ? 0 : bad), (total ? ticks / hz * 1e6 / total : 0) }
	' "$work/wrk.out"
}

for store in $STORES; do
	start_portal "$store"
done

load() { cut -d' ' -f1-3 /proc/loadavg; }
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
redis_version=$(redis-server --version | awk '{ print $3 }' | tr -d 'v=')
echo "date:   $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu:    $cpu_model, $(nproc) cores; $(go version | awk '{ print $3 }'); redis $redis_version"
echo "load:   $(load) (1, 5, 15 min) at start"
echo "wrk -t$THREADS -c$CONNS -d$DURATION GET /api/items/1, $ROUNDS rounds, stores: $STORES"
for round in $(seq "$ROUNDS"); do
	for store in $STORES; do
		for c in $CONTENDERS; do
			result=$(one_run "$store" "$c")
			echo "round $round $store $c: req/s p50ms p99ms non2xx cpu-us/req = $result  (load $(load))"
			echo "$store $c $result" >>"$work/results"
		done
	done
done

if [ -n "$PROFILE" ]; then
	store=${STORES%% *}
	url="http://127.0.0.1:${port[$store]}/api/items/1"
	hdr=()
	case "$PROFILE" in
	anon) anonymous_plan "$store" limited ;;
	key) hdr=(-H "Authorization: Bearer ${key_on[$store]}") ;;
	*) echo "bench: PROFILE is anon or key" >&2; exit 1 ;;
	esac
	wrk -t"$THREADS" -c"$CONNS" -d12s "${hdr[@]}" "$url" >/dev/null &
	wrk_pid=$!
	sleep 1
	out="${TMPDIR:-/tmp}/sluice-bench-$store-$PROFILE.pprof"
	curl -fsS -o "$out" "http://127.0.0.1:${debug_port[$store]}/debug/pprof/profile?seconds=10"
	wait "$wrk_pid"
	echo "CPU profile of the $store portal under $PROFILE: $out (go tool pprof -top $work/portal $out; the binary is deleted at exit, rebuild it with go build -o /tmp/portal ./cmd/portal)"
fi

echo "load:   $(load) at end"
echo
python3 - "$work/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    store, c, rps, p50, p99, bad, cpu = line.split()
    rows.setdefault((store, c), []).append((float(rps), float(p50), float(p99), int(bad), float(cpu)))
med = lambda xs: statistics.median(xs)
print(f"| store | caller | req/s median (range) | share of no limits (range) | portal CPU us/req | CPU share | p50 ms | p99 ms |")
print(f"|---|---|---|---|---|---|---|---|")
for (store, c), rs in rows.items():
    rps = [r[0] for r in rs]
    share = cpu_share = "-"
    twin = rows.get((store, c + "-off"))
    if twin and len(twin) == len(rs):
        # Ratios per round: each pair ran back to back, so load is shared.
        ratios = [a[0] / b[0] * 100 for a, b in zip(rs, twin)]
        share = f"{med(ratios):.0f} % ({min(ratios):.0f} - {max(ratios):.0f} %)"
        # The share of the route's throughput a CPU-bound portal keeps:
        # the unlimited route's CPU per request over the limited one's.
        # Other processes' load moves it much less than req/s.
        cpu = [b[4] / a[4] * 100 for a, b in zip(rs, twin) if a[4] > 0]
        if cpu:
            cpu_share = f"{med(cpu):.0f} % ({min(cpu):.0f} - {max(cpu):.0f} %)"
    bad = sum(r[3] for r in rs)
    note = f" NON-2XX: {bad}" if bad else ""
    print(f"| {store} | {c} | {med(rps)/1000:.1f}k ({min(rps)/1000:.1f}k - {max(rps)/1000:.1f}k) | {share} | "
          f"{med(r[4] for r in rs):.1f} | {cpu_share} | {med(r[1] for r in rs):.2f} | {med(r[2] for r in rs):.2f} |{note}")
PY
