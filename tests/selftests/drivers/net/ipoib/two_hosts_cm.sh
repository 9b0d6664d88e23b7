#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Connected mode (RFC 4755) between two hosts, soft-RoCE on each: MTU 65520, RC connections
# made through the IB CM, large pings, netperf and a checked bulk transfer. Run on both
# hosts with IPOIB_ROLE=server or client, IPOIB_LOCAL_IP and IPOIB_PEER_IP set.
#
# Flag 0x80 in the address; `ifconfig ib0 mtu 65520`, as the original connected-mode
# instructions have it; 60000-byte pings not fragmented; IPv6 neighbour discovery and pings;
# IPv4 and IPv6 multicast (receivers joined with mcast_udp get a sender's datagrams; once
# they leave, fewer than 10 packets of any kind reach ib0 while 100 are sent to the groups);
# one RC queue pair per direction. `ethtool -i` and `ethtool -S`; `ethtool ib0` (speed,
# duplex); `ethtool -c` and `-C` (refused with the reason on rxe, which cannot moderate its
# CQs). The debugfs files ipoib/ib0_mcg, ib0_path and ib0_cm (gone after unload). 32 MiB
# checked end to end (sha256) with scatter-gather on; netperf STREAM, MAERTS, RR and UDP
# 60000, and iperf3 -P 8 (the server: over 4 MiB received meanwhile). The mode switched both
# ways under a TCP stream; the peer's module reloaded under a stream (traffic resumes, no
# stale connection left; reloaded with smaller queues); an idle connection closed by the
# peer (cm_stale_secs=3), destroyed as soon as its queue pair reports its last receive, and
# made again by the next packet.
. "$(dirname "$0")/lib.sh"

DATA_PORT=5002
RELOAD_PORT=5003
MCAST_PORT=5004
STALE_PORT=5008

ktap_print_header
if [ -z "${IPOIB_ROLE:-}" ] || [ -z "${IPOIB_LOCAL_IP:-}" ] || [ -z "${IPOIB_PEER_IP:-}" ]; then
	ktap_skip_all "needs a second host: set IPOIB_ROLE, IPOIB_LOCAL_IP and IPOIB_PEER_IP"
	exit "$KSFT_SKIP"
fi
ktap_set_plan $([ "$IPOIB_ROLE" = server ] && echo 21 || echo 22)
role=$IPOIB_ROLE peer=$IPOIB_PEER_IP
klog_mark
start_mark=$KLOG_MARK

ipoib_check "$role: rxe0 on eth0 ($IPOIB_LOCAL_IP) ACTIVE" two_hosts_topology
two_hosts_meet
ipoib_check "$role: peer $peer answers ping" wait_for 60 ping -c 1 -W 1 "$peer"
ipoib_check "$role: modprobe $MODULE" modprobe "$MODULE"

case "$role" in
server) ib_local=198.51.100.1 ib_peer=198.51.100.2 ib6_local=2001:db8:1::1 ib6_peer=2001:db8:1::2 ;;
*) ib_local=198.51.100.2 ib_peer=198.51.100.1 ib6_local=2001:db8:1::2 ib6_peer=2001:db8:1::1 ;;
esac
# The address offers connected mode (flags byte 0x80) and the mode is connected.
cm_offered() {
	local addr
	addr=$(cat /sys/class/net/ib0/address)
	echo "address $addr, mode $(cat /sys/class/net/ib0/mode)"
	[ "${addr:0:2}" = 80 ] && [ "$(cat /sys/class/net/ib0/mode)" = connected ]
}
ipoib_check "$role: ib0 offers connected mode (address flags 0x80) and uses it" cm_offered
# The same switch through netlink: ip link set ib0 type ipoib mode ..., shown by ip -d link.
ip_link_mode() {
	ip link set ib0 type ipoib mode datagram &&
		[ "$(cat /sys/class/net/ib0/mode)" = datagram ] &&
		[ "$(cat /sys/class/net/ib0/mtu)" = 1020 ] &&
		ip -d link show ib0 | grep -q "ipoib pkey 0xffff mode datagram" &&
		ip link set ib0 type ipoib mode connected &&
		[ "$(cat /sys/class/net/ib0/mode)" = connected ] &&
		[ "$(cat /sys/class/net/ib0/mtu)" = 65520 ] || return 1
	ip -d link show ib0
	ip -d link show ib0 | grep -q "ipoib pkey 0xffff mode connected" &&
		ip link set ib0 type ipoib umcast 1 &&
		ip -d link show ib0 | grep -Eq "umcast +0001" &&
		[ "$(cat /sys/class/net/ib0/umcast)" = 1 ] &&
		ip link set ib0 type ipoib umcast 0 || return 1
	# As in the C driver, deleting a port's own interface does nothing (and says so).
	ip link del ib0 2>/dev/null
	ip link show ib0 >/dev/null
}
ipoib_check "$role: ip link set ib0 type ipoib mode datagram|connected; ip -d link shows it" \
	ip_link_mode
