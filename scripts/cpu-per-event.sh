#!/usr/bin/env bash
# cpu-per-event.sh: the broker's (or nginx's) CPU per event at a fixed rate, pinned as
# make bench pins it: the proxy on CPU 1, `sluice receive` and `sluice load` on CPU 0,
# 2 KiB events, one trigger. Prints user and system µs per event over the middle of the
# run, read from /proc/PID/stat. Traffic goes to 127.0.0.1 only; every process it starts
# is stopped by PID before it exits.
#
#   scripts/cpu-per-event.sh sluice 5000 8        # the memory broker, 5,000 ev/s for 8 s
#   scripts/cpu-per-event.sh nginx 5000 8         # nginx proxy_pass to the same receiver
#   SLUICE=/tmp/old/sluice scripts/cpu-per-event.sh sluice 5000 8   # another build
#   TRIGGERS=10 scripts/cpu-per-event.sh sluice 2000 8              # 10 matching triggers
#   BATCH=10 scripts/cpu-per-event.sh sluice 8000 8                 # batched delivery, up to 10 per POST (5 ms wait)
#   SERVEFLAGS=--lean-http1=false scripts/cpu-per-event.sh sluice 5000 8   # extra flags for sluice serve
#   BROKER_ANN=sluice.dev/dedup-window=5m scripts/cpu-per-event.sh sluice 5000 8     # broker annotations K=V,K=V
#   TRIGGER_ANN=sluice.dev/max-in-flight=1000 scripts/cpu-per-event.sh sluice 5000 8 # trigger annotations
#
# The receiver's end-to-end latency line (warm-up included) is printed last.
set -euo pipefail
what=${1:?sluice or nginx}; rate=${2:?events/s}; secs=${3:-8}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${SLUICE:-$root/bin/sluice}
data=$root/testdata/sample-ce-data.json
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
rport=19391; pport=19392
taskset -c 0 "$bin" receive --addr 127.0.0.1:$rport --quiet-periods 0 >"$dir/receive.log" 2>&1 &
pids+=($!)
# annotations K=V,K=V: the YAML ", annotations: {K: "V", ...}" of a metadata map, or nothing
annotations() {
	[ -n "$1" ] || return 0
	local out="" kv
	IFS=, read -ra kvs <<<"$1"
	for kv in "${kvs[@]}"; do out+="${out:+, }${kv%%=*}: \"${kv#*=}\""; done
	printf ', annotations: {%s}' "$out"
}
case $what in
sluice)
	{
		printf 'apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: b, namespace: bench%s}\n' "$(annotations "${BROKER_ANN:-}")"
		for i in $(seq 1 "${TRIGGERS:-1}"); do
			printf -- '---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t%d, namespace: bench' "$i"
			ann=${TRIGGER_ANN:-}
			if [ -n "${BATCH:-}" ]; then
				ann=${ann:+$ann,}sluice.dev/delivery-batch=$BATCH,sluice.dev/delivery-batch-wait=PT0.005S
			fi
			printf '%s' "$(annotations "$ann")"
			printf '}\n'
			printf 'spec:\n  broker: b\n  filter: {attributes: {type: io.triggermesh.perf.drill}}\n  subscriber: {uri: "http://127.0.0.1:%d/"}\n' $rport
		done
	} >"$dir/config.yaml"
	taskset -c 1 "$bin" serve --config "$dir/config.yaml" --addr 127.0.0.1:$pport --log-level warn ${SERVEFLAGS:-} >"$dir/serve.log" 2>&1 &
	pid=$!; target=http://127.0.0.1:$pport/bench/b ;;
nginx)
	mkdir -p "$dir/tmp"
	cat >"$dir/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $dir/nginx.pid; error_log $dir/error.log warn;
events { worker_connections 8192; }
http { access_log off; client_body_temp_path $dir/tmp; proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp;
  uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp; keepalive_requests 100000000; keepalive_timeout 120s;
  upstream receiver { server 127.0.0.1:$rport max_fails=0; keepalive 1024; keepalive_requests 100000000; }
  server { listen 127.0.0.1:$pport backlog=4096;
    location / { proxy_pass http://receiver; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
CONF
	taskset -c 1 nginx -c "$dir/nginx.conf" >"$dir/nginx.log" 2>&1 &
	pid=$!; target=http://127.0.0.1:$pport/ ;;
*) echo "want sluice or nginx, got $what" >&2; exit 2 ;;
esac
pids+=("$pid")
sleep 1.5
load() { taskset -c 0 "$bin" load --target "$target" --rate "$rate" --duration "$1" --data "@$data" --quiet; }
load 3s >/dev/null # warm-up: connections, pools, caches
mid=$((secs - 2))
load "${secs}s" >"$dir/load.txt" &
lp=$!
sleep 1
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
sleep "$mid"
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
wait "$lp"
kill -INT "${pids[0]}" 2>/dev/null && wait "${pids[0]}" 2>/dev/null || true # the receiver prints its report
tck=$(getconf CLK_TCK)
awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v n=$((rate * mid)) -v t="$tck" -v w="$what" -v r="$rate" \
	'BEGIN { printf "%s at %d ev/s: user %.1f µs/ev, system %.1f µs/ev, total %.1f µs/ev\n", w, r, u*1e6/t/n, s*1e6/t/n, (u+s)*1e6/t/n }'
grep -E "^Success" "$dir/load.txt" || true
grep -E "^E2E Latencies" "$dir/receive.log" || true
