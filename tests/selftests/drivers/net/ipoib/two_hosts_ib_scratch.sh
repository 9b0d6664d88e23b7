#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# scratch
. "$(dirname "$0")/lib.sh"
ktap_print_header
two_hosts_roles
ktap_set_plan 1
trap 'opensm_stop' EXIT
klog_mark
ib_fabric_topology
both_at 7101
[ "$role" = server ] && opensm_start
wait_for 90 ib_port_is ACTIVE
if [ "$role" = server ]; then insmod "$C_IPOIB"; else modprobe ib_ipoib; fi
wait_for 10 test -d /sys/class/net/ib0
echo connected >/sys/class/net/ib0/mode; ifconfig ib0 mtu 65520
ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up
wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP'
both_at 7102
wait_for 60 ping -c 1 -W 1 "$ib_peer"
ping -c 2 -W 5 -s 60000 "$ib_peer"
./ib_capture eth0 5 & cp=$!
sleep 1
both_at 7103
ping -c 1 -W 2 "$ib_peer"
wait $cp
both_at 7104
[ "$role" = server ] && echo datagram >/sys/class/net/ib0/mode
both_at 7105
if [ "$role" = client ]; then
	cat /sys/kernel/debug/ipoib/ib0_cm
	./ib_capture eth0 12 > /tmp/cap 2>&1 & cp=$!
	sleep 1
	ping -c 4 -W 2 -s 3000 "$ib_peer"
	ping -c 2 -W 2 -s 500 "$ib_peer"
	wait $cp; cat /tmp/cap
	cat /sys/kernel/debug/ipoib/ib0_cm
	ethtool -S ib0
	ip -s link show ib0
fi
both_at 7106
[ "$role" = server ] && { ethtool -S ib0; ip -s link show ib0; cat /sys/kernel/debug/ipoib/ib0_path; }
ipoib_check "$role: done" true
klog_since | grep -i ipoib | tail -30
ktap_finished