# As in the original connected-mode instructions: modprobe, then ifconfig ib0 mtu 65520.
cm_up() {
	ifconfig ib0 mtu 65520 && [ "$(cat /sys/class/net/ib0/mtu)" = 65520 ] &&
		ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP' || return 1
	# A real queue (not noqueue): a stopped device then holds packets instead of failing;
	# twice the send ring long, as C's.
	ip link show ib0
	local qlen
	qlen=$((2 * $(cat /sys/module/$MODULE/parameters/send_queue_size)))
	ip link show ib0 |
		grep -q "qdisc pfifo_fast .*qlen $qlen$"
}
ipoib_check "$role: ib0 up with MTU 65520" cm_up
ipoib_check "$role: ping $ib_peer over ib0" wait_for 60 ping -c 1 -W 1 "$ib_peer"
big_pings() {
	local before after
	before=$(frag_creates)
	ping -c 3 -W 5 -s 60000 "$ib_peer" || return 1
	after=$(frag_creates)
	echo "IPv4 fragments created: $before before, $after after"
	[ "$before" = "$after" ]
}
ipoib_check "$role: 60000-byte pings over ib0, unfragmented" big_pings
# IPv6 (MTU 65520 allows it): neighbour discovery through the solicited-node multicast
# groups ib0 joins from its multicast list, then pings, small and large, both ways.
ipv6_pings() {
	ip -6 addr add "$ib6_local/64" dev ib0 nodad || return 1
	ip -6 addr show dev ib0
	wait_for 60 ping -6 -c 1 -W 2 "$ib6_peer" || { ip -6 neigh show dev ib0; return 1; }
	ping -6 -c 2 -W 5 -s 30000 "$ib6_peer" && ip -6 neigh show dev ib0
}
ipoib_check "$role: IPv6 over ib0: neighbour discovery by multicast, pings both ways" ipv6_pings
# Multicast: receivers on the server join an IPv4 and an IPv6 group (ib0 attaches to their
# MGIDs as its multicast list changes) and get the client's datagrams; once they leave,
# ib0 lets the groups go and their datagrams no longer reach it.
MC4=239.1.2.3 MC6=ff12::1:2 MC_UDP=5010
mcast_udp() { "$(dirname "$0")/mcast_udp" "$@"; }
# The groups' hardware addresses in ib0's list: P_Key 0xffff, IPv4 and IPv6 signatures.
MC4_HW=12:40:1b:ff:ff:00:00:00:00:00:00:0f:01:02:03 \
	MC6_HW=12:60:1b:ff:ff:00:00:00:00:00:00:00:01:00:02
