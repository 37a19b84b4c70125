#!/usr/bin/env bash
# agents-ab.sh — does distributed generation keep the single-machine efficiency?
# Interleaved pairs A B A B … (B A in even pairs) of
#   A: one `sluice load --agent`, driven by a controller,
#   B: three agents, driven by a controller, sharing one schedule,
# all generators (agents and controller) pinned to CPU 0 with taskset, a fresh
# `sluice receive` per run pinned to CPU 1, 127.0.0.1 only.
#
# Each run asks for more than one core can send (RATE, default 80000 requests/s, for
# SECS seconds), so the open-model generators fall behind and send the whole schedule
# as fast as CPU 0 allows: the achieved rate is requests ÷ attack time (the merged
# run's attack is the longest agent's). Both sides keep the same total connections
# (CONNS, default 256; each of three agents gets a third). Also printed: the
# generators' CPU (agents + controller, % of one core, from /proc/PID/stat) and
# requests per generator CPU-second, and the receiver's CPU: near 100% means the
# receiver, not the generators, set the rate. Prints the median and spread of each side and
# the median of the pairwise ratios B/A.
#
#   scripts/agents-ab.sh [PAIRS]       (default 6; fewer decide nothing on a shared machine)
#
# Env: SKIP_BUILD=1 uses an existing bin/sluice; RATE, SECS (default 5), CONNS,
# DATA (default testdata/sample-ce-data.json), PORT (receiver, default 9321),
# APORT (first agent port, default 7171).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PAIRS=${1:-6}
RATE=${RATE:-80000}
SECS=${SECS:-5}
CONNS=${CONNS:-256}
DATA=${DATA:-$ROOT/testdata/sample-ce-data.json}
PORT=${PORT:-9321}
APORT=${APORT:-7171}
HZ=$(getconf CLK_TCK)
((PAIRS >= 6)) || echo "agents-ab.sh: $PAIRS pairs: fewer than 6 pairs decide nothing on a shared machine" >&2
(($(nproc) >= 2)) || { echo "agents-ab.sh: needs 2 CPUs (generators on 0, receiver on 1)" >&2; exit 1; }
OUT=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}" ${RECV_PID:-}; do kill "$p" 2>/dev/null || true; done
	rm -rf "$OUT"
}
trap cleanup EXIT

if [ -z "${SKIP_BUILD:-}" ]; then go build -o bin/sluice ./cmd/sluice; fi
SLUICE=$ROOT/bin/sluice
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $RATE requests/s asked for ${SECS}s; data $(wc -c <"$DATA") bytes; $CONNS connections a side"

wait_http() { # wait_http URL: up to 10 s
	for _ in $(seq 100); do curl -s -o /dev/null "$1" && return; sleep 0.1; done
	echo "agents-ab.sh: $1 did not answer" >&2; exit 1
}
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo "$t"; }

# three agents, started once: idle between runs
AGENTS=()
for i in 0 1 2; do
	addr=127.0.0.1:$((APORT + i))
	taskset -c 0 "$SLUICE" load --agent --listen "$addr" >"$OUT/agent$i.log" 2>&1 &
	PIDS+=($!)
	AGENTS+=("$addr")
done
for a in "${AGENTS[@]}"; do wait_http "http://$a/time"; done

