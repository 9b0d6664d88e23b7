#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Host test of scripts/vs-c.awk, the summary of `scripts/bench.sh --vs-c`, on made-up
# figures whose medians and ratios are known: what the README's benchmark table is built
# from. Prints one "ok - ..." or "not ok - ..." line per check.
set -uo pipefail
awk_script=$(dirname "$0")/../../scripts/vs-c.awk
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Three runs, C then Rust each run. Datagram TCP_STREAM: C 100, 80, 120; Rust 110, 60,
# failed in run 3 (so 2 pairs: 1.1 and 0.75). TCP_RR in microseconds. Connected mode: the
# C driver's whole run 2 failed. One in-kernel reference (verbs) stream per run.
cat >"$work/in" <<'IN'
BENCH c datagram tcp_stream 1 100 Mbit/s 0.010 0.020 s/MB
BENCH rust datagram tcp_stream 1 110 Mbit/s 0.009 0.022 s/MB
BENCH c datagram tcp_rr 1 500 us 0.1 0.1 s/ktrans
BENCH rust datagram tcp_rr 1 400 us 0.1 0.1 s/ktrans
BENCH c connected tcp_stream 1 300 Mbit/s 0.010 0.010 s/MB
BENCH rust connected tcp_stream 1 330 Mbit/s 0.010 0.010 s/MB
BENCH verbs connected rc_stream 1 600 Mbit/s 0.005 0.005 s/MB
BENCH c datagram tcp_stream 2 80 Mbit/s 0.010 0.020 s/MB
BENCH rust datagram tcp_stream 2 60 Mbit/s 0.012 0.020 s/MB
BENCH c datagram tcp_rr 2 520 us 0.1 0.1 s/ktrans
BENCH rust datagram tcp_rr 2 540 us 0.1 0.1 s/ktrans
BENCH c connected all 2 failed interface did not come up
BENCH rust connected tcp_stream 2 310 Mbit/s 0.010 0.010 s/MB
BENCH verbs connected rc_stream 2 500 Mbit/s 0.005 0.005 s/MB
BENCH c datagram tcp_stream 3 120 Mbit/s 0.010 0.020 s/MB
BENCH rust datagram tcp_stream 3 failed netperf exited 1
BENCH c datagram tcp_rr 3 480 us 0.1 0.1 s/ktrans
BENCH rust datagram tcp_rr 3 480 us 0.1 0.1 s/ktrans
BENCH c connected tcp_stream 3 200 Mbit/s 0.010 0.010 s/MB
BENCH rust connected tcp_stream 3 260 Mbit/s 0.010 0.010 s/MB
BENCH verbs connected rc_stream 3 400 Mbit/s 0.005 0.005 s/MB
IN
awk -v json="$work/json" -v dat="$work/dat" -v when=now -v logs=made-up -f "$awk_script" \
	<"$work/in" >"$work/out"
status=$?

# check NAME COMMAND...: one line of TAP-like output; counts failures.
fails=0
check() {
	local name=$1
	shift
	if "$@" >/dev/null 2>&1; then
		echo "ok - bench summary: $name"
	else
		echo "not ok - bench summary: $name"
		fails=$((fails + 1))
	fi
}
# field KEY PATH: a JSON figure (python3 reads the file: it must parse).
field() {
	python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(v)' "$work/json" "$1"
}
is() { [ "$(field "$1")" = "$2" ]; }
# near KEY VALUE: equal to 4 decimal places.
near() { python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 5e-5)' "$(field "$1")" "$2"; }

check "exit status counts the failed measurements (6: one, and five of a whole run)" [ "$status" = 6 ]
check "the JSON parses and counts the runs and failures" eval 'is runs 3 && is failed_measurements 6'
check "C's datagram TCP_STREAM median of 3 runs (100)" \
	eval 'is rust_to_c_datagram_tcp_stream.c.median 100 && is rust_to_c_datagram_tcp_stream.c.runs 3'
check "a failed run is counted, not in the median (Rust: 2 runs, median 85, 1 failed)" \
	eval 'is rust_to_c_datagram_tcp_stream.rust.median 85 && is rust_to_c_datagram_tcp_stream.rust.runs 2 &&
		is rust_to_c_datagram_tcp_stream.rust.failed 1'
check "the ratio is the median of paired runs (1.1 and 0.75: 0.925, 2 pairs)" \
	eval 'near rust_to_c_datagram_tcp_stream.ratio 0.925 && is rust_to_c_datagram_tcp_stream.pairs 2 &&
		near rust_to_c_datagram_tcp_stream.ratio_min 0.75 && near rust_to_c_datagram_tcp_stream.ratio_max 1.1'
check "CPU ratios paired the same way (client 0.9 and 1.2: 1.05)" \
	near rust_to_c_datagram_tcp_stream.client_cpu_ratio 1.05
check "latency ratio (0.8, 1.038, 1: median 1)" near rust_to_c_datagram_tcp_rr.ratio 1
check "a whole failed run counts for each of its five tests (C connected TCP_STREAM: 2 runs, 1 failed)" \
	eval 'is rust_to_c_connected_tcp_stream.c.runs 2 && is rust_to_c_connected_tcp_stream.c.failed 1 &&
		is rust_to_c_connected_tcp_maerts.c.failed 1 && is rust_to_c_connected_tcp_maerts.pairs 0'
check "nothing measured is null, not 0" eval '[ "$(field rust_to_c_connected_tcp_maerts.ratio)" = None ]'
check "the in-kernel reference and each driver over it (Rust: 0.55, 0.62, 0.65 -> 0.62)" \
	eval 'is verbs_connected_rc_stream.median 500 && near rust_connected_tcp_to_verbs_rc_stream_ratio.ratio 0.62 &&
		is c_connected_tcp_to_verbs_rc_stream_ratio.pairs 2'
check "the table lists every failure with its run and reason" \
	eval 'grep -q "6 measurements failed" "$work/out" && grep -q "run 3, rust driver, datagram tcp_stream: netperf exited 1" "$work/out" &&
		grep -q "run 2, c driver, connected tcp_rr: interface did not come up" "$work/out"'
check "the table shows runs and failures behind each median (2+1F)" \
	grep -Eq "^datagram +tcp_stream .* 85\.0 \(60\.0\.\.110\) 2\+1F" "$work/out"
check "the table tells a failed test (failed 1F) from one never run (-)" \
	grep -Eq "^connected +tcp_maerts +- +failed 1F +- +none" "$work/out"
[ "$fails" = 0 ]
