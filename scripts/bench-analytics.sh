#!/usr/bin/env bash
# Page times of the analytics and request log pages on a portal holding 30
# days of data for 100,000 keys: seeds a fresh database on the Postgres at
# BENCH_DATABASE_URL, starts the portal binary on it (memory counters, no
# Redis), signs in as the operator and as the busiest key's developer, and
# times each page with curl, rounds interleaved, printing the median and
# p95 per page. The database is dropped at exit.
#
# What is seeded (KEYS and DAYS change the first two):
#   3 plans with tiers; KEYS keys (100000), two per developer
#   consumer_days: every key on every one of DAYS days (30), requests
#     falling off with the key's rank (a Zipf-like 1/rank^1.1), one key in
#     twenty rejected a tenth of its requests
#   traffic_hours: DAYS*24 hours x 3 plans x 8 routes x 4 status classes,
#     with latency histograms, and traffic_days, their sums per day
#   usage_hours (the history a consumer's series is read from): the 2,000
#     busiest keys every hour, every other key once a day
#   request_log: 7 daily partitions, 2,000,000 rows over the keys
#
#   scripts/bench-analytics.sh              # ROUNDS=30 requests per page
#   ROUNDS=50 KEYS=20000 scripts/bench-analytics.sh
#   KEEP=1 scripts/bench-analytics.sh       # keep the database, print its URL
#   SEEDED=sluice_bench_analytics_123 scripts/bench-analytics.sh
#       time the pages again on a database an earlier KEEP=1 run seeded
#
# Needs go, psql, curl, python3.
set -euo pipefail

ROUNDS=${ROUNDS:-30}
KEYS=${KEYS:-100000}
DAYS=${DAYS:-30}
BENCH_DATABASE_URL=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
db=${SEEDED:-sluice_bench_analytics_$$}
dburl=$(python3 -c "import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path='/' + sys.argv[2])))" "$BENCH_DATABASE_URL" "$db")
portal_pid=

