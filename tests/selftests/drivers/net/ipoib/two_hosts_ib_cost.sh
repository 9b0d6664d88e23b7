#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Benchmark, not a test: scripts/bench.sh --cost runs it with IPOIB_COST_RUNS set and the
# ipoib-cost QEMU plugin loaded into both guests; without the variable the program skips.
# Counts what a fixed amount of work costs in guest instructions, our driver against the C
# ipoib on the same InfiniBand fabric: each run loads one driver on both hosts, then the
# other (C first in odd runs, ours in even ones). The fabric runs at Ethernet MTU 9000, so
# that its ports run at IB MTU 4096; the default partition's broadcast group is at IB MTU
# 2048 (opensm's default on real fabrics: datagram MTU 2044), P_Key 0x8003's at 4096
# (datagram MTU 4092). Modes: datagram (ib0, 2044), datagram4096 (a child of ib0 on
# 0x8003, 4092) and connected (ib0 at 65520); in each it measures
#   udp         IPOIB_COST_UDP datagrams of the MTU, client to server (udp_flood: netperf's
#               UDP_STREAM given a byte count waits for an end its flooded receiver may
#               lose);
#   tcp_stream  IPOIB_COST_KB KiB, client to server (TCP_STREAM given the byte count);
#   tcp_rr      IPOIB_COST_RR request/response transactions (TCP_RR given the count).
# Each measurement is one counting window (cost_mark start/stop): the server opens its
# window and waits; the client opens its own, works, closes it and tells the server, which
# closes its own. Both hosts then print
#   COST <window> <driver> <mode> <test> <run> <role> <packets> <kib> <transactions> <tx> <rx>
# (the units the host's counts are divided by: packets the interface sent (client) or
# received (server) for udp, KiB for tcp_stream, transactions for tcp_rr; 0 where not the
# test's) and, for the driver's module, where its code was
#   COSTSEC <window> <module> <section> <address>
# or COST <window> ... failed <why>. Once: COSTKERNEL _stext <address> (the kernel's text
# as the guest sees it: the host checks it against System.map).
. "$(dirname "$0")/lib.sh"

RUNS=${IPOIB_COST_RUNS:-}
UDP_N=${IPOIB_COST_UDP:-2000}
KIB=${IPOIB_COST_KB:-65536}
RR_N=${IPOIB_COST_RR:-2000}
MARK=$(dirname "$0")/cost_mark
FLOOD=$(dirname "$0")/udp_flood
SINK_PORT=9

