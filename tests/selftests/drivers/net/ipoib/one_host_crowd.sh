#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# 256 connected-mode peers at once, then all gone. rdma_rs_selftest.ko, loaded with
# ipoib_qpn=QPN ipoib_peers=256 (IPOIB_RS_CROWD), opens 256 connections from rxe0 to the
# IPoIB service of the interface of rxe1 through the IB CM, sends one message on each and
# keeps them until it is unloaded. The interface accepts them all, on its one shared receive
# queue, and counts them: the memory they take is printed per connection (about 35 KB for
# both ends) and must stay below one 64 KiB receive buffer each (no per-connection receive
# ring). Unloaded, the peers close their connections: the interface destroys them all and
# slab plus vmalloc memory returns within 1 MiB of where it was; the interface still takes a
# new connection.
#
# On a KASAN kernel, allocations carry redzones (the bound per connection doubles, to 128
# KiB) and freed memory waits in KASAN's quarantine, so the totals cannot show it back:
# kmemleak (which that kernel has) must find no leak instead.
#
# Then 2000 datagram destinations in one burst (udp_burst, IPOIB_RS_CROWD_DESTS; pinned at a
# real-time priority so that the destinations wait together): each waits in a queue of its
# own while its handle is made, and what is released beyond the send queue's room waits for
# its completions. Every datagram is sent, none dropped, each destination is looked up once
# (path_lookups) and a handle is kept for each, and the memory the destinations take is
# printed per destination. A second burst to them all is sent with no lookup.
. "$(dirname "$0")/lib.sh"

SELFTEST=rdma_rs_selftest
PEERS=${IPOIB_RS_CROWD:-256}

ktap_print_header
if ! modinfo "$MODULE" >/dev/null 2>&1 || ! modinfo "$SELFTEST" >/dev/null 2>&1; then
	ktap_skip_all "$MODULE or $SELFTEST not built"
	exit "$KSFT_SKIP"
fi
one_host_topology || ktap_exit_fail_msg "soft-RoCE topology did not come up"
module_loaded && rmmod "$MODULE"
ktap_set_plan 8
klog_mark
start_mark=$KLOG_MARK

ipoib_check "modprobe $MODULE" modprobe "$MODULE"
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
stat() { ethtool_stat "$ib_b" "$1"; }
# The interface's statistics, with what the stack counted on it (its drops of unknown
# ethertypes, which the driver passes up).
sysfs_stat() { cat "/sys/class/net/$ib_b/statistics/$1"; }
up() {
	[ -n "$ib_b" ] && ip addr add 198.51.100.2/24 dev "$ib_b" && ip link set "$ib_b" up
}
ipoib_check "$ib_b (rxe1, connected mode) up" up
qpn=0x$(cut -d: -f2-4 "/sys/class/net/$ib_b/address" | tr -d :)
if kasan_kernel; then
	PER_CONN_MAX=131072
	[ -e "$KMEMLEAK" ] && kmemleak_clear
else
	PER_CONN_MAX=65536
fi
base=$(kernel_kib) base_dropped=$(sysfs_stat rx_dropped)

klog_mark
modprobe "$SELFTEST" ipoib_qpn="$qpn" ipoib_peers="$PEERS" ||
	ktap_print_msg "modprobe $SELFTEST ipoib_qpn=$qpn ipoib_peers=$PEERS failed"
ktap_relay "$(klog_since | sed -n "s/^.*$SELFTEST: //p")"

crowd() {
	local n during
	wait_for 20 eval '[ "$(stat cm_rx_connections)" = "$PEERS" ]'
	n=$(stat cm_rx_connections)
	during=$(kernel_kib)
	echo "$n receive connections, $(($(sysfs_stat rx_dropped) - base_dropped)) messages of" \
		"an unknown ethertype dropped by the stack"
	echo "slab and vmalloc: $base -> $during KiB," \
		"$(((during - base) * 1024 / PEERS)) bytes per connection" \
		"(both ends: the peers' queue pairs are on this host too)"
	[ "$n" = "$PEERS" ] && [ "$(($(sysfs_stat rx_dropped) - base_dropped))" = "$PEERS" ] &&
		[ $(((during - base) * 1024 / PEERS)) -lt "$PER_CONN_MAX" ]
}
desc="$PEERS peers connected at once, each message counted,"
desc+=" under $PER_CONN_MAX bytes of memory each"
ipoib_check "$desc" crowd

