#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A mixed fabric: the server loads ib_ipoib with cm_enabled=0 (datagram only, no 0x80 in its
# address), the client runs connected mode with MTU 65520. The Ethernet MTU is 9000, so the
# RoCE MTU is 4096, the datagram MTU 4092 and IPv6 runs on both. Run on both hosts with
# IPOIB_ROLE=server or client, IPOIB_LOCAL_IP and IPOIB_PEER_IP set.
#
# The client reaches the server over UD, and packets too big for it come back to the
# client's stack as a locally generated ICMP "fragmentation needed" (ICMPv6 "packet too
# big"), so the path MTU drops to 4092 (route MTU 4092; fragments made). TCP completes (the
# server: over 256 KiB received), with no RC connection. `ip link add ... type ipoib mode
# connected` on the cm_enabled=0 side makes the child, which refuses the mode and is deleted
# again.
. "$(dirname "$0")/lib.sh"


ktap_print_header
if [ -z "${IPOIB_ROLE:-}" ] || [ -z "${IPOIB_LOCAL_IP:-}" ] || [ -z "${IPOIB_PEER_IP:-}" ]; then
	ktap_skip_all "needs a second host: set IPOIB_ROLE, IPOIB_LOCAL_IP and IPOIB_PEER_IP"
	exit "$KSFT_SKIP"
fi
role=$IPOIB_ROLE peer=$IPOIB_PEER_IP
case "$role" in
server) ib_local=198.51.100.1 ib_peer=198.51.100.2 ib6_local=2001:db8:2::1 ib6_peer=2001:db8:2::2 ;;
*) ib_local=198.51.100.2 ib_peer=198.51.100.1 ib6_local=2001:db8:2::2 ib6_peer=2001:db8:2::1 ;;
esac
ktap_set_plan 12
klog_mark
start_mark=$KLOG_MARK

ipoib_check "$role: rxe0 on eth0 ($IPOIB_LOCAL_IP) ACTIVE" two_hosts_topology
two_hosts_meet
ipoib_check "$role: peer $peer answers ping" wait_for 60 ping -c 1 -W 1 "$peer"
jumbo() {
	ip link set eth0 mtu 9000 &&
		wait_for 10 eval 'ibv_devinfo -d rxe0 | grep -q "active_mtu:.*4096"' &&
		wait_for 30 ping -c 1 -W 1 -s 8000 "$peer"
}
ipoib_check "$role: Ethernet MTU 9000, RoCE MTU 4096" jumbo


if [ "$role" = server ]; then
	ipoib_check "$role: modprobe $MODULE cm_enabled=0" modprobe "$MODULE" cm_enabled=0
	datagram_only() {
		local addr m=/sys/class/net/ib0/mode
		addr=$(cat /sys/class/net/ib0/address)
		echo "address $addr, mode $(cat $m)," \
			"cm_enabled=$(cat /sys/module/$MODULE/parameters/cm_enabled)"
		[ "${addr:0:2}" = 00 ] && [ "$(cat $m)" = datagram ] &&
			[ "$(cat /sys/module/$MODULE/parameters/cm_enabled)" = N ] &&
			[ "$(cat /sys/class/net/ib0/mtu)" = 4092 ] &&
			! echo connected >$m 2>/dev/null && ! ip link set ib0 mtu 4093 2>/dev/null
	}
	ipoib_check "$role: datagram only: flags 0x00, mode datagram, connected mode refused" \
		datagram_only
	# A child asked for in connected mode is made, then refused its mode: deleted again.
	child_refused() {
		local out lines
		lines=$(klog_since | grep -c "ib0.k: connected mode not supported")
		out=$(ip link add link ib0 name ib0.k type ipoib mode connected 2>&1) && return 1
		echo "mode connected: $out"
		! ip link show ib0.k 2>/dev/null &&
			[ "$(klog_since | grep -c "ib0.k: connected mode not supported")" = \
				$((lines + 1)) ]
	}
	desc="$role: ip link add ... type ipoib mode connected refused, the child not left behind"
	ipoib_check "$desc" child_refused