ktap_print_header
two_hosts_roles IPOIB_COST_RUNS "a benchmark: scripts/bench.sh --cost runs it"
MODES=${IPOIB_COST_MODES:-datagram datagram4096 connected}
set -- $MODES
ktap_set_plan $((2 + RUNS * 2 * $#))
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
ip link set eth0 mtu 9000 || ktap_exit_fail_msg "$role: eth0 refused MTU 9000"
cat >"$OPENSM_PARTITIONS" <<'PARTITIONS'
Default=0x7fff, ipoib, mtu=4, defmember=full : ALL=full ;
P8003=0x8003, ipoib, mtu=5 : ALL=full ;
PARTITIONS
two_hosts_meet
# What this program changed goes back for the programs after it: eth0's MTU, the partitions.
trap 'opensm_stop; rm -f "$OPENSM_PARTITIONS"; ip link set eth0 mtu 1500' EXIT
klog_mark
START_MARK=$KLOG_MARK START_FIRST=$KLOG_FIRST

ipoib_check "$role: fabric up: port ACTIVE under opensm" ib_fabric_up
if [ "$role" = server ]; then
	netserver </dev/null >/dev/null 2>&1 3>&- 4>&-
	# Takes the flood's datagrams, whichever interface they come in on.
	"$FLOOD" sink $SINK_PORT </dev/null >/tmp/udp_sink.out 2>&1 3>&- 4>&- &
	SINK_PID=$!
fi
echo "COSTKERNEL _stext 0x$(awk '$3 == "_stext" { print $1; exit }' /proc/kallsyms)"

# up DRIVER MODE: the interface of MODE (IF) up with carrier at its MTU, its peer's address
# in PEER_ADDR.
up() {
	local mode=$2 want
	IF=ib0 PEER_ADDR=$ib_peer
	load_driver "$1" || return 1
	case "$mode" in
	connected) echo connected >/sys/class/net/ib0/mode &&
		ip link set ib0 mtu 65520 || return 1 ;;
	*) echo datagram >/sys/class/net/ib0/mode || return 1 ;;
	esac
	ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up || return 1
	want=65520
	case "$mode" in
	datagram) want=2044 ;;
	datagram4096)
		want=4092 IF=ib0.8003 PEER_ADDR=${ib_peer/198.51.100/198.51.103}
		# Its mode given to `ip link`: C's children made so have no sysfs mode file.
		ip link add link ib0 name $IF type ipoib pkey 0x8003 mode datagram &&
			ip addr add "${ib_local/198.51.100/198.51.103}/24" dev $IF &&
			ip link set $IF up ||
			return 1
		;;
	esac
	wait_for 60 eval "ip link show $IF | grep -q LOWER_UP" &&
		wait_for 30 eval "[ \$(cat /sys/class/net/$IF/mtu) = $want ]" ||
		{ echo "$IF: $(ip link show $IF | head -n 1), not at MTU $want"; return 1; }
}
stat_of() { cat "/sys/class/net/$IF/statistics/$1"; }
# work TEST MTU: the client's fixed amount of work for TEST (netperf's negative test
# length: bytes for a stream, transactions for request/response).
work() {
	case "$1" in
	udp) timeout 600 "$FLOOD" send "$PEER_ADDR" $SINK_PORT $(($2 - 28)) "$UDP_N" ;;
	tcp_stream) timeout 600 netperf -H "$PEER_ADDR" -t TCP_STREAM -l -$((KIB * 1024)) \
		-P 0 -- -m 65536 ;;
	tcp_rr) timeout 600 netperf -H "$PEER_ADDR" -t TCP_RR -l -"$RR_N" -P 0 ;;
	esac
}
# window W DRIVER MODE TEST RUN MTU: one counting window on each host around the client's
# work; prints the COST and COSTSEC lines.
window() {
	local w=$1 drv=$2 mode=$3 test=$4 run=$5 mtu=$6 tx0 rx0 tx1 rx1 out failed=0
	local head="COST $w $drv $mode $test $run $role"
	tx0=$(stat_of tx_packets) rx0=$(stat_of rx_packets)
	if [ "$role" = server ]; then
		"$MARK" start "$w" && both_at $((7300 + w * 2)) &&
			both_at $((7301 + w * 2)) 900 || failed=1
		"$MARK" stop "$w"
	else
		both_at $((7300 + w * 2)) || failed=1
		"$MARK" start "$w" || failed=1
		out=$(work "$test" "$mtu" 2>&1) || failed=1
		"$MARK" stop "$w"
		both_at $((7301 + w * 2)) || failed=1
		echo "# work: $(echo "$out" | tail -n 1)"
	fi
	tx1=$(stat_of tx_packets) rx1=$(stat_of rx_packets)
	if [ "$failed" = 1 ]; then
		echo "$head failed $(echo "$out" | tr -c '[:alnum:] ._:\n-' ' ' | tail -n 1)"
		return 1
	fi
	local packets=0 kib=0 trans=0
	case "$test" in
	udp) if [ "$role" = client ]; then packets=$((tx1 - tx0)); \
		else packets=$((rx1 - rx0)); fi ;;
	tcp_stream) kib=$KIB ;;
	tcp_rr) trans=$RR_N ;;
	esac
	echo "$head $packets $kib $trans $((tx1 - tx0)) $((rx1 - rx0))"
	local s
	for s in /sys/module/"$MODULE"/sections/.text*; do
		echo "COSTSEC $w $MODULE ${s##*/} $(cat "$s")"
	done
	[ "$packets" -gt 0 ] || [ "$test" != udp ]
}
# block DRIVER MODE RUN STEP: both hosts bring ib0 up with DRIVER in MODE and count each
# test's window; both unload. The hosts meet before and after, whatever failed.
block() {
	local drv=$1 mode=$2 run=$3 step=$4 mtu failed=0 t w
	up "$drv" "$mode" || failed=1
	mtu=$(cat /sys/class/net/$IF/mtu 2>/dev/null)
	both_at $((7200 + step * 2)) || return 1
	if [ "$role" = client ]; then
		wait_for 60 ping -c 1 -W 1 "$PEER_ADDR" >/dev/null || failed=1
	fi
	w=$((step * 3))
	for t in udp tcp_stream tcp_rr; do
		window "$w" "$drv" "$mode" "$t" "$run" "${mtu:-0}" || failed=1
		w=$((w + 1))
	done
	both_at $((7201 + step * 2)) 600 || return 1
	echo "$drv driver, $mode mode, $IF at MTU ${mtu:-none}"
	ip link del ib0.8003 2>/dev/null
	rmmod "$MODULE" && [ "$failed" = 0 ]
}

step=0
for run in $(seq "$RUNS"); do
	if [ $((run % 2)) = 1 ]; then order="c rust"; else order="rust c"; fi
	for drv in $order; do
		for mode in $MODES; do
			ipoib_check "$role: run $run, $drv driver, $mode mode: counted" \
				block "$drv" "$mode" "$run" "$step"
			module_loaded && rmmod "$MODULE"
			step=$((step + 1))
		done
	done
done
if [ "$role" = server ]; then
	kill $(pidof netserver) "$SINK_PID" 2>/dev/null
	wait "$SINK_PID"
	echo "udp_flood sink: $(tail -n 1 /tmp/udp_sink.out)"
fi
KLOG_MARK=$START_MARK KLOG_FIRST=$START_FIRST
ipoib_check "$role: unloaded, kernel log clean" eval '! module_loaded && klog_clean_since'
ktap_finished
