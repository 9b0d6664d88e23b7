#!/usr/bin/env bash
# Benchmarks: two guests on soft-RoCE, on the same link and in the same run, at Ethernet MTU
# 1500 and 9000: raw RC verbs bandwidth from user space (perftest's ib_send_bw on
# completion events, into a shared receive queue), TCP over the Ethernet link, IPoIB
# datagram mode and connected mode at MTU 65520 (netperf), each repeated
# IPOIB_RS_BENCH_RUNS times (default 3). Prints a table of medians and spreads with the
# ratios to the user-space RC figure (the in-kernel reference is --vs-c's), and writes bench/results/latest.json (every figure with its
# unit) and bench/results/latest.png (a chart, when gnuplot is installed). Everything runs on
# the bench kernel (IPOIB_RS_FLAVOUR=bench: the test kernel without its lock debugging,
# built in a tree of its own on first use, about 15 minutes).
# Usage: scripts/bench.sh [--from LOGDIR]   (--from: summarise an earlier run's logs again;
#        LOGDIR is the run's folder, $IPOIB_RS_CACHE/out/logs/<run>, which each run prints)
#        scripts/bench.sh --scaling [--from LOGDIR]
# --scaling: one guest, TCP streams from 1, 8 and 64 connected-mode peers at once into one
# interface (one_host_scaling_bench.sh): total throughput and kernel memory per peer count,
# written to bench/results/scaling.json.
#        scripts/bench.sh --profile [--from LOGDIR]
# --profile: two guests, where a TCP_RR transaction's time goes in datagram and connected
# mode (two_hosts_profile.sh): raw UD and RC verbs latency, TCP_RR, and a system-wide perf
# profile of both hosts during TCP_RR (busy samples by module and function; Rust names
# demangled by rustfilt, which cargo installs on first use), written to
# bench/results/profile.txt, with the RC retransmissions of connected-mode UDP streams at
# Ethernet MTU 1500 and 9000. IPOIB_RS_PROFILE_SECS sets each run's time (default 20).
#        scripts/bench.sh --vs-c [--from LOGDIR]
# --vs-c: two guests on the InfiniBand fabric (two-hosts-ib), ours against the C ipoib on
# the same link in the same run (two_hosts_ib_bench.sh): each run measures the in-kernel
# reference (raw RC and UD streams through the kernel verbs: rdma_rs_selftest loaded with
# stream=1|2 on both guests, RC messages of 65520 bytes into a shared receive queue, UD
# datagrams of the port's MTU, ib_ipoib's queue depths, completions taken on events; the
# figure is what arrived at the receiver), then one driver on both guests, then the other
# (C first in odd runs, ours in even
# ones; IPOIB_RS_BENCH_FIRST=rust the other way round, also for the profiles and traces),
# in datagram mode and in connected mode
# at MTU 65520 (netperf TCP_STREAM, TCP_MAERTS, TCP_RR, UDP_STREAM at the MTU, four TCP
# streams, with both hosts' CPU). Prints both drivers' medians with their spread and the
# number of runs behind them, the Rust/C ratio of each figure over the paired runs, and
# each driver's TCP_STREAM over the reference; writes bench/results/vs-c.json (keys
# rust_to_c_<mode>_<test>) and bench/results/vs-c.png. Failed measurements are listed and
# counted, and make the exit status non-zero. With IPOIB_RS_PROFILE_SECS set, each driver's
# TCP_STREAM in each mode is then profiled on both guests (perf, as --profile does), written
# to bench/results/vs-c-profile.txt; with IPOIB_RS_PROFILE_TEST=TCP_RR its TCP_RR instead,
# to bench/results/vs-c-profile-tcp_rr.txt (IPOIB_RS_BENCH_RUNS=0: the profiles alone).
# With IPOIB_RS_TRACE_SECS set, each driver's TCP_RR in each mode is traced on both guests
# (tracefs events: sends and receives on ib0 and eth0, rxe's tasks, NAPI rounds, NET_RX
# softirqs; the bench kernel has event tracing without the function tracer) and split into
# intervals (send to rxe's task and to the wire, wire to rxe's task and to the stack, the
# application's turn, the round trip), with what each host did per transaction (time in
# rxe's tasks and NET_RX softirqs, CPU busy and idle, context switches, interrupts, IPIs,
# softirqs of each kind, idle-state entries), written to bench/results/vs-c-trace.txt. With
# IPOIB_RS_PRELUDE_SECS=N, each profiled or traced run follows an N-second TCP_MAERTS.
#        scripts/bench.sh --cost [--from LOGDIR]
# --cost: the guest instructions a fixed amount of work costs, ours against the C ipoib on
# the InfiniBand fabric (two_hosts_ib_cost.sh), counted by a QEMU TCG plugin
# (bench/cost-plugin, built with cargo on first use) and so independent of the machine's
# load: per run (IPOIB_RS_BENCH_RUNS), each driver in datagram mode at IB MTU 2048 (ib0) and
# 4096 (a child on a partition of IB MTU 4096) and in connected mode (MTU 65520), on a fabric
# at Ethernet MTU 9000: UDP datagrams of the MTU (IPOIB_RS_COST_UDP, default 2000), a TCP
# stream of IPOIB_RS_COST_KB KiB (65536) and IPOIB_RS_COST_RR TCP_RR transactions (2000);
# IPOIB_RS_COST_MODES=datagram,connected (say) measures only those modes.
# Each guest's counts go to the run's LOGDIR/host*.cost. Prints, per driver, mode, test and host,
# the instructions per packet (per KiB, per transaction) in the driver's module, in rxe, in
# the rest of the kernel, in user space and in all, with the spread over the runs, and the
# Rust/C ratios; writes bench/results/cost.json (keys cost_<driver>_<mode>_<test>_<host>_<part>
# and cost_rust_to_c_<mode>_<test>_<host>_<part>, with the commit measured), its table to
# bench/results/cost.md and the functions that cost most to bench/results/cost-symbols.txt;
# the hottest blocks of the module's costliest functions, disassembled, to LOGDIR/cost-blocks.txt.
# With IPOIB_RS_LINE_TABLES=1 the module is built with line tables (see build.sh) and the
# results go to LOGDIR instead: for `scripts/cost-annotate.py --lines`, which says which
# source lines the instructions came from.
set -euo pipefail
# Figures come from the bench kernel (no lock debugging) unless a flavour is named.
export IPOIB_RS_FLAVOUR=${IPOIB_RS_FLAVOUR:-bench}
. "$(dirname "$0")/lib.sh"

