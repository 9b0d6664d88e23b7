#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Connected mode without a shared receive queue, as on devices that have none: loaded with
# cm_srq=0 max_nonsrq_conn_qp=1 (rings of 48; the receive CQ sized for them), every receive
# connection gets a ring of its own, and max_nonsrq_conn_qp caps how many an interface
# accepts. rxe has SRQs, so the parameter forces the path.
#
# The interface of rxe0 (root namespace) takes connections from the one of rxe1 (namespace
# A) and from a child of it (namespace B), with room for one: the first peer's 60000-byte
# pings arrive unfragmented over a connection with its own ring, and 8 MiB over TCP arrive
# intact with both ends' rings in use; the second peer is refused (REJ "no QP",
# cm_rx_rejected, a log line) while the first holds the one place, and connects once the
# first leaves connected mode. Nothing is left after rmmod.
. "$(dirname "$0")/lib.sh"

NS_PEER=ipoibpeer NS_KID=ipoibkid
OURS=198.51.100.1 PEER=198.51.100.2 KID=198.51.100.3
# 48 buffers a ring: the receive CQ needs 3 x 48 + 1 entries, which rxe rounds to 255; sized
# for the UD ring alone (2 x 48 + 1) it would have 127.
RING=48

one_host_begin 7
klog_mark
start_mark=$KLOG_MARK

params() {
	modprobe "$MODULE" cm_srq=0 max_nonsrq_conn_qp=1 recv_queue_size=$RING \
		debug_level=1 || return 1
	local p=/sys/module/$MODULE/parameters
	echo "cm_srq $(cat $p/cm_srq), max_nonsrq_conn_qp $(cat $p/max_nonsrq_conn_qp)"
	[ "$(cat $p/cm_srq)" = N ] && [ "$(cat $p/max_nonsrq_conn_qp)" = 1 ] || return 1
	# The receive CQ takes the UD ring's completions and those of the connections' rings:
	# room for both rings (the UD QP's and one connection's), plus the C driver's slack.
	local cqe prog
	rdma res show cq dev rxe0 | grep "comm \[$MODULE\]"
	# shellcheck disable=SC2016 # an awk program
	prog='index($0, m) {'
	# shellcheck disable=SC2016 # an awk program
	prog+=' for (i = 1; i < NF; i++) if ($i == "cqe" && $(i + 1) > max) max = $(i + 1) }'
	prog+=' END { print max + 0 }'
	cqe=$(rdma res show cq dev rxe0 | awk -v m="[$MODULE]" "$prog")
	echo "largest CQ of $MODULE on rxe0: $cqe entries"
	[ "$cqe" -ge $((3 * RING + 1)) ]
}
desc="modprobe $MODULE cm_srq=0 max_nonsrq_conn_qp=1: parameters shown,"
desc+=" receive CQ sized for the rings"
ipoib_check "$desc" params
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
kid=$ib_b.kid
cm_file=/sys/kernel/debug/ipoib/${ib_a}_cm

# in_namespace NS IF ADDR: moves IF into NS with ADDR, MTU 65520, up.
in_namespace() {
	ip link set "$2" netns "$1" && ip -n "$1" addr add "$3/24" dev "$2" &&
		ip -n "$1" link set "$2" mtu 65520 && ip -n "$1" link set "$2" up
}
setup() {
	[ -n "$ib_a" ] && [ -n "$ib_b" ] ||
		{ echo "interfaces not found: '$ib_a' '$ib_b'"; return 1; }
	ip netns add "$NS_PEER" && ip netns add "$NS_KID" &&
		ip link add link "$ib_b" name "$kid" type ipoib &&
		in_namespace "$NS_KID" "$kid" "$KID" &&
		in_namespace "$NS_PEER" "$ib_b" "$PEER" &&
		ip addr add "$OURS/24" dev "$ib_a" && ip link set "$ib_a" mtu 65520 &&
		ip link set "$ib_a" up
}
desc="interfaces up in connected mode, MTU 65520 ($ib_a; $ib_b in $NS_PEER, its child in $NS_KID)"
ipoib_check "$desc" setup

# frags NS: IPv4 fragments namespace NS made so far.
frags() { ip netns exec "$1" awk '/^Ip: [0-9]/ { print $(NF - 1) }' /proc/net/snmp; }

