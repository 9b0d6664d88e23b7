#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Datagram-mode IPoIB on one host: the interface of rxe1 moves into a network namespace, the
# one of rxe0 stays; they reach each other over soft-RoCE (ARP through the broadcast group,
# unicast back), pinging both ways.
#
# Malformed datagrams sent from user space with ud_inject (libibverbs): empty and short ones
# counted in rx_errors; an ethertype IPoIB does not carry passed up as C passes it (the
# stack drops 10 as unhandled in rx_dropped, a packet socket for the type receives 10 more:
# pkt_io); noise refused by IPv4; 10 with a wrong Q_Key never delivered while the 10 sent
# after them with the group's are; the interface still answering. On transmit, that
# ethertype dropped (tx_dropped +10 each) as in C, unicast and broadcast alike.
#
# The multicast counter counted as C counts it (5 datagrams to the all-hosts group count, 5
# broadcasts do not), the same in `ip -s link` as in `ethtool -S`. 1000 IPv4 groups joined
# at once by sockets (mcast_udp join): all 1000 in debugfs and on the Ethernet device under
# the port, the last one receiving, all left when the sockets close. Datagrams sent in
# a burst and one by one all counted as sent: no send completion is left unreaped.
#
# The Ethernet MTU changed under rxe (which changes the port's MTU without an event): at
# 3000, MTU 2044 can be set and 2000-byte pings go whole; back at 1500 the interfaces come
# down to 1020 by themselves, and in connected mode a connection made at path MTU 2048 is
# made again at 1024.
#
# Idle neighbours (address handles) forgotten after two ARP collection intervals, and in
# connected mode the idle destination's connection closed with it (cm_tx_idle_closed +1) and
# made again by the next ping. In connected mode, unicast ARP (a probe of the peer's entry)
# sent as datagrams, as in C, and answered. The module unloads with an interface in the
# other namespace.
. "$(dirname "$0")/lib.sh"

NS=ipoibpeer

one_host_begin 19
klog_mark
start_mark=$KLOG_MARK
# The driver ages its neighbours at the pace of the ARP table's collection: 1 s here.
gc_interval=$(sysctl -n net.ipv4.neigh.default.gc_interval)
sysctl -qw net.ipv4.neigh.default.gc_interval=1

