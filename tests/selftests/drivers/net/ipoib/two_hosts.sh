#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Two hosts on one Ethernet link, soft-RoCE on each: the fabric carries RC traffic between
# them (ib_send_bw; the client prints the raw RC bandwidth) and ib_ipoib takes on the port
# on both. Run on both hosts with IPOIB_ROLE=server or client, IPOIB_LOCAL_IP and
# IPOIB_PEER_IP set.
#
# ib0 with type, address, broadcast address and MTU as the C driver sets them; the mode file
# (connected by default, switched to datagram, bad values refused) and pkey; carrier; ping
# across ib0 (ARP through the broadcast group, unicast back); datagram MTU limits (65520 and
# 4093 refused, 4092 taken and run at the group's 1020, as C); full-MTU and fragmented
# pings; netperf over ib0 and over Ethernet (every figure above 0; the server checks that
# ib0 received over 1 MiB meanwhile); iperf3 -u at 1 Mbit/s without a lost datagram; 8 MiB
# checked end to end with scatter-gather on and off; no RC connection made in datagram mode.
# The Ethernet link flapped: carrier follows the port, the UD queue pair rxe failed is
# reset, pings resume. `rdma link delete rxe0` under a ping: ib0 goes cleanly and comes back
# with the device.
#
# Like every two-host program, it starts with both hosts meeting over eth0 on a port of its
# own (a peer that does not come fails the program) and ends with both hosts done in time (a
# rendezvous whose timeout fails the last check).
. "$(dirname "$0")/lib.sh"

BW_PORT=18515
DATA_PORT=5002

ktap_print_header
if [ -z "${IPOIB_ROLE:-}" ] || [ -z "${IPOIB_LOCAL_IP:-}" ] || [ -z "${IPOIB_PEER_IP:-}" ]; then
	ktap_skip_all "needs a second host: set IPOIB_ROLE, IPOIB_LOCAL_IP and IPOIB_PEER_IP"
	exit "$KSFT_SKIP"
fi
ktap_set_plan $([ "$IPOIB_ROLE" = server ] && echo 19 || echo 21)
role=$IPOIB_ROLE peer=$IPOIB_PEER_IP
klog_mark
start_mark=$KLOG_MARK

ipoib_check "$role: rxe0 on eth0 ($IPOIB_LOCAL_IP) ACTIVE" two_hosts_topology
two_hosts_meet
ipoib_check "$role: peer $peer answers ping" wait_for 60 ping -c 1 -W 1 "$peer"
gidx=$(gid_index rxe0 "$IPOIB_LOCAL_IP")

# Raw RC send bandwidth between the hosts: the baseline IPoIB is judged against.
rc_bandwidth() {
	local args=(-d rxe0 -x "$gidx" -c RC -s 65536 -n 200 -p "$BW_PORT" -F)
	if [ "$role" = server ]; then
		timeout 120 ib_send_bw "${args[@]}" >/tmp/bw.log 2>&1
	else
		wait_for 60 eval 'timeout 120 ib_send_bw "${args[@]}" "$peer" >/tmp/bw.log 2>&1'
	fi
	local rc=$?
	grep -A1 '#bytes' /tmp/bw.log | sed 's/^/  /'
	[ $rc = 0 ] || cat /tmp/bw.log
	return $rc
}
ipoib_check "$role: ib_send_bw RC 64 KiB x 200 between the hosts" rc_bandwidth

klog_mark
ipoib_check "$role: modprobe $MODULE" modprobe "$MODULE"
ipoib_check "$role: rxe0 port 1 logged with link, MTU and GID 0" port_logged "$(klog_since)" rxe0 1

