#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Many destinations waiting at once, on the InfiniBand fabric (rxe_ib on eth0 of both hosts,
# opensm on the server), with the C ipoib as the control: in the first round the client
# runs ours and the server C, in the second the other way round (the same checks pass with
# C holding the destinations). Run on both hosts with IPOIB_ROLE, IPOIB_LOCAL_IP and
# IPOIB_PEER_IP set.
#
# Each driver starts ib0 and a child (create_child) in its own first mode: ours connected, C
# datagram (the README's table of differences). The client, its paths forgotten (ib0 down
# and up), sends one datagram to each of 2000 made-up hosts of 10.77.0.0/16 (permanent
# neighbours whose GIDs no port has), in one burst: each destination waits for its own path
# query, which the subnet administrator fails, and its datagram is then dropped, counted as
# dropped (tx_dropped: 2000 exactly, nothing in tx_errors, as C counts them). Meanwhile the
# server, its neighbours flushed, resolves the client's address by ARP, pings it and opens a
# TCP connection to it: the client's answers wait for a path query of their own, behind the
# 2000, and are never held back by them (as in C, packets wait per destination; a shared
# pool of waiting packets would be full). Ours asks the SA once per destination and once for
# the server, whose path went with the down (as C's): path_lookups 2001 exactly. Unload,
# clean log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
# Per round: 3 checks on each host.
ktap_set_plan 6
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT

DESTS=2000 TCP_PORT=5331 UDP_PORT=9
# The made-up hosts' neighbours fit in the stack's table.
sysctl -qw net.ipv4.neigh.default.gc_thresh3=4096 net.ipv4.neigh.default.gc_thresh2=4096

[ "$role" = server ] && opensm_start
wait_for 90 ib_port_is ACTIVE || ktap_exit_fail_msg "$role: port not ACTIVE under opensm"

# The counters ip -s link shows for ib0, C's and ours alike.
link_stat() { cat "/sys/class/net/ib0/statistics/$1"; }
dest_ip() { echo "10.77.$((1 + $1 / 200)).$((1 + $1 % 200))"; }