ipoib_check "modprobe $MODULE" modprobe "$MODULE"
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
netns_setup() {
	[ -n "$ib_a" ] && [ -n "$ib_b" ] ||
		{ echo "interfaces not found: '$ib_a' '$ib_b'"; return 1; }
	ip netns add "$NS" && ip link set "$ib_b" netns "$NS" &&
		ip -n "$NS" link set lo up &&
		ip -n "$NS" addr add 198.51.100.2/24 dev "$ib_b" &&
		ip -n "$NS" link set "$ib_b" up &&
		ip addr add 198.51.100.1/24 dev "$ib_a" && ip link set "$ib_a" up
}
ipoib_check "$ib_b (rxe1) moved into namespace $NS, both interfaces up" netns_setup
ipoib_check "ping $ib_a -> $ib_b across namespaces" wait_for 30 ping -c 1 -W 1 198.51.100.2
ipoib_check "ping back $ib_b -> $ib_a" ip netns exec "$NS" ping -c 2 -W 2 198.51.100.1
# Multicast counted as C counts it: datagrams to groups other than the broadcast one, shown
# by ip -s link as by ethtool. Five datagrams to the subnet's broadcast address move it not
# at all, five to the all-hosts group (which every interface joins) by five at least.
peer_stat() { ip netns exec "$NS" cat "/sys/class/net/$ib_b/statistics/$1"; }
multicast_counted() {
	local m0 rx0 m1 rx1 m2 m3
	m0=$(peer_stat multicast) rx0=$(peer_stat rx_packets)
	./udp_burst 9 198.51.100.255 198.51.100.255 198.51.100.255 198.51.100.255 198.51.100.255
	wait_for 5 eval '[ $(($(peer_stat rx_packets) - rx0)) -ge 5 ]' ||
		{ echo "broadcast not received"; return 1; }
	m1=$(peer_stat multicast) rx1=$(peer_stat rx_packets)
	./mcast_udp send "$ib_a" 224.0.0.1 9 5 100
	wait_for 5 eval '[ $(($(peer_stat rx_packets) - rx1)) -ge 5 ]' ||
		{ echo "multicast not received"; return 1; }
	m2=$(peer_stat multicast)
	echo "multicast: $m0 -> $m1 after 5 broadcast datagrams -> $m2 after 5 to 224.0.0.1"
	ip -n "$NS" -s link show "$ib_b"
	[ "$m1" = "$m0" ] && [ $((m2 - m1)) -ge 5 ] &&
		m3=$(ip netns exec "$NS" ethtool -S "$ib_b" |
			awk '$1 == "multicast:" { print $2 }') &&
		[ "$m3" = "$m2" ]
}
ipoib_check "multicast counted (ip -s link, ethtool -S), broadcast not" multicast_counted
# Send completions are reaped in batches (datagrams' by the transmit path every 32 sends;
# both modes' by NAPI a few milliseconds after it last found some, or at once when it last
# found none): every packet counts as sent soon after it went, none left behind a completion
# nobody reaps. A burst, then single datagrams 200 ms apart (each after a round that found
# the one before); in datagram mode, then over a connection.
sent_counted() {
	local mode=$1 tx0 drop0 sent tx1 i ok=0
	# Unicast goes over a connection in connected mode, the interfaces' first.
	echo "$mode" >"/sys/class/net/$ib_a/mode" || return 1
	# The destination's address handle (or connection) first: beyond a few, packets that
	# wait for it are dropped (as in C).
	tx0=$(ethtool_stat "$ib_a" tx_packets)
	./udp_flood send 198.51.100.2 9 100 1 >/dev/null
	wait_for 5 eval '[ $(($(ethtool_stat "$ib_a" tx_packets) - tx0)) -ge 1 ]'
	tx0=$(ethtool_stat "$ib_a" tx_packets) drop0=$(ethtool_stat "$ib_a" tx_dropped)
	sent=$(./udp_flood send 198.51.100.2 9 100 50 | awk '{ print $2 }')
	for i in 1 2 3 4 5; do
		sleep 0.2
		./udp_flood send 198.51.100.2 9 100 1 >/dev/null && sent=$((sent + 1))
	done
	wait_for 2 eval '[ $(($(ethtool_stat "$ib_a" tx_packets) - tx0)) -ge 55 ]'
	tx1=$(ethtool_stat "$ib_a" tx_packets)
	echo "$mode: $sent datagrams sent: tx_packets +$((tx1 - tx0))," \
		"tx_dropped +$(($(ethtool_stat "$ib_a" tx_dropped) - drop0))"
	# A few more may be the stack's own (neighbour probes; in connected mode, the first
	# datagram, which waited for its connection, may be counted after tx0).
	[ "$sent" = 55 ] && [ $((tx1 - tx0)) -ge 55 ] && [ $((tx1 - tx0)) -le 65 ] || ok=1
	echo connected >"/sys/class/net/$ib_a/mode" && return $ok
}
desc="datagram mode: 50 datagrams in a burst, then 5 one by one,"
desc+=" all counted as sent (completions reaped in batches)"
ipoib_check "$desc" sent_counted datagram
desc="connected mode: 50 datagrams in a burst over a connection, then 5 one by one,"
desc+=" all counted as sent (completions reaped in batches)"
ipoib_check "$desc" sent_counted connected

