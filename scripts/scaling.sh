#!/usr/bin/env bash
# scaling.sh — measure Sluice's CPU per delivered event with 1, 2 and 3 replicas sharing
# one engine cluster, at the same total rate (docs/scaling.md holds the results).
#
#   scripts/scaling.sh [jetstream|kafka|memory ...]   (default: jetstream kafka)
#
# For each channel and replica count it starts the engine cluster if needed
# (scripts/nats-cluster.sh, scripts/kafka.sh start-cluster), N `sluice serve` replicas on
# 127.0.0.1 with one broker and TRIGGERS triggers delivering to one `sluice receive`,
# sends RATE events/s of 2 KiB for DURATION with N `sluice load` processes (RATE/N each,
# one per replica, as a load balancer would spread them), waits until every accepted event
# was delivered, and reads the CPU time (user + system, /proc/PID/stat) the replicas and
# the engine's processes used. It prints one Markdown table row per run.
#
# Environment: RATE (default 1000), DURATION (default 20s), TRIGGERS (default 1),
# REPLICAS (default "1 2 3"), WARMUP (default 10s: a first run of one replica, not
# reported, so the engine is warm), SLUICE (default bin/sluice, built if absent).
# It stops what it started; the clusters are stopped at the end if it started them.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rate="${RATE:-1000}"
duration="${DURATION:-20s}"
triggers="${TRIGGERS:-1}"
counts="${REPLICAS:-1 2 3}"
sluice="${SLUICE:-bin/sluice}"
channels=("$@")
((${#channels[@]})) || channels=(jetstream kafka)
work="$(mktemp -d)"
name=scaling.sh
logfile="$work/replica-1.log"
pidfile=/dev/null
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

pids=()
started_nats=0 started_kafka=0
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	((started_nats)) && scripts/nats-cluster.sh stop >/dev/null 2>&1
	((started_kafka)) && scripts/kafka.sh stop-cluster >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

[[ -x "$sluice" ]] || go build -o "$sluice" ./cmd/sluice

# ticks PID...: user + system CPU clock ticks of the processes.
ticks() {
	local sum=0 p f
	for p in "$@"; do
		read -ra f <"/proc/$p/stat"
		# Fields after the command (which may hold spaces): utime is the 14th, stime the 15th.
		sum=$((sum + f[13] + f[14]))
	done
	echo "$sum"
}

# metric URL NAME: the sum of a Prometheus metric's samples.
metric() {
	curl -fsS "$1/metrics" | awk -v n="$2" '$1 ~ "^"n"({|$)" {s += $NF} END {printf "%d\n", s}'
}

engine_pids() {
	local i
	case "$1" in
	jetstream) for i in 1 2 3; do scripts/nats-cluster.sh pid "$i"; done ;;
	kafka) for i in 1 2 3; do scripts/kafka.sh pid-node "$i"; done ;;
	memory) ;;
	esac
}

config() { # NS RECEIVER_URL
	printf 'apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: default, namespace: %s}\n' "$1"
	local t
	for ((t = 1; t <= triggers; t++)); do
		printf -- '---\napiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t%d, namespace: %s}\nspec: {broker: default, subscriber: {uri: "%s"}}\n' "$t" "$1" "$2"
	done
}

echo "| channel | replicas | triggers | accepted | delivered | replica CPU s | µs/delivered event (replicas) | engine CPU s | µs/delivered event (engine) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for ch in "${channels[@]}"; do
	case "$ch" in
	jetstream)
		if ! out=$(scripts/nats-cluster.sh status 2>/dev/null); then
			out=$(scripts/nats-cluster.sh start) && started_nats=1
		fi
		eval "$out"
		args=(--channel jetstream --nats-url "$SLUICE_NATS_URLS" --jetstream-replicas 3)
		;;
	kafka)
		if ! out=$(scripts/kafka.sh status-cluster 2>/dev/null); then
			out=$(scripts/kafka.sh start-cluster 3) && started_kafka=1
		fi
		eval "$out"
		args=(--channel kafka --kafka-brokers "$SLUICE_KAFKA_CLUSTER_BROKERS")
		;;
	memory) args=(--channel memory) ;;
	*) die "unknown channel $ch" ;;
	esac
	for n in warmup $counts; do
		[[ "$ch" == memory && "$n" != warmup && "$n" -gt 1 ]] && continue # not shared: one replica only
		# A first run of 1 replica, not reported, warms the engine up (the JVM's JIT).
		run_duration="$duration" report=1
		if [[ "$n" == warmup ]]; then
			n=1 run_duration="${WARMUP:-10s}" report=0
		fi
		ns="scale$RANDOM$RANDOM"
		rport="$(free_port)"
		"$sluice" receive --addr "127.0.0.1:$rport" --quiet-periods 0 >"$work/receive.log" 2>&1 &
		rpid=$!
		pids+=("$rpid")
		config "$ns" "http://127.0.0.1:$rport/" >"$work/$ns.yaml"
		rep_pids=() urls=()
		for ((i = 1; i <= n; i++)); do
			port="$(free_port)"
			"$sluice" serve --addr "127.0.0.1:$port" --config "$work/$ns.yaml" "${args[@]}" >"$work/replica-$i.log" 2>&1 &
			rep_pids+=($!)
			pids+=($!)
			urls+=("http://127.0.0.1:$port")
		done
		for u in "${urls[@]}"; do
			for _ in $(seq 1 300); do
				curl -fsS "$u/readyz" >/dev/null 2>&1 && break
				sleep 0.1
			done
			curl -fsS "$u/readyz" >/dev/null || die "replica $u not ready"
		done
		eng=($(engine_pids "$ch"))
		t0=$(ticks "${rep_pids[@]}")
		e0=0
		((${#eng[@]})) && e0=$(ticks "${eng[@]}")
		lpids=()
		for u in "${urls[@]}"; do
			"$sluice" load --quiet --target "$u/$ns/default" --rate "$(awk -v r="$rate" -v n="$n" 'BEGIN {print r / n}')" \
				--duration "$run_duration" --connections 64 >>"$work/load.log" 2>&1 &
			lpids+=($!)
		done
		wait "${lpids[@]}" || true
		# Wait for the deliveries: every accepted event, once per trigger.
		accepted=0 delivered=0
		for _ in $(seq 1 600); do
			accepted=0 delivered=0
			for u in "${urls[@]}"; do
				accepted=$((accepted + $(metric "$u" sluice_events_accepted_total)))
				delivered=$((delivered + $(metric "$u" sluice_delivery_delivered_total)))
			done
			((delivered >= accepted * triggers && accepted > 0)) && break
			sleep 0.5
		done
		t1=$(ticks "${rep_pids[@]}")
		e1=0
		((${#eng[@]})) && e1=$(ticks "${eng[@]}")
		hz=$(getconf CLK_TCK)
		((report)) && awk -v ch="$ch" -v n="$n" -v tr="$triggers" -v a="$accepted" -v d="$delivered" -v t=$((t1 - t0)) -v e=$((e1 - e0)) -v hz="$hz" 'BEGIN {
			printf "| %s | %d | %d | %d | %d | %.1f | %.0f | %.1f | %.0f |\n", ch, n, tr, a, d, t / hz, t / hz / d * 1e6, e / hz, (d ? e / hz / d * 1e6 : 0)
		}'
		for p in "${rep_pids[@]}" "$rpid"; do kill "$p" 2>/dev/null || true; done
		for p in "${rep_pids[@]}" "$rpid"; do wait "$p" 2>/dev/null || true; done
		pids=()
	done
done