round() {
	local drv=$1 n=$2 base=$((7510 + $2 * 20)) peer_drv
	local who="$role ($drv)"
	[ "$drv" = rust ] && peer_drv=c || peer_drv=rust

	klog_mark
	# The README's differences: ours starts interfaces and children in connected mode, C in
	# datagram mode.
	up() {
		local mode child_mode first
		if [ "$drv" = rust ]; then modprobe ib_ipoib; else insmod "$C_IPOIB"; fi &&
			wait_for 10 test -d /sys/class/net/ib0 || return 1
		mode=$(cat /sys/class/net/ib0/mode)
		echo 0x8001 >/sys/class/net/ib0/create_child &&
			wait_for 10 test -e /sys/class/net/ib0.8001/mode || return 1
		child_mode=$(cat /sys/class/net/ib0.8001/mode)
		echo 0x8001 >/sys/class/net/ib0/delete_child || return 1
		echo "first modes: ib0 $mode, ib0.8001 $child_mode"
		[ "$drv" = rust ] && first=connected || first=datagram
		[ "$mode" = "$first" ] && [ "$child_mode" = "$first" ] || return 1
		echo datagram >/sys/class/net/ib0/mode
		ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
			wait_for $((60 * SLOW)) eval 'ip link show ib0 | grep -q LOWER_UP'
	}
	local desc="$who: ib0 and a child start in"
	desc+=" $([ "$drv" = rust ] && echo connected || echo datagram) mode;"
	desc+=" ib0 up in datagram mode, carrier"
	ipoib_check "$desc" up
	both_at $((base + 1))

	if [ "$role" = server ]; then
		reach() {
			wait_for 30 ping -c 1 -W 1 "$ib_peer" || return 1
			# One ARP request per 10 s, so that the client holds at most three answers
			# (C's limit per destination, and ours) while its path query for us waits
			# behind the 2000: at a request per second a slow guest drops the excess of
			# them, with either driver, and the count below is no longer exact.
			sysctl -qw net.ipv4.neigh.ib0.retrans_time_ms=10000 || return 1
			ip neigh flush dev ib0
			both_at $((base + 2)) || return 1
			# The client's burst starts at this rendezvous.
			both_at $((base + 3)) 300 || return 1
			sleep 1
			wait_for $((30 * SLOW)) ping -c 1 -W 1 "$ib_peer" ||
				{ echo "no answer to ARP and ping"; return 1; }
			ip neigh show dev ib0 "$ib_peer"
			wait_for $((30 * SLOW)) eval "echo hello >/dev/tcp/$ib_peer/$TCP_PORT" ||
				{ echo "no TCP connection"; return 1; }
		}
		local desc="$who: the peer ($peer_drv) resolved and reached over TCP while"
		desc+=" $DESTS of its destinations wait"
		ipoib_check "$desc" reach
	else
		crowd() {
			local i lost0 dropped0 looked0 lost dropped looked wmem listener fmt
			nc -l -p "$TCP_PORT" </dev/null >/tmp/tcp.out 2>&1 &
			listener=$!
			wait_for 10 tcp_listening "$TCP_PORT"
			# The datagrams the stack can hold for them while they wait.
			wmem=$(cat /proc/sys/net/core/wmem_default)
			sysctl -qw net.core.wmem_default=$((DESTS * 4096))
			# Once the server has pinged us: the paths forgotten (down and up, which
			# also empties the neighbour table), so that the answers to it wait for a
			# query of their own; then the made-up hosts.
			both_at $((base + 2)) || return 1
			ip link set ib0 down && ip link set ib0 up &&
				wait_for $((60 * SLOW)) \
					eval 'ip link show ib0 | grep -q LOWER_UP' || return 1
			ip addr add 10.77.0.1/16 dev ib0 || return 1
			fmt='neigh replace %s dev ib0 nud permanent lladdr'
			fmt+=' 00:00:00:48:fe:80:00:00:00:00:00:00:02:00:00:ff:fe:00:%02x:%02x\n'
			for i in $(seq 0 $((DESTS - 1))); do
				# shellcheck disable=SC2059 # the format is built above
				printf "$fmt" \
					"$(dest_ip "$i")" $((i / 256)) $((i % 256))
			done >/tmp/crowd.neigh
			ip -batch /tmp/crowd.neigh || return 1
			[ "$(ip neigh show dev ib0 nud permanent | wc -l)" = "$DESTS" ] || {
				echo "$(ip neigh show dev ib0 nud permanent | wc -l)" \
					"neighbours made, not $DESTS"
				return 1
			}
			dropped0=$(link_stat tx_dropped)
			lost0=$((dropped0 + $(link_stat tx_errors)))
			[ "$drv" = rust ] && looked0=$(ethtool_stat ib0 path_lookups)
			both_at $((base + 3)) || return 1
			./udp_burst "$UDP_PORT" \
				$(for i in $(seq 0 $((DESTS - 1))); do dest_ip "$i"; done)
			# shellcheck disable=SC2016 # expanded by eval
			wait_for $((120 * SLOW)) eval '[ $(($(link_stat tx_dropped) +' \
				'$(link_stat tx_errors) - lost0)) -ge $DESTS ]'
			wait_for $((30 * SLOW)) grep -q hello /tmp/tcp.out ||
				echo "the server's TCP connection never came"
			sleep 2
			lost=$(($(link_stat tx_dropped) + $(link_stat tx_errors) - lost0))
			dropped=$(($(link_stat tx_dropped) - dropped0))
			echo "$lost of the $DESTS datagrams dropped, their paths failed" \
				"(tx_dropped $dropped)"
			kill "$listener" 2>/dev/null
			wait "$listener" 2>/dev/null
			sysctl -qw net.core.wmem_default="$wmem"
			ip addr del 10.77.0.1/16 dev ib0
			if [ "$drv" = rust ]; then
				looked=$(($(ethtool_stat ib0 path_lookups) - looked0))
				echo "$looked paths looked up"
			fi
			grep -q hello /tmp/tcp.out && [ "$lost" = "$DESTS" ] &&
				[ "$dropped" = "$DESTS" ] || return 1
			[ "$drv" = rust ] || return 0
			[ "$looked" = $((DESTS + 1)) ]
		}
		local desc="$who: $DESTS destinations waiting at once, each dropped once its path"
		desc+=" failed; the server's TCP connection accepted meanwhile"
		ipoib_check "$desc" crowd
	fi

	both_at $((base + 4)) 300
	done_ok() {
		ip link set ib0 down && rmmod ib_ipoib && ! test -d /sys/class/net/ib0 &&
			klog_clean_since
	}
	ipoib_check "$who: driver unloaded, kernel log clean" done_ok
}

ib_rounds 7599
ktap_finished
