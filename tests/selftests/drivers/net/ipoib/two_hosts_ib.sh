#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Two hosts as an InfiniBand fabric (docs/rxe_ib.md): rxe_ib on eth0 of each (an InfiniBand
# port whose packets cross the Ethernet link), opensm on the server as SM and SA, and the
# upstream C ipoib on both as the control. Run on both hosts with IPOIB_ROLE, IPOIB_LOCAL_IP
# and IPOIB_PEER_IP set.
#
# The port: it trains to INIT and stays there with LID 0 without an SM; the local SMA
# answers `smpquery -D nodeinfo 0` (a CA, one port, PartitionCap 64, node and port GUID as
# sysfs has them, apart), and an SMP for an attribute a CA lacks (SwitchInfo) gets an error
# status back at once. opensm on the server brings both ports ACTIVE with LIDs and the SM
# LID; sminfo names the master; ibnetdiscover finds two CAs and no switch; saquery gives the
# fabric's four path records, the IPoIB broadcast groups of 0xffff and 0x8001 and the P_Key
# table records; 0x8001 is in both ports' P_Key tables. Seven malformed frames (ib_frame:
# short, link version 1, raw next header, length beyond the frame, wrong ICRC, another LID,
# a multicast LID without GRH) are dropped and counted exactly in ib_rcv_dropped.
#
# The C ipoib on both: carrier once joined to the SA's broadcast group, MTU 1020, ARP (the
# peer's hardware address carries its port GID) and pings, full-MTU and fragmented pings;
# connected mode at MTU 65520, IPv6 neighbour discovery and pings, 60000-byte pings
# unfragmented, netperf TCP_STREAM with the bytes counted on the receiver; children ib0.8001
# with carrier pinging each other; ib0 linked to the adapter (device in sysfs, bus-info,
# dev_port 0), ib0.8001 to nothing. opensm restarted: CLIENT_REREGISTER on both ports and
# traffic resumes through a new ARP. The client's Ethernet link down and up: PORT_ERR and
# DOWN, then ACTIVE again with PORT_ACTIVE after the SM's sweep while the server's port
# stays ACTIVE, and traffic resumes. The C ipoib unloads and the devices go, with a clean
# kernel log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
ktap_set_plan 28
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT
klog_mark
start_mark=$KLOG_MARK

# --- The port before any SM.
ib_port_layer() {
	echo "link layer $(ib_port link_layer), state $(ib_port state), phys $(ib_port phys_state)"
	[ "$(ib_port link_layer)" = InfiniBand ] && ib_port_is INIT &&
		ib_port phys_state | grep -q LinkUp
}
ipoib_check "$role: $IB_DEV (rxe_ib on eth0) is an InfiniBand port, INIT, link up" \
	eval 'ib_fabric_topology && ib_port_layer'
# The local SMA answers a directed-route NodeInfo with what sysfs says of the node.
node_info() {
	local out node port
	out=$(smpquery -D nodeinfo 0) || { echo "$out"; return 1; }
	echo "$out" | grep -E 'NodeType|NumPorts|PartCap|Guid'
	node=$(echo "$out" | sed -n 's/^Guid:\.*0x//p')
	port=$(echo "$out" | sed -n 's/^PortGuid:\.*0x//p')
	echo "$out" | grep -q '^NodeType:\.*Channel Adapter' &&
		echo "$out" | grep -q '^NumPorts:\.*1$' &&
		echo "$out" | grep -q '^PartCap:\.*64$' &&
		[ "$(hex_of "$node")" = \
			"$(hex_of "$(cat "/sys/class/infiniband/$IB_DEV/node_guid")")" ] &&
		[ "$(hex_of "$port")" = "$(hex_of "$(ib_port_guid)")" ] && [ "$node" != "$port" ]
}
ipoib_check \
	"$role: smpquery -D nodeinfo 0: a CA, one port, 64 P_Keys, port GUID apart from node GUID" \
	node_info
