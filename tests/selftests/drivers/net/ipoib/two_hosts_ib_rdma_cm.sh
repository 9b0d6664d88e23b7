#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rdma_cm listeners on the address of a bond of IPoIB interfaces, on the InfiniBand fabric
# (rxe_ib on eth0 of both hosts, opensm on the server), with the C ipoib as the control: in
# the first round the server runs C and the client ours, in the second the other way round.
# Run on both hosts with IPOIB_ROLE, IPOIB_LOCAL_IP and IPOIB_PEER_IP set.
#
# The RDMA CM asks the driver which net_device a connection request is for
# (get_net_dev_by_params) and checks it against the route back to the requester: the driver
# must name the bond, not the interface enslaved to it. On the server, `rping -s` listens on
# the address of an active-backup bond over ib0, then on the address of a bond over ib0.1,
# a child in ib0's own partition (two interfaces then match the request, and the address
# tells them apart: it is on a device above the child); the client's `rping -c` connects
# and exchanges data. Unload, clean log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
ktap_set_plan 8
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT

[ "$role" = server ] && opensm_start
wait_for 90 ib_port_is ACTIVE || ktap_exit_fail_msg "$role: port not ACTIVE under opensm"

# A second subnet, on the bond over the child (server) and on ib0 (client).
CHILD_NET=198.51.104
carrier() { ip link show "$1" | grep -q LOWER_UP; }
# bond_over SLAVE ADDRESS: an active-backup bond cmbond over SLAVE, holding ADDRESS/24.
bond_over() {
	ip link add cmbond type bond mode active-backup miimon 100 fail_over_mac active &&
		ip link set cmbond mtu "$(cat "/sys/class/net/$1/mtu")" &&
		ip link set "$1" down && ip link set "$1" master cmbond &&
		ip addr add "$2/24" dev cmbond && ip link set cmbond up || return 1
	wait_for 30 eval "[ \"\$(cat /sys/class/net/cmbond/bonding/active_slave)\" = $1 ]" &&
		wait_for 60 carrier cmbond
}
# listens ADDRESS PORT: (server) an rping server on ADDRESS, over a bond made beforehand;
# the hosts meet on PORT; it must serve the client's connection.
listens() {
	timeout 60 rping -s -a "$1" -C 3 -v >/tmp/rping.out 2>&1 &
	local pid=$!
	both_at "$2" || return 1
	wait "$pid"
	cat /tmp/rping.out
	grep -q "ping data" /tmp/rping.out
}
# connects ADDRESS PORT: (client) once the hosts meet on PORT, rping to ADDRESS.
connects() {
	both_at "$2" || return 1
	wait_for 30 ping -c 1 -W 1 "$1" >/dev/null || { echo "$1 does not answer pings"; return 1; }
	sleep 2
	rping_client "$1"
}

round() {
	local drv=$1 n=$2 base=$((7910 + $2 * 20))
	local who="$role ($drv)"
	klog_mark
	up() {
		load_driver "$drv" && echo datagram >/sys/class/net/ib0/mode || return 1
		if [ "$role" = client ]; then
			ip addr add "$ib_local/24" dev ib0 &&
				ip addr add "$CHILD_NET.2/24" dev ib0 || return 1
		fi
		ip link set ib0 up && wait_for 60 carrier ib0
	}
	ipoib_check "$who: ib0 up in datagram mode, carrier" up
	if [ "$role" = server ]; then
		on_ib0() { bond_over ib0 "$ib_local" && listens "$ib_local" $((base + 1)); }
		ipoib_check \
			"$who: an rping server on a bond over ib0 ($ib_local) served a connection" \
			on_ib0
		both_at $((base + 2))
		ip link del cmbond
		on_child() {
			ip link set ib0 up && ip addr add "$ib_local/24" dev ib0 &&
				ip link add link ib0 name ib0.1 type ipoib || return 1
			bond_over ib0.1 "$CHILD_NET.1" && listens "$CHILD_NET.1" $((base + 3))
		}
		local desc="$who: an rping server on a bond over ib0.1,"
		desc+=" a child in ib0's partition ($CHILD_NET.1), served a connection"
		ipoib_check "$desc" on_child
		both_at $((base + 4))
		ip link del cmbond
		ip link del ib0.1
	else
		local desc="$who: rping to the address of a bond over the server's ib0"
		desc+=" ($ib_peer) connects and exchanges data"
		ipoib_check "$desc" connects "$ib_peer" $((base + 1))
		both_at $((base + 2))
		local desc="$who: rping to the address of a bond over a child of the server's ib0"
		desc+=" ($CHILD_NET.1) connects and exchanges data"
		ipoib_check "$desc" connects "$CHILD_NET.1" $((base + 3))
		both_at $((base + 4))
	fi
	both_at $((base + 5))
	done_ok() {
		ip link set ib0 down && rmmod "$MODULE" && ! test -d /sys/class/net/ib0 &&
			klog_clean_since
	}
	ipoib_check "$who: driver unloaded, kernel log clean" done_ok
}

ib_rounds 7999
ktap_finished
