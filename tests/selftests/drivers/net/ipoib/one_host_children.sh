#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Child interfaces (partitions) on one host, as Documentation/infiniband/ipoib.rst describes
# them.
#
# `echo 0x8001 > /sys/class/net/ib0/create_child` makes ib0.8001 (its parent, pkey, `ip -d
# link` details, `ethtool -i`); delete_child removes it. Duplicates, the parent's P_Key, 0,
# 0x8000, 0x10000 and text are refused with EINVAL, ENOTUNIQ or ENODEV. umcast 0 and 1, any
# other number taken as 1 as in C (text refused). A child whose P_Key the port lacks (all
# but 0xffff on rxe) comes up without carrier.
#
# `ip link add link ib0 name ... type ipoib pkey 0x7fff mode connected`, and without a
# P_Key: each with its own address, shown by `ip link` as NAME@ib0 (its iflink is the
# parent's index, as C's ndo_get_iflink gives); `umcast 2` through netlink makes a child
# with umcast on. Refused: a child of a child, of lo, P_Key 0x8000, and a VLAN on ib0 (an
# IPoIB frame has no room for an 802.1Q tag: the interface is `vlan-challenged: on [fixed]`
# in `ethtool -k`, as C's, which bonding reads). `ip link del ib0` leaves the port's own
# interface.
#
# The debugfs files follow a rename of the interface when it comes up (renames happen only
# while down), and back. Children of both interfaces (one made inside a network namespace)
# ping in datagram mode and, at MTU 65520 over a connection, with 60000 bytes unfragmented,
# beside their parents' traffic. debug_level and mcast_debug_level switched at run time log
# connections and joins, and nothing once 0. Children go with rmmod and with their RDMA
# device.
. "$(dirname "$0")/lib.sh"

NS=ipoibkids

one_host_begin 19
klog_mark
start_mark=$KLOG_MARK

ipoib_check "modprobe $MODULE" modprobe "$MODULE"
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
sys() { echo "/sys/class/net/$1/$2"; }
# write FILE VALUE: writes VALUE to FILE, printing the error; fails as the write does.
write() { sh -c "echo '$2' > '$1'" 2>&1; }
# refused FILE VALUE ERRNO-TEXT: the write fails with that error.
refused() {
	local out
	out=$(write "$1" "$2") && { echo "$1 took '$2'"; return 1; }
	echo "$out"
	echo "$out" | grep -q "$3"
}

parent_files() {
	[ -n "$ib_a" ] || { echo "no interface for rxe0"; return 1; }
	[ "$(stat -c %a "$(sys "$ib_a" create_child)")" = 200 ] &&
		[ "$(stat -c %a "$(sys "$ib_a" delete_child)")" = 200 ] &&
		[ ! -e "$(sys "$ib_a" parent)" ] &&
		[ "$(cat "$(sys "$ib_a" pkey)")" = 0xffff ] &&
		[ "$(cat "$(sys "$ib_a" umcast)")" = 0 ] &&
		write "$(sys "$ib_a" umcast)" 1 && [ "$(cat "$(sys "$ib_a" umcast)")" = 1 ] &&
		ip -d link show "$ib_a" | grep -Eq "umcast +0001" &&
		write "$(sys "$ib_a" umcast)" 0 && [ "$(cat "$(sys "$ib_a" umcast)")" = 0 ] &&
		write "$(sys "$ib_a" umcast)" 2 && [ "$(cat "$(sys "$ib_a" umcast)")" = 1 ] &&
		refused "$(sys "$ib_a" umcast)" on "Invalid argument" &&
		write "$(sys "$ib_a" umcast)" 0 && [ "$(cat "$(sys "$ib_a" umcast)")" = 0 ]
}
desc="$ib_a: create_child and delete_child (write-only), pkey 0xffff, umcast 0,"
desc+=" 1 (shown by ip -d), 2 as 1, not text"
ipoib_check "$desc" parent_files

kid=$ib_a.8001
legacy_child() {
	write "$(sys "$ib_a" create_child)" 0x8001 || return 1
	[ "$(cat "$(sys "$kid" parent)")" = "$ib_a" ] &&
		[ "$(cat "$(sys "$kid" pkey)")" = 0x8001 ] &&
		[ ! -e "$(sys "$kid" create_child)" ] &&
		ip -d link show "$kid" | tee /dev/stderr | grep -Eq "ipoib pkey +0x8001 mode" &&
		ethtool -i "$kid" | grep -q "driver: ib_ipoib" &&
		klog_since | grep -q "$kid: child of $ib_a in partition 0x8001"
}
ipoib_check "echo 0x8001 > create_child: $kid with parent, pkey, ip -d details" legacy_child