# An attribute a CA does not have: the SMA answers with an error status (not silence).
bad_smp() {
	local out start=$(date +%s)
	out=$(smpquery -D switchinfo 0 2>&1) && { echo "$out"; return 1; }
	echo "$out" | tail -n 2
	[ $(($(date +%s) - start)) -lt 5 ] && ! echo "$out" | grep -qi timeout
}
ipoib_check "$role: an SMP for SwitchInfo gets an error status back at once" bad_smp
stays_init() { sleep 3; ib_port state; ib_port_is INIT && [ "$(ib_lid)" = 0 ]; }
ipoib_check "$role: without an SM the port stays INIT with LID 0" stays_init

# --- opensm on the server brings both ports up.
both_at 7001
[ "$role" = server ] && opensm_start
swept() {
	wait_for 90 ib_port_is ACTIVE && return 0
	ib_port state
	tail -n 20 /tmp/opensm.log 2>/dev/null
	return 1
}
ipoib_check "$role: port ACTIVE after opensm's sweep" swept
lids() {
	echo "lid 0x$(ib_lid), sm_lid $(ib_port sm_lid), lmc $(ib_port lid_mask_count)"
	[ "$(ib_lid)" != 0 ] && [ "$(hex_of "$(ib_port sm_lid)")" != 0 ] &&
		{ [ "$role" != server ] || [ "$(ib_lid)" = "$(hex_of "$(ib_port sm_lid)")" ]; }
}
ipoib_check "$role: LID and SM LID assigned (the server's LID is the SM's)" lids
sm_info() {
	local out
	out=$(sminfo) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "sm lid $((0x$(hex_of "$(ib_port sm_lid)"))) " &&
		echo "$out" | grep -q SMINFO_MASTER
}
ipoib_check "$role: sminfo names the master SM at the SM LID" sm_info
discover() {
	local out
	out=$(ibnetdiscover) || { echo "$out"; return 1; }
	echo "$out" | grep -E '^(Ca|Switch|\[)'
	[ "$(echo "$out" | grep -c '^Ca')" = 2 ] && ! echo "$out" | grep -q '^Switch'
}
ipoib_check "$role: ibnetdiscover finds two CAs and no switch" discover
sa_paths() {
	local out
	out=$(saquery PR) || { echo "$out"; return 1; }
	echo "$out" | grep -E 'dlid|slid' | sort | uniq -c
	# Two ports, each reaching both: four paths.
	[ "$(echo "$out" | grep -c 'dlid\.')" = 4 ] &&
		echo "$out" | grep -q "dlid\.*$((0x$(ib_lid)))\$"
}
ipoib_check \
	"$role: the SA answers the four path records of the fabric, this port's LID among them" \
	sa_paths
sa_groups() {
	local out
	out=$(saquery -g) || { echo "$out"; return 1; }
	echo "$out" | grep -E 'MGID|P_Key|Mtu|Qkey'
	echo "$out" | grep -q 'ff12:401b:ffff::ffff:ffff' &&
		echo "$out" | grep -q 'ff12:401b:8001::ffff:ffff'
}
ipoib_check "$role: the SA holds the IPoIB broadcast groups of 0xffff and 0x8001" sa_groups
pkey_table() {
	local f hit=
	for f in /sys/class/infiniband/$IB_DEV/ports/1/pkeys/*; do
		case "$(cat "$f")" in
		0xffff) echo "pkey ${f##*/}: 0xffff" ;;
		0x8001) echo "pkey ${f##*/}: 0x8001" && hit=1 ;;
		esac
	done
	[ -n "$hit" ] && saquery --smkey 1 PKTR | grep -q 0x8001
}
ipoib_check "$role: the SM wrote 0x8001 into the P_Key table (sysfs and the SA agree)" pkey_table

# --- Malformed frames, while nothing else runs on the fabric: each one dropped and counted.
before=$(rxe_counter ib_rcv_dropped)
both_at 7002
if [ "$role" = client ]; then
	ipoib_check "$role: 7 malformed frames sent to the server's LID" \
		eval 'sent=$(./ib_frame eth0 "$(ib_port sm_lid)") && [ "$sent" = 7 ]'
	tell_peer 7003