# big_pings NS: three 60000-byte pings from NS to us, each in one packet (no fragment made).
big_pings() {
	local before
	before=$(frags "$1")
	ip netns exec "$1" ping -c 3 -W 2 -s 60000 "$OURS" || return 1
	echo "fragments made: $before -> $(frags "$1")"
	[ "$(frags "$1")" = "$before" ]
}

# rx_lines: our receive connections that are up.
rx_lines() { grep "^rx .* state live " "$cm_file"; }

# connects NS: the interface in NS reaches us, with 60000-byte pings unfragmented, over our
# one receive connection, which has a ring of its own.
connects() {
	wait_for 30 ip netns exec "$1" ping -c 1 -W 1 "$OURS" || return 1
	big_pings "$1" || return 1
	cat "$cm_file"
	[ "$(rx_lines | wc -l)" = 1 ] && rx_lines | grep -q " recv ring $RING\$"
}
ipoib_check "first peer: 60000-byte pings over a receive connection with its own ring of $RING" \
	connects "$NS_PEER"

# An 8 MiB TCP transfer to the peer, checked end to end: data over our transmit connection
# into the peer's ring, acknowledgements back into ours.
bulk_to_peer() {
	local sent got rx
	head -c $((8 << 20)) /dev/urandom >/tmp/nonsrq.bin
	sent=$(sha256sum </tmp/nonsrq.bin | cut -d' ' -f1)
	ip netns exec "$NS_PEER" timeout 90 nc -l -p 5002 </dev/null | sha256sum >/tmp/nonsrq.got &
	rx=$!
	wait_for 10 eval 'timeout 60 cat /tmp/nonsrq.bin >/dev/tcp/$PEER/5002'
	wait "$rx"
	got=$(cut -d' ' -f1 </tmp/nonsrq.got)
	rm -f /tmp/nonsrq.bin /tmp/nonsrq.got
	echo "sent sha256 $sent, received $got"
	[ "$sent" = "$got" ] && grep -q " recv ring $RING\$" "/sys/kernel/debug/ipoib/${ib_b}_cm"
}
ipoib_check "8 MiB over TCP intact (sha256), both ends' rings in use" bulk_to_peer

second_refused() {
	local before kid_failed refused
	before=$(ethtool_stat "$ib_a" cm_rx_rejected)
	! ip netns exec "$NS_KID" ping -c 3 -W 2 "$OURS" ||
		{ echo "the second peer got through"; return 1; }
	kid_failed=$(ip netns exec "$NS_KID" ethtool -S "$kid" |
		awk '$1 == "cm_tx_failed:" { print $2 }')
	echo "cm_rx_rejected $before -> $(ethtool_stat "$ib_a" cm_rx_rejected)," \
		"child's cm_tx_failed $kid_failed"
	cat "$cm_file"
	refused="$MODULE: $ib_a: connection request refused:"
	refused+=" 1 connections with rings of their own (max_nonsrq_conn_qp)"
	[ "$(ethtool_stat "$ib_a" cm_rx_rejected)" -gt "$before" ] &&
		[ "$(rx_lines | wc -l)" = 1 ] &&
		klog_since | grep -q "$refused"
}
ipoib_check "second peer refused while the first holds the one place (REJ no QP, counted, logged)" \
	second_refused

# The first peer leaves connected mode: its connection to us closes and frees the place.
second_after_first() {
	ip netns exec "$NS_PEER" sh -c "echo datagram > /sys/class/net/$ib_b/mode" || return 1
	wait_for 20 eval '[ "$(rx_lines | wc -l)" = 0 ]' || { cat "$cm_file"; return 1; }
	connects "$NS_KID"
}
ipoib_check "first peer to datagram mode: its connection closed, the second peer connects" \
	second_after_first

unload() {
	rmmod "$MODULE" && ! module_loaded && no_rc_qps
}
KLOG_MARK=$start_mark
ipoib_check "rmmod: connections and rings freed, kernel log clean" eval 'unload && klog_clean_since'
ip netns del "$NS_PEER" 2>/dev/null
ip netns del "$NS_KID" 2>/dev/null
ktap_finished
