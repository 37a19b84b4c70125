#!/usr/bin/env bash
# dynalite.sh — run a DynamoDB-compatible server (dynalite, from the npm registry) on
# 127.0.0.1 for Sluice's tests (the kinesis channel's lease table). It keeps its tables in
# memory.
#
#   scripts/dynalite.sh start   install dynalite with npm into the cache (once), start it
#                              on a free port bound to 127.0.0.1, wait until it answers,
#                              print SLUICE_DYNAMODB_ENDPOINT=http://127.0.0.1:PORT on stdout.
#                              A server already running is reused (same line printed).
#   scripts/dynalite.sh stop    kill the server.
#   scripts/dynalite.sh status  print SLUICE_DYNAMODB_ENDPOINT=... and exit 0 if it runs, else exit 1.
#
# Use it as:  eval "$(scripts/dynalite.sh start)"; export SLUICE_DYNAMODB_ENDPOINT
#
# Environment:
#   SLUICE_CACHE               cache directory (default: .cache/ at the repo root, git-ignored)
#   SLUICE_DYNALITE_VERSION    dynalite version (default 4.0.0)
#   SLUICE_DYNAMODB_TIMEOUT    seconds to wait for the server to answer (default 30)
#
# Progress goes to stderr; only the SLUICE_DYNAMODB_ENDPOINT line goes to stdout. The
# server's own output goes to $SLUICE_CACHE/dynalite/dynalite.log.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${SLUICE_CACHE:-$root/.cache}"
name=dynalite.sh
npm_pkg=dynalite
version="${SLUICE_DYNALITE_VERSION:-4.0.0}"
timeout="${SLUICE_DYNAMODB_TIMEOUT:-30}"
home="$cache/dynalite"
env_var=SLUICE_DYNAMODB_ENDPOINT
service=dynamodb amz_json=1.0 probe=DynamoDB_20120810.ListTables
# Tables are created, updated and deleted at once (tests need no waiting).
server='m({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0})'
# shellcheck source=scripts/awslite.sh
source "$root/scripts/awslite.sh"
awslite_main "$@"