run() { # run SIDE: one measurement; prints "SIDE rate gen_cpu% req_per_cpu_s"
	local side=$1 agents conns n t0 t1 r0 r1 wall rate cpu eff rcpu
	if [ "$side" = A ]; then agents=${AGENTS[0]} conns=$CONNS n=1; else
		agents=$(IFS=,; echo "${AGENTS[*]}") conns=$(((CONNS + 2) / 3)) n=3
	fi
	taskset -c 1 "$SLUICE" receive --addr "127.0.0.1:$PORT" >"$OUT/recv.log" 2>&1 &
	RECV_PID=$!
	wait_http "http://127.0.0.1:$PORT/metrics"
	t0=$(ticks "${PIDS[@]:0:n}") r0=$(ticks "$RECV_PID")
	local s0; s0=$(date +%s.%N)
	taskset -c 0 "$SLUICE" load --agents "$agents" --target "http://127.0.0.1:$PORT/" --rate "$RATE" \
		--duration "${SECS}s" --connections "$conns" --data "@$DATA" --quiet -o "$OUT/run.json" \
		>"$OUT/run.txt" 2>&1 || true # agents behind an over-capacity schedule exit non-zero
	local s1; s1=$(date +%s.%N)
	t1=$(ticks "${PIDS[@]:0:n}") r1=$(ticks "$RECV_PID")
	kill "$RECV_PID"; wait "$RECV_PID" 2>/dev/null || true; RECV_PID=
	rate=$(jq -r '.requests / (.attack_ns / 1e9)' "$OUT/run.json")
	# generator CPU over the attack, % of one core (agents' ticks; the controller sleeps)
	cpu=$(jq -r --argjson t "$((t1 - t0))" --argjson hz "$HZ" '100 * $t / $hz / (.attack_ns / 1e9)' "$OUT/run.json")
	eff=$(jq -r --argjson t "$((t1 - t0))" --argjson hz "$HZ" '.requests / ($t / $hz)' "$OUT/run.json")
	rcpu=$(jq -r --argjson t "$((r1 - r0))" --argjson hz "$HZ" '100 * $t / $hz / (.attack_ns / 1e9)' "$OUT/run.json")
	wall=$(awk -v a="$s0" -v b="$s1" 'BEGIN{printf "%.0f", b-a}')
	printf '%s %.0f %.0f %.0f %.0f  (%s agents, requests %s, ok %s, wall %ss)\n' "$side" "$rate" "$cpu" "$eff" "$rcpu" "$n" \
		"$(jq -r .requests "$OUT/run.json")" "$(jq -r .ok "$OUT/run.json")" "$wall" | tee -a "$OUT/lines"
}

printf '%s %s %s %s %s\n' side sent/s "gen-cpu%" "requests/gen-cpu-s" "recv-cpu%"
for i in $(seq 1 "$PAIRS"); do
	if ((i % 2)); then run A; run B; else run B; run A; fi
done

awk -v pairs="$PAIRS" '
function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
{ k = ++n[$1]; r[$1, k] = $2; c[$1, k] = $3; e[$1, k] = $4; rc[$1, k] = $5 }
END {
	print ""
	for (side = 0; side < 2; side++) {
		s = side ? "B (3 agents)" : "A (1 agent) "; x = side ? "B" : "A"; m = n[x]
		lo = hi = r[x, 1]; elo = ehi = e[x, 1]
		for (i = 1; i <= m; i++) { v[i] = r[x, i]; w[i] = e[x, i]; u[i] = c[x, i]; z[i] = rc[x, i]
			if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]; if (w[i] < elo) elo = w[i]; if (w[i] > ehi) ehi = w[i] }
		printf "%s: sent/s median %.0f (%.0f–%.0f), gen CPU median %.0f%%, requests per gen CPU-second median %.0f (%.0f–%.0f), receiver CPU median %.0f%%, %d runs\n", s, median(v, m), lo, hi, median(u, m), median(w, m), elo, ehi, median(z, m), m
	}
	for (i = 1; i <= pairs; i++) { q[i] = r["B", i] / r["A", i]; qe[i] = e["B", i] / e["A", i]; lo = (i == 1 || q[i] < lo) ? q[i] : lo; hi = (i == 1 || q[i] > hi) ? q[i] : hi
		printf "pair %d: B/A sent/s %.3f, per CPU-second %.3f\n", i, q[i], qe[i] }
	printf "B/A per pair: sent/s median %.3f (%.3f–%.3f), requests per CPU-second median %.3f\n", median(q, pairs), lo, hi, median(qe, pairs)
}' "$OUT/lines"