mc_joined() {
	local list
	list=$(ip maddr show dev ib0)
	[[ $list == *"$MC4_HW"* && $list == *"$MC6_HW"* ]]
}
if [ "$role" = server ]; then
	mcast_received() {
		local p4 p6 n4 n6
		mcast_udp recv ib0 "$MC4" "$MC_UDP" 60 50 >/tmp/mc4.out &
		p4=$!
		mcast_udp recv ib0 "$MC6" "$MC_UDP" 60 50 >/tmp/mc6.out &
		p6=$!
		wait_for 10 mc_joined ||
			{ ip maddr show dev ib0; cat /tmp/mc4.out /tmp/mc6.out; return 1; }
		ip maddr show dev ib0
		tell_peer "$MCAST_PORT" || return 1
		wait "$p4" "$p6"
		n4=$(sed -n 's/^received //p' /tmp/mc4.out) \
			n6=$(sed -n 's/^received //p' /tmp/mc6.out)
		echo "received $n4 of 50 on $MC4, $n6 of 50 on $MC6"
		[ "${n4:-0}" -ge 45 ] && [ "${n6:-0}" -ge 45 ]
	}
	ipoib_check "$role: IPv4 and IPv6 multicast: joined receivers get the client's datagrams" \
		mcast_received
	mcast_left() {
		local before after
		wait_for 10 eval '! mc_joined' || { ip maddr show dev ib0; return 1; }
		before=$(cat /sys/class/net/ib0/statistics/rx_packets)
		tell_peer "$MCAST_PORT" && wait_peer "$MCAST_PORT" 60 || return 1
		after=$(cat /sys/class/net/ib0/statistics/rx_packets)
		echo "ib0 rx_packets $before -> $after while the client" \
			"sent 100 datagrams to the groups"
		# The groups' datagrams none: what came was other traffic (ARP, neighbour
		# discovery).
		[ "$((after - before))" -lt 10 ]
	}
	ipoib_check "$role: groups left: their datagrams no longer reach ib0" mcast_left
else
	mcast_sent() {
		wait_peer "$MCAST_PORT" 60 || return 1
		mcast_udp send ib0 "$MC4" "$MC_UDP" 50 10 &&
			mcast_udp send ib0 "$MC6" "$MC_UDP" 50 10
	}
	ipoib_check "$role: 50 datagrams each to an IPv4 and an IPv6 group" mcast_sent
	ipoib_check "$role: the same again once the peer left the groups" eval '
		wait_peer "$MCAST_PORT" 60 && mcast_udp send ib0 "$MC4" "$MC_UDP" 50 10 &&
			mcast_udp send ib0 "$MC6" "$MC_UDP" 50 10 && tell_peer "$MCAST_PORT"'
fi
# Each direction has its own connection: ours to the peer and the peer's to us.
rc_qps() {
	rdma res show qp type RC
	[ "$(rdma res show qp type RC | grep -c "comm \[$MODULE\]")" -ge 2 ]
}
ipoib_check "$role: RC queue pairs of $MODULE on rxe0 (one per direction)" rc_qps
# debugfs: the C driver's _mcg file, and our _cm listing both connections (two_hosts.sh
# checks _path in datagram mode).
debugfs_files() {
	local d=/sys/kernel/debug/ipoib tx rx
	head -n 12 $d/ib0_mcg && cat $d/ib0_path $d/ib0_cm || return 1
	grep -qx "GID: ff12:401b:ffff:0:0:0:ffff:ffff" $d/ib0_mcg &&
		grep -Eq "^  complete: +yes$" $d/ib0_mcg ||
		{ echo "no broadcast group in ib0_mcg"; return 1; }
	# The peer is reached over connections: the UD destinations are groups sent to.
	grep -Eq "^  send_only: +yes$" $d/ib0_mcg ||
		{ echo "no send-only group in ib0_mcg"; return 1; }
	tx="^tx peer .* state Live qpn 0x[0-9a-f]{6} mtu 65520 packets [1-9][0-9]* "
	rx="^rx peer-qpn 0x[0-9a-f]{6} .* state live qpn 0x[0-9a-f]{6} packets [1-9][0-9]* "
	grep -Eq "$tx" $d/ib0_cm &&
		grep -Eq "$rx" $d/ib0_cm
}
ipoib_check "$role: debugfs ipoib/ib0_mcg and ib0_cm list the groups and connections" debugfs_files
# ethtool: the driver and its RDMA device, and counters of both modes.
ethtool_shows() {
	local s
	ethtool -i ib0 && ethtool -S ib0 || return 1
	# rxe on RoCE sits on no adapter: bus-info names the RDMA device, ib0 has no device link.
	ethtool -i ib0 | grep -qx "driver: ib_ipoib" &&
		ethtool -i ib0 | grep -qx "bus-info: rxe0" &&
		[ ! -e /sys/class/net/ib0/device ] || return 1
	for s in rx_packets tx_packets cm_tx_connections cm_rx_connections cm_tx_established \
		cm_rx_accepted; do
		[ "$(ethtool_stat ib0 $s)" -ge 1 ] || { echo "$s is not counted"; return 1; }
	done
	# The server received the 100 datagrams of the multicast test.
	if [ "$role" = server ] && [ "$(ethtool_stat ib0 multicast)" -lt 100 ]; then
		echo "multicast: $(ethtool_stat ib0 multicast) received, 100 expected"
		return 1
	fi
	[ "$(ethtool -S ib0 | grep -c :)" -ge 18 ]
}
ipoib_check "$role: ethtool -i and -S on ib0 (driver, device, connected-mode counters)" \
	ethtool_shows
