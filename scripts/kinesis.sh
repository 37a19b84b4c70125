#!/usr/bin/env bash
# kinesis.sh — run a Kinesis-compatible server (kinesalite, from the npm registry) on
# 127.0.0.1 for Sluice's tests. It keeps its streams in memory.
#
#   scripts/kinesis.sh start    install kinesalite with npm into the cache (once), start it
#                               on a free port bound to 127.0.0.1, wait until it answers,
#                               print SLUICE_KINESIS_ENDPOINT=http://127.0.0.1:PORT on stdout.
#                               A server already running is reused (same line printed).
#   scripts/kinesis.sh stop     kill the server.
#   scripts/kinesis.sh status   print SLUICE_KINESIS_ENDPOINT=... and exit 0 if it runs, else exit 1.
#
# Use it as:  eval "$(scripts/kinesis.sh start)"; export SLUICE_KINESIS_ENDPOINT
#
# Environment:
#   SLUICE_CACHE               cache directory (default: .cache/ at the repo root, git-ignored)
#   SLUICE_KINESALITE_VERSION  kinesalite version (default 3.3.3)
#   SLUICE_KINESIS_TIMEOUT     seconds to wait for the server to answer (default 30)
#
# Progress goes to stderr; only the SLUICE_KINESIS_ENDPOINT line goes to stdout. The
# server's own output goes to $SLUICE_CACHE/kinesis/kinesis.log.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${SLUICE_CACHE:-$root/.cache}"
name=kinesis.sh
npm_pkg=kinesalite
version="${SLUICE_KINESALITE_VERSION:-3.3.3}"
timeout="${SLUICE_KINESIS_TIMEOUT:-30}"
home="$cache/kinesis"
env_var=SLUICE_KINESIS_ENDPOINT
service=kinesis amz_json=1.1 probe=Kinesis_20131202.ListStreams
# Streams are created, resharded and deleted at once (tests need no waiting), and a stream
# may have up to 1000 shards.
server='m({createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000})'
# shellcheck source=scripts/awslite.sh
source "$root/scripts/awslite.sh"
awslite_main "$@"