else
	ipoib_check "$role: modprobe $MODULE" modprobe "$MODULE"
	cm_65520() {
		ifconfig ib0 mtu 65520 && [ "$(cat /sys/class/net/ib0/mode)" = connected ] &&
			[ "$(cat /sys/class/net/ib0/mtu)" = 65520 ]
	}
	ipoib_check "$role: connected mode, MTU 65520" cm_65520
fi
ib_up() {
	ip addr add "$ib_local/24" dev ib0 && ip -6 addr add "$ib6_local/64" dev ib0 nodad &&
		ip link set ib0 up &&
		wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP'
}
ipoib_check "$role: ib0 up" ib_up
ipoib_check "$role: ping $ib_peer over ib0" wait_for 60 ping -c 1 -W 1 "$ib_peer"

if [ "$role" = server ]; then
	serve
	ipoib_skip "$role: path MTU checks" "the client makes them"
else
	# 6000 bytes fit the client's MTU but not the server's 4092: the first is refused with
	# a local ICMP, the route learns MTU 4092, and the rest go out as IPv4 fragments.
	pmtu_learnt() {
		local before after out
		before=$(frag_creates)
		out=$(ping -c 4 -W 2 -s 6000 "$ib_peer")
		echo "$out"
		after=$(frag_creates)
		ip route get "$ib_peer"
		echo "IPv4 fragments created: $before before, $after after"
		echo "$out" | grep -q "bytes from" && [ "$after" -gt "$before" ] &&
			ip route get "$ib_peer" | grep -q "mtu 4092"
	}
	ipoib_check "$role: 6000-byte pings answered after the emulated ICMP set path MTU 4092" \
		pmtu_learnt
	frag6_creates() { awk '$1 == "Ip6FragCreates" { print $2 }' /proc/net/snmp6; }
	pmtu6_learnt() {
		local before after out
		wait_for 60 ping -6 -c 1 -W 2 "$ib6_peer" || return 1
		before=$(frag6_creates)
		out=$(ping -6 -c 4 -W 2 -s 6000 "$ib6_peer")
		echo "$out"
		after=$(frag6_creates)
		ip -6 route get "$ib6_peer"
		echo "IPv6 fragments created: $before before, $after after"
		echo "$out" | grep -q "bytes from" && [ "$after" -gt "$before" ] &&
			ip -6 route get "$ib6_peer" | grep -q "mtu 4092"
	}
	desc="$role: IPv6: 6000-byte pings answered after the emulated ICMPv6 set path MTU 4092"
	ipoib_check "$desc" pmtu6_learnt
fi
# TCP with MTU 65520 on one side: the MSS and path MTU fit the datagram peer.
if [ "$role" = client ]; then
	ipoib_check "$role: netperf TCP_STREAM to the datagram-only peer" eval '
		wait_for 30 eval "netperf -H $ib_peer -t TCP_RR -l 1 >/dev/null 2>&1" &&
		timeout 60 netperf -H "$ib_peer" -t TCP_STREAM -l 3 -P 0 -- -m 65536'
	runs_done
else
	ipoib_check "$role: the client's netperf served over ib0 (over 256 KiB received)" \
		served $((256 << 10))
fi
ipoib_check "$role: no RC connection made: the peer does not offer connected mode" no_rc_qps
ip -s link show ib0

together=0
finish_together 180 || { ktap_print_msg "peer did not finish in time"; together=1; }
[ "$role" = server ] && kill $(pidof netserver) 2>/dev/null
rmmod "$MODULE"
ip link set eth0 mtu 1500
KLOG_MARK=$start_mark
ipoib_check "$role: both hosts done in time; unloaded, kernel log clean" \
	eval '[ "$together" = 0 ] && ! module_loaded && klog_clean_since'
ktap_finished
