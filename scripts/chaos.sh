#!/bin/sh
# Runs the chaos suite (tests/chaos): Redis killed and restarted empty,
# a portal instance SIGKILLed holding leases and slots,
# Redis frozen with SIGSTOP, Postgres cut off, under two instances deciding
# for one subject; each test counts admissions against the stated bound and
# compares the quota ledger with what was admitted. Needs redis-server on
# PATH and the test Postgres (TEST_DATABASE_URL, or the embedded one).
# The figures it logs are in docs/chaos.md.
set -eu
cd "$(dirname "$0")/.."
uptime
exec go test -tags chaos -count=1 -v ./tests/chaos/ "$@"
