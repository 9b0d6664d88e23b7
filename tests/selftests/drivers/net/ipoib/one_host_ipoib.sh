#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Datagram-mode IPoIB on one host: the interface of rxe1 moves into a network namespace, the
# one of rxe0 stays; they reach each other over soft-RoCE (ARP through the broadcast group,
# unicast back), and the module unloads with an interface in the other namespace.
. "$(dirname "$0")/lib.sh"

NS=ipoibpeer

ktap_print_header
if ! modinfo "$MODULE" >/dev/null 2>&1; then
	ktap_skip_all "module $MODULE not installed"
	exit "$KSFT_SKIP"
fi
one_host_topology || ktap_exit_fail_msg "soft-RoCE topology did not come up"
module_loaded && rmmod "$MODULE"
ktap_set_plan 5
klog_mark
start_mark=$KLOG_MARK

ipoib_check "modprobe $MODULE" modprobe "$MODULE"
# The interface names the module logged for each device.
if_of() { klog_since | sed -n "s/.*$MODULE: $1 port 1: \(ib[0-9]*\) address.*/\1/p" | tail -n 1; }
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
netns_setup() {
	[ -n "$ib_a" ] && [ -n "$ib_b" ] || { echo "interfaces not found: '$ib_a' '$ib_b'"; return 1; }
	ip netns add "$NS" && ip link set "$ib_b" netns "$NS" &&
		ip -n "$NS" link set lo up &&
		ip -n "$NS" addr add 198.51.100.2/24 dev "$ib_b" && ip -n "$NS" link set "$ib_b" up &&
		ip addr add 198.51.100.1/24 dev "$ib_a" && ip link set "$ib_a" up
}
ipoib_check "$ib_b (rxe1) moved into namespace $NS, both interfaces up" netns_setup
ipoib_check "ping $ib_a -> $ib_b across namespaces" wait_for 30 ping -c 1 -W 1 198.51.100.2
ipoib_check "ping back $ib_b -> $ib_a" ip netns exec "$NS" ping -c 2 -W 2 198.51.100.1
unload() {
	rmmod "$MODULE" && ! module_loaded && ! ip -n "$NS" link show "$ib_b" 2>/dev/null
}
KLOG_MARK=$start_mark
ipoib_check "rmmod with an interface in another namespace, kernel log clean" \
	eval 'unload && klog_clean_since'
ip netns del "$NS" 2>/dev/null
ktap_finished
