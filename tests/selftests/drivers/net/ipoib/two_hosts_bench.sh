#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Benchmark, not a test: scripts/bench.sh runs it with IPOIB_BENCH_RUNS set; without it the
# program skips. On the same link and in the same run: raw RC verbs bandwidth from user
# space (perftest's ib_send_bw -e --use-srq, 1000 messages of 64 KiB, --output=bandwidth for
# the full-precision figure; no UD figure, see RC_BW below), TCP over the Ethernet link, and
# IPoIB in datagram mode and in connected mode at MTU 65520 (netperf TCP_STREAM, TCP_RR and
# UDP_STREAM; four TCP streams at once in connected mode), each run IPOIB_BENCH_RUNS times,
# at Ethernet MTU 1500 and 9000. The client prints one line per measurement: BENCH <eth mtu>
# <name> <run> <value> <unit> <client cpu s per MB>.
. "$(dirname "$0")/lib.sh"

RUNS=${IPOIB_BENCH_RUNS:-}
SECS=5
SYNC=5005 RC_PORT=18515

ktap_print_header
two_hosts_roles IPOIB_BENCH_RUNS "a benchmark: scripts/bench.sh runs it"
ktap_set_plan 4
ipoib_check "$role: rxe0 on eth0 ($IPOIB_LOCAL_IP) ACTIVE" two_hosts_topology
two_hosts_meet

# emit MTU NAME RUN VALUE UNIT MBIT_S BUSY_JIFFIES: one result line; CPU seconds per MB
# moved when the measurement moved data.
emit() {
	local cpu_per_mb prog
	prog='BEGIN { mb = mbit * s / 8;'
	prog+=' if (mb > 0) printf "%.4f", busy / 100 / mb; else print "-" }'
	cpu_per_mb=$(awk -v mbit="$6" -v busy="$7" -v s="$SECS" "$prog")
	echo "BENCH $1 $2 $3 $4 $5 $cpu_per_mb"
}
# measure MTU NAME RUN UNIT COMMAND...: COMMAND prints the figure (Mbit/s for bandwidths,
# transactions/s for RR); the line is emitted with the client's CPU use.
measure() {
	local mtu=$1 name=$2 run=$3 unit=$4 b0 b1 v mbit
	shift 4
	b0=$(cpu_busy)
	v=$("$@" 2>/tmp/measure.err | tail -n 1)
	b1=$(cpu_busy)
	if [ -z "$v" ] || ! awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }'; then
		# Counted: the run's check fails and bench.sh says so.
		echo "# $name: no figure ($(tail -n 2 /tmp/measure.err | tr '\n' ' '))"
		FAILED=$((FAILED + 1))
		return 1
	fi
	mbit=$v
	[ "$unit" = Mbit/s ] || mbit=0
	emit "$mtu" "$name" "$run" "$v" "$unit" "$mbit" "$((b1 - b0))"
}
np() { # np TEST HOST [test options]: netperf's throughput figure
	local t=$1 h=$2
	shift 2
	timeout 60 netperf -H "$h" -t "$t" -l "$SECS" -P 0 -- "$@" -o THROUGHPUT | tail -n 1
}
np4() { # four TCP streams at once over ib0: the sum
	local i
	for i in 1 2 3 4; do np TCP_STREAM "$ib_peer" -m 65536 >"/tmp/np$i" & done
	wait
	cat /tmp/np1 /tmp/np2 /tmp/np3 /tmp/np4 | awk '{ s += $1 } END { print s }'
}
# The user-space reference (perftest), shaped as connected mode uses the verbs: RC messages
# of 64 KiB into a shared receive queue, completions taken on events (-e), not by busy
# polling. perftest takes events only counting iterations, not for a duration; 1000 take
# 4 to 15 s here. No UD figure: counting iterations, a datagram lost stalls the receiver
# (the in-kernel UD reference of --vs-c has no such limit). The same options on both ends.
RC_BW=(-e --use-srq -s 65536 -n 1000)
FAILED=0
bw() { # bw PORT [ib_send_bw options]: Mbit/s between the hosts, at full precision
	local port=$1
	shift
	timeout 60 ib_send_bw -d rxe0 -p "$port" --report_gbits --output=bandwidth "$@" "$peer" |
		awk '$1 ~ /^[0-9.]+$/ { v = $1 * 1000 } END { if (v != "") printf "%.3f\n", v }'
}
ud_size() { awk '/active_mtu/ { print $2 }' < <(ibv_devinfo -d rxe0); }

