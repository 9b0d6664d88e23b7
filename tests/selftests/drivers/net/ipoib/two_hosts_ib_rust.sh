#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Our driver on both hosts of the InfiniBand fabric (rxe_ib on eth0, opensm on the server),
# through what the subnet manager does to it; nothing is reloaded or re-created along the
# way. Run on both hosts with IPOIB_ROLE, IPOIB_LOCAL_IP and IPOIB_PEER_IP set.
#
# Loaded before any SM runs (the port freshly INIT): no carrier, broadcast joins failing and
# counted (mcast_join_failures). opensm started: carrier, MTU 1020; pings. A neighbour whose
# GID has no path: the SA's answer counted in path_failures, its packets dropped. Connected
# mode with 60000-byte pings; IPv6; netperf. A REQ asking RNR retry count 6 from
# rdma_rs_selftest.ko on the client (ipoib_guid_hi/lo: over InfiniBand to the server's port,
# the path from the SA) answered by a REP echoing 6. An rdma_cm listener (rping -s) bound to
# the server's ib0 address accepts rping -c and exchanges data (the RDMA CM finds our
# interface through get_net_dev_by_params).
#
# Children on 0x8001 (carrier) and 0x8002 (not in the SM's partitions: no carrier); ib0
# linked to the adapter as C links it, ib0.8001 to nothing. Then 0x8002 added to opensm's
# partitions with a broadcast group of MTU 512 and opensm told to sweep (SIGHUP): the P_Key
# change event gives ib0.8002 carrier without re-creating it, its MTU becomes 508 (datagram
# mode), and the children on 0x8002 ping. An active-backup bond over the two children
# (client): a group joined on the bond is joined by the active ib0.8001, and once ib0.8002
# is made active the bond's groups (0x8001's P_Key, from its first slave) reach it and it
# joins none of them (none listed, no join asked), as C filters the list. A group user space
# joined through the SA (mckey, the RDMA CM) and that a socket joins on ib0 too is left to
# user space with umcast 1 and joined by the driver with umcast 0.
#
# opensm restarted: client reregister, the broadcast group joined again, traffic resumes.
# opensm restarted with LMC 1 and reassigned LIDs (-r -l 1): this port's LID changes, the
# event is seen, and traffic resumes over paths to the new LIDs. opensm restarted with
# subnet prefix fec0::/64: the port's GID changes and ib0's address (and its children's)
# follows it, and ARP then gives the peer's new address. Unload, clean log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
# The client runs two checks more: a hand-made connection to the server's interface, and a
# bond over its children.
ktap_set_plan $([ "$role" = client ] && echo 24 || echo 22)
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT
klog_mark
start_mark=$KLOG_MARK

stat_of() { ethtool_stat ib0 "$1"; }
carrier() { ip link show "${1:-ib0}" | grep -q LOWER_UP; }

# --- Before any SM: the interface exists, the broadcast join fails (counted), no carrier.
no_sm() {
	ib_fabric_topology || return 1
	# A port an earlier SM brought up stays ACTIVE: the link goes down and up to start over.
	if ! ib_port_is INIT; then
		ip link set eth0 down && wait_for 10 ib_port_is DOWN && ip link set eth0 up &&
			wait_for 30 ib_port_is INIT || return 1
	fi
	modprobe ib_ipoib && wait_for 10 test -d /sys/class/net/ib0 || return 1
	ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up || return 1
	sleep 5
	ip link show ib0
	echo "port $(ib_port state), mcast_join_failures $(stat_of mcast_join_failures)"
	! carrier && [ "$(stat_of mcast_join_failures)" -ge 1 ] && ib_port_is INIT
}
ipoib_check "$role: no SM: ib0 up without carrier, broadcast joins fail and are counted" no_sm

both_at 7201
[ "$role" = server ] && opensm_start
sm_up() {
	wait_for 90 carrier || { ib_port state; return 1; }
	klog_since | grep "joined broadcast group"
	[ "$(cat /sys/class/net/ib0/mtu)" = 1020 ]
}
ipoib_check "$role: opensm started: carrier once the broadcast group is joined, MTU 1020" sm_up
both_at 7202
# shellcheck disable=SC2016 # expanded by eval
ipoib_check "$role: ARP, ping, full-MTU and fragmented pings" \
	eval 'wait_for 60 ping -c 1 -W 1 "$ib_peer" && ping -c 2 -W 2 -s 992 "$ib_peer" &&' \
		'ping -c 2 -W 2 -s 3000 "$ib_peer"'