bad_requests() {
	local f
	f=$(sys "$ib_a" create_child)
	refused "$f" 0x8001 "not unique" && refused "$f" 0xffff "not unique" &&
		refused "$f" 0 "Invalid argument" && refused "$f" 0x8000 "Invalid argument" &&
		refused "$f" 0x10000 "Invalid argument" && refused "$f" pkey "Invalid argument" &&
		refused "$(sys "$ib_a" delete_child)" 0x8002 "No such device"
}
desc="create_child refuses a duplicate, the parent's P_Key, 0, 0x8000, 0x10000, text;"
desc+=" delete_child an unknown P_Key"
ipoib_check "$desc" bad_requests

no_pkey_logged() { klog_since |
	grep -q "$kid: P_Key 0x8001 is not in the port's P_Key table: no carrier"; }
no_partition() {
	ip link set "$kid" up || return 1
	wait_for 10 no_pkey_logged || { echo "no line on the missing P_Key"; return 1; }
	echo "carrier $(cat "$(sys "$kid" carrier)"), operstate $(cat "$(sys "$kid" operstate)")"
	[ "$(cat "$(sys "$kid" carrier)")" = 0 ]
}
ipoib_check "$kid up: P_Key 0x8001 is not in soft-RoCE's table, so no carrier (logged)" no_partition

legacy_delete() {
	write "$(sys "$ib_a" delete_child)" 0x8001 && ! ip link show "$kid" 2>/dev/null &&
		refused "$(sys "$ib_a" delete_child)" 0x8001 "No such device"
}
ipoib_check "echo 0x8001 > delete_child removes it (a second time: ENODEV)" legacy_delete

rtnl_children() {
	ip link add link "$ib_a" name "$ib_a.k1" type ipoib pkey 0x7fff mode connected &&
		ip link add link "$ib_a" name "$ib_a.k2" type ipoib || return 1
	ip -d link show "$ib_a.k1" | tee /dev/stderr |
		grep -Eq "ipoib pkey +0xffff mode +connected" &&
		[ "$(cat "$(sys "$ib_a.k1" parent)")" = "$ib_a" ] &&
		[ "$(cat "$(sys "$ib_a.k2" pkey)")" = 0xffff ] &&
		[ "$(cat "$(sys "$ib_a.k2" address)")" != "$(cat "$(sys "$ib_a.k1" address)")" ] &&
		[ "$(cat "$(sys "$ib_a.k1" address)")" != "$(cat "$(sys "$ib_a" address)")" ] ||
		return 1
	# Each child sends through its parent (ndo_get_iflink: IFLA_LINK, `@parent`); the
	# parent through itself.
	ip link show "$ib_a.k1" | grep -q "^[0-9]*: $ib_a.k1@$ib_a:" &&
		[ "$(cat "$(sys "$ib_a.k1" iflink)")" = "$(cat "$(sys "$ib_a" ifindex)")" ] &&
		[ "$(cat "$(sys "$ib_a" iflink)")" = "$(cat "$(sys "$ib_a" ifindex)")" ]
}
desc="ip link add ... type ipoib pkey 0x7fff mode connected, and without a P_Key:"
desc+=" own addresses, shown as NAME@$ib_a"
ipoib_check "$desc" rtnl_children

rtnl_refusals() {
	local out
	out=$(ip link add link "$ib_a.k1" name "$ib_a.k3" type ipoib 2>&1) && return 1
	echo "child of a child: $out"
	out=$(ip link add link lo name lo.k type ipoib 2>&1) && return 1
	echo "child of lo: $out"
	echo "$out" | grep -q "No such device" || return 1
	out=$(ip link add link "$ib_a" name "$ib_a.k4" type ipoib pkey 0x8000 2>&1) && return 1
	echo "P_Key 0x8000: $out"
	# An IPoIB frame has no room for a VLAN tag: partitions split the link instead. The
	# device says so (ethtool's fixed vlan-challenged, which bonding reads too); 802.1Q
	# also refuses any device that is not Ethernet.
	ethtool -k "$ib_a" | grep "vlan-challenged" &&
		ethtool -k "$ib_a" | grep -q "vlan-challenged: on \[fixed\]" || return 1
	out=$(ip link add link "$ib_a" name "$ib_a.v5" type vlan id 5 2>&1) && return 1
	echo "VLAN: $out"
	echo "$out" | grep -q "VLANs not supported on device" || return 1
	ip link del "$ib_a" && ip link show "$ib_a" >/dev/null &&
		klog_since | grep -q "$ib_a: not deleted"
}
desc="refused: a child of a child, of lo, P_Key 0x8000, a VLAN (vlan-challenged, fixed);"
desc+=" ip link del of the parent leaves it"
ipoib_check "$desc" rtnl_refusals
# umcast through netlink: any value but 0 is on, as in C.
ipoib_check "ip link add ... type ipoib umcast 2: made with umcast on" eval '
	ip link add link "$ib_a" name "$ib_a.k5" type ipoib umcast 2 &&
		ip -d link show "$ib_a.k5" | grep -Eq "umcast +0001" && ip link del "$ib_a.k5"'

