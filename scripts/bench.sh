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
#   leased ...      the same four on a Redis portal whose two limits have
#                   precision leased (decided from leases in memory; only in
#                   STORES when named, e.g. STORES="redis leased memory")
#
# "share" is each limited contender's req/s over its unlimited twin's, on
# the same portal process, so it is what the limits cost in the product.
# Contenders are interleaved round by round so that load from other
# processes on a shared machine spreads over all of them; the tables give
# medians over ROUNDS and the range. cpu us/req is the portal process's user
# plus system CPU time over the requests wrk completed; "CPU share" is the
# unlimited twin's CPU per request over the contender's, the share of the
# route's throughput a portal that has the cores to itself keeps, which the
# load of other processes moves much less than req/s. For the Redis store the
# tables also give redis-server's own CPU per request (it shares the cores,
# so it is part of what a limited request costs the machine) and how many
# requests one call of the decision script decided on average (INFO
# commandstats; the script's fixed cost per call is most of Redis's share).
#
# The script builds ./cmd/portal, starts its own redis-server on a free port
# below 32768 (never the shared one), and creates one database per portal on
# the Postgres at BENCH_DATABASE_URL, dropped at exit. Needs go, wrk, curl,
# psql, redis-server, redis-cli, python3.
#
# BASELINE=<git revision> also builds that revision's portal (from git
# archive, so the work tree is left alone) and runs it beside this tree's,
# each store twice, every round interleaving both binaries, then prints what
# this tree's binary costs per request against the baseline's: the way to
# show what a change buys on a machine whose load moves under you.
#
#   scripts/bench.sh                              # defaults below
#   ROUNDS=7 DURATION=10s scripts/bench.sh
#   STORES=redis CONTENDERS="anon anon-off" scripts/bench.sh
#   BASELINE=main scripts/bench.sh  # this tree's portal against main's
#   PORTAL_ENV="GOMAXPROCS=1" BASELINE=HEAD scripts/bench.sh
#       this tree's portal with GOMAXPROCS=1 beside the same code with the
#       defaults (BASELINE_ENV likewise sets the baseline's environment):
#       space-separated NAME=value pairs, exported to that portal only
#   PROFILE="anon anon-off" scripts/bench.sh
#       also, after the rounds, 10 s CPU and allocation profiles of the
#       first store's portal (this tree's) under each contender named (pprof
#       on PORTAL_DEBUG_ADDR), kept with the binary and wrk's output (its
#       request count, to turn samples into time per request) in
#       $TMPDIR/sluice-bench-STORE-CONTENDER/
#   PROFILE=key PROFILE_STORES="leased memory" STORES="leased memory" scripts/bench.sh
#       profiles of each of those stores' portals, one after the other,
#       to compare with go tool pprof -diff_base; TRACE=1 adds a 3 s
#       execution trace of each (trace.out), whose sync profile is the time
#       requests spent waiting on locks, as a lease's renewal makes them
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
STORES=${STORES:-"redis memory"}
CONTENDERS=${CONTENDERS:-"anon anon-off key key-off"}
PROFILE=${PROFILE:-}
PROFILE_STORES=${PROFILE_STORES:-${STORES%% *}}
TRACE=${TRACE:-}
BASELINE=${BASELINE:-}
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
rev=$(git describe --always --dirty 2>/dev/null || echo "this tree")
if [ -n "$BASELINE" ]; then
	base_rev=$(git rev-parse --short "$BASELINE^{commit}")
	echo "building the baseline portal at $BASELINE ($base_rev)..."
	mkdir -p "$work/base-src"
	git archive "$BASELINE" | tar -x -C "$work/base-src"
	(cd "$work/base-src" && go build -o "$work/portal-base" ./cmd/portal)
	rm -rf "$work/base-src"
fi

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
	>"$work/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
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

# limits_of INSTANCE is its bench plan's limits: leased ones for "leased".
limits_of() {
	if [ "$(store_of "$1")" = leased ]; then
		echo "$limits" | sed 's/"algorithm"/"precision":"leased","algorithm"/g'
	else
		echo "$limits"
	fi
}