# --- A destination the SA has no path to: the query fails, its packets are dropped.
path_to_nobody() {
	local before after
	before=$(stat_of path_failures)
	# Without the connected-mode flag: reached over UD, through a path query.
	ip neigh replace 198.51.100.9 dev ib0 nud permanent \
		lladdr 00:00:00:48:fe:80:00:00:00:00:00:00:00:11:22:ff:fe:33:44:55 || return 1
	ping -c 2 -W 2 198.51.100.9 && return 1
	after=$(stat_of path_failures)
	echo "path_failures $before -> $after"
	ip neigh del 198.51.100.9 dev ib0
	[ "$after" -gt "$before" ]
}
ipoib_check \
	"$role: a GID without a path: the SA's answer counted as a path failure, packets dropped" \
	path_to_nobody

# --- Connected mode.
both_at 7203
cm() {
	echo connected >/sys/class/net/ib0/mode && ifconfig ib0 mtu 65520 || return 1
	both_at 7204
	wait_for 30 ping -c 1 -W 2 -s 60000 "$ib_peer" && ping -c 3 -W 5 -s 60000 "$ib_peer" &&
		cat /sys/kernel/debug/ipoib/ib0_cm &&
		grep -q "state Live" /sys/kernel/debug/ipoib/ib0_cm
}
ipoib_check "$role: connected mode at MTU 65520: 60000-byte pings over a connection" cm
nd_ping() {
	local peer6=2001:db8:1b::${ib_peer##*.}
	ip -6 addr add "2001:db8:1b::${ib_local##*.}/64" dev ib0 nodad || return 1
	wait_for 60 ping -6 -c 1 -W 2 "$peer6"
}
ipoib_check "$role: IPv6 neighbour discovery and ping (send-only joins)" nd_ping
both_at 7205
if [ "$role" = server ]; then
	netserver </dev/null >/dev/null 2>&1 3>&- 4>&-
	both_at 7206 300
	ipoib_check "$role: netperf served" eval '[ "$(stat_of rx_bytes)" -gt 1048576 ]'
else
	stream() {
		local line
		line=$(netperf_run "$ib_peer" TCP_STREAM "-m 65536" "ib rust TCP_STREAM") ||
			{ echo "$line"; return 1; }
		echo "$line"
		echo "$line" | awk '{ exit !($(NF - 1) > 0) }'
	}
	ipoib_check "$role: netperf TCP_STREAM in connected mode moves data" stream
	# A REQ asking an RNR retry count no IPoIB peer asks (6), from rdma_rs_selftest on this
	# host's port to the server's interface (its UD QPN and port GUID from the neighbour
	# entry): the REP must echo it, as C's does.
	rnr_echo() {
		local hw results
		hw=$(ip neigh show dev ib0 "$ib_peer" |
			sed -n 's/.* lladdr \([0-9a-f:]*\).*/\1/p' | tr -d :)
		[ ${#hw} = 40 ] || { echo "no neighbour entry for $ib_peer: $hw"; return 1; }
		klog_mark
		modprobe rdma_rs_selftest ipoib_qpn=$((0x${hw:2:6})) \
			ipoib_guid_hi=$((0x${hw:24:8})) ipoib_guid_lo=$((0x${hw:32:8})) || return 1
		rmmod rdma_rs_selftest
		results=$(klog_since | sed -n "s/^.*rdma_rs_selftest: //p")
		echo "$results"
		echo "$results" | grep -q "^ok .* the REP's RNR retry count echoes the REQ's 6" &&
			! echo "$results" | grep -q "^not ok"
	}
	ipoib_check "$role: a REQ asking RNR retry count 6: the server's REP echoes 6" rnr_echo
	both_at 7206 300
fi

# --- An rdma_cm listener on ib0's IPv4 address: the RDMA CM finds our interface.
both_at 7207
if [ "$role" = server ]; then
	timeout 60 rping -s -a "$ib_local" -C 3 -v >/tmp/rping.out 2>&1 &
	rping_pid=$!
	both_at 7208
	ipoib_check "$role: rping server on $ib_local accepted and served a connection" \
		eval 'wait "$rping_pid"; cat /tmp/rping.out; grep -q "ping data" /tmp/rping.out'
else
	both_at 7208
	sleep 2
	ipoib_check \
		"$role: rping to the server's ib0 address ($ib_peer) connects and exchanges data" \
		rping_client "$ib_peer"
fi

# --- umcast: a group user space joined itself through the SA (mckey, the RDMA CM in the
# IPoIB port space) is left to it when a socket joins it on ib0 too; without umcast the
# driver joins it. 239.1.2.3 maps to ff12:401b:ffff::f01:203.
umcast() {
	local group="ff12:401b:ffff:0:0:0:f01:203"
	timeout 60 mckey -m 239.1.2.3 -b "$ib_local" -p 0x2 -C 1000 >/tmp/mckey.out 2>&1 &
	local mk=$!
	# mckey's join made the group at the SA.
	wait_for 20 eval 'saquery -g 2>/dev/null | grep -q "ff12:401b:ffff::f01:203"' ||
		{ echo "mckey did not join"; cat /tmp/mckey.out; return 1; }
	echo 1 >/sys/class/net/ib0/umcast || return 1
	./mcast_udp recv ib0 239.1.2.3 5123 6 1 >/dev/null &
	local rx=$!
	sleep 5
	grep -q "GID: $group\$" /sys/kernel/debug/ipoib/ib0_mcg &&
		{ echo "joined despite umcast"; return 1; }
	wait "$rx"
	echo 0 >/sys/class/net/ib0/umcast || return 1
	./mcast_udp recv ib0 239.1.2.3 5123 6 1 >/dev/null &
	rx=$!
	wait_for 10 grep -q "GID: $group\$" /sys/kernel/debug/ipoib/ib0_mcg
	local joined=$?
	wait "$rx"
	kill "$mk" 2>/dev/null
	wait "$mk"
	cat /tmp/mckey.out
	return $joined
}
ipoib_check "$role: umcast 1: a group user space joined (mckey) is left to it; umcast 0: joined" \
	umcast

# --- Children: 0x8001 is in opensm's partitions; 0x8002 only once the SM adds it.
both_at 7209
children() {
	ip link add link ib0 name ib0.8001 type ipoib pkey 0x8001 &&
		ip link add link ib0 name ib0.8002 type ipoib pkey 0x8002 || return 1
	echo datagram >/sys/class/net/ib0.8002/mode || return 1
	ip addr add "198.51.101.${ib_local##*.}/24" dev ib0.8001 &&
		ip addr add "198.51.102.${ib_local##*.}/24" dev ib0.8002 &&
		ip link set ib0.8001 up && ip link set ib0.8002 up || return 1
	wait_for 60 carrier ib0.8001 && sleep 3 && ! carrier ib0.8002
}
ipoib_check "$role: children: ib0.8001 gets carrier, ib0.8002 (P_Key not in the table) none" \
	children
desc="$role: ib0 linked to the adapter as C links it (sysfs, bus-info,"
desc+=" dev_port), ib0.8001 to nothing"
ipoib_check "$desc" adapter_links ib0.8001
both_at 7210
ipoib_check "$role: the children on 0x8001 ping each other" \
	wait_for 60 ping -c 1 -W 1 "198.51.101.${ib_peer##*.}"
both_at 7211
if [ "$role" = server ]; then
	# With a broadcast group of MTU 512 (code 2), below the port's 1024.
	echo "P8002=0x8002, ipoib, mtu=2 : ALL=full ;" >>"$OPENSM_PARTITIONS"
	kill -HUP $(pidof opensm)
fi
later_pkey() {
	wait_for 90 carrier ib0.8002 ||
		{ cat /sys/class/infiniband/$IB_DEV/ports/1/pkeys/[0-3]; return 1; }
	klog_since | grep "ib0.8002: P_Key 0x8002 now at index" || return 1
	wait_for 10 eval '[ "$(cat /sys/class/net/ib0.8002/mtu)" = 508 ]'
	echo "ib0.8002 MTU $(cat /sys/class/net/ib0.8002/mtu)"
	[ "$(cat /sys/class/net/ib0.8002/mtu)" = 508 ]
}
desc="$role: 0x8002 added by the SM: ib0.8002 gets carrier without being"
desc+=" re-created, MTU 508 from its group"
ipoib_check "$desc" later_pkey
both_at 7212
ipoib_check "$role: the children on 0x8002 ping each other" \
	wait_for 60 ping -c 1 -W 1 "198.51.102.${ib_peer##*.}"

# --- A bond over the two children (partitions 0x8001 and 0x8002), on the client. The
# bond's group addresses carry its first slave's P_Key (it copies that slave's broadcast
# address) and go to whichever slave is active: each slave joins only the groups of its own
# partition (C: ipoib_mcast_addr_is_valid), so ib0.8002 gets 0x8001's addresses and joins
# none of them: none listed in debugfs, and (mcast_debug_level on) no answer of the SA to a
# join of one logged, joined or failed.
if [ "$role" = client ]; then
	mcg_of() { cat "/sys/kernel/debug/ipoib/${1}_mcg" 2>/dev/null; }
	# full_members_of DEV PKEY: the groups of partition PKEY that DEV's ib*_mcg lists as
	# joined or asked for as a full member (the multicast list's; a send-only group is one
	# only sent to, such as the bond's broadcast address, which is its first slave's).
	full_members_of() {
		mcg_of "$1" | awk -v p="$2" '
			/^GID: / { g = ($2 ~ "^ff12:[46]01b:" p ":") ? $2 : ""; next }
			g != "" && /^  send_only: +no$/ { print g }'
	}
	bond_partitions() {
		local group=ff12:401b:8001:0:0:0:f01:203 s pid fails \
			dbg=/sys/module/ib_ipoib/parameters/mcast_debug_level
		# A new bond has Ethernet's MTU, which it sets on its slaves: 0x8002's first. The
		# first slave becomes the active one.
		ip link add ibbond type bond mode active-backup miimon 100 fail_over_mac active &&
			ip link set ibbond mtu 508 || return 1
		for s in ib0.8001 ib0.8002; do
			ip link set "$s" down && ip link set "$s" master ibbond || return 1
		done
		ip addr add 198.51.103.2/24 dev ibbond && ip link set ibbond up || return 1
		wait_for 30 eval \
			'[ "$(cat /sys/class/net/ibbond/bonding/active_slave)" = ib0.8001 ]' ||
			return 1
		./mcast_udp join ibbond 239.1.2.3 1 120 >/tmp/bond-join.out &
		pid=$!
		wait_for 30 eval 'mcg_of ib0.8001 | grep -qx "GID: $group"' || {
			echo "ib0.8001 did not join $group:"
			mcg_of ib0.8001
			kill "$pid"
			return 1
		}
		echo "ib0.8001 (active) joined $group"
		fails=$(stat_of_dev ib0.8002 mcast_join_failures)
		klog_mark
		echo 1 >"$dbg"
		echo ib0.8002 >/sys/class/net/ibbond/bonding/active_slave
		# The list reaches the new active slave: the kernel's copy shows 0x8001's groups.
		wait_for 30 eval 'grep -q " ib0\.8002 .*ff12401b8001" /proc/net/dev_mcast' || {
			echo "the bond's groups did not reach ib0.8002:"
			grep ib0.8002 /proc/net/dev_mcast
			kill "$pid"
			return 1
		}
		grep " ib0\.8002 " /proc/net/dev_mcast
		# ib0.8002 left to act on it: none of 0x8001's groups joined or asked for as a
		# member.
		! wait_for 5 eval '[ -n "$(full_members_of ib0.8002 8001)" ] ||
			klog_since | grep -q "ib0\.8002: join.* ff12:[46]01b:8001:"'
		local joined_none=$?
		echo 0 >"$dbg"
		echo "ib0.8002's groups:"
		mcg_of ib0.8002 | grep "^GID\|send_only"
		echo "ib0.8002's joins:"
		klog_since | grep "ib0\.8002: join"
		echo "ib0.8002 mcast_join_failures $fails ->" \
			"$(stat_of_dev ib0.8002 mcast_join_failures)"
		kill "$pid"
		wait "$pid" 2>/dev/null
		[ "$joined_none" = 0 ]
	}
	stat_of_dev() { ethtool_stat "$1" "$2"; }
	desc="$role: a bond over ib0.8001 and ib0.8002: the active slave joins a group of its"
	desc+=" partition; ib0.8002, made active, joins none of 0x8001's"
	ipoib_check "$desc" bond_partitions
	# The children back as they were (a released slave is left down).
	ip link del ibbond 2>/dev/null
	for s in ib0.8001 ib0.8002; do
		ip link set "$s" up
	done
fi

# --- opensm restarted: every port is told to reregister; ours rejoins and paths resume.
both_at 7213
klog_mark
if [ "$role" = server ]; then
	opensm_stop
	opensm_start
fi
rereg() {
	wait_for 90 eval 'klog_since | grep -q "client reregister requested"' || return 1
	wait_for 60 eval 'klog_since | grep -q "joined broadcast group ff12:401b:ffff:"' &&
		wait_for 60 carrier
}
ipoib_check "$role: opensm restarted: reregistration, the broadcast group joined again, carrier" \
	rereg
both_at 7214
# shellcheck disable=SC2016 # expanded by eval
ipoib_check "$role: traffic resumes without reloading (ARP again, a big ping over a connection)" \
	eval 'ip neigh flush dev ib0; wait_for 60 ping -c 1 -W 1 "$ib_peer" &&' \
		'ping -c 2 -W 5 -s 60000 "$ib_peer"'

# --- opensm restarted with other LIDs (LMC 1 and reassigned): paths follow.
# peer_dlids: the DLIDs of our paths, as debugfs lists them (the peer's, after the pings):
# those of datagrams (ib0_path) and of connections (ib0_cm; in connected mode the client
# may have sent the peer no unicast datagram at all).
peer_dlids() {
	{
		sed -n 's/^  DLID: *0x0*\([0-9a-f]*\)$/\1/p' /sys/kernel/debug/ipoib/ib0_path
		sed -n 's/^tx peer .* dlid 0x0*\([0-9a-f]*\)$/\1/p' /sys/kernel/debug/ipoib/ib0_cm
	} | sort -u
}
old_dlids=$(peer_dlids)
both_at 7215
old_lid=$(ib_lid)
klog_mark
if [ "$role" = server ]; then
	opensm_stop
	opensm_start -r -l 1
fi
new_lids() {
	wait_for 90 eval '[ "$(ib_lid)" != "$old_lid" ]' ||
		{ echo "LID still 0x$old_lid"; return 1; }
	echo "LID 0x$old_lid -> 0x$(ib_lid)"
	wait_for 90 eval 'klog_since | grep -q "LID changed"' && wait_for 60 carrier
}
ipoib_check "$role: opensm with LMC 1: this port's LID changed, the event seen, carrier back" \
	new_lids
both_at 7216
resumed() {
	ip neigh flush dev ib0
	wait_for 60 ping -c 1 -W 1 "$ib_peer" && ping -c 2 -W 5 -s 60000 "$ib_peer" || return 1
	cat /sys/kernel/debug/ipoib/ib0_path /sys/kernel/debug/ipoib/ib0_cm
	# The path now leads to the peer's new LID (the path query is answered anew), not to
	# one it had before (which LIDs opensm gives which port varies: compare, not assume).
	echo "DLIDs before: $(echo $old_dlids), now: $(echo $(peer_dlids))"
	[ -n "$old_dlids" ] && [ -n "$(peer_dlids)" ] &&
		! peer_dlids | grep -qxF "$old_dlids"
}
ipoib_check "$role: traffic resumes over paths to the new LIDs" resumed

# --- opensm restarted with another subnet prefix: the port's GID changes, and with it
# ib0's address (C: the address follows the GID unless set by hand).
both_at 7220
klog_mark
old_addr=$(cat /sys/class/net/ib0/address)
if [ "$role" = server ]; then
	opensm_stop
	echo "subnet_prefix 0xfec0000000000000" >/tmp/opensm-prefix.conf
	opensm_start -F /tmp/opensm-prefix.conf
fi
new_gid() {
	wait_for 90 eval 'ib_port gids/0 | grep -q "^fec0:"' || { ib_port gids/0; return 1; }
	wait_for 30 eval 'grep -q "^80:00:00:..:fe:c0:" /sys/class/net/ib0/address' ||
		{ cat /sys/class/net/ib0/address; return 1; }
	echo "address $old_addr -> $(cat /sys/class/net/ib0/address)"
	klog_since | grep "(the port's GID changed)" && wait_for 60 carrier
}
ipoib_check "$role: opensm with subnet prefix fec0::/64: the GID changes, ib0's address follows" \
	new_gid
both_at 7221
new_neigh() {
	ip neigh flush dev ib0
	wait_for 60 ping -c 1 -W 1 "$ib_peer" || return 1
	ip neigh show dev ib0 "$ib_peer"
	ip neigh show dev ib0 "$ib_peer" | grep -q "fe:c0:00:00:00:00:00:00:50:54:00:ff:ff"
}
ipoib_check "$role: traffic resumes; ARP gives the peer's address with its new GID" new_neigh

both_at 7217
kill $(pidof netserver) 2>/dev/null
ipoib_check "$role: children deleted, driver unloaded" \
	eval 'ip link del ib0.8001 && ip link del ib0.8002 && rmmod ib_ipoib &&' \
		'! test -d /sys/class/net/ib0'
KLOG_MARK=$start_mark
ipoib_check "$role: kernel log clean (the whole program)" klog_clean_since
both_at 7218
opensm_stop
ktap_finished