runs=${IPOIB_RS_BENCH_RUNS:-3}
RUSTFILT_VERSION=0.2.1
dest=$REPO/bench/results
rc=0
# What the results were measured on, recorded with them: the commit (+ when the work tree
# differs from it) and the kernel flavour.
commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD 2>/dev/null || commit+=+

# run_guests NAME TOPOLOGY PROGRAM TIMEOUT [GUEST-ARGS]: sets up and builds, runs PROGRAM in
# the guests of TOPOLOGY (IPOIB_RS_VM_TIMEOUT, else TIMEOUT seconds), and leaves the run's
# log directory in logs (vm.sh's failure in rc).
run_guests() {
	"$REPO/scripts/setup.sh"
	"$REPO/scripts/build.sh"
	"$REPO/scripts/initramfs.sh"
	local run
	run=$(date +%Y%m%d-%H%M%S)-$1
	IPOIB_RS_RUN=$run IPOIB_RS_VM_TIMEOUT=${IPOIB_RS_VM_TIMEOUT:-$4} \
		IPOIB_RS_GUEST_ARGS=${5:-${IPOIB_RS_GUEST_ARGS:-}} \
		"$REPO/scripts/vm.sh" "$2" $3 || rc=$?
	logs=$OUT/logs/$run
}

# ensure_rustfilt: rustfilt, which makes Rust names readable (installed on first use).
ensure_rustfilt() {
	if ! "$TOOLS/bin/rustfilt" --version >/dev/null 2>&1; then
		log "cargo install rustfilt $RUSTFILT_VERSION"
		cargo +"$RUST_VERSION" install --locked --quiet --root "$TOOLS" \
			rustfilt --version "$RUSTFILT_VERSION" || log "no rustfilt: Rust names stay mangled"
	fi
}
# demangled_prof LOGDIR [KIND]: the PROF (or KIND) lines of both guests' results, with Rust
# names made readable by rustfilt.
demangled_prof() {
	ensure_rustfilt
	grep -ah "^# ${2:-PROF} " "$1"/host*.results | sed 's/^# //' |
		if [ -x "$TOOLS/bin/rustfilt" ]; then "$TOOLS/bin/rustfilt"; else cat; fi
}
# print_prof MODES: for each profiled mode and role, the busy share, modules, kinds of work
# and top functions of the PROF lines in $prof.
print_prof() {
	local mode role
	for mode in "$@"; do
		for role in client server; do
			echo
			echo "$prof" | awk -v m="$mode" -v r="$role" '$2 == m && $3 == r && $4 == "busy" { printf "%s, %s: busy %s%% of samples; by module:\n", m, r, $5 }'
			echo "$prof" | awk -v m="$mode" -v r="$role" '$2 == m && $3 == r && $4 == "dso" && $5 >= 1 { printf "  %6.1f%%  %s\n", $5, $6 }'
			echo "  by kind of work:"
			echo "$prof" | awk -v m="$mode" -v r="$role" '$2 == m && $3 == r && $4 == "kind" { printf "  %6.1f%%  %s\n", $5, $6 }'
			echo "  top functions:"
			echo "$prof" | awk -v m="$mode" -v r="$role" '$2 == m && $3 == r && $4 == "sym" { n++; if (n <= 12) { s = $6; for (i = 7; i <= NF; i++) s = s " " $i; printf "  %6.1f%%  %s\n", $5, s } }'
		done
	done
}