gone() {
	local after
	rmmod "$SELFTEST" || return 1
	wait_for 30 eval '[ "$(stat cm_rx_connections)" = 0 ] && [ "$(rc_qp_count)" = 0 ]' || {
		echo "still $(stat cm_rx_connections) connections, $(rc_qp_count) RC queue pairs"
		return 1
	}
	after=$(kernel_kib)
	echo "slab and vmalloc after: $after KiB (baseline $base)"
	if kasan_kernel && [ -e "$KMEMLEAK" ]; then
		echo "freed memory waits in the address sanitizer's quarantine: kmemleak judges"
		kmemleak_none
		return
	fi
	# What the connections took is back, but for allocator caches: within 1 MiB.
	[ "$after" -lt $((base + 1024)) ]
}
desc="the peers gone: every connection destroyed,"
desc+=" memory back to the baseline (or no leak found by kmemleak)"
ipoib_check "$desc" gone

reachable() {
	ip netns add crowd && ip link set "$ib_a" netns crowd &&
		ip -n crowd addr add 198.51.100.1/24 dev "$ib_a" &&
		ip -n crowd link set "$ib_a" up &&
		wait_for 30 ip netns exec crowd ping -c 1 -W 2 198.51.100.2
}
ipoib_check "$ib_b still takes a connection" reachable
ip netns del crowd 2>/dev/null

