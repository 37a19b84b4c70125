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
version="${SLUICE_KINESALITE_VERSION:-3.3.3}"
timeout="${SLUICE_KINESIS_TIMEOUT:-30}"

home="$cache/kinesis"
pkg="$home/kinesalite-$version"
logfile="$home/kinesis.log"
pidfile="$home/kinesis.pid"
portfile="$home/kinesis.port"

name=kinesis.sh
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

# install: kinesalite and its dependencies into $pkg through npm, once. Its optional
# LevelDB store is not needed (streams live in memory), so install scripts are skipped.
install() {
	if [[ -f "$pkg/.complete" ]]; then
		return 0
	fi
	command -v node >/dev/null || die "node not found (apt-get install nodejs npm)"
	command -v npm >/dev/null || die "npm not found (apt-get install npm)"
	say "installing kinesalite@$version from the npm registry into $pkg"
	rm -rf "$pkg.tmp"
	mkdir -p "$pkg.tmp"
	if ! npm install --no-audit --no-fund --ignore-scripts --prefix "$pkg.tmp" "kinesalite@$version" >"$home/npm.log" 2>&1; then
		tail -n 40 "$home/npm.log" >&2 || true
		die "npm could not install kinesalite@$version (full output: $home/npm.log)"
	fi
	rm -rf "$pkg"
	mv "$pkg.tmp" "$pkg"
	touch "$pkg/.complete"
}

# answers PORT: true when the server answers a ListStreams call.
answers() {
	curl -sf -m 2 -X POST "http://127.0.0.1:$1/" \
		-H 'Content-Type: application/x-amz-json-1.1' \
		-H 'X-Amz-Target: Kinesis_20131202.ListStreams' \
		-H 'X-Amz-Date: 20260101T000000Z' \
		-H 'Authorization: AWS4-HMAC-SHA256 Credential=sluice/20260101/us-east-1/kinesis/aws4_request, SignedHeaders=host, Signature=0' \
		-d '{}' >/dev/null 2>&1
}

print_addr() { echo "SLUICE_KINESIS_ENDPOINT=http://127.0.0.1:$(cat "$portfile")"; }

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
	say "starting kinesalite $version on 127.0.0.1:$port (log: $logfile)"
	# Streams are created, resharded and deleted at once (tests need no waiting), and a
	# stream may have up to 1000 shards. setsid: the server outlives this script.
	# kinesalite throws (and would exit) when a client aborts a request, as Sluice does
	# when it closes a reader mid-poll: an aborted request is logged and the server goes on.
	NODE_PATH="$pkg/node_modules" setsid node -e '
		process.on("uncaughtException", (err) => {
			if (err && err.code === "ECONNRESET") { console.error("a client aborted a request"); return; }
			console.error(err); process.exit(1);
		});
		const port = Number(process.argv[1]);
		require("kinesalite")({createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 1000})
			.listen(port, "127.0.0.1", (err) => { if (err) throw err; console.log("listening on 127.0.0.1:" + port); });
	' "$port" >>"$logfile" 2>&1 </dev/null &
	echo $! >"$pidfile"
	echo "$port" >"$portfile"
	local deadline=$((SECONDS + timeout))
	until answers "$port"; do
		running || die "kinesalite exited during startup"
		((SECONDS < deadline)) || die "kinesalite did not answer within ${timeout}s"
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