# ethtool: link settings from the port; receive coalescing shown, and refused with the
# reason where the device cannot moderate its CQ (rxe), or past what a CQ takes.
ethtool_link() {
	local out
	ethtool ib0 | grep -E "Speed|Duplex|Port:|Link detected"
	ethtool ib0 | grep -Eq "^\s*Speed: [1-9][0-9]*Mb/s" &&
		ethtool ib0 | grep -q "Duplex: Full" &&
		ethtool ib0 | grep -q "Link detected: yes" || return 1
	ethtool -c ib0 | grep -E "^rx-(usecs|frames):"
	ethtool -c ib0 | grep -Eq "^rx-usecs:\s+0$" &&
		ethtool -c ib0 | grep -Eq "^rx-frames:\s+0$" || return 1
	klog_mark
	out=$(ethtool -C ib0 rx-usecs 10 2>&1) && { echo "rx-usecs 10 accepted on rxe"; return 1; }
	echo "ethtool -C ib0 rx-usecs 10: $out"
	echo "$out" | grep -q "Operation not supported" &&
		klog_since | grep -q "ib0: the RDMA device cannot moderate completions" || return 1
	out=$(ethtool -C ib0 rx-frames 70000 2>&1) && { echo "rx-frames 70000 accepted"; return 1; }
	echo "ethtool -C ib0 rx-frames 70000: $out"
	echo "$out" | grep -q "Invalid argument" &&
		klog_since | grep -q "ib0: coalescing refused" &&
		! ethtool -C ib0 tx-usecs 5 2>/dev/null &&
		ethtool -c ib0 | grep -Eq "^rx-usecs:\s+0$"
}
ipoib_check "$role: ethtool ib0 (speed, full duplex), -c and -C (refused with the reason on rxe)" \
	ethtool_link

# A bulk transfer, checked end to end: the client sends, the server compares checksums.
# Scatter-gather is on, so TCP hands over pages that go out without a copy.
if [ "$role" = server ]; then
	ipoib_check "$role: 32 MiB received over ib0 intact (sha256)" bulk_receive "$DATA_PORT"
	serve
	ipoib_check "$role: the client's netperf and iperf3 served over ib0 (over 4 MiB received)" \
		served $((4 << 20))