ipoib_check "ip link del $ib_a.k2" \
	eval "ip link del $ib_a.k2 && ! ip link show $ib_a.k2 2>/dev/null"
# The debugfs files follow a rename (which the core allows only while the interface is
# down) when the interface comes up, and back.
renamed_files() {
	local d=/sys/kernel/debug/ipoib was_up= named
	ip link show "$ib_b" | grep -q ",UP" && was_up=1
	ip link set "$ib_b" down && ip link set "$ib_b" name ipoibren &&
		ip link set ipoibren up || return 1
	ls "$d" | grep -E "^(ipoibren|$ib_b)_"
	[ -e "$d/ipoibren_mcg" ] && [ -e "$d/ipoibren_path" ] && [ -e "$d/ipoibren_cm" ] &&
		[ ! -e "$d/${ib_b}_mcg" ]
	named=$?
	ip link set ipoibren down && ip link set ipoibren name "$ib_b" &&
		ip link set "$ib_b" up || return 1
	[ -n "$was_up" ] || ip link set "$ib_b" down
	[ "$named" = 0 ] && [ -e "$d/${ib_b}_mcg" ] && [ ! -e "$d/ipoibren_mcg" ]
}
ipoib_check \
	"debugfs files renamed with the interface ($ib_b -> ipoibren -> $ib_b) when it comes up" \
	renamed_files

param() { echo "/sys/module/$MODULE/parameters/$1"; }
debug_params() {
	local p
	for p in debug_level mcast_debug_level data_debug_level cm_data_debug_level; do
		[ "$(stat -c %a "$(param $p)")" = 644 ] && [ "$(cat "$(param $p)")" = 0 ] &&
			refused "$(param $p)" verbose "Invalid argument" && write "$(param $p)" 1 &&
			[ "$(cat "$(param $p)")" = 1 ] || return 1
	done
}
desc="debug_level, mcast_debug_level, data_debug_level, cm_data_debug_level: 0644,"
desc+=" 0 by default, set to 1 (text refused)"
ipoib_check "$desc" debug_params

# Traffic between a child of each interface, the second one in another namespace.
kid_a=$ib_a.k1 kid_b=$ib_b.k1
kids_up() {
	[ -n "$ib_b" ] || { echo "no interface for rxe1"; return 1; }
	ip netns add "$NS" && ip link set "$ib_b" netns "$NS" && ip -n "$NS" link set lo up &&
		ip -n "$NS" link add link "$ib_b" name "$kid_b" type ipoib pkey 0xffff || return 1
	ip -n "$NS" addr add 203.0.113.2/24 dev "$kid_b" && ip -n "$NS" link set "$kid_b" up &&
		ip addr add 203.0.113.1/24 dev "$kid_a" && ip link set "$kid_a" up &&
		[ "$(cat "$(sys "$kid_a" carrier)")" = 1 ]
}
ipoib_check "$kid_a and $kid_b (in namespace $NS, made there) up, carrier on" kids_up

datagram_ping() {
	echo datagram >"$(sys "$kid_a" mode)" &&
		ip netns exec "$NS" sh -c "echo datagram >/sys/class/net/$kid_b/mode" &&
		wait_for 30 ping -c 1 -W 1 203.0.113.2 &&
		ip netns exec "$NS" ping -c 2 -W 2 203.0.113.1 || return 1
	# data_debug_level is 1: each datagram and completion logged, under the child's name.
	klog_since | grep -E "$kid_a: (sending datagram|send completion|receive completion)" |
		tail -n 3
	local rx="ib_ipoib: $kid_a: receive completion, [0-9]* bytes from QPN 0x[0-9a-f]*,"
	rx+=" status Success"
	klog_since | grep -q "^.*ib_ipoib: $kid_a: sending datagram, length [0-9]* to QPN 0x" &&
		klog_since | grep -q "ib_ipoib: $kid_a: send completion, status Success" &&
		klog_since | grep -q "$rx"
}
desc="datagram mode: ping between the children both ways (each datagram"
desc+=" logged under the child's name)"
ipoib_check "$desc" datagram_ping