# A portal instance is named by its store, "redis", "leased" or "memory", for this
# tree's binary, and "STORE@BASELINE" for the baseline's.
store_of() { echo "${1%@*}"; }

# admin INSTANCE METHOD PATH BODY calls the admin API of that portal.
admin() {
	curl -fsS -X "$2" -H "Authorization: Bearer $token" -H "Content-Type: application/json" \
		${4:+-d "$4"} "http://127.0.0.1:${port[$1]}/admin/api/v1$3"
}

declare -A port debug_port pid_of key_on key_off bench_plan open_plan
instances=()
# start_portal INSTANCE BINARY starts a portal on a fresh database and sets
# up the plans, a developer and two keys through its admin API and sign-up
# form.
start_portal() {
	local store=$1 bin=$2 db
	db="sluice_bench_${#instances[@]}_$$"
	instances+=("$store")
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
		export PORTAL_DEBUG_ADDR=127.0.0.1:${debug_port[$store]} PORTAL_METRICS_ADDR=off
		# Each portal its own counters, should two share a plan id.
		export PORTAL_REDIS_PREFIX="bench${#instances[@]}:"
		if [ "$(store_of "$store")" != memory ]; then export REDIS_URL=redis://127.0.0.1:$redis_port/0; else unset REDIS_URL; fi
		# PORTAL_ENV or BASELINE_ENV: NAME=value pairs for this portal only.
		local extra=${PORTAL_ENV:-}
		if [[ $store == *@* ]]; then extra=${BASELINE_ENV:-}; fi
		for kv in $extra; do export "${kv?}"; done
		exec "$bin" >"$work/$store.log" 2>&1
	) &
	pid_of[$store]=$!
	pids+=("${pid_of[$store]}")
	wait_for "http://127.0.0.1:${port[$store]}/readyz" "$work/$store.log"
	open_plan[$store]=$(admin "$store" POST /plans '{"slug":"open","name":"Open"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	bench_plan[$store]=$(admin "$store" POST /plans "{\"slug\":\"bench\",\"name\":\"Bench\",\"is_default\":true,\"is_anonymous\":true,\"limits\":$(limits_of "$store")}" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	curl -fsS -o /dev/null -d 'email=bench@example.com&password=correct-horse-battery-staple-9' "http://127.0.0.1:${port[$store]}/signup"
	local dev
	dev=$(admin "$store" GET /developers | python3 -c 'import json,sys; print(json.load(sys.stdin)["items"][0]["id"])')
	key_on[$store]=$(admin "$store" POST /keys "{\"user_id\":$dev,\"name\":\"limited\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
	key_off[$store]=$(admin "$store" POST /keys "{\"user_id\":$dev,\"name\":\"open\",\"plan_id\":${open_plan[$store]}}" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
}

# anonymous_plan INSTANCE limited|open gives the anonymous role to one plan and
# waits until the portal enforces it (the snapshot reloads on a change).
anonymous_plan() {
	local store=$1 want=$2 id body version
	if [ "$want" = limited ]; then
		id=${bench_plan[$store]}
		body="\"slug\":\"bench\",\"name\":\"Bench\",\"is_default\":true,\"is_anonymous\":true,\"limits\":$(limits_of "$store")"
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

# one_run INSTANCE CONTENDER prints "rps p50_ms p99_ms non2xx cpu_us_per_req
# redis_cpu_us_per_req requests_per_script_call" (the last two 0 when the
# route called no script).
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
	local before after redis_before redis_after calls
	before=$(cpu_ticks "${pid_of[$store]}")
	redis_before=$(cpu_ticks "$redis_pid")
	redis-cli -p "$redis_port" config resetstat >/dev/null
	wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "${hdr[@]}" "$url" >"$work/wrk.out"
	after=$(cpu_ticks "${pid_of[$store]}")
	redis_after=$(cpu_ticks "$redis_pid")
	calls=$(redis-cli -p "$redis_port" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
	awk -v ticks=$((after - before)) -v rticks=$((redis_after - redis_before)) -v calls="${calls:-0}" -v hz="$(getconf CLK_TCK)" '
		function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
		/Requests\/sec:/ { rps = $2 }
		/^ +50%/ { p50 = ms($2) }
		/^ +99%/ { p99 = ms($2) }
		/Non-2xx/ { bad = $NF }
		/requests in/ { total = $1 }
		END {
			printf "%.0f %.3f %.3f %s %.1f %.1f %.1f\n", rps, p50, p99, (bad == "" ? 0 : bad), (total ? ticks / hz * 1e6 / total : 0),
				(total && calls ? rticks / hz * 1e6 / total : 0), (calls ? total / calls : 0)
		}
	' "$work/wrk.out"
}

for store in $STORES; do
	start_portal "$store" "$work/portal"
	if [ -n "$BASELINE" ]; then
		start_portal "$store@$BASELINE" "$work/portal-base"
	fi
done

load() { cut -d' ' -f1-3 /proc/loadavg; }
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
redis_version=$(redis-server --version | awk '{ print $3 }' | tr -d 'v=')
echo "date:   $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu:    $cpu_model, $(nproc) cores; $(go version | awk '{ print $3 }'); redis $redis_version"
echo "load:   $(load) (1, 5, 15 min) at start"
echo "portal: $rev${PORTAL_ENV:+ with $PORTAL_ENV}${BASELINE:+, baseline $BASELINE ($base_rev)${BASELINE_ENV:+ with $BASELINE_ENV}}"
echo "wrk -t$THREADS -c$CONNS -d$DURATION GET /api/items/1, $ROUNDS rounds, portals: ${instances[*]}"
for round in $(seq "$ROUNDS"); do
	for store in "${instances[@]}"; do
		for c in $CONTENDERS; do
			result=$(one_run "$store" "$c")
			echo "round $round $store $c: req/s p50ms p99ms non2xx cpu-us/req redis-us/req req/script = $result  (load $(load))"
			echo "$store $c $result" >>"$work/results"
		done
	done
done

for profiled in $PROFILE_STORES; do for c in $PROFILE; do
	store=$profiled
	url="http://127.0.0.1:${port[$store]}/api/items/1"
	hdr=()
	case "$c" in
	anon) anonymous_plan "$store" limited ;;
	anon-off) anonymous_plan "$store" open ;;
	key) hdr=(-H "Authorization: Bearer ${key_on[$store]}") ;;
	key-off) hdr=(-H "Authorization: Bearer ${key_off[$store]}") ;;
	*) echo "bench: PROFILE names contenders: anon, anon-off, key, key-off" >&2; exit 1 ;;
	esac
	dir="${TMPDIR:-/tmp}/sluice-bench-$store-$c"
	mkdir -p "$dir"
	if [[ $store == *@* ]]; then cp "$work/portal-base" "$dir/portal"; else cp "$work/portal" "$dir/portal"; fi
	wrk -t"$THREADS" -c"$CONNS" -d12s "${hdr[@]}" "$url" >"$dir/wrk.out" &
	wrk_pid=$!
	sleep 1
	# CPU and allocations over the same 10 s (allocs?seconds= is a delta).
	curl -fsS -o "$dir/cpu.pprof" "http://127.0.0.1:${debug_port[$store]}/debug/pprof/profile?seconds=10" &
	cpu_pid=$!
	curl -fsS -o "$dir/allocs.pprof" "http://127.0.0.1:${debug_port[$store]}/debug/pprof/allocs?seconds=10"
	wait "$cpu_pid" "$wrk_pid"
	echo "profiles of the $store portal under $c in $dir ($(awk '/requests in/ { print $1 }' "$dir/wrk.out") requests in wrk's 12 s):"
	echo "  go tool pprof -top $dir/portal $dir/cpu.pprof"
	echo "  go tool pprof -top -sample_index=alloc_space $dir/portal $dir/allocs.pprof"
	if [ -n "$TRACE" ]; then
		wrk -t"$THREADS" -c"$CONNS" -d5s "${hdr[@]}" "$url" >/dev/null &
		wrk_pid=$!
		sleep 1
		curl -fsS -o "$dir/trace.out" "http://127.0.0.1:${debug_port[$store]}/debug/pprof/trace?seconds=3"
		wait "$wrk_pid"
		echo "  go tool trace -pprof=sync $dir/trace.out >$dir/sync.pprof  # time blocked on locks"
	fi