# IPoIB over the fabric: ib0 on each host, .1 on the server, .2 on the client.
case "$role" in
server) ib_local=198.51.100.1 ib_peer=198.51.100.2 ;;
*) ib_local=198.51.100.2 ib_peer=198.51.100.1 ;;
esac
ib_attrs() {
	local addr gid
	gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/0 | tr -d :)
	addr=$(cat /sys/class/net/ib0/address | tr -d :)
	ip -d link show ib0
	[ "$(cat /sys/class/net/ib0/type)" = 32 ] && [ "${addr:8}" = "$gid" ] &&
		[ "$(cat /sys/class/net/ib0/broadcast)" = \
			"00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff" ] &&
		[ "$(cat /sys/class/net/ib0/mtu)" = 1020 ]
}
ipoib_check "$role: ib0 is InfiniBand (type 32) with QPN+GID address, broadcast, MTU 1020" ib_attrs
# The mode file: connected by default (the port offers it), P_Key read-only; this test runs
# datagram mode, two_hosts_cm.sh connected mode.
mode_file() {
	local m=/sys/class/net/ib0/mode
	echo "mode $(cat $m), pkey $(cat /sys/class/net/ib0/pkey)"
	[ "$(cat $m)" = connected ] && [ "$(cat /sys/class/net/ib0/pkey)" = 0xffff ] &&
		! echo bogus >$m 2>/dev/null && ! echo 1 >/sys/class/net/ib0/pkey 2>/dev/null &&
		echo datagram >$m && [ "$(cat $m)" = datagram ] &&
		[ "$(cat /sys/class/net/ib0/mtu)" = 1020 ]
}
ipoib_check "$role: mode connected by default, switched to datagram; bad modes refused" mode_file
ib_up() {
	ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP'
}
ipoib_check "$role: ib0 up with carrier" ib_up
ipoib_check "$role: ping $ib_peer over ib0 (ARP by broadcast, unicast replies)" \
	wait_for 60 ping -c 1 -W 1 "$ib_peer"
# As C: up to the port's largest MTU (rxe's 4096) less 4 is accepted in datagram mode, the
# interface running at what the broadcast group carries (1020 at Ethernet MTU 1500).
mtu_rules() {
	! ip link set ib0 mtu 4093 2>/dev/null && ! ip link set ib0 mtu 67 2>/dev/null &&
		! ifconfig ib0 mtu 65520 2>/dev/null &&
		ip link set ib0 mtu 576 && [ "$(cat /sys/class/net/ib0/mtu)" = 576 ] &&
		ip link set ib0 mtu 4092 && [ "$(cat /sys/class/net/ib0/mtu)" = 1020 ] &&
		ip link set ib0 mtu 1020 && [ "$(cat /sys/class/net/ib0/mtu)" = 1020 ]
}
desc="$role: datagram MTU above 4092 (4093, 65520) or below 68 refused, 576 taken, 4092 run at 1020"
ipoib_check "$desc" mtu_rules
# 992 bytes of ICMP payload fill the 1020-byte MTU exactly; 3000 need IPv4 fragments.
ipoib_check "$role: full-MTU and fragmented pings over ib0" \
	eval 'ping -c 2 -W 2 -s 992 "$ib_peer" && ping -c 2 -W 2 -s 3000 "$ib_peer"'

# Throughput and latency over ib0, with TCP over the Ethernet link under it for comparison.
# The figures are printed; nothing here judges their size.
if [ "$role" = server ]; then
	serve
	ipoib_check "$role: the client's netperf and iperf3 served over ib0 (over 1 MiB received)" \
		served $((1 << 20))
else
	ipoib_check "$role: netperf TCP_STREAM and TCP_RR over ib0" eval '
		wait_for 30 eval "netperf -H $ib_peer -t TCP_RR -l 1 >/dev/null 2>&1" &&
		netperf_run "$ib_peer" TCP_STREAM "-m 16384" "ib0 (datagram) TCP_STREAM" &&
		netperf_run "$ib_peer" TCP_RR "" "ib0 (datagram) TCP_RR"'
	ipoib_check "$role: netperf TCP_STREAM over eth0 (baseline)" \
		netperf_run "$peer" TCP_STREAM "-m 16384" "eth0 TCP_STREAM"
	# UDP at a modest rate: every datagram arrives (900 bytes fit the 1020-byte MTU).
	udp_no_loss() {
		local out
		out=$(wait_for 30 eval "iperf3 -c $ib_peer -u -b 1M -l 900 -t 5 2>&1") ||
			{ echo "$out"; return 1; }
		echo "$out" | tail -n 4
		echo "$out" | grep -Eq ' 0/[1-9][0-9]* \(0%\) +receiver'
	}
	ipoib_check "$role: iperf3 -u at 1 Mbit/s over ib0 loses no datagram" udp_no_loss
	runs_done
