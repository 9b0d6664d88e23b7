#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Scratch: our driver against the C ipoib on the InfiniBand fabric.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
ktap_set_plan 6
trap 'opensm_stop' EXIT
klog_mark
ib_fabric_topology
both_at 7101
[ "$role" = server ] && opensm_start
ipoib_check "$role: port ACTIVE" wait_for 90 ib_port_is ACTIVE
if [ "$role" = server ]; then
	insmod "$C_IPOIB"
else
	modprobe ib_ipoib
fi
up() {
	wait_for 10 test -d /sys/class/net/ib0 || return 1
	echo datagram >/sys/class/net/ib0/mode
	ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP'
	ip -d link show ib0
	cat /sys/class/net/ib0/mtu
}
ipoib_check "$role: ib0 up with carrier" up
both_at 7102
ipoib_check "$role: ping" eval 'wait_for 60 ping -c 1 -W 1 "$ib_peer" && ping -c 2 -W 2 -s 992 "$ib_peer" && ping -c 2 -W 2 -s 3000 "$ib_peer"'
ip neigh show dev ib0
cat /sys/kernel/debug/ipoib/ib0_path 2>/dev/null
cat /sys/kernel/debug/ipoib/ib0_mcg 2>/dev/null
ethtool -S ib0 | grep -E "fail|drop|err"
both_at 7103
cm_up() {
	echo connected >/sys/class/net/ib0/mode && ifconfig ib0 mtu 65520 &&
		[ "$(cat /sys/class/net/ib0/mtu)" = 65520 ]
}
ipoib_check "$role: connected mode" cm_up
both_at 7104
ipoib_check "$role: big pings" eval 'wait_for 30 ping -c 1 -W 2 -s 60000 "$ib_peer" && ping -c 3 -W 5 -s 60000 "$ib_peer"'
nd_ping() {
	local peer6=2001:db8:1b::${ib_peer##*.}
	ip -6 addr add "2001:db8:1b::${ib_local##*.}/64" dev ib0 nodad || return 1
	wait_for 60 ping -6 -c 1 -W 2 "$peer6" || { ip -6 neigh show dev ib0; return 1; }
}
ipoib_check "$role: ND ping" nd_ping
cat /sys/kernel/debug/ipoib/ib0_path 2>/dev/null
cat /sys/kernel/debug/ipoib/ib0_mcg 2>/dev/null
ethtool -S ib0 | grep -E "fail|drop|err|cm_"
both_at 7105
rmmod ib_ipoib
opensm_stop
ipoib_check "$role: kernel log clean" klog_clean_since
klog_since | grep -i ipoib | tail -n 40
ktap_finished