done; done

echo "load:   $(load) at end"
echo
python3 - "$work/results" "$BASELINE" <<'PY'
import statistics, sys
baseline = sys.argv[2]
rows = {}
for line in open(sys.argv[1]):
    inst, c, rps, p50, p99, bad, cpu, rcpu, per_call = line.split()
    rows.setdefault((inst, c), []).append((float(rps), float(p50), float(p99), int(bad), float(cpu), float(rcpu), float(per_call)))
med = lambda xs: statistics.median(xs)
rng = lambda xs, f: f"{f(med(xs))} ({f(min(xs))} - {f(max(xs))})"
pct = lambda x: f"{x:.0f} %"
pcts = lambda xs: f"{med(xs):.0f} % ({min(xs):.0f} - {max(xs):.0f} %)"

def shares(inst, c):
    """Per-round req/s and CPU shares of (inst, c) against its -off twin:
    each pair ran back to back, so they shared the machine's load."""
    rs, twin = rows.get((inst, c)), rows.get((inst, c + "-off"))
    if not rs or not twin or len(twin) != len(rs):
        return None, None
    share = [a[0] / b[0] * 100 for a, b in zip(rs, twin)]
    # The share of the route's throughput a CPU-bound portal keeps: the
    # unlimited route's CPU per request over the limited one's. Other
    # processes' load moves it much less than req/s.
    cpu = [b[4] / a[4] * 100 for a, b in zip(rs, twin) if a[4] > 0]
    return share, cpu

