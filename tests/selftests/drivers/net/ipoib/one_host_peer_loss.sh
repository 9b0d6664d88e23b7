#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Peer loss and queue pressure on one host, in connected mode. The interface of rxe0 talks
# to the one of rxe1 (in namespace A) and to a child of its own (in namespace B, reached
# through rxe0 itself, so never over the wire). Then:
#
# - the peer's RDMA device is deleted under a UDP flood: our connections to it are gone at
#   once (by its DREQ), and traffic resumes once the device is back;
#
# - the peer goes silent under a flood (its Ethernet MAC changes, so every RoCE packet sent
#   to it is lost, without any send failing on either side): the sends to it stall, the
#   transmit queue stops, the 2 s watchdog fires (tx_timeouts), the stalled connection is
#   closed (cm_tx_stalled) and the child stays reachable during the flood; sends lost toward
#   the silent peer are not counted in tx_packets (a packet counts as sent when its send
#   completes: no more than the peer and the child received);
#
# - the peer comes back (its device added again, since the RDMA core cannot restore a RoCE
#   default GID after a MAC change) and traffic to it resumes. This last check has failed
#   about twice in fifty runs; when it fails it prints both ends' neighbours, paths,
#   connections, counters and QPs.
. "$(dirname "$0")/lib.sh"

NS_PEER=ipoibpeer NS_KID=ipoibkid
PEER=198.51.100.2 KID=198.51.100.3

one_host_begin 8
klog_mark
start_mark=$KLOG_MARK

ipoib_check "modprobe $MODULE" modprobe "$MODULE"
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
kid=$ib_a.kid

# peer_in_namespace IF: moves IF (rxe1's interface) into the peer's namespace and up.
peer_in_namespace() {
	ip link set "$1" netns "$NS_PEER" && ip -n "$NS_PEER" addr add "$PEER/24" dev "$1" &&
		ip -n "$NS_PEER" link set "$1" up
}
setup() {
	[ -n "$ib_a" ] && [ -n "$ib_b" ] ||
		{ echo "interfaces not found: '$ib_a' '$ib_b'"; return 1; }
	ip netns add "$NS_PEER" && ip netns add "$NS_KID" && peer_in_namespace "$ib_b" &&
		ip link add link "$ib_a" name "$kid" type ipoib &&
		ip link set "$kid" netns "$NS_KID" &&
		ip -n "$NS_KID" addr add "$KID/24" dev "$kid" &&
		ip -n "$NS_KID" link set "$kid" up &&
		ip addr add 198.51.100.1/24 dev "$ib_a" && ip link set "$ib_a" up || return 1
	wait_for 30 ping -c 1 -W 1 "$PEER" && ping -c 2 -W 2 "$KID" || return 1
	echo "transmit connections: $(ethtool_stat "$ib_a" cm_tx_connections)"
	[ "$(ethtool_stat "$ib_a" cm_tx_connections)" = 2 ]
}
ipoib_check "connected mode to the peer ($NS_PEER) and to a child ($NS_KID, through rxe0 itself)" \
	setup