else
	ipoib_check "$role: 32 MiB sent over ib0 with its checksum, scatter-gather on" \
		eval 'sg_is ib0 on && bulk_send "$ib_peer" "$DATA_PORT" 32'
	# The netperf figures' labels.
	cm="ib0 (connected, MTU 65520)"
	ipoib_check "$role: netperf over ib0 in connected mode" eval '
		wait_for 30 eval "netperf -H $ib_peer -t TCP_RR -l 1 >/dev/null 2>&1" &&
		netperf_run "$ib_peer" TCP_STREAM "-m 65536" "$cm TCP_STREAM" &&
		netperf_run "$ib_peer" TCP_MAERTS "-m 65536" "$cm TCP_MAERTS" &&
		netperf_run "$ib_peer" TCP_RR "" "$cm TCP_RR" &&
		netperf_run "$ib_peer" UDP_STREAM "-m 60000" "$cm UDP_STREAM 60000"'
	iperf3_parallel() {
		local out
		out=$(wait_for 30 eval 'timeout 60 iperf3 -c "$ib_peer" -P 8 -t 5 2>&1') ||
			{ echo "$out"; return 1; }
		echo "$out" | grep -E "SUM.*(sender|receiver)"
		echo "$out" | grep -qE "SUM.*receiver"
	}
	ipoib_check "$role: iperf3 with 8 parallel streams over ib0" iperf3_parallel
	runs_done
fi
# stream_moving: ib0 sends another MiB within 20 s (a stream started in the background runs).
stream_moving() {
	local tx0 tx=/sys/class/net/ib0/statistics/tx_bytes
	tx0=$(cat "$tx")
	wait_for $((20 * SLOW)) eval '[ $(($(cat "$tx") - tx0)) -gt 1048576 ]' ||
		{ echo "no stream on ib0"; return 1; }
}
# Mode switches both ways while a TCP stream runs: the stream goes on in datagram mode, the
# MTU follows the mode, and large pings work again afterwards. The stream is given far more
# time than the switches take (on the debug kernel the first MiB can take most of a minute)
# and is stopped after them; ib0 goes back to connected mode whatever failed, so a failure
# here does not leave the checks below in the wrong mode.
switch_under_load() {
	local m=/sys/class/net/ib0/mode pid rc=0 status
	timeout $((120 * SLOW)) netperf -H "$ib_peer" -t TCP_STREAM -l $((100 * SLOW)) -P 0 \
		-- -m 65536 >/tmp/switch.log 2>&1 &
	pid=$!
	stream_moving && echo datagram >$m && [ "$(cat /sys/class/net/ib0/mtu)" = 1020 ] &&
		stream_moving || rc=1
	echo connected >$m && [ "$(cat /sys/class/net/ib0/mtu)" = 65520 ] || rc=1
	if kill -0 "$pid" 2>/dev/null; then
		status="still running after both switches; stopped"
		kill "$pid"
	fi
	wait "$pid"
	echo "netperf during the switches: ${status:-exited with $?}: $(tail -n 1 /tmp/switch.log)"
	[ "$rc" = 0 ] && wait_for 30 ping -c 1 -W 2 -s 60000 "$ib_peer"
}
if [ "$role" = client ]; then
	ipoib_check "$role: mode switched both ways under a TCP stream" switch_under_load
else
	ipoib_skip "$role: mode switched both ways under a TCP stream" "the client switches"
fi
# The server's module goes away under a client stream and comes back: both ends tear the
# connections down, and traffic resumes over new ones (the server announces its new
# address with a gratuitous ARP).
if [ "$role" = client ]; then
	peer_reload() {
		local pid n
		timeout 120 netperf -H "$ib_peer" -t TCP_STREAM -l 20 -P 0 -- -m 65536 \
			>/tmp/reload.log 2>&1 &
		pid=$!
		stream_moving || return 1
		wait_for 30 eval 'echo go >/dev/tcp/$peer/$RELOAD_PORT' || return 1
		wait "$pid"
		echo "netperf across the reload exited with $?: $(tail -n 1 /tmp/reload.log)"
		wait_for 90 ping -c 1 -W 2 -s 60000 "$ib_peer" || return 1
		n=$(rc_qp_count)
		rdma res show qp type RC
		echo "$n RC queue pairs of $MODULE"
		[ "$n" = 2 ]
	}
	desc="$role: peer module reloaded under a stream; traffic resumes, stale connections gone"
	ipoib_check "$desc" peer_reload