else
	wait_peer 7003 120
	frames_counted() {
		local after
		after=$(rxe_counter ib_rcv_dropped)
		echo "ib_rcv_dropped $before -> $after"
		[ $((after - before)) = 7 ]
	}
	ipoib_check "$role: the 7 malformed frames dropped and counted, exactly" \
		wait_for 10 frames_counted
fi

# --- The C ipoib on both hosts, through the SA's broadcast group.
c_ipoib_up() {
	insmod "$C_IPOIB" || return 1
	wait_for 10 test -d /sys/class/net/ib0 || return 1
	echo datagram >/sys/class/net/ib0/mode
	ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP' &&
		cat /sys/class/net/ib0/mtu && [ "$(cat /sys/class/net/ib0/mtu)" = 1020 ]
}
ipoib_check "$role: C ipoib: ib0 up, carrier once joined to the broadcast group, MTU 1020" \
	c_ipoib_up
both_at 7004
arp_ping() {
	ping -c 2 -W 2 "$ib_peer" || return 1
	ip neigh show dev ib0 "$ib_peer"
	# The peer's hardware address carries its port GID.
	ip neigh show dev ib0 "$ib_peer" | grep -q "fe:80:00:00:00:00:00:00:50:54:00:ff:ff"
}
ipoib_check "$role: C ipoib: ARP and ping to $ib_peer" \
	eval 'wait_for 60 ping -c 1 -W 1 "$ib_peer" && arp_ping'
ipoib_check "$role: C ipoib: full-MTU and fragmented pings" \
	eval 'ping -c 2 -W 2 -s 992 "$ib_peer" && ping -c 2 -W 2 -s 3000 "$ib_peer"'