# live_to_peer ADDR: lines of our connections to and from the interface of address ADDR
# that are still up (the flood keeps trying new ones, which never come up).
live_to_peer() {
	local cm=/sys/kernel/debug/ipoib/${ib_a}_cm qpn=0x${1:3:8}
	qpn=${qpn//:/}
	grep -E "tx peer $1 state Live|rx .*peer-ud-qpn $qpn state live" "$cm"
}
device_gone() {
	local start flooder addr
	addr=$(ip -n "$NS_PEER" -br link show "$ib_b" | awk '{ print $3 }')
	wait_for 10 eval '[ "$(live_to_peer "$addr" | wc -l)" = 2 ]' ||
		{ cat "/sys/kernel/debug/ipoib/${ib_a}_cm"; return 1; }
	live_to_peer "$addr"
	udp_flood 30 "$PEER"
	flooder=$!
	sleep 1
	start=$(date +%s)
	rdma link del rxe1 || return 1
	wait_for 20 eval '! live_to_peer "$addr" >/dev/null'
	local reaped=$?
	echo "after $(($(date +%s) - start)) s:"
	cat "/sys/kernel/debug/ipoib/${ib_a}_cm"
	kill "$flooder" 2>/dev/null
	wait "$flooder" 2>/dev/null
	[ "$reaped" = 0 ] && ping -c 2 -W 2 "$KID"
}
ipoib_check "the peer's RDMA device deleted mid-flood: our connections to it reaped within 20 s" \
	device_gone

peer_device_back() {
	local ib start
	klog_mark
	rxe_add rxe1 veth1 || return 1
	wait_for 10 eval '[ -n "$(if_of rxe1)" ]' || return 1
	ib=$(if_of rxe1)
	peer_in_namespace "$ib" || return 1
	start=$(date +%s)
	# The new interface may have a new hardware address (a new UD QPN): our ARP entry keeps
	# the old one until it ages out (up to about 55 s of the kernel's timers). A host that
	# comes back speaks first: its ARP request gives us its new address.
	wait_for 30 ip netns exec "$NS_PEER" ping -c 1 -W 1 198.51.100.1 || return 1
	wait_for 30 ping -c 1 -W 1 "$PEER" || return 1
	echo "$ib (new) answers after $(($(date +%s) - start)) s"
	ping -c 2 -W 2 -s 2000 "$PEER"
}
ipoib_check "rxe1 back: a new interface there, and traffic to it resumes" peer_device_back

PEER_MAC=$(cat /sys/class/net/veth1/address)
# ns_stat NETNS IF COUNTER: a counter of IF in NETNS.
ns_stat() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3"; }
# received: what the peer and the child have received.
received() { echo \
	$(($(ns_stat "$NS_PEER" "$peer_if" rx_packets) + $(ns_stat "$NS_KID" "$kid" rx_packets))); }
silent_peer() {
	local start flooder peer_if tx0 rx0 sent got stalled
	# A packet counts as sent once its send completed: those lost toward the silent peer
	# do not, so we count no more than the peer and the child received (a few may still be
	# on their way at either end).
	peer_if=$(ip -n "$NS_PEER" -br link show | awk '$1 ~ /^ib/ { print $1; exit }')
	tx0=$(cat "/sys/class/net/$ib_a/statistics/tx_packets") rx0=$(received) || return 1
	ip link set veth1 address 02:00:00:00:00:99 || return 1
	start=$(date +%s)
	udp_flood 20 "$PEER"
	flooder=$!
	wait_for 15 eval '[ "$(ethtool_stat "$ib_a" tx_timeouts)" -ge 1 ]'
	local fired=$?
	echo "after $(($(date +%s) - start)) s: tx_timeouts $(ethtool_stat "$ib_a" tx_timeouts)," \
		"cm_tx_stalled $(ethtool_stat "$ib_a" cm_tx_stalled)," \
		"queue_stopped $(ethtool_stat "$ib_a" queue_stopped)"
	# The flood goes on: the child must still be reachable.
	local reachable=1
	[ "$fired" = 0 ] && ping -c 3 -W 2 "$KID" && reachable=0
	kill "$flooder" 2>/dev/null
	wait "$flooder" 2>/dev/null
	sleep 1
	sent=$(($(cat "/sys/class/net/$ib_a/statistics/tx_packets") - tx0)) \
		got=$(($(received) - rx0))
	echo "counted as sent meanwhile: $sent; received by the peer and the child: $got;" \
		"tx_errors $(ethtool_stat "$ib_a" tx_errors)," \
		"tx_dropped $(ethtool_stat "$ib_a" tx_dropped)"
	stalled="$ib_a: connection to .* stalled with [0-9]* sends in flight; closed"
	[ "$sent" -le $((got + 16)) ] &&
		[ "$fired" = 0 ] && [ "$reachable" = 0 ] &&
		[ "$(ethtool_stat "$ib_a" cm_tx_stalled)" -ge 1 ] &&
		klog_since | grep -q "$ib_a: transmit timeout: queue stopped with" &&
		klog_since | grep -q "$stalled"
}
desc="peer silent under a UDP flood: transmit timeout, stalled connection closed,"
desc+=" child still reachable, lost sends not counted as sent"
ipoib_check "$desc" silent_peer

# peer_state: what both ends hold for each other, for a failed check to show (this one
# failed twice in about fifty runs, with no answer to the peer's pings).
peer_state() {
	local ib
	ib=$(if_of rxe1)
	echo "--- state at the failure: veth neighbours, our paths and connections, both counters"
	ip -6 neigh show dev veth0
	ip link show veth0 | grep ether; ip link show veth1 | grep ether
	ip -6 neigh show dev veth1
	ip neigh show dev "$ib_a"
	ip -n "$NS_PEER" neigh show
	cat "/sys/kernel/debug/ipoib/${ib_a}_path" "/sys/kernel/debug/ipoib/${ib_a}_cm"
	[ -n "$ib" ] && cat "/sys/kernel/debug/ipoib/${ib}_cm" "/sys/kernel/debug/ipoib/${ib}_mcg"
	ethtool -S "$ib_a" | grep -vw 0
	[ -n "$ib" ] && ip netns exec "$NS_PEER" ethtool -S "$ib" | grep -vw 0
	rdma res show qp | grep -v "comm \[rdma_rs" | head -20
	rdma statistic show link rxe0/1; rdma statistic show link rxe1/1
	klog_since | tail -n 30
}
peer_back() {
	ip link set veth1 address "$PEER_MAC" || return 1
	# While silent, veth0's neighbour entry for the peer's link-local address learnt the
	# changed MAC: forget it, or RoCE packets keep going there until it ages out.
	ip -6 neigh flush dev veth0
	# The RDMA core does not give rxe1 back its default GID after the change of address
	# (the GID cache refuses it, ENOSPC): the device has to be added again.
	rdma link del rxe1 && peer_device_back || { peer_state; return 1; }
}
ipoib_check "the peer back (its device added again): traffic to it resumes" peer_back

ipoib_check "the child and the parent still talk" \
	ip netns exec "$NS_KID" ping -c 2 -W 2 198.51.100.1

unload() {
	rmmod "$MODULE" && ! module_loaded && ! ip -n "$NS_KID" link show "$kid" 2>/dev/null
}
KLOG_MARK=$start_mark
ipoib_check "rmmod, kernel log clean" eval 'unload && klog_clean_since'
ip netns del "$NS_PEER" 2>/dev/null
ip netns del "$NS_KID" 2>/dev/null
ktap_finished