# 1000 groups on ib_a's multicast list at once (IPv4 239.1.0.0 to 239.1.3.231, joined by
# sockets): each is joined (listed in debugfs, its group joined on veth0 under rxe0) and
# the last one receives; once the sockets are gone, all are left. C has no limit on the
# groups either.
MCG=/sys/kernel/debug/ipoib/${ib_a}_mcg
joined_of() { grep -c "^GID: ff12:401b:ffff:0:0:0:f01:" "$MCG"; }
veth_groups() { ip -6 maddr show dev veth0 | grep -c "ff12:401b:ffff::f01:"; }
many_groups() {
	local m0 pid mc=/sys/class/net/$ib_a/statistics/multicast
	[ -r "$MCG" ] || { echo "no $MCG"; return 1; }
	./mcast_udp join "$ib_a" 239.1.0.0 1000 120 >/tmp/groups.out &
	pid=$!
	wait_for 60 eval '[ "$(joined_of)" = 1000 ] && [ "$(veth_groups)" = 1000 ]' || {
		echo "joined: $(joined_of) in debugfs," \
			"$(veth_groups) on veth0; $(cat /tmp/groups.out)"
		kill "$pid"
		return 1
	}
	echo "$(cat /tmp/groups.out): 1000 in debugfs and on veth0"
	# The last group receives (counted by ib_a as multicast).
	m0=$(cat "$mc")
	ip netns exec "$NS" ./mcast_udp send "$ib_b" 239.1.3.231 9 5 100 >/dev/null &&
		wait_for 10 eval '[ $(($(cat "$mc") - m0)) -ge 5 ]' ||
		{ echo "group 239.1.3.231 not received"; kill "$pid"; return 1; }
	kill "$pid" && wait "$pid"
	wait_for 60 eval '[ "$(joined_of)" = 0 ] && [ "$(veth_groups)" = 0 ]' || {
		echo "still joined: $(joined_of) in debugfs, $(veth_groups) on veth0"
		return 1
	}
}
ipoib_check "1000 multicast groups joined at once, the last one receiving, and all left" many_groups
# The port follows its Ethernet device's MTU (under rxe, without an event), and the
# interfaces follow the port within a few collection intervals (1 s here). In datagram
# mode: at Ethernet MTU 3000 the port carries 2048-byte packets and ib MTU 2044 can be set,
# 2000-byte pings go whole; back at 1500, the MTU comes down to 1020 by itself and they go
# in fragments (at 2044 they would vanish). In connected mode: a connection made at path
# MTU 2048 is made again at 1024 when the Ethernet MTU comes down, 3000-byte pings go on.
mtus() { echo "$(cat "/sys/class/net/$ib_a/mtu")" \
	"$(ip netns exec "$NS" cat "/sys/class/net/$ib_b/mtu")"; }