if [ "${1:-}" = --cost ]; then
	if [ "${2:-}" = --from ]; then
		logs=${3:?usage: bench.sh --cost --from LOGDIR}
	else
		log "building the cost plugin (bench/cost-plugin)"
		cargo +"$RUST_VERSION" build --release --locked --quiet \
			--manifest-path "$REPO/bench/cost-plugin/Cargo.toml" --target-dir "$CACHE/cost-plugin"
		export IPOIB_RS_QEMU_PLUGIN=$CACHE/cost-plugin/release/libipoib_cost.so
		run_guests cost two-hosts-ib two_hosts_ib_cost.sh 3000 \
			"ipoibrs.costruns=$runs ipoibrs.costudp=${IPOIB_RS_COST_UDP:-2000} ipoibrs.costkb=${IPOIB_RS_COST_KB:-65536} ipoibrs.costrr=${IPOIB_RS_COST_RR:-2000} ipoibrs.costmodes=${IPOIB_RS_COST_MODES:-datagram,datagram4096,connected}"
	fi
	ensure_rustfilt
	# A build with line tables is for cost-annotate.py --lines: its figures stay in the logs.
	[ "${IPOIB_RS_LINE_TABLES:-0}" = 0 ] || dest=$logs
	mkdir -p "$dest"
	python3 "$REPO/scripts/cost-report.py" --logs "$logs" --build "$KBUILD" \
		--rust-ko "$(find "$OUT/$FLAVOUR/modroot" -name ib_ipoib.ko | head -n 1)" \
		--c-ko "$OUT/$FLAVOUR/ipoib-c.ko" --json "$dest/cost.json" --markdown "$dest/cost.md" \
		--symbols "$dest/cost-symbols.txt" --blocks "$logs/cost-blocks.txt" \
		--rustfilt "$TOOLS/bin/rustfilt" --commit "$commit" \
		--flavour "$IPOIB_RS_FLAVOUR" || rc=1
	echo "logs: $logs"
	exit $rc
