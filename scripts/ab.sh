#!/usr/bin/env bash
# ab.sh: an interleaved A/B of two broker set-ups, as docs/decisions/README.md asks of
# every decision: pairs A B A B ... of scripts/cpu-per-event.sh (broker pinned to CPU 1,
# load and receiver on CPU 0, 127.0.0.1 only), then the median and spread of each side's
# CPU µs per event and end-to-end p99, and the median of the pairwise ratios B/A.
#
#   A='SERVEFLAGS=--lean-http1=true' B='SERVEFLAGS=--lean-http1=false' scripts/ab.sh 6 5000 8
#   A='SLUICE=/tmp/old/sluice' B='SLUICE=bin/sluice' scripts/ab.sh 8 5000 8
#
# Arguments: pairs (at least 6), events/s, seconds per run. A and B are space-separated
# VAR=value assignments given to cpu-per-event.sh (SLUICE, SERVEFLAGS, TRIGGERS, BATCH,
# BROKER_ANN, TRIGGER_ANN);
# any other variable in the environment (GOGC, GODEBUG) reaches both sides alike.
set -euo pipefail
pairs=${1:?pairs}; rate=${2:?events/s}; secs=${3:-8}
root=$(cd "$(dirname "$0")/.." && pwd)
((pairs >= 6)) || echo "ab.sh: $pairs pairs: fewer than 6 pairs decide nothing on a shared machine" >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { # run SIDE: one measurement, one line "SIDE cpu p99ms"
	local side=$1 assign line cpu p99
	assign=${!side:-}
	line=$(env $assign "$root/scripts/cpu-per-event.sh" sluice "$rate" "$secs")
	cpu=$(sed -n 's/.*total \([0-9.]*\) µs\/ev.*/\1/p' <<<"$line")
	p99=$(awk -F'[][]' '/^E2E Latencies/ { gsub(/^ +/, "", $3); split($3, v, ", "); print v[6] }' <<<"$line")
	echo "$side ${cpu:-nan} ${p99:-nan}" | tee -a "$out"
}
for i in $(seq 1 "$pairs"); do
	if ((i % 2)); then run A; run B; else run B; run A; fi
done
# durations as milliseconds, then medians, spreads and the median ratio of pairs
awk -v pairs="$pairs" '
function ms(s) { if (s ~ /µs$/) return s/1000; if (s ~ /ms$/) return s+0; if (s ~ /s$/) return s*1000; return s }
function median(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
{ k = ++n[$1]; cpu[$1, k] = $2; p99[$1, k] = ms($3) }
END {
	for (side = 0; side < 2; side++) {
		s = side ? "B" : "A"; m = n[s]
		lo = hi = cpu[s, 1]; plo = phi = p99[s, 1]
		for (i = 1; i <= m; i++) { c[i] = cpu[s, i]; p[i] = p99[s, i]
			if (c[i] < lo) lo = c[i]; if (c[i] > hi) hi = c[i]; if (p[i] < plo) plo = p[i]; if (p[i] > phi) phi = p[i] }
		printf "%s: CPU µs/event median %.1f (%.1f–%.1f), e2e p99 median %.2f ms (%.2f–%.2f), %d runs\n", s, median(c, m), lo, hi, median(p, m), plo, phi, m
	}
	for (i = 1; i <= pairs; i++) { rc[i] = cpu["B", i] / cpu["A", i]; rp[i] = p99["B", i] / p99["A", i] }
	printf "B/A per pair: CPU median %.2f, e2e p99 median %.2f\n", median(rc, pairs), median(rp, pairs)
}' "$out"
