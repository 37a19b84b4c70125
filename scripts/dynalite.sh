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
version="${SLUICE_DYNALITE_VERSION:-4.0.0}"
timeout="${SLUICE_DYNAMODB_TIMEOUT:-30}"

home="$cache/dynalite"
pkg="$home/dynalite-$version"
logfile="$home/dynalite.log"
pidfile="$home/dynalite.pid"
portfile="$home/dynalite.port"

name=dynalite.sh
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

# install: dynalite and its dependencies into $pkg through npm, once. Its LevelDB store on
# disk is not used (tables live in memory), so install scripts are skipped.
install() {
	if [[ -f "$pkg/.complete" ]]; then
		return 0
	fi
	command -v node >/dev/null || die "node not found (apt-get install nodejs npm)"
	command -v npm >/dev/null || die "npm not found (apt-get install npm)"
	say "installing dynalite@$version from the npm registry into $pkg"
	rm -rf "$pkg.tmp"
	mkdir -p "$pkg.tmp"
	if ! npm install --no-audit --no-fund --ignore-scripts --prefix "$pkg.tmp" "dynalite@$version" >"$home/npm.log" 2>&1; then
		tail -n 40 "$home/npm.log" >&2 || true
		die "npm could not install dynalite@$version (full output: $home/npm.log)"
	fi
	rm -rf "$pkg"
	mv "$pkg.tmp" "$pkg"
	touch "$pkg/.complete"
}

# answers PORT: true when the server answers a ListTables call.
answers() {
	curl -sf -m 2 -X POST "http://127.0.0.1:$1/" \
		-H 'Content-Type: application/x-amz-json-1.0' \
		-H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
		-H 'X-Amz-Date: 20260101T000000Z' \
		-H 'Authorization: AWS4-HMAC-SHA256 Credential=sluice/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
		-d '{}' >/dev/null 2>&1
}

print_addr() { echo "SLUICE_DYNAMODB_ENDPOINT=http://127.0.0.1:$(cat "$portfile")"; }

start() {
	mkdir -p "$home"
	if running && [[ -f "$portfile" ]]; then
		say "already running (pid $(cat "$pidfile"))"
		print_addr
		return 0
	fi
	install
	local port
	port="$(free_port)" || die "no free port found"
	: >"$logfile"
	say "starting dynalite $version on 127.0.0.1:$port (log: $logfile)"
	# Tables are created, updated and deleted at once (tests need no waiting). setsid: the
	# server outlives this script. An aborted client request is logged and the server goes on.
	NODE_PATH="$pkg/node_modules" setsid node -e '
		process.on("uncaughtException", (err) => {
			if (err && err.code === "ECONNRESET") { console.error("a client aborted a request"); return; }
			console.error(err); process.exit(1);
		});
		const port = Number(process.argv[1]);
		require("dynalite")({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0})
			.listen(port, "127.0.0.1", (err) => { if (err) throw err; console.log("listening on 127.0.0.1:" + port); });
	' "$port" >>"$logfile" 2>&1 </dev/null &
	echo $! >"$pidfile"
	echo "$port" >"$portfile"
	local deadline=$((SECONDS + timeout))
	until answers "$port"; do
		running || die "dynalite exited during startup"
		((SECONDS < deadline)) || die "dynalite did not answer within ${timeout}s"
		sleep 0.2
	done
	say "ready"
	print_addr
}

stop() {
	if running; then
		local pid
		pid="$(cat "$pidfile")"
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile" "$portfile"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status)
	if running && [[ -f "$portfile" ]]; then print_addr; else exit 1; fi
	;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