fi
if [ "${1:-}" = --scaling ]; then
	if [ "${2:-}" = --from ]; then
		logs=${3:?usage: bench.sh --scaling --from LOGDIR}
	else
		# The crowd program holds 2000 datagram destinations at once and prints their memory.
		run_guests scaling one-host "one_host_scaling_bench.sh one_host_crowd.sh" 1800
	fi
	lines=$(grep -a '^# # SCALE ' "$logs/host0.results" | sed 's/^# # //' || true)
	dests=$(grep -a '^# # DESTS ' "$logs/host0.results" | sed 's/^# # //' | tail -n 1 || true)
	[ -n "$lines" ] && [ -n "$dests" ] || die "no figures in $logs/host0.results"
	mkdir -p "$dest"
	echo "$lines" | awk -v json="$dest/scaling.json" -v when="$(date -u +%FT%TZ)" \
		-v commit="$commit" -v flavour="$IPOIB_RS_FLAVOUR" -v dests="$dests" '
	BEGIN { printf "%6s %14s %14s %16s\n", "peers", "Mbit/s total", "memory KiB", "KiB per peer" }
	{
		n[++k] = $2; bw[k] = $3; mem[k] = $4
		printf "%6d %14.2f %14d %16.1f\n", $2, $3, $4, $4 / $2
	}
	END {
		printf "{\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"kernel_flavour\": \"%s\",\n  \"figures\": [\n", when, commit, flavour > json
		for (i = 1; i <= k; i++)
			printf "    {\"peers\": %d, \"throughput_mbit_s\": %.3f, \"kernel_memory_kib\": %d, \"kernel_memory_kib_per_peer\": %.1f}%s\n", n[i], bw[i], mem[i], mem[i] / n[i], i < k ? "," : "" > json
		split(dests, d, " ")
		printf "  ],\n  \"destinations\": {\"count\": %d, \"kernel_memory_bytes_per_destination\": %d}\n}\n", d[2], d[3] > json
		printf "%d datagram destinations held at once: %d bytes of kernel memory each\n", d[2], d[3]
	}'
	echo "wrote $dest/scaling.json"
	echo "logs: $logs"
	exit $rc
fi
if [ "${1:-}" = --profile ]; then
	if [ "${2:-}" = --from ]; then
		logs=${3:?usage: bench.sh --profile --from LOGDIR}
	else
		run_guests profile two-hosts two_hosts_profile.sh 1800 \
			"ipoibrs.profilesecs=${IPOIB_RS_PROFILE_SECS:-20}"
	fi
	# Rust symbols are mangled in the kernel's symbol table: rustfilt makes them readable.
	lat=$(grep -ah '^# LAT ' "$logs"/host*.results | sed 's/^# //' || true)
	prof=$(demangled_prof "$logs" || true)
	[ -n "$lat" ] && [ -n "$prof" ] || die "no figures in $logs"
	mkdir -p "$dest"
	{
		echo "# ipoib-rs: where TCP_RR time goes ($(date -u +%FT%TZ); $IPOIB_RS_FLAVOUR kernel, commit $commit)"
		echo "# LAT name value unit: raw verbs latency and netperf TCP_RR rates (client)"
		echo "$lat"
		echo "# PROF mode role dso|sym share name: % of busy (non-idle) perf samples during TCP_RR"
		echo "$prof"
	} >"$dest/profile.txt"
	echo "$lat" | awk '{ printf "%-28s %10s %s\n", $2, $3, $4 }'
	print_prof datagram connected
	echo "wrote $dest/profile.txt"
	echo "logs: $logs"
	exit $rc
fi
if [ "${1:-}" = --vs-c ]; then
	profile_test=${IPOIB_RS_PROFILE_TEST:-TCP_STREAM}
	case "$profile_test" in
	TCP_STREAM) profile_file=vs-c-profile.txt ;;
	TCP_RR) profile_file=vs-c-profile-tcp_rr.txt ;;
	*) die "IPOIB_RS_PROFILE_TEST: TCP_STREAM or TCP_RR, not $profile_test" ;;
	esac
	if [ "${2:-}" = --from ]; then
		logs=${3:?usage: bench.sh --vs-c --from LOGDIR}
	else
		run_guests vs-c two-hosts-ib two_hosts_ib_bench.sh 3000 \
			"ipoibrs.benchruns=$runs${IPOIB_RS_PROFILE_SECS:+ ipoibrs.profilesecs=$IPOIB_RS_PROFILE_SECS}${IPOIB_RS_TRACE_SECS:+ ipoibrs.tracesecs=$IPOIB_RS_TRACE_SECS}${IPOIB_RS_PRELUDE_SECS:+ ipoibrs.preludesecs=$IPOIB_RS_PRELUDE_SECS}${IPOIB_RS_PERF_GRAPH:+ ipoibrs.perfgraph=1} ipoibrs.profiletest=$profile_test ipoibrs.benchfirst=${IPOIB_RS_BENCH_FIRST:-c}"
	fi
	lines=$(grep -a '^# BENCH ' "$logs/host1.results" | sed 's/^# //' || true)
	prof=$(grep -qa '^# PROF ' "$logs"/host*.results && demangled_prof "$logs" || true)
	trace=$(grep -ah '^# TRACE ' "$logs"/host*.results | sed 's/^# //' || true)
	[ -n "$lines" ] || [ -n "$prof" ] || [ -n "$trace" ] || die "no figures in $logs"
	mkdir -p "$dest"
	failed=0
	if [ -n "$trace" ]; then
		{
			echo "# ipoib-rs against the C ipoib: TCP_RR traced ($(date -u +%FT%TZ); $IPOIB_RS_FLAVOUR kernel, commit $commit)"
			echo "# TRACE <driver>-<mode> role interval median M mean M us n N: from an event to the first of the other kind after it"
			echo "# TRACE <driver>-<mode> role event per_ib0_send R n N: events of that kind per packet ib0 sent"
			echo "$trace" | sort -k3,3 -k4,4 -k2,2
		} >"$dest/vs-c-trace.txt"
		echo "$trace" | sort -k3,3 -k4,4 -k2,2 | awk '{ printf "%-18s %-7s %-18s %s %s %s %s %s\n", $2, $3, $4, $5, $6, $7, $8, $9 }'
		echo "wrote $dest/vs-c-trace.txt"
	fi
	if [ -n "$lines" ]; then
		echo "$lines" | awk -v json="$dest/vs-c.json" -v dat="$dest/vs-c.dat" \
			-v when="$(date -u +%FT%TZ)" -v commit="$commit" -v flavour="$IPOIB_RS_FLAVOUR" \
			-f "$REPO/scripts/vs-c.awk" ||
			failed=$?
		echo "wrote $dest/vs-c.json"
		if command -v gnuplot >/dev/null; then
			gnuplot <<EOF