def scripted(rs, i, fmt):
    """The median of field i over the runs that called the script, or -."""
    xs = [r[i] for r in rs if r[6] > 0]
    return format(med(xs), fmt) if xs else "-"

print("| portal | caller | req/s median (range) | share of no limits (range) | portal CPU us/req | CPU share (range) | Redis CPU us/req | requests per script call | p50 ms | p99 ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (inst, c), rs in rows.items():
    share, cpu = shares(inst, c)
    bad = sum(r[3] for r in rs)
    note = f" NON-2XX: {bad}" if bad else ""
    print(f"| {inst} | {c} | {rng([r[0] for r in rs], lambda x: f'{x/1000:.1f}k')} | "
          f"{pcts(share) if share else '-'} | {med(r[4] for r in rs):.1f} | {pcts(cpu) if cpu else '-'} | "
          f"{scripted(rs, 5, '.1f')} | {scripted(rs, 6, '.1f')} | {med(r[1] for r in rs):.2f} | {med(r[2] for r in rs):.2f} |{note}")

if baseline:
    print()
    print(f"This tree's portal against {baseline}'s, per round (both ran in every round):")
    print()
    print(f"| store | caller | CPU us/req, this / {baseline} (range) | req/s, this / {baseline} (range) | share: this, {baseline} | CPU share: this, {baseline} | Redis CPU us/req: this, {baseline} | requests per script call: this, {baseline} |")
    print("|---|---|---|---|---|---|---|---|")
    for (inst, c), rs in rows.items():
        if "@" in inst:
            continue
        base = rows.get((f"{inst}@{baseline}", c))
        if not base or len(base) != len(rs):
            continue
        cpu = [a[4] / b[4] for a, b in zip(rs, base) if b[4] > 0]
        rps = [a[0] / b[0] for a, b in zip(rs, base) if b[0] > 0]
        s1, c1 = shares(inst, c)
        s2, c2 = shares(f"{inst}@{baseline}", c)
        both = lambda a, b: f"{med(a):.0f} %, {med(b):.0f} %" if a and b else "-"
        pair = lambda i: f"{scripted(rs, i, '.1f')}, {scripted(base, i, '.1f')}"
        print(f"| {inst} | {c} | {rng(cpu, lambda x: f'{x:.2f}')} | {rng(rps, lambda x: f'{x:.2f}')} | {both(s1, s2)} | {both(c1, c2)} | {pair(5)} | {pair(6)} |")
PY