cleanup() {
	if [[ -n $portal_pid ]]; then kill "$portal_pid" 2>/dev/null || true; wait "$portal_pid" 2>/dev/null || true; fi
	if [[ -n ${KEEP:-}${SEEDED:-} ]]; then
		echo "kept the database: $dburl" >&2
	else
		psql -q "$BENCH_DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "building ./cmd/portal" >&2
(cd "$root" && go build -o "$work/portal" ./cmd/portal)
export DATABASE_URL=$dburl PORTAL_DATA_DIR=$work/data PORTAL_ADMIN_EMAIL=op@example.com \
	PORTAL_ADMIN_PASSWORD=bench-password-123 PORTAL_SESSION_SECRET=0123456789abcdef0123456789abcdef-bench \
	PORTAL_LOG_LEVEL=warn
[[ -n ${SEEDED:-} ]] || psql -q "$BENCH_DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
"$work/portal" migrate up >/dev/null
if [[ -z ${SEEDED:-} ]]; then
	echo "seeding $KEYS keys and $DAYS days" >&2
	start=$(date +%s)
	psql -q -v ON_ERROR_STOP=1 -v keys="$KEYS" -v days="$DAYS" "$dburl" <<'SQL'
INSERT INTO plans (slug, name, is_default) VALUES ('free', 'Free', true), ('pro', 'Pro', false), ('enterprise', 'Enterprise', false);
INSERT INTO plan_limits (plan_id, name, route, algorithm, limit_count, window_ms, burst)
SELECT p.id, t.name, t.route, t.algorithm, t.lim * (CASE p.slug WHEN 'free' THEN 1 WHEN 'pro' THEN 10 ELSE 100 END), t.window_ms, t.burst
FROM plans p, (VALUES ('all', '', 'fixed_window', 1000, 3600000, 0),
                      ('search', 'GET /api/search', 'token_bucket', 60, 60000, 20)) AS t(name, route, algorithm, lim, window_ms, burst);

INSERT INTO users (email, password_hash, role, plan_id)
SELECT 'dev' || i || '@example.com', 'x', 'developer', (SELECT id FROM plans WHERE slug = (ARRAY['free','pro','enterprise'])[1 + i % 3])
FROM generate_series(1, (:keys + 1) / 2) i;
INSERT INTO api_keys (user_id, name)
SELECT u.id, 'key ' || k FROM generate_series(1, :keys) k JOIN users u ON u.email = 'dev' || ((k + 1) / 2) || '@example.com';
INSERT INTO api_key_secrets (key_id, hash, prefix)
SELECT id, sha256(('bench-secret-' || id)::bytea), 'sk_live_' || lpad(id::text, 8, '0') FROM api_keys;

-- Every key every day, requests 1/rank^1.1 of the busiest's.
INSERT INTO consumer_days (day, plan, key_id, user_id, address, requests, rejected)
SELECT d::date, (ARRAY['free','pro','enterprise'])[1 + k.user_id % 3], k.id, k.user_id, '',
       r.n, CASE WHEN k.id % 20 = 0 THEN r.n / 10 + 1 ELSE 0 END
FROM api_keys k
CROSS JOIN generate_series(current_date - (:days - 1), current_date, interval '1 day') d
CROSS JOIN LATERAL (SELECT (2000000 / power(k.id, 1.1) * (0.5 + random()))::bigint + 1 AS n) r;

INSERT INTO traffic_hours (hour, plan, route, class, requests, latency_count, latency_sum, latency)
SELECT h, p, 'GET /api/r' || r, c, n, CASE WHEN c IN (2, 5) THEN n ELSE 0 END, n * 20000,
       CASE WHEN c IN (2, 5) THEN ARRAY(SELECT (n * exp(-power(b - 10, 2) / 8.0) / 5)::bigint FROM generate_series(1, 24) b)
            ELSE array_fill(0::bigint, ARRAY[24]) END
FROM generate_series(date_trunc('hour', now()) - make_interval(hours => :days * 24 - 1), date_trunc('hour', now()), interval '1 hour') h,
     unnest(ARRAY['free','pro','enterprise']) p, generate_series(1, 8) r, unnest(ARRAY[2, 4, 5, 9]) c,
     LATERAL (SELECT (100000 / r / (CASE c WHEN 2 THEN 1 ELSE 20 END) * (0.5 + random()))::bigint AS n) x;

INSERT INTO traffic_days (day, plan, route, class, requests, latency_count, latency_sum, latency)
SELECT hour::date, plan, route, class, sum(requests), sum(latency_count), sum(latency_sum), array_fill(0::bigint, ARRAY[24])
FROM traffic_hours GROUP BY 1, 2, 3, 4;
UPDATE traffic_days t SET latency = x.latency FROM (
  SELECT day, plan, route, class, array_agg(n ORDER BY i) AS latency FROM (
    SELECT h.hour::date AS day, h.plan, h.route, h.class, b.i, sum(b.n) AS n
    FROM traffic_hours h, unnest(h.latency) WITH ORDINALITY AS b(n, i) GROUP BY 1, 2, 3, 4, 5) y
  GROUP BY 1, 2, 3, 4) x
WHERE x.day = t.day AND x.plan = t.plan AND x.route = t.route AND x.class = t.class;

INSERT INTO usage_hours (hour, plan, route, key_id, user_id, address, admitted, rejected)
SELECT h, 'pro', 'GET /api/search', k.id, k.user_id, '', (50000 / power(k.id, 1.1))::bigint + 1, 0
FROM api_keys k, generate_series(date_trunc('hour', now()) - make_interval(hours => :days * 24 - 1), date_trunc('hour', now()), interval '1 hour') h
WHERE k.id <= 2000;
INSERT INTO usage_hours (hour, plan, route, key_id, user_id, address, admitted, rejected)
SELECT d + interval '12 hours', 'pro', 'GET /api/search', k.id, k.user_id, '', 10, 0
FROM api_keys k, generate_series(current_date - (:days - 1), current_date - 1, interval '1 day') d
WHERE k.id > 2000;

DO $$
DECLARE d date;
BEGIN
  FOR i IN 0..6 LOOP
    d := current_date - i;
    EXECUTE format('CREATE TABLE request_log_p%s PARTITION OF request_log FOR VALUES FROM (%L) TO (%L)',
                   to_char(d, 'YYYYMMDD'), d::timestamptz, (d + 1)::timestamptz);
  END LOOP;
END $$;
INSERT INTO request_log (at, way_in, outcome, plan, route, key_id, user_id, address, layer, retry_after, degraded, status, upstream_status, latency_us, weight)
SELECT now() - random() * interval '6 days', 'middleware', CASE WHEN i % 10 = 0 THEN 'rejected' ELSE 'admitted' END, 'pro', 'GET /api/search',
       k, (k + 1) / 2, '', CASE WHEN i % 10 = 0 THEN 'pro-search' ELSE '' END, CASE WHEN i % 10 = 0 THEN 3 ELSE 0 END, '',
       CASE WHEN i % 10 = 0 THEN 429 ELSE 200 END, CASE WHEN i % 10 = 0 THEN 0 ELSE 200 END, (5000 + random() * 50000)::bigint,
       CASE WHEN i % 10 = 0 THEN 1 ELSE 100 END
FROM generate_series(1, 2000000) i, LATERAL (SELECT least(:keys, 1 + (power(random(), 3) * :keys)::int) AS k) x;
INSERT INTO request_log_days (day, rows) SELECT at::date, count(*) FROM request_log GROUP BY 1;
ANALYZE;
SQL
	echo "seeded in $(( $(date +%s) - start )) s: $(psql -tA "$dburl" -c "SELECT pg_size_pretty(pg_database_size(current_database()))")" >&2
fi

password=$("$work/portal" users reset-password dev1@example.com | awk '/password/ {print $NF}' | tail -1)
PORTAL_ADDR=127.0.0.1:0 "$work/portal" -no-demo >"$work/portal.log" 2>&1 &
portal_pid=$!
for _ in $(seq 300); do
	url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/portal.log" | head -1 || true)
	[[ -n $url ]] && break
	sleep 0.2
done
[[ -n ${url:-} ]] || { cat "$work/portal.log" >&2; exit 1; }

signin() { # jar email password
	curl -s -o /dev/null -c "$1" -b "$1" -X POST --data-urlencode "email=$2" --data-urlencode "password=$3" "$url/signin"
}
signin "$work/op.jar" op@example.com bench-password-123
signin "$work/dev.jar" dev1@example.com "$password"

pages=(
	"op /admin/analytics?range=24h"
	"op /admin/analytics?range=7d"
	"op /admin/analytics?range=30d"
	"op /admin/analytics?range=30d&plan=pro"
	"op /admin/requests?range=7d"
	"op /admin/requests?range=7d&status=429"
	"dev /app/analytics?range=7d"
	"dev /app/requests?range=7d"
)
# One warm-up request per page, then ROUNDS rounds, every page per round.
for p in "${pages[@]}"; do
	set -- $p
	code=$(curl -s -o "$work/page.html" -w '%{http_code}' -b "$work/$1.jar" "$url$2")
	[[ $code == 200 ]] || { echo "$2: status $code" >&2; head -c 2000 "$work/page.html" >&2; exit 1; }
done
for _ in $(seq "$ROUNDS"); do
	for i in "${!pages[@]}"; do
		set -- ${pages[$i]}
		curl -s -o /dev/null -w "$i %{time_total}\n" -b "$work/$1.jar" "$url$2" >>"$work/times"
	done
done
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; $ROUNDS requests per page"
python3 - "$work/times" "${pages[@]}" <<'PY'
import sys, statistics
times = {}
for line in open(sys.argv[1]):
    i, t = line.split()
    times.setdefault(int(i), []).append(float(t) * 1000)
print(f"| page | median ms | p95 ms |\n|---|---|---|")
for i, page in enumerate(sys.argv[2:]):
    ts = sorted(times[i])
    p95 = ts[min(len(ts) - 1, int(round(0.95 * len(ts))) - 1)]
    print(f"| `{page.split(' ', 1)[1]}` ({page.split()[0]}) | {statistics.median(ts):.0f} | {p95:.0f} |")
PY