fi
# Checked bulk transfers: with scatter-gather on, TCP hands over pages that are sent in
# place; off, linear packets.
bulk_over_ib0() {
	{ [ "$1" = on ] || ethtool -K ib0 sg off; } && sg_is ib0 "$1" ||
		{ ethtool -k ib0; return 1; }
	if [ "$role" = server ]; then
		bulk_receive "$DATA_PORT"
	else
		bulk_send "$ib_peer" "$DATA_PORT" 8
	fi
}
# debugfs: the peer, reached over UD, is a complete path; its GID printed as the C driver
# prints GIDs (groups of hex digits without leading zeros).
path_listed() {
	local lladdr b gid="" i
	lladdr=$(ip neigh show dev ib0 "$ib_peer" | sed -n 's/.*lladdr \([0-9a-f:]*\).*/\1/p')
	IFS=: read -ra b <<<"$lladdr"
	[ "${#b[@]}" = 20 ] || { ip neigh show dev ib0; return 1; }
	for ((i = 4; i < 20; i += 2)); do
		gid+=$(printf '%x' $((16#${b[i]}${b[i + 1]})))
		[ $i -lt 18 ] && gid+=:
	done
	cat /sys/kernel/debug/ipoib/ib0_path
	grep -A1 -x "GID: $gid" /sys/kernel/debug/ipoib/ib0_path | grep -Eq "^  complete: +yes$"
}
ipoib_check "$role: debugfs ipoib/ib0_path lists the peer ($ib_peer) as a complete path" path_listed
ipoib_check "$role: 8 MiB over ib0 intact (sha256), scatter-gather on" bulk_over_ib0 on
ipoib_check "$role: 8 MiB over ib0 intact (sha256), scatter-gather off" bulk_over_ib0 off
ethtool -K ib0 sg on
ip -s link show ib0
# Datagram mode sends unicast over the UD QP: no RC queue pair of the module exists.
ipoib_check "$role: datagram mode made no RC connection" no_rc_qps

# The client's Ethernet link flaps: ib0's carrier follows the port down and up, and pings
# resume. Then its rxe device goes away under a ping: ib0 goes with it, cleanly, and comes
# back when the device is added again.
if [ "$role" = client ]; then
	link_flap() {
		ip link set eth0 down && wait_for 10 eval '! ip link show ib0 | grep -q LOWER_UP' ||
			{ ip link show ib0; return 1; }
		echo "eth0 down: ib0 lost its carrier"
		ip link set eth0 up && wait_for 30 eval 'ip link show ib0 | grep -q LOWER_UP' ||
			{ ip link show ib0; return 1; }
		echo "eth0 up: ib0 has its carrier back"
		# rxe fails the UD queue pair when a send finds the port down; it is reset.
		wait_for 60 ping -c 1 -W 1 "$ib_peer" &&
			echo "qp_recoveries $(ethtool_stat ib0 qp_recoveries)" &&
			return 0
		ip -s link show ib0
		ip neigh show dev ib0
		rdma res show qp type UD
		klog_since | tail -n 8
		return 1
	}
	ipoib_check "$role: eth0 down and up: ib0 carrier follows, ping resumes" link_flap
	device_removed() {
		local pid
		ping -i 0.2 "$ib_peer" >/dev/null 2>&1 &
		pid=$!
		sleep 1
		rdma link delete rxe0 && wait_for 10 eval '[ ! -e /sys/class/net/ib0 ]'
		local gone=$?
		kill "$pid"
		wait "$pid" 2>/dev/null
		[ "$gone" = 0 ] || return 1
		echo "rdma link delete rxe0 under a ping: ib0 gone"
		rxe_add rxe0 eth0 && wait_for 10 eval '[ -e /sys/class/net/ib0 ]' &&
			echo datagram >/sys/class/net/ib0/mode && ib_up || return 1
		echo "rxe0 added again: ib0 back"
		wait_for 60 ping -c 1 -W 1 "$ib_peer"
	}
	ipoib_check "$role: rxe0 deleted under a ping: ib0 removed cleanly, back with the device" \
		device_removed
else
	ipoib_skip "$role: eth0 down and up: ib0 carrier follows, ping resumes" \
		"the client flaps its link"
	ipoib_skip "$role: rxe0 deleted under a ping: ib0 removed cleanly, back with the device" \
		"the client removes its device"
fi

together=0
finish_together 180 || { ktap_print_msg "peer did not finish in time"; together=1; }
[ "$role" = server ] && kill $(pidof netserver) $(pidof iperf3) 2>/dev/null
rmmod "$MODULE"
KLOG_MARK=$start_mark
ipoib_check "$role: both hosts done in time; unloaded, kernel log clean" \
	eval '[ "$together" = 0 ] && ! module_loaded && klog_clean_since'
ktap_finished