else
	reload_under_stream() {
		wait_peer "$RELOAD_PORT" 90 || return 1
		rmmod "$MODULE" || return 1
		sleep 3
		sysctl -qw net.ipv4.conf.default.arp_notify=1
		# Idle receive connections are closed after 3 s from now on (see below); smaller
		# queues than the defaults carry the rest of the test.
		modprobe "$MODULE" cm_stale_secs=3 send_queue_size=32 recv_queue_size=48 &&
			[ "$(cat /sys/module/$MODULE/parameters/send_queue_size)" = 32 ] &&
			[ "$(cat /sys/module/$MODULE/parameters/recv_queue_size)" = 48 ] &&
			ip link show ib0 | grep -q "qlen 64" && ifconfig ib0 mtu 65520 &&
			ip addr add "$ib_local/24" dev ib0 &&
			ip link set ib0 up && wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP'
	}
	desc="$role: module removed under the client's stream, loaded again with smaller queues"
	ipoib_check "$desc" reload_under_stream
fi
# The server, reloaded with cm_stale_secs=3, closes the client's connection once idle; the
# client's side goes with it, and the next packet connects again.
if [ "$role" = client ]; then
	stale_closed() {
		local n
		wait_for $((30 * SLOW)) eval '[ "$(rc_qp_count)" = 1 ]'
		n=$(rc_qp_count)
		rdma res show qp type RC
		echo "$n RC queue pairs of $MODULE once idle"
		# The server counts its queue pairs before the next packet makes new ones.
		wait_peer "$STALE_PORT" 60 ||
			{ echo "the server did not finish its count"; return 1; }
		[ "$n" = 1 ] && wait_for 30 ping -c 1 -W 2 -s 60000 "$ib_peer" &&
			[ "$(rc_qp_count)" = 2 ]
	}
	ipoib_check "$role: the peer closed our idle connection; the next packet reconnects" \
		stale_closed
else
	stale_logged() {
		local rc=1
		echo "cm_stale_secs=$(cat /sys/module/$MODULE/parameters/cm_stale_secs)"
		# Destroyed as soon as its queue pair reports its last receive (the fallback
		# without that report waits 5 s); our transmit connection stays.
		wait_for 90 eval \
			'klog_since | grep "ib0: [0-9]* idle receive connection(s) closed"' &&
			wait_for 2 eval '[ "$(rc_qp_count)" = 1 ]' && rc=0
		echo "$(rc_qp_count) RC queue pairs;" \
			"ethtool: cm_rx_stale_closed $(ethtool_stat ib0 cm_rx_stale_closed)," \
			"cm_rx_drained $(ethtool_stat ib0 cm_rx_drained)"
		tell_peer "$STALE_PORT"
		[ "$rc" = 0 ] && [ "$(ethtool_stat ib0 cm_rx_stale_closed)" -ge 1 ] &&
			[ "$(ethtool_stat ib0 cm_rx_drained)" -ge 1 ]
	}
	desc="$role: idle receive connection closed after cm_stale_secs=3, destroyed once drained"
	ipoib_check "$desc" stale_logged
fi
ip -s link show ib0

together=0
finish_together 240 || { ktap_print_msg "peer did not finish in time"; together=1; }
[ "$role" = server ] && kill $(pidof netserver) $(pidof iperf3) 2>/dev/null
rmmod "$MODULE"
KLOG_MARK=$start_mark
ipoib_check "$role: both hosts done in time; unloaded, kernel log clean, debugfs files gone" \
	eval '[ "$together" = 0 ] && ! module_loaded && klog_clean_since &&' \
		'[ ! -e /sys/kernel/debug/ipoib ]'
ktap_finished
