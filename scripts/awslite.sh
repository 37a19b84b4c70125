# awslite.sh — what kinesis.sh and dynalite.sh share: an AWS-compatible test server from the
# npm registry (kinesalite, dynalite) installed into the cache, started on a free 127.0.0.1
# port, and stopped by its PID. Source it after setting:
#   name      prefix of messages (the script's name)
#   npm_pkg   the npm package, e.g. kinesalite; version: its version
#   home      the cache folder of this server; timeout: seconds to wait for it to answer
#   env_var   the variable printed, e.g. SLUICE_KINESIS_ENDPOINT
#   service   the AWS service name in the probe's signature (kinesis, dynamodb)
#   probe     the X-Amz-Target of the probe (a list call); amz_json: its JSON version (1.0, 1.1)
#   server    the JavaScript expression making the server from the package `m`
# then call `awslite_main "$@"`.

pkg="$home/$npm_pkg-$version"
base="$home/$(basename "$home")"
logfile="$base.log"
pidfile="$base.pid"
portfile="$base.port"
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# install: the package and its dependencies into $pkg through npm, once. Its LevelDB store
# on disk is not used (everything lives in memory), so install scripts are skipped.
install() {
	if [[ -f "$pkg/.complete" ]]; then
		return 0
	fi
	command -v node >/dev/null || die "node not found (apt-get install nodejs npm)"
	command -v npm >/dev/null || die "npm not found (apt-get install npm)"
	say "installing $npm_pkg@$version from the npm registry into $pkg"
	rm -rf "$pkg.tmp"
	mkdir -p "$pkg.tmp"
	if ! npm install --no-audit --no-fund --ignore-scripts --prefix "$pkg.tmp" "$npm_pkg@$version" >"$home/npm.log" 2>&1; then
		tail -n 40 "$home/npm.log" >&2 || true
		die "npm could not install $npm_pkg@$version (full output: $home/npm.log)"
	fi
	rm -rf "$pkg"
	mv "$pkg.tmp" "$pkg"
	touch "$pkg/.complete"
}

# answers PORT: true when the server answers the probe.
answers() {
	curl -sf -m 2 -X POST "http://127.0.0.1:$1/" \
		-H "Content-Type: application/x-amz-json-$amz_json" \
		-H "X-Amz-Target: $probe" \
		-H 'X-Amz-Date: 20260101T000000Z' \
		-H "Authorization: AWS4-HMAC-SHA256 Credential=sluice/20260101/us-east-1/$service/aws4_request, SignedHeaders=host, Signature=0" \
		-d '{}' >/dev/null 2>&1
}

print_addr() { echo "$env_var=http://127.0.0.1:$(cat "$portfile")"; }

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
	say "starting $npm_pkg $version on 127.0.0.1:$port (log: $logfile)"
	# setsid: the server outlives this script. These servers throw (and would exit) when a
	# client aborts a request, as Sluice does when it closes a reader mid-poll: an aborted
	# request is logged and the server goes on.
	NODE_PATH="$pkg/node_modules" setsid node -e '
		process.on("uncaughtException", (err) => {
			if (err && err.code === "ECONNRESET") { console.error("a client aborted a request"); return; }
			console.error(err); process.exit(1);
		});
		const port = Number(process.argv[1]);
		const m = require(process.argv[2]);
		eval(process.argv[3])
			.listen(port, "127.0.0.1", (err) => { if (err) throw err; console.log("listening on 127.0.0.1:" + port); });
	' "$port" "$npm_pkg" "$server" >>"$logfile" 2>&1 </dev/null &
	echo $! >"$pidfile"
	echo "$port" >"$portfile"
	local deadline=$((SECONDS + timeout))
	until answers "$port"; do
		running || die "$npm_pkg exited during startup"
		((SECONDS < deadline)) || die "$npm_pkg did not answer within ${timeout}s"
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

awslite_main() {
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
}
