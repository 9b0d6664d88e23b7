#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The datagram-mode MTU as the fabric negotiates it, on the InfiniBand fabric (rxe_ib on
# eth0 of both hosts at Ethernet MTU 9000, so that the ports run at IB MTU 4096; opensm on
# the server), with the C ipoib as the control: in the first round the server runs C and the
# client ours, in the second the other way round. Run on both hosts with IPOIB_ROLE,
# IPOIB_LOCAL_IP and IPOIB_PEER_IP set.
#
# - The driver is loaded by `ip link add ... type ipoib` (the module alias rtnl-link-ipoib),
#   ours from the module tree, C's placed there for its round.
#
# - In datagram mode the interface runs at the broadcast group's MTU (the partition's mtu=3:
#   IB MTU 1024, IPoIB MTU 1020); an MTU of 4092 (the port's) is accepted and the interface
#   stays at 1020.
#
# - opensm restarted with the partition at mtu=5 (IB MTU 4096): the groups are joined again
#   and the interface runs at the 4092 asked for, which 4092-byte pings cross without
#   fragments (none made by either host).
#
# - opensm restarted at mtu=3: back to 1020, and 1020-byte pings cross unfragmented. Unload,
#   clean log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
ktap_set_plan 12
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
ip link set eth0 mtu 9000 || ktap_exit_fail_msg "$role: eth0 refused MTU 9000"
two_hosts_meet
# What this program changed goes back for the programs after it: eth0's MTU, the partitions.
trap 'opensm_stop; rm -f "$OPENSM_PARTITIONS"; ip link set eth0 mtu 1500' EXIT

# partitions N: opensm's partitions with the default one at IB MTU enum N.
partitions() {
	cat >"$OPENSM_PARTITIONS" <<EOF
Default=0x7fff, ipoib, mtu=$1, defmember=full : ALL=full ;
EOF
}
partitions 3
[ "$role" = server ] && opensm_start
wait_for 90 ib_port_is ACTIVE || ktap_exit_fail_msg "$role: port not ACTIVE under opensm"

mtu_is() { [ "$(cat /sys/class/net/ib0/mtu)" = "$1" ]; }
# The IPv4 fragments this host made (frag_creates): busybox's ping cannot forbid
# fragmenting, so a ping crosses whole when none were made for it or its answer.
# sm_restart PORT N: the server restarts opensm with the default partition at IB MTU enum
# N; both hosts meet on PORT once it runs.
sm_restart() {
	if [ "$role" = server ]; then
		opensm_stop
		partitions "$2"
		opensm_start
	fi
	both_at "$1" 300
}

# settles MTU PORT: this host's ib0 reaches MTU (the group changed), both hosts meet on PORT
# whatever they saw, then pings of the MTU are answered, and neither they nor the peer's
# (this host answers them) were fragmented.
settles() {
	local want=$1 port=$2 ok=0 frags
	wait_for $((90 * SLOW)) mtu_is "$want" ||
		{ echo "MTU $(cat /sys/class/net/ib0/mtu), not $want"; ok=1; }
	both_at "$port" || return 1
	[ "$ok" = 0 ] && wait_for 30 ping -c 1 -W 1 "$ib_peer" >/dev/null || return 1
	frags=$(frag_creates)
	ping -c 2 -W 5 -s $((want - 28)) "$ib_peer" || return 1
	sleep 2
	[ "$(frag_creates)" = "$frags" ] ||
		{ echo "$(($(frag_creates) - frags)) fragments made"; return 1; }
}

round() {
	local drv=$1 n=$2 base=$((7610 + $2 * 20))
	local who="$role ($drv)" moddir ko
	klog_mark
	moddir=/lib/modules/$(uname -r)
	ko=$(find "$moddir" -name "$MODULE.ko")
	# by_alias: with no driver loaded, a new link of kind ipoib has the kernel load the
	# module of alias rtnl-link-ipoib (the link itself is refused: eth0 is no IPoIB device).
	by_alias() {
		if [ "$drv" = c ]; then
			cp "$ko" /tmp/ours.ko && cp "$C_IPOIB" "$ko" && depmod || return 1
		fi
		! module_loaded || { echo "$MODULE loaded already"; return 1; }
		ip link add link eth0 name ibx type ipoib 2>&1
		if [ "$drv" = c ]; then
			cp /tmp/ours.ko "$ko" && depmod || return 1
		fi
		module_loaded || { echo "$MODULE not loaded by the alias"; return 1; }
		wait_for 10 test -d /sys/class/net/ib0
	}
	ipoib_check "$who: loaded by 'ip link add ... type ipoib' (alias rtnl-link-ipoib)" by_alias
	module_loaded || load_driver "$drv"
	up() {
		echo datagram >/sys/class/net/ib0/mode && ip addr add "$ib_local/24" dev ib0 &&
			ip link set ib0 up &&
			wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP' &&
			wait_for 30 mtu_is 1020 || { ip link show ib0; return 1; }
	}
	ipoib_check "$who: datagram mode, carrier, MTU 1020 (the broadcast group's IB MTU 1024)" up
	above() {
		ip link set ib0 mtu 4092 || return 1
		mtu_is 1020 || { echo "MTU $(cat /sys/class/net/ib0/mtu), not 1020"; return 1; }
	}
	ipoib_check "$who: MTU 4092 accepted, run at 1020 while the group carries no more" above
	both_at $((base + 1))
	sm_restart $((base + 2)) 5
	ipoib_check \
		"$who: the group at IB MTU 4096: MTU 4092 as asked, 4092-byte pings cross whole" \
		settles 4092 $((base + 3))
	both_at $((base + 4))
	sm_restart $((base + 5)) 3
	ipoib_check \
		"$who: the group back at IB MTU 1024: MTU 1020 again, 1020-byte pings cross whole" \
		settles 1020 $((base + 6))
	both_at $((base + 7)) 300
	done_ok() {
		ip link set ib0 down && rmmod "$MODULE" && ! test -d /sys/class/net/ib0 &&
			klog_clean_since
	}
	ipoib_check "$who: driver unloaded, kernel log clean" done_ok
}

ib_rounds 7699
ktap_finished