modes() {
	echo "$1" >"/sys/class/net/$ib_a/mode" &&
		ip netns exec "$NS" sh -c "echo $1 >/sys/class/net/$ib_b/mode"
}
ethernet_mtu() { ip link set veth0 mtu "$1" && ip link set veth1 mtu "$1"; }
port_mtu() { [ "$(klog_since | grep -c "port's MTU is $1 now")" -ge 2 ]; }
port_mtu_followed() {
	local mode
	mode=$(cat "/sys/class/net/$ib_a/mode")
	klog_mark
	modes datagram && ethernet_mtu 3000 || return 1
	# shellcheck disable=SC2016 # expanded by eval
	wait_for 40 eval 'ip link set "$ib_a" mtu 2044 2>/dev/null &&' \
		'ip -n "$NS" link set "$ib_b" mtu 2044 2>/dev/null' || {
		echo "MTU 2044 refused at Ethernet MTU 3000"
		ethernet_mtu 1500
		return 1
	}
	echo "MTUs $(mtus) at Ethernet MTU 3000"
	ping -c 2 -W 2 -s 2000 198.51.100.2 && ethernet_mtu 1500 &&
		wait_for 40 eval '[ "$(mtus)" = "1020 1020" ]' &&
		echo "MTUs $(mtus) at Ethernet MTU 1500" &&
		ping -c 2 -W 2 -s 2000 198.51.100.2 || return 1
	klog_mark
	ethernet_mtu 3000 && wait_for 40 port_mtu 2048 && modes connected &&
		wait_for 20 ping -c 1 -W 2 -s 3000 198.51.100.2 &&
		grep "^tx peer .* state Live" "/sys/kernel/debug/ipoib/${ib_a}_cm" || return 1
	klog_mark
	ethernet_mtu 1500 && wait_for 40 port_mtu 1024 &&
		wait_for 30 ping -c 1 -W 2 -s 3000 198.51.100.2 &&
		ping -c 2 -W 2 -s 3000 198.51.100.2 && klog_since | grep "port's MTU is" &&
		modes datagram && modes "$mode"
}
desc="Ethernet MTU changed under rxe: the interfaces follow the port in"
desc+=" both modes, pings get through"
ipoib_check "$desc" port_mtu_followed
# Malformed datagrams from a user-space UD queue pair on rxe1 to the interface of rxe0.
stat_of() { cat "/sys/class/net/$ib_a/statistics/$1"; }
# IPv4's InHdrErrors, found by its name in the header line of /proc/net/snmp.
in_hdr_errors() { snmp_stat Ip InHdrErrors; }
inject() {
	local kind=$1 qkey=${2:-0x0b1b} sgid
	sgid=$(gid_index_link_local rxe1) || return 1
	"$(dirname "$0")/ud_inject" rxe1 "$sgid" "$(cat /sys/class/net/$ib_a/address)" \
		"$qkey" "$kind" 10
}
# counted_by COUNTER N COMMAND...: COMMAND succeeds and COUNTER (a function's output) grows
# by exactly N within 5 s.
counted_by() {
	local counter=$1 n=$2 before
	shift 2
	before=$($counter)
	"$@" || return 1
	wait_for 5 eval '[ "$(($($counter) - before))" -ge "$n" ]' ||
		{ echo "$counter: $before -> $($counter)"; return 1; }
	sleep 0.5
	echo "$counter: $before -> $($counter)"
	[ "$(($($counter) - before))" = "$n" ]
}
rx_errors() { stat_of rx_errors; }
rx_dropped() { stat_of rx_dropped; }
tx_dropped() { stat_of tx_dropped; }
ipoib_check "10 empty and 10 two-byte datagrams: rx_errors +20" \
	counted_by rx_errors 20 eval 'inject empty && inject short'
# Datagrams of an ethertype IPoIB names nowhere are passed up, as C passes them (C filters
# on transmit only): with no handler for the type the stack drops them (rx_dropped); a
# packet socket for it receives them.
unknown_passed_up() {
	local pid
	counted_by rx_dropped 10 inject unknown || return 1
	./pkt_io recv "$ib_a" 0x88b6 10 10 >/tmp/pkt.out 2>/tmp/pkt.err &
	pid=$!
	wait_for 5 grep -q listening /tmp/pkt.err && inject unknown || { kill "$pid"; return 1; }
	wait "$pid"
	echo "a packet socket for 0x88b6 on $ib_a: $(cat /tmp/pkt.out)"
	grep -qx "received 10" /tmp/pkt.out
}
desc="10 datagrams of an ethertype IPoIB does not carry: dropped by the stack (rx_dropped +10);"
desc+=" 10 more received by a packet socket for it"
ipoib_check "$desc" unknown_passed_up
# On transmit, as C: IPoIB carries IPv4, IPv6, ARP, RARP and TIPC only, other types are
# dropped (tx_dropped), unicast and multicast alike.
unknown_sent() {
	counted_by tx_dropped 10 ./pkt_io send "$ib_a" 0x88b6 \
		"$(ip netns exec "$NS" cat "/sys/class/net/$ib_b/address")" 10 &&
		counted_by tx_dropped 10 ./pkt_io send "$ib_a" 0x88b6 \
			"$(cat "/sys/class/net/$ib_a/broadcast")" 10
}
desc="10 unicast packets of that ethertype dropped on transmit (tx_dropped +10),"
desc+=" 10 to the broadcast group too"
ipoib_check "$desc" unknown_sent
ipoib_check "10 IPv4 datagrams of noise: passed up, refused by IPv4 (InHdrErrors +10)" \
	counted_by in_hdr_errors 10 inject garbage
# The Q_Key is the one the interface's UD queue pair holds (the broadcast group's): 10
# datagrams with another are dropped before the driver, the 10 sent after them with the
# group's Q_Key reach it and are counted (in order: the wrong ones came first).
wrong_qkey() {
	local errors
	errors=$(rx_errors)
	counted_by rx_dropped 10 eval 'inject unknown 0x1234 && inject unknown' &&
		[ "$(rx_errors)" = "$errors" ]
}
desc="10 datagrams with a wrong Q_Key never reach the driver, 10 with the group's after them do"
ipoib_check "$desc" wrong_qkey
ipoib_check "ping still answered after the bad input" ping -c 2 -W 2 198.51.100.2
# In datagram mode unicast goes over UD through a neighbour's address handle.
neigh_aged() {
	local n
	echo datagram >"/sys/class/net/$ib_a/mode" && ping -c 1 -W 2 198.51.100.2 || return 1
	n=$(ethtool_stat "$ib_a" neighbours)
	echo "neighbours in use: $n"
	[ "${n:-0}" -ge 1 ] &&
		wait_for 10 eval '[ "$(ethtool_stat "$ib_a" neighbours)" = 0 ]' || return 1
	echo "idle neighbours forgotten"
	ping -c 1 -W 2 198.51.100.2 && [ "$(ethtool_stat "$ib_a" neighbours)" -ge 1 ]
}
ipoib_check "idle neighbours forgotten after two collection intervals, made again on use" neigh_aged
# In connected mode a destination's connection goes with it once idle (C frees it with its
# neighbour): closed by us, counted, made again by the next packet.
tx_idle_closed() {
	local closed
	modes connected && wait_for 20 ping -c 1 -W 2 -s 3000 198.51.100.2 || return 1
	closed=$(ethtool_stat "$ib_a" cm_tx_idle_closed)
	echo "transmit connections: $(ethtool_stat "$ib_a" cm_tx_connections)"
	[ "$(ethtool_stat "$ib_a" cm_tx_connections)" = 1 ] &&
		wait_for 10 eval '[ "$(ethtool_stat "$ib_a" cm_tx_connections)" = 0 ]' || {
		cat "/sys/kernel/debug/ipoib/${ib_a}_cm"
		return 1
	}
	echo "idle: closed; cm_tx_idle_closed $closed -> $(ethtool_stat "$ib_a" cm_tx_idle_closed)"
	[ $(($(ethtool_stat "$ib_a" cm_tx_idle_closed) - closed)) = 1 ] &&
		ping -c 1 -W 2 -s 3000 198.51.100.2 &&
		[ "$(ethtool_stat "$ib_a" cm_tx_connections)" = 1 ]
}
desc="connected mode: an idle destination's connection closed after two collection"
desc+=" intervals (counted), made again on use"
ipoib_check "$desc" tx_idle_closed
# Unicast ARP goes as a datagram in connected mode too, as in C (ARP answers must not wait
# for a connection): a probe of the peer's entry (unicast ARP requests, 60 bytes with the
# IPoIB header) is sent as datagrams to the peer's QPN, and answered.
arp_over_ud() {
	local peer qpn param=/sys/module/$MODULE/parameters/data_debug_level
	peer=$(ip netns exec "$NS" cat "/sys/class/net/$ib_b/address")
	qpn=$(echo "$peer" | cut -d: -f2-4 | tr -d :)
	ping -c 1 -W 2 198.51.100.2 && echo 1 >"$param" || return 1
	klog_mark
	ip neigh change 198.51.100.2 dev "$ib_a" lladdr "$peer" nud probe &&
		wait_for 10 eval 'ip neigh show 198.51.100.2 dev "$ib_a" | grep -q REACHABLE'
	local answered=$?
	echo 0 >"$param"
	ip neigh show 198.51.100.2 dev "$ib_a"
	klog_since | grep "sending datagram, length 60 to QPN 0x$qpn" | head -n 3
	[ "$answered" = 0 ] && klog_since | grep -q "sending datagram, length 60 to QPN 0x$qpn"
}
desc="connected mode: unicast ARP sent as datagrams (a probe of the peer's entry), and answered"
ipoib_check "$desc" arp_over_ud
unload() {
	rmmod "$MODULE" && ! module_loaded && ! ip -n "$NS" link show "$ib_b" 2>/dev/null
}
KLOG_MARK=$start_mark
ipoib_check "rmmod with an interface in another namespace, kernel log clean" \
	eval 'unload && klog_clean_since'
ip netns del "$NS" 2>/dev/null
sysctl -qw net.ipv4.neigh.default.gc_interval="$gc_interval"
ktap_finished