set terminal pngcairo size 1000,560 noenhanced font ",10"
set output "$dest/vs-c.png"
set title "ipoib-rs against the C ipoib on one rxe_ib fabric under TCG: Rust / C, median of paired runs (bars: min..max)"
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by -30
set grid ytics
set yrange [0:*]
set ylabel "above 1: ours better"
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 2
plot "$dest/vs-c.dat" using 2:3:4:xtic(1) title "throughput (1 / latency for TCP_RR)", "" using 5:6:7 title "client CPU (C / Rust)", "" using 8:9:10 title "server CPU (C / Rust)"
EOF
			echo "wrote $dest/vs-c.png"
		else
			echo "gnuplot not installed: no chart"
		fi
		rm -f "$dest/vs-c.dat"
	fi
	if [ -n "$prof" ]; then
		{
			echo "# ipoib-rs against the C ipoib: $profile_test profiles ($(date -u +%FT%TZ); $IPOIB_RS_FLAVOUR kernel, commit $commit)"
			echo "# PROF <driver>-<mode> role dso|kind|sym share name: % of busy (non-idle) perf samples"
			echo "$prof"
			if grep -qa '^# LOCKS ' "$logs"/host*.results; then
				echo "# LOCKS <driver>-<mode> role: who spun on contended spinlocks (IPOIB_RS_PERF_GRAPH=1;"
				echo "# perf report's caller chains of queued_spin_lock_slowpath, % of all samples)"
				demangled_prof "$logs" LOCKS
			fi
		} >"$dest/$profile_file"
		print_prof c-datagram rust-datagram c-connected rust-connected
		echo "wrote $dest/$profile_file"
	fi
	echo "logs: $logs"
	[ "$failed" = 0 ] || { echo "bench.sh: measurements failed (counted above)"; rc=1; }
	exit $rc
fi
if [ "${1:-}" = --from ]; then
	logs=${2:?usage: bench.sh --from LOGDIR}
else
	run_guests bench two-hosts two_hosts_bench.sh 3000 "ipoibrs.benchruns=$runs"
fi
lines=$(grep -a '^# BENCH ' "$logs/host1.results" | sed 's/^# //' || true)
runs=$(echo "$lines" | awk '{ if ($4 > n) n = $4 } END { print n + 0 }')
[ -n "$lines" ] || die "no figures in $logs/host1.results"
mkdir -p "$dest"

# Medians, spreads and ratios, as a table and as JSON. Lines: BENCH mtu name run value unit cpu.
echo "$lines" | awk -v runs="$runs" -v json="$dest/latest.json" -v dat="$dest/latest.dat" -v when="$(date -u +%FT%TZ)" \
	-v commit="$commit" -v flavour="$IPOIB_RS_FLAVOUR" '