bench_at() {
	local mtu=$1 run size
	module_loaded && rmmod "$MODULE"
	ip link set eth0 mtu "$mtu" && wait_for 20 port_active rxe0 1 &&
		modprobe "$MODULE" && echo datagram >/sys/class/net/ib0/mode &&
		ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP' || return 1
	size=$(ud_size)
	echo "# Ethernet MTU $mtu: RoCE MTU $size, ib0 datagram MTU $(cat /sys/class/net/ib0/mtu)"
	if [ "$role" = server ]; then
		# Receivers for the raw verbs runs, restarted for every run.
		# A receiver that cannot start must not spin: one try a second.
		(while :; do timeout 90 ib_send_bw -d rxe0 -p "$RC_PORT" "${RC_BW[@]}" \
			>/dev/null 2>&1 || sleep 1; done) &
		echo $! >/tmp/rc_loop
		# the client measured datagram mode
		tell_peer "$SYNC" && wait_peer "$SYNC" 600 || return 1
		echo connected >/sys/class/net/ib0/mode || return 1
		tell_peer "$SYNC" && wait_peer "$SYNC" 600 || return 1 # and connected mode
		kill "$(cat /tmp/rc_loop)"
		killall ib_send_bw 2>/dev/null
	else
		wait_peer "$SYNC" 120 && wait_for 60 ping -c 1 -W 1 "$ib_peer" || return 1
		for run in $(seq "$RUNS"); do
			measure "$mtu" rc_perftest_bw "$run" Mbit/s bw "$RC_PORT" "${RC_BW[@]}"
			measure "$mtu" eth_tcp "$run" Mbit/s np TCP_STREAM "$peer" -m 65536
			measure "$mtu" datagram_tcp "$run" Mbit/s np TCP_STREAM "$ib_peer" -m 65536
			measure "$mtu" datagram_tcp_rr "$run" trans/s np TCP_RR "$ib_peer"
			measure "$mtu" datagram_udp "$run" Mbit/s np UDP_STREAM "$ib_peer" \
				-m $(($(cat /sys/class/net/ib0/mtu) - 28))
		done
		echo connected >/sys/class/net/ib0/mode &&
			tell_peer "$SYNC" && wait_peer "$SYNC" 120 || return 1
		wait_for 60 ping -c 1 -W 2 -s 60000 "$ib_peer" || return 1
		for run in $(seq "$RUNS"); do
			measure "$mtu" connected_tcp "$run" Mbit/s np TCP_STREAM "$ib_peer" -m 65536
			measure "$mtu" connected_tcp_rr "$run" trans/s np TCP_RR "$ib_peer"
			measure "$mtu" connected_udp "$run" Mbit/s np UDP_STREAM "$ib_peer" -m 60000
			measure "$mtu" connected_tcp_4_streams "$run" Mbit/s np4
		done
		tell_peer "$SYNC" || return 1
	fi
	sleep 2
	rmmod "$MODULE" && [ "$FAILED" = 0 ]
}

if [ "$role" = server ]; then
	netserver </dev/null >/dev/null 2>&1 3>&- 4>&-
fi
ipoib_check "$role: measured at Ethernet MTU 1500" bench_at 1500
ipoib_check "$role: measured at Ethernet MTU 9000" bench_at 9000
[ "$role" = server ] && kill $(pidof netserver) 2>/dev/null
ip link set eth0 mtu 1500
KLOG_MARK=0
ipoib_check "$role: unloaded, kernel log clean" eval '! module_loaded && klog_clean_since'
ktap_finished