# Connected mode at MTU 65520: 60000-byte pings go unfragmented over an RC connection.
both_at 7005
cm_up() {
	echo connected >/sys/class/net/ib0/mode && ifconfig ib0 mtu 65520 &&
		[ "$(cat /sys/class/net/ib0/mtu)" = 65520 ]
}
ipoib_check "$role: C ipoib: connected mode, ifconfig ib0 mtu 65520" cm_up
both_at 7006
nd_ping() {
	local peer6=2001:db8:1b::${ib_peer##*.}
	ip -6 addr add "2001:db8:1b::${ib_local##*.}/64" dev ib0 nodad || return 1
	wait_for 60 ping -6 -c 1 -W 2 "$peer6" || { ip -6 neigh show dev ib0; return 1; }
	ip -6 neigh show dev ib0 "$peer6"
	ip -6 neigh show dev ib0 "$peer6" | grep -q "fe:80:00:00:00:00:00:00:50:54:00:ff:ff"
}
# IPv6 needs an MTU of 1280 at least: connected mode has it, a 1024-byte IB MTU does not.
ipoib_check "$role: C ipoib: IPv6 neighbour discovery and ping in connected mode" nd_ping
# fabric_state: what the port and its queue pairs went through, for a failure's log.
fabric_state() {
	rdma statistic show link "$IB_DEV/1"
	rdma res show qp type RC
	grep -H . /sys/class/net/ib0/statistics/*_errors /sys/class/net/ib0/statistics/*_dropped
}
big_pings() {
	local before after
	wait_for 30 ping -c 1 -W 2 -s 60000 "$ib_peer" || { fabric_state; return 1; }
	before=$(frag_creates)
	ping -c 3 -W 5 -s 60000 "$ib_peer" || { fabric_state; return 1; }
	after=$(frag_creates)
	echo "IPv4 fragments made: $before -> $after"
	[ "$before" = "$after" ]
}
ipoib_check "$role: C ipoib: 60000-byte pings unfragmented in connected mode" big_pings
if [ "$role" = server ]; then
	netserver </dev/null >/dev/null 2>&1 3>&- 4>&-
	rx_before=$(cat /sys/class/net/ib0/statistics/rx_bytes)
	both_at 7007
	both_at 7008 300
	rx_moved() {
		local rx
		rx=$(cat /sys/class/net/ib0/statistics/rx_bytes)
		echo "ib0 rx_bytes $rx_before -> $rx"
		[ $((rx - rx_before)) -gt $((1 << 20)) ]
	}
	ipoib_check "$role: C ipoib: the client's TCP stream arrived (over 1 MiB received)" rx_moved
else
	both_at 7007
	nonzero_stream() {
		local line
		line=$(netperf_run "$ib_peer" TCP_STREAM "-m 65536" \
			"C ipoib (connected) TCP_STREAM") ||
			{ echo "$line"; return 1; }
		echo "$line"
		echo "$line" | awk '{ exit !($(NF - 1) > 0) }'
	}
	ipoib_check "$role: C ipoib: netperf TCP_STREAM in connected mode moves data" nonzero_stream
	both_at 7008
fi

# A child on the SM's second partition.
child_up() {
	local addr=198.51.101.${ib_local##*.}
	echo 0x8001 >/sys/class/net/ib0/create_child &&
		wait_for 10 test -d /sys/class/net/ib0.8001 &&
		ip addr add "$addr/24" dev ib0.8001 && ip link set ib0.8001 up &&
		wait_for 60 eval 'ip link show ib0.8001 | grep -q LOWER_UP'
}
ipoib_check "$role: C ipoib: child ib0.8001 up with carrier (0x8001's broadcast group)" child_up
desc="$role: C ipoib: ib0 linked to the adapter (sysfs, bus-info, dev_port), ib0.8001 to nothing"
ipoib_check "$desc" adapter_links ib0.8001
both_at 7009
ipoib_check "$role: C ipoib: the children ping each other on 0x8001" \
	wait_for 60 ping -c 1 -W 1 "198.51.101.${ib_peer##*.}"

# --- opensm restarted: every port is told to reregister; the C driver rejoins.
both_at 7010
klog_mark
if [ "$role" = server ]; then
	opensm_stop
	opensm_start
fi
ipoib_check "$role: opensm restarted: CLIENT_REREGISTER raised on the port" \
	wait_for 90 eval 'klog_since | grep -q "$IB_DEV: port event client reregister"'
both_at 7011
ipoib_check "$role: C ipoib: traffic resumes after the reregistration (ARP again)" \
	eval 'ip neigh flush dev ib0; wait_for 60 ping -c 1 -W 1 "$ib_peer"'

# --- The client's Ethernet link lost and back: PORT_ERR, then ACTIVE after a sweep.
both_at 7012
klog_mark
if [ "$role" = client ]; then
	link_bounce() {
		ip link set eth0 down && wait_for 10 ib_port_is DOWN || return 1
		ip link set eth0 up && wait_for 90 ib_port_is ACTIVE &&
			klog_since | grep -q "$IB_DEV: port event port error" &&
			klog_since | grep -q "$IB_DEV: port event port active"
	}
	ipoib_check "$role: eth0 down: port DOWN with PORT_ERR; up: ACTIVE again with PORT_ACTIVE" \
		link_bounce
else
	ipoib_check "$role: this port stays ACTIVE while the peer's link bounces" \
		eval 'sleep 5; wait_for 90 ib_port_is ACTIVE &&' \
			'! klog_since | grep -q "$IB_DEV: port event port error"'
fi
both_at 7013
ipoib_check "$role: C ipoib: traffic resumes after the link came back" \
	eval 'ip neigh flush dev ib0; wait_for 90 ping -c 1 -W 1 "$ib_peer"'

# --- Cleanup: the C driver unloads, the device goes; the console stays clean.
both_at 7014
# shellcheck disable=SC2016 # expanded by eval
ipoib_check "$role: C ipoib unloads, $IB_DEV deleted" \
	eval 'rmmod ib_ipoib && opensm_stop && rdma link del "$IB_DEV" &&' \
		'! test -d "/sys/class/infiniband/$IB_DEV"'
KLOG_MARK=$start_mark
ipoib_check "$role: kernel log clean (the whole program)" klog_clean_since
ktap_finished