function median(key,   n, i, j, t, a) {
	n = split(vals[key], a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	lo[key] = a[1]; hi[key] = a[n]
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
$1 == "BENCH" {
	key = $2 " " $3
	if (!(key in unit)) { order[++nkeys] = key }
	vals[key] = vals[key] " " $5; unit[key] = $6
	if ($7 != "-") cpu[key] = cpu[key] " " $7
}
END {
	for (i = 1; i <= nkeys; i++) {
		key = order[i]; med[key] = median(key)
		if (unit[key] == "Mbit/s" && cpu[key] != "") { vals["cpu " key] = cpu[key]; cmed[key] = median("cpu " key) }
	}
	printf "%-6s %-34s %10s %18s %7s %9s\n", "MTU", "measurement", "median", "min..max", "/ RC", "CPU s/MB"
	printf "{\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"kernel_flavour\": \"%s\",\n  \"runs\": %d,\n  \"figures\": [\n", when, commit, flavour, runs > json
	for (i = 1; i <= nkeys; i++) {
		key = order[i]; split(key, k, " "); mtu = k[1]; name = k[2]
		rc = med[mtu " rc_perftest_bw"]
		ratio = (unit[key] == "Mbit/s" && rc > 0) ? sprintf("%.3f", med[key] / rc) : ""
		printf "%-6s %-34s %10.2f %18s %7s %9s\n", mtu, name " (" unit[key] ")", med[key], sprintf("%.2f..%.2f", lo[key], hi[key]), ratio, (key in cmed) ? sprintf("%.4f", cmed[key]) : ""
		printf "    {\"eth_mtu\": %d, \"name\": \"%s\", \"unit\": \"%s\", \"median\": %.3f, \"min\": %.3f, \"max\": %.3f%s%s}%s\n", mtu, name, unit[key], med[key], lo[key], hi[key], ratio != "" ? ", \"ratio_to_rc_perftest\": " ratio : "", (key in cmed) ? sprintf(", \"client_cpu_s_per_mb\": %.4f", cmed[key]) : "", i < nkeys ? "," : "" > json
		if (unit[key] == "Mbit/s") bars[mtu] = bars[mtu] sprintf("%s %.3f\n", name, med[key])
	}
	m = "1500"
	r1 = med[m " rc_perftest_bw"] > 0 ? med[m " connected_tcp"] / med[m " rc_perftest_bw"] : 0
	r2 = med[m " datagram_tcp"] > 0 ? med[m " connected_tcp"] / med[m " datagram_tcp"] : 0
	r3 = med[m " datagram_tcp_rr"] > 0 ? med[m " connected_tcp_rr"] / med[m " datagram_tcp_rr"] : 0
	printf "  ],\n  \"connected_tcp_to_rc_perftest_ratio\": %.3f,\n  \"connected_to_datagram_tcp_ratio\": %.3f,\n  \"connected_to_datagram_tcp_rr_ratio\": %.3f\n}\n", r1, r2, r3 > json
	printf "\nAt Ethernet MTU 1500: connected TCP / user-space RC perftest %.2f (the in-kernel reference: --vs-c), connected / datagram TCP %.2f (target 2), connected / datagram TCP_RR rate %.2f (target 0.90 or more)\n", r1, r2, r3
	n = split("rc_perftest_bw eth_tcp datagram_tcp datagram_udp connected_tcp connected_udp connected_tcp_4_streams", names, " ")
	for (i = 1; i <= n; i++) printf "%s %.3f %.3f\n", names[i], med["1500 " names[i]], med["9000 " names[i]] > dat
}'
echo "wrote $dest/latest.json"
if command -v gnuplot >/dev/null; then
	gnuplot <<EOF
set terminal pngcairo size 1000,560 noenhanced font ",10"
set output "$dest/latest.png"
set title "ipoib-rs on soft-RoCE under TCG: medians of $runs runs (Mbit/s)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by -30
set grid ytics
set ylabel "Mbit/s"
set key top left
plot "$dest/latest.dat" using 2:xtic(1) title "Ethernet MTU 1500", "" using 3 title "Ethernet MTU 9000"
EOF
	echo "wrote $dest/latest.png"
else
	echo "gnuplot not installed: no chart"
fi
rm -f "$dest/latest.dat"
echo "logs: $logs"
exit $rc
