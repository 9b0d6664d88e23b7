#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Scaling benchmark on one host: the interface of rxe0 receives TCP streams from 1, 8 and
# 64 connected-mode peers at once (child interfaces, each in a network namespace of its
# own, each its own connection), for IPOIB_SCALE_SECS seconds. The first 48 peers are
# children of the interface of rxe1; rxe attaches at most 56 queue pairs to a multicast
# group, and every interface of a port joins its broadcast group, so the others are
# children of the receiving interface itself, reached through rxe0 without the wire. Prints, per
# peer count, the total throughput and the kernel memory (slab and vmalloc) the peers'
# connections took, as "SCALE peers throughput-Mbit/s memory-KiB" lines for scripts/bench.sh.
# The module is loaded with recv_queue_size=32 so that 64 interfaces fit the guest's memory.
. "$(dirname "$0")/lib.sh"

COUNTS=${IPOIB_SCALE_PEERS:-1 8 64}
SECS=${IPOIB_SCALE_SECS:-5}

ktap_print_header
if ! modinfo "$MODULE" >/dev/null 2>&1; then
	ktap_skip_all "module $MODULE not installed"
	exit "$KSFT_SKIP"
fi
if ! command -v netperf >/dev/null || ! command -v netserver >/dev/null; then
	ktap_skip_all "netperf not installed"
	exit "$KSFT_SKIP"
fi
one_host_topology || ktap_exit_fail_msg "soft-RoCE topology did not come up"
module_loaded && rmmod "$MODULE"
max=0
for n in $COUNTS; do [ "$n" -gt "$max" ] && max=$n; done
ktap_set_plan $((3 + $(echo $COUNTS | wc -w)))
klog_mark
start_mark=$KLOG_MARK

ipoib_check "modprobe $MODULE recv_queue_size=32" modprobe "$MODULE" recv_queue_size=32
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)

peers() {
	local i
	[ -n "$ib_a" ] && [ -n "$ib_b" ] || return 1
	# Only the interface that has the address answers ARP for it: the interface of rxe1,
	# in the same namespace, would otherwise answer for it too and take the streams.
	sysctl -qw net.ipv4.conf.all.arp_ignore=1 || return 1
	ip addr add 10.77.0.1/16 dev "$ib_a" && ip link set "$ib_a" up &&
		ip link set "$ib_b" up || return 1
	for i in $(seq 1 "$max"); do
		local parent=$ib_b
		[ "$i" -gt 48 ] && parent=$ib_a
		ip netns add "scale$i" && ip link add link "$parent" name "sc$i" type ipoib &&
			ip link set "sc$i" netns "scale$i" &&
			ip -n "scale$i" addr add "10.77.$((i / 200 + 1)).$((i % 200 + 1))/16" \
				dev "sc$i" &&
			ip -n "scale$i" link set "sc$i" up || return 1
	done
	netserver -p 12865 >/dev/null 2>&1 || return 1
	# From the last peer, whose connections then count in the baseline of every run.
	wait_for 30 ip netns exec "scale$max" ping -c 1 -W 1 10.77.0.1
}
ipoib_check "$max child interfaces, each in its own namespace, reach $ib_a" peers

base=$(kernel_kib)
# run N: N streams at once from the first N peers; prints the SCALE line.
run() {
	local n=$1 i pids="" total
	rm -f /tmp/scale.*
	for i in $(seq 1 "$n"); do
		ip netns exec "scale$i" timeout $((SECS + 60)) netperf -H 10.77.0.1 \
			-t TCP_STREAM -l "$SECS" -P 0 -- -o THROUGHPUT >"/tmp/scale.$i" 2>&1 &
		pids="$pids $!"
	done
	wait $pids
	total=$(cat /tmp/scale.* |
		awk '/^[0-9.]+$/ { s += $1; k++ } END { if (k) printf "%.2f %d", s, k }')
	local mem
	mem=$(($(kernel_kib) - base))
	local rx
	rx=$(ethtool_stat "$ib_a" cm_rx_connections)
	echo "streams: $n, answered: ${total#* }, total ${total% *} Mbit/s, connections:" \
		"tx $(ethtool_stat "$ib_a" cm_tx_connections) rx $rx"
	[ "${total#* }" = "$n" ] || { head -n 3 /tmp/scale.*; return 1; }
	# Every stream came in over a connection of its own.
	[ "$rx" -ge "$n" ] || return 1
	ktap_print_msg "SCALE $n ${total% *} $mem"
}
for n in $COUNTS; do
	ipoib_check "$n peers streaming to $ib_a at once" run "$n"
done

cleanup() {
	local i
	sysctl -qw net.ipv4.conf.all.arp_ignore=0
	killall netserver 2>/dev/null
	for i in $(seq 1 "$max"); do ip netns del "scale$i" 2>/dev/null; done
	true
}
cleanup
KLOG_MARK=$start_mark
ipoib_check "unloaded, kernel log clean" eval 'wait_for 20 eval "rmmod $MODULE" && klog_clean_since'
ktap_finished
