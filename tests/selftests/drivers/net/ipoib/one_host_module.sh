#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# ib_ipoib loads, takes on every soft-RoCE port, follows devices added and removed later,
# unloads cleanly, and survives repeated load/unload cycles.
#
# `modprobe ib_ipoib` logs every port with its real link layer, state, MTU and GID; devices
# added and removed while it is loaded are taken on and let go; port down/up and
# address-change events arrive; rmmod; 20 load/unload cycles; a clean kernel log.
. "$(dirname "$0")/lib.sh"

CYCLES=20

ktap_print_header
ktap_set_plan 10

if ! modinfo "$MODULE" >/dev/null 2>&1; then
	ktap_skip_all "module $MODULE not installed"
	exit "$KSFT_SKIP"
fi
if ! one_host_topology; then
	ktap_exit_fail_msg "soft-RoCE topology did not come up"
fi
module_loaded && rmmod "$MODULE"

klog_mark
start_mark=$KLOG_MARK
ipoib_check "modprobe $MODULE" modprobe "$MODULE"
log=$(klog_since)
every_port_logged() {
	local n=0 dev port
	while read -r dev port; do
		port_logged "$log" "$dev" "$port" ||
			{ echo "no add line for $dev port $port"; return 1; }
		n=$((n + 1))
	done < <(all_ports)
	[ "$n" -ge 2 ]
}
ipoib_check "every rxe port logged with link, MTU and GID 0" every_port_logged

# A device added and removed while the module is loaded.
hotplug() {
	ip link add ipoibdummy0 type dummy && ip link set ipoibdummy0 up || return 1
	klog_mark
	rxe_add rxe9 ipoibdummy0 || return 1
	port_logged "$(klog_since)" rxe9 1 || { echo "rxe9 not taken on"; return 1; }
	klog_mark
	rdma link delete rxe9 || return 1
	port_removed_logged "$(klog_since)" rxe9 1 || { echo "rxe9 not let go"; return 1; }
	ip link del ipoibdummy0
}
ipoib_check "device added and removed while loaded" hotplug

# Port and address events of the devices reach the module.
port_events() {
	klog_mark
	ip link set veth1 down || return 1
	wait_for 5 eval 'klog_since | grep -q "$MODULE: rxe1 port 1: port down"' ||
		{ echo "no port down event"; return 1; }
	ip link set veth1 up || return 1
	wait_for 10 eval 'klog_since | grep -q "$MODULE: rxe1 port 1: port active"' ||
		{ echo "no port active event"; return 1; }
	ip addr add 192.0.2.12/24 dev veth1 || return 1
	wait_for 5 eval 'klog_since | grep -q "$MODULE: rxe1 port 1: GID table changed"' ||
		{ echo "no GID change event"; return 1; }
	ip addr del 192.0.2.12/24 dev veth1
	wait_for 10 port_active rxe1 1
}
ipoib_check "port down, port up and address change events logged" port_events

klog_mark
ipoib_check "rmmod $MODULE" rmmod "$MODULE"
log=$(klog_since)
every_port_removed() {
	local n=0 dev port
	while read -r dev port; do
		port_removed_logged "$log" "$dev" "$port" ||
			{ echo "no remove line for $dev port $port"; return 1; }
		n=$((n + 1))
	done < <(all_ports)
	[ "$n" -ge 2 ] && ! module_loaded
}
ipoib_check "every port let go and module gone" every_port_removed

klog_mark
cycles() {
	local i
	for i in $(seq "$CYCLES"); do
		modprobe "$MODULE" || { echo "load $i failed"; return 1; }
		rmmod "$MODULE" || { echo "unload $i failed"; return 1; }
	done
	[ "$(klog_since | grep -c "$MODULE: loaded")" -eq "$CYCLES" ]
}
ipoib_check "$CYCLES load/unload cycles" cycles

# Queue sizes out of range refuse the load with one line naming the parameter (C clamps
# them silently); the largest allowed ones work.
bad_sizes() {
	local arg
	for arg in send_queue_size=8193 recv_queue_size=15; do
		klog_mark
		modprobe "$MODULE" "$arg" 2>/dev/null &&
			{ echo "loaded with $arg"; rmmod "$MODULE"; return 1; }
		module_loaded && return 1
		klog_since | grep "$MODULE: $arg is out of range (16..8192)" ||
			{ echo "no line for $arg"; return 1; }
	done
}
ipoib_check "modprobe with send_queue_size=8193 or recv_queue_size=15 refused, logged" bad_sizes
big_sizes() {
	local ib_a ib_b
	klog_mark
	# Datagram mode only: 8192 shared receive buffers of 64 KiB would take 512 MiB.
	modprobe "$MODULE" send_queue_size=8192 recv_queue_size=8192 cm_enabled=0 || return 1
	ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
	[ -n "$ib_a" ] && [ -n "$ib_b" ] || { echo "no interfaces"; rmmod "$MODULE"; return 1; }
	# The transmit queue is twice the send queue, as C sets it.
	ip link show "$ib_a" | grep -q "qlen 16384" ||
		{ ip link show "$ib_a"; rmmod "$MODULE"; return 1; }
	rmmod "$MODULE"
}
desc="modprobe with both queue sizes at 8192 (datagram only):"
desc+=" interfaces made (qlen 16384), unloaded"
ipoib_check "$desc" big_sizes
KLOG_MARK=$start_mark
ipoib_check "kernel log clean throughout" klog_clean_since
ktap_finished