# 2000 datagram destinations in one burst (made-up hosts with link-local GIDs, whose MACs
# follow from the GIDs): every destination's packet waits in a queue of its own while its
# handle is made, so none keeps another waiting or dropped (as C, which queues per path),
# and the packets released at once beyond the send queue (128) wait for its completions
# instead of being dropped (C sends them through the qdisc again): every datagram is sent,
# and the table keeps a handle for each. The socket's buffer is made large enough that the
# burst is never held back by the packets waiting. The memory the destinations take
# (address handles and table entries, with the stack's neighbour entries) is printed per
# destination.
DESTS=${IPOIB_RS_CROWD_DESTS:-2000}
dest_ip() { echo "10.77.$((1 + $1 / 200)).$((1 + $1 % 200))"; }
# burst FIRST LAST: one datagram to each of destinations FIRST..LAST at once.
burst() { ./udp_burst 9 $(for i in $(seq "$1" "$2"); do dest_ip "$i"; done); }
many_destinations() {
	local i tx0 drop0 sent dropped kib0 kib1 wmem gc look0 looked resent redropped relooked
	local qlen sndbuf0 sndbuf fmt
	echo 1 >"/proc/sys/net/ipv6/conf/$ib_b/disable_ipv6"
	# Only the burst may reach the driver while it is counted: the ping above left a
	# neighbour entry for ib_a's address that would be probed (three unicast ARP requests)
	# a few seconds later, with ib_a gone.
	ip addr del 198.51.100.2/24 dev "$ib_b" && ip neigh flush dev "$ib_b" || return 1
	ip addr add 10.77.0.1/16 dev "$ib_b" || return 1
	fmt='neigh replace %s dev %s nud permanent lladdr'
	fmt+=' 00:00:00:48:fe:80:00:00:00:00:00:00:02:00:00:ff:fe:00:%02x:%02x\n'
	for i in $(seq 0 $((DESTS - 1))); do
		# shellcheck disable=SC2059 # the format is built above
		printf "$fmt" \
			"$(dest_ip "$i")" "$ib_b" $((i / 256)) $((i % 256))
	done >/tmp/crowd.neigh
	# rxe sends each datagram as UDP over IPv6 to its destination's link-local GID: that the
	# made-up hosts' addresses resolve at once (rather than each holding rxe's queue for the
	# three seconds neighbour discovery takes to fail), veth1 knows their MACs.
	fmt='neigh replace fe80::200:ff:fe00:%x dev veth1 nud permanent lladdr'
	fmt+=' 00:00:00:00:%02x:%02x\n'
	for i in $(seq 0 $((DESTS - 1))); do
		# shellcheck disable=SC2059 # the format is built above
		printf "$fmt" \
			"$i" $((i / 256)) $((i % 256))
	done >>/tmp/crowd.neigh
	ip -batch /tmp/crowd.neigh || return 1
	[ "$(ip neigh show dev "$ib_b" nud permanent | wc -l)" = "$DESTS" ] ||
		{ echo "$(ip neigh show dev "$ib_b" nud permanent | wc -l) neighbours made," \
			"not $DESTS"; return 1; }
	wmem=$(cat /proc/sys/net/core/wmem_default)
	sysctl -qw net.core.wmem_default=$((DESTS * 4096))
	# No destination ages (two collection intervals unused) before the second sending
	# reaches it, however slow the kernel.
	gc=$(cat /proc/sys/net/ipv4/neigh/default/gc_interval)
	sysctl -qw net.ipv4.neigh.default.gc_interval=600
	# The interface's queue (the qdisc) takes the whole burst: once handles are made their
	# sends fill the send queue and stop it, maybe while the burst still comes, and a qdisc
	# of the usual length would drop the rest (counted by UDP as send-buffer errors, by no
	# driver).
	qlen=$(cat "/sys/class/net/$ib_b/tx_queue_len")
	ip link set dev "$ib_b" txqueuelen $((2 * DESTS)) || return 1
	sndbuf0=$(snmp_stat Udp SndbufErrors)
	tx0=$(stat tx_packets) drop0=$(stat tx_dropped) kib0=$(kernel_kib) \
		look0=$(stat path_lookups)
	burst 0 $((DESTS - 1))
	echo "right after the burst: $(($(stat tx_packets) - tx0)) sent," \
		"$(stat neighbours) address handles"
	wait_for $((60 * SLOW)) eval \
		'[ $(($(stat tx_packets) - tx0 + $(stat tx_dropped) - drop0)) -ge $DESTS ]'
	sleep 1
	sent=$(($(stat tx_packets) - tx0)) dropped=$(($(stat tx_dropped) - drop0)) \
		kib1=$(kernel_kib)
	looked=$(($(stat path_lookups) - look0)) sndbuf=$(($(snmp_stat Udp SndbufErrors) - sndbuf0))
	echo "$sent sent, $dropped dropped ($sndbuf before the driver)," \
		"$(stat neighbours) address handles, $looked looked up;" \
		"slab and vmalloc $kib0 -> $kib1 KiB," \
		"$(((kib1 - kib0) * 1024 / DESTS)) bytes per destination"
	# For bench.sh --scaling: the destinations' memory.
	echo "# DESTS $DESTS $(((kib1 - kib0) * 1024 / DESTS))"
	# The same destinations again, all in use: sent through their handles, none looked up
	# again. In bursts of 100, which the send queue and the qdisc take whole (nothing waits
	# in the driver now: the qdisc would drop what overflows it).
	tx0=$(stat tx_packets) drop0=$(stat tx_dropped) look0=$(stat path_lookups)
	for ((i = 0; i < DESTS; i += 100)); do
		burst "$i" $((i + 99 < DESTS - 1 ? i + 99 : DESTS - 1))
		# shellcheck disable=SC2016 # expanded by eval
		wait_for $((10 * SLOW)) eval \
			'[ $(($(stat tx_packets) - tx0 + $(stat tx_dropped) - drop0)) -ge' \
			'$((i + 100 < DESTS ? i + 100 : DESTS)) ]'
	done
	sleep 1
	resent=$(($(stat tx_packets) - tx0)) redropped=$(($(stat tx_dropped) - drop0))
	relooked=$(($(stat path_lookups) - look0))
	sysctl -qw net.core.wmem_default="$wmem" net.ipv4.neigh.default.gc_interval="$gc"
	ip link set dev "$ib_b" txqueuelen "$qlen"
	echo "again: $resent sent, $redropped dropped, $relooked looked up"
	ip addr del 10.77.0.1/16 dev "$ib_b"
	ip -6 neigh flush dev veth1 nud permanent
	[ "$sent" = "$DESTS" ] && [ "$dropped" = 0 ] && [ "$sndbuf" = 0 ] &&
		[ "$(stat neighbours)" -ge "$DESTS" ] &&
		[ "$looked" = "$DESTS" ] && [ "$resent" = "$DESTS" ] && [ "$redropped" = 0 ] &&
		[ "$relooked" = 0 ] || {
		ip neigh show dev "$ib_b" nud all | grep -v PERMANENT
		ethtool -S "$ib_b" | grep -v ": 0$"
		return 1
	}
}
desc="$DESTS destinations in one burst: every datagram sent, none dropped or left waiting;"
desc+=" each looked up once, a handle kept for each; sent to again, none looked up again"
ipoib_check "$desc" many_destinations
KLOG_MARK=$start_mark
ipoib_check "unloaded, kernel log clean" eval 'wait_for 10 eval "rmmod $MODULE" && klog_clean_since'
ktap_finished