connected_ping() {
	local before frags rx
	before=$(rc_qp_count) frags=$(frag_creates)
	echo connected >"$(sys "$kid_a" mode)" && ip link set "$kid_a" mtu 65520 &&
		ip netns exec "$NS" sh -c "echo connected >/sys/class/net/$kid_b/mode" &&
		ip -n "$NS" link set "$kid_b" mtu 65520 || return 1
	ping -c 3 -W 2 -s 60000 203.0.113.2 || return 1
	echo "RC queue pairs: $before -> $(rc_qp_count), fragments made:" \
		"$((frags)) -> $(frag_creates)"
	[ "$(rc_qp_count)" -gt "$before" ] && [ "$(frag_creates)" = "$frags" ] &&
		[ "$(ethtool_stat "$kid_a" cm_tx_connections)" = 1 ] &&
		grep -q "tx" "/sys/kernel/debug/ipoib/${kid_a}_cm" || return 1
	# debug_level and mcast_debug_level are 1: the connections and joins were logged, and
	# with cm_data_debug_level each message, all under the children's names.
	klog_since | grep -E "connected to|accepted on QPN|joined multicast group" | head -n 6
	rx="ib_ipoib: $kid_b: connection receive completion, 6[0-9]* bytes, status Success"
	klog_since | grep -q "ib_ipoib: $kid_a: connected to .* (QPN 0x" &&
		klog_since |
			grep -q "ib_ipoib: $kid_b: connection from QPN .* accepted on QPN 0x" &&
		klog_since | grep -q "ib_ipoib: $kid_a: joined multicast group ff12:601b:ffff" &&
		klog_since |
			grep -q "ib_ipoib: $kid_a: sending message, length 6[0-9]* on QPN 0x" &&
		klog_since | grep -q "$rx"
}
ipoib_check "connected mode, MTU 65520: 60000-byte pings unfragmented, over a connection" \
	connected_ping

parent_unharmed() {
	write "$(param debug_level)" 0 && write "$(param mcast_debug_level)" 0 &&
		write "$(param data_debug_level)" 0 &&
		write "$(param cm_data_debug_level)" 0 || return 1
	local mark=$KLOG_MARK
	klog_mark
	ip addr add 198.51.100.1/24 dev "$ib_a" && ip link set "$ib_a" up &&
		ip -n "$NS" addr add 198.51.100.2/24 dev "$ib_b" &&
		ip -n "$NS" link set "$ib_b" up &&
		wait_for 30 ping -c 1 -W 1 198.51.100.2 && ping -c 2 -W 2 203.0.113.2 || return 1
	# A new connection between the parents, not logged now that debug_level is 0; nor
	# their datagrams and messages.
	! klog_since | grep -E "connected to|accepted on QPN|multicast group|completion|sending"
	local quiet=$?
	KLOG_MARK=$mark
	return $quiet
}
ipoib_check \
	"the parents carry their own traffic beside their children's (debug logging off: quiet)" \
	parent_unharmed

unload() {
	write "$(sys "$ib_a" create_child)" 0x0002 &&
		ip link show "$ib_a.0002" >/dev/null || return 1
	rmmod "$MODULE" && ! module_loaded && ! ip link show "$kid_a" 2>/dev/null &&
		! ip link show "$ib_a.0002" 2>/dev/null &&
		! ip -n "$NS" link show "$kid_b" 2>/dev/null
}
ipoib_check "rmmod with three children (one in $NS): all gone" unload
ip netns del "$NS" 2>/dev/null

readd() {
	klog_mark
	modprobe "$MODULE" || return 1
	ib_a=$(if_of rxe0)
	ip link add link "$ib_a" name "$ib_a.k1" type ipoib && ip link set "$ib_a.k1" up || return 1
	rdma link del rxe0 && ! ip link show "$ib_a.k1" 2>/dev/null &&
		! ip link show "$ib_a" 2>/dev/null &&
		rxe_add rxe0 veth0
}
ipoib_check "rdma link del rxe0 with a child up: parent and child gone; rxe0 back" readd

KLOG_MARK=$start_mark
ipoib_check "rmmod, kernel log clean" eval 'rmmod "$MODULE" && klog_clean_since'
ktap_finished
