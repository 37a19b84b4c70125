#!/usr/bin/env bash
# loadkit-vs-vegeta.sh — how fast can `sluice load` drive `sluice receive` on this
# machine, compared with `sluice gen | vegeta attack` (v12.12.0) driving the same
# receiver with the same 2 KiB events? Runs one after the other, ~2 minutes in all.
#
# For each tool a short ramp of 5-second constant-rate steps is sent to a fresh
# `sluice receive` on 127.0.0.1. A step is *sustained* when success ≥ 99.9% and the
# achieved send rate is ≥ 95% of the intended one (for sluice load, also: the
# generator did not report itself saturated). CPU is measured for every process from
# /proc/PID/stat (utime+stime) or /usr/bin/time, as % of one core over the step.
#
# Usage: scripts/loadkit-vs-vegeta.sh [DATA_FILE]   (default testdata/sample-ce-data.json)
# Env:   SKIP_BUILD=1 uses an existing bin/sluice; VEGETA_RATES, SLUICE_RATES (space-separated), STEP (seconds, default 5), PORT.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DATA=${1:-$ROOT/testdata/sample-ce-data.json}
STEP=${STEP:-5}
PORT=${PORT:-9311}
VEGETA_RATES=${VEGETA_RATES:-"6000 8000 10000 12000 14000"}
SLUICE_RATES=${SLUICE_RATES:-"10000 12000 15000 18000 21000 24000"}
URL=http://127.0.0.1:$PORT/
HZ=$(getconf CLK_TCK)
OUT=$(mktemp -d)
trap 'kill "${RECV_PID:-}" 2>/dev/null || true; rm -rf "$OUT"' EXIT

echo "== building bin/sluice and bin/vegeta (tools/vegeta, v12.12.0)"
if [ -z "${SKIP_BUILD:-}" ]; then
  go build -o bin/sluice ./cmd/sluice
fi
(cd tools/vegeta && go build -o ../../bin/vegeta github.com/tsenart/vegeta/v12)
SLUICE=$ROOT/bin/sluice
VEGETA=$ROOT/bin/vegeta
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); data: $DATA ($(wc -c <"$DATA") bytes)"

ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
pct() { awk -v t="$1" -v hz="$HZ" -v s="$2" 'BEGIN{printf "%.0f", 100*t/hz/s}'; }

start_receiver() {
  "$SLUICE" receive --addr "127.0.0.1:$PORT" >"$OUT/recv-$1.txt" 2>&1 &
  RECV_PID=$!
  for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics" && return; sleep 0.1; done
  echo "receiver did not start" >&2; exit 1
}
stop_receiver() { kill -INT "$RECV_PID"; wait "$RECV_PID" || true; RECV_PID=; }
received() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^sluice_receive_events_total/{printf "%d", $2}'; }

best_v=0; best_v_cpu=; best_s=0; best_s_cpu=; best_r=0; best_r_cpu=
printf '\n== vegeta: sluice gen | vegeta attack -lazy -format=json (-max-workers unlimited)\n'
printf '%8s %9s %8s %9s %9s %9s %s\n' rate achieved success "vegeta%" "gen%" "recv%" verdict
start_receiver vegeta
for r in $VEGETA_RATES; do
  r0=$(ticks "$RECV_PID"); n0=$(received)
  "$SLUICE" gen -u "$URL" -d "@$DATA" 2>/dev/null \
    | /usr/bin/time -f '%U %S %e' -o "$OUT/vt" "$VEGETA" attack -lazy -format=json -rate="$r/s" -duration="${STEP}s" -timeout=10s \
    | "$VEGETA" report -type=json >"$OUT/v.json" || true
  r1=$(ticks "$RECV_PID")
  read -r vu vs ve <"$OUT/vt"
  rate=$(jq -r '.rate' "$OUT/v.json"); succ=$(jq -r '.success' "$OUT/v.json")
  vcpu=$(awk -v u="$vu" -v s="$vs" -v e="$ve" 'BEGIN{printf "%.0f", 100*(u+s)/e}')
  rcpu=$(pct $((r1 - r0)) "$ve")
  ok=$(awk -v a="$rate" -v i="$r" -v s="$succ" 'BEGIN{print (s>=0.999 && a>=0.95*i) ? "sustained" : "NOT sustained"}')
  printf '%8d %9.0f %7.2f%% %9s %9s %9s %s\n' "$r" "$rate" "$(awk -v s="$succ" 'BEGIN{print 100*s}')" "$vcpu" "-" "$rcpu" "$ok"
  if [ "$ok" = sustained ]; then best_v=$r; best_v_cpu=$vcpu; fi
done
stop_receiver

printf '\n== sluice load (open model, 256 keep-alive connections)\n'
printf '%8s %9s %8s %9s %9s %9s %s\n' rate achieved success "load%" "recv-ev/s" "recv%" verdict
start_receiver sluice
for r in $SLUICE_RATES; do
  r0=$(ticks "$RECV_PID"); n0=$(received)
  /usr/bin/time -f '%U %S %e' -o "$OUT/st" "$SLUICE" load --target "$URL" --rate "$r" --duration "${STEP}s" \
    --data "@$DATA" --quiet --output "$OUT/s.json" >/dev/null 2>"$OUT/s.err" || true
  r1=$(ticks "$RECV_PID"); n1=$(received)
  read -r su ss se <"$OUT/st"
  rate=$(jq -r '.rate' "$OUT/s.json"); succ=$(jq -r '.success' "$OUT/s.json"); sat=$(jq -r '.saturated' "$OUT/s.json")
  attack=$(jq -r '.duration_ns/1e9' "$OUT/s.json")
  scpu=$(awk -v u="$su" -v s="$ss" -v e="$se" 'BEGIN{printf "%.0f", 100*(u+s)/e}')
  rcpu=$(pct $((r1 - r0)) "$se")
  revs=$(awk -v n=$((n1 - n0)) -v e="$attack" 'BEGIN{printf "%.0f", n/e}')
  ok=$(awk -v a="$rate" -v i="$r" -v s="$succ" -v sat="$sat" 'BEGIN{print (s>=0.999 && a>=0.95*i && sat=="false") ? "sustained" : "NOT sustained"}')
  printf '%8d %9.0f %7.2f%% %9s %9s %9s %s\n' "$r" "$rate" "$(awk -v s="$succ" 'BEGIN{print 100*s}')" "$scpu" "$revs" "$rcpu" "$ok"
  if [ "$ok" = sustained ]; then best_s=$r; best_s_cpu=$scpu; best_r=$revs; best_r_cpu=$rcpu; fi
done
stop_receiver

echo
echo "== result"
echo "vegeta sustained:      ${best_v} events/s (vegeta CPU ${best_v_cpu:-?}%)"
echo "sluice load sustained: ${best_s} events/s (load CPU ${best_s_cpu:-?}%)"
echo "sluice receive:        ${best_r} events/s at ${best_r_cpu:-?}% CPU (of $(( $(nproc) * 100 ))%)"
awk -v s="$best_s" -v v="$best_v" 'BEGIN{ if (v>0) printf "ratio sluice/vegeta:   %.2fx (bar: 1.5x)\n", s/v }'
