#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Many multicast groups sent to without joining them, on the InfiniBand fabric (rxe_ib on
# eth0 of both hosts, opensm on the server), with the C ipoib as the control: in the first
# round the client runs ours and the server C, in the second the other way round (the same
# checks pass with C sending). Run on both hosts with IPOIB_ROLE, IPOIB_LOCAL_IP and
# IPOIB_PEER_IP set.
#
# The server joins 1000 IPv4 groups (all complete in ib0_mcg); the client sends 3 datagrams
# to each (1000 send-only groups, each joined, no limit on their number), and the server
# receives datagrams for every one of the 1000 groups (counted per group). With nothing sent
# for two neighbour collection intervals (gc_interval 5 s, scaled by SLOW), the client's
# send-only groups are left. The client sends to every group again and, right after, the
# server, its neighbours flushed, resolves the client's address by ARP, pings it and opens a
# TCP connection to it (packets held for groups being joined keep no other destination from
# resolving); each group is joined anew and receives again. Unload, clean log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
# Per round: 6 checks on each host.
ktap_set_plan 12
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT

GROUPS_N=1000 FIRST=239.1.0.0 MC_PORT=5300 TCP_PORT=5301
DBG=/sys/kernel/debug/ipoib
# The handles age after two collection intervals (both drivers take the ARP table's); on a
# slow kernel longer than the joins of all the groups take.
sysctl -qw net.ipv4.neigh.default.gc_interval=$((5 * SLOW))
# The neighbours of 1000 groups and more fit in the stack's tables.
sysctl -qw net.ipv4.neigh.default.gc_thresh3=4096 net.ipv4.neigh.default.gc_thresh2=4096

[ "$role" = server ] && opensm_start
wait_for 90 ib_port_is ACTIVE || ktap_exit_fail_msg "$role: port not ACTIVE under opensm"

# groups_in_mcg KIND: how many of the test's groups ib0_mcg lists as KIND: "joined"
# (complete, full member), "send_only" (send-only, joined or being joined) or
# "send_only_joined" (send-only, complete).
groups_in_mcg() {
	awk -v kind="$1" '
		/^GID: / { g = ($2 ~ /^ff12:401b:ffff:0:0:0:f01:/); c = 0; s = 0; next }
		g && /^  complete: +yes$/ { c = 1 }
		g && /^  send_only: +yes$/ { s = 1 }
		g && /^  send_only:/ {
			if (kind == "joined") n += c && !s
			else if (kind == "send_only") n += s
			else n += c && s
		}
		END { print n + 0 }' "$DBG/ib0_mcg"
}

# mcg_reaches KIND N SECONDS: waits until ib0_mcg lists at least N of the test's groups as
# KIND (SECONDS scaled by SLOW); says how many it lists.
mcg_reaches() {
	wait_for $(($3 * SLOW)) eval "[ \"\$(groups_in_mcg $1)\" -ge $2 ]"
	local rc=$?
	echo "$(groups_in_mcg "$1") groups in ib0_mcg as $1"
	return $rc
}

round() {
	local drv=$1 n=$2 base=$((7310 + $2 * 20)) peer_drv
	local who="$role ($drv)"
	[ "$drv" = rust ] && peer_drv=c || peer_drv=rust

	klog_mark
	up() {
		if [ "$drv" = rust ]; then modprobe ib_ipoib; else insmod "$C_IPOIB"; fi &&
			wait_for 10 test -d /sys/class/net/ib0 || return 1
		echo datagram >/sys/class/net/ib0/mode
		ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up || return 1
		# The SM may still be busy with the previous round's many leaves.
		wait_for $((120 * SLOW)) eval 'ip link show ib0 | grep -q LOWER_UP' || {
			ip link show ib0
			head -n 12 "$DBG/ib0_mcg"
			return 1
		}
	}
	ipoib_check "$who: ib0 up, carrier once the broadcast group is joined" up
	both_at $((base + 1))

	if [ "$role" = server ]; then
		./mcast_udp count ib0 "$FIRST" "$GROUPS_N" "$MC_PORT" 1200 >/tmp/count.out 2>&1 &
		local counter=$!
		joined() {
			mcg_reaches joined "$GROUPS_N" 300
			local rc=$?
			cat /tmp/count.out
			return $rc
		}
		ipoib_check "$who: $GROUPS_N IPv4 groups joined" joined
		both_at $((base + 2)) 600
		# received PORT NTH: once the client is done sending (a rendezvous on PORT), its
		# NTH sending counted: every group received at least one datagram. Datagrams the
		# counting socket had no room for (a burst as many joins complete) are said.
		local overflows
		overflows=$(snmp_stat Udp RcvbufErrors)
		received() {
			local line
			both_at "$1" 600 || return 1
			sleep 3
			kill -USR1 "$counter"
			wait_for 10 eval "[ \"\$(grep -c '^groups' /tmp/count.out)\" -ge $2 ]" ||
				return 1
			line=$(grep "^groups" /tmp/count.out | tail -n 1)
			echo "from the client ($peer_drv), sending $2: $line;" \
				"$(($(snmp_stat Udp RcvbufErrors) - overflows))" \
				"dropped by the full socket so far"
			[ "$(echo "$line" | awk '{ print $2 }')" = "$GROUPS_N" ]
		}
		local desc="$who: every one of the $GROUPS_N groups received datagrams from the"
		desc+=" peer ($peer_drv) sending to them unjoined"
		ipoib_check "$desc" received $((base + 3)) 1
		# The second sending, after the client's send-only groups aged out; once it is
		# over, while its packets may still wait for joins, the client's address is
		# resolved again and a TCP connection made to it.
		both_at $((base + 4)) 600
		both_at $((base + 5)) 600
		reach() {
			ip neigh flush dev ib0
			wait_for 30 ping -c 1 -W 1 "$ib_peer" ||
				{ echo "no answer to ARP and ping"; return 1; }
			ip neigh show dev ib0 "$ib_peer"
			wait_for 30 eval "echo hello >/dev/tcp/$ib_peer/$TCP_PORT" ||
				{ echo "no TCP connection"; return 1; }
		}
		local desc="$who: the peer ($peer_drv) resolved and reached over TCP while"
		desc+=" it joins $GROUPS_N groups anew"
		ipoib_check "$desc" reach
		local desc="$who: every group received again once the peer's"
		desc+=" ($peer_drv) send-only joins had aged out"
		ipoib_check "$desc" received $((base + 6)) 2
		kill "$counter" 2>/dev/null
		wait "$counter" 2>/dev/null
		# The groups left before the next round's driver joins its own.
		wait_for $((60 * SLOW)) eval '[ "$(groups_in_mcg joined)" = 0 ]'
	else
		both_at $((base + 2)) 600
		sent() {
			./mcast_udp sendmany ib0 "$FIRST" "$GROUPS_N" "$MC_PORT" 3 2000 &&
				mcg_reaches send_only_joined "$GROUPS_N" 120
		}
		local desc="$who: 3 datagrams sent to each of $GROUPS_N groups not"
		desc+=" joined, each a send-only group"
		ipoib_check "$desc" sent
		both_at $((base + 3)) 600
		aged() {
			# Nothing sent to them for two collection intervals: their handles go, and
			# with them the send-only joins.
			wait_for $((90 * SLOW)) eval '[ "$(groups_in_mcg send_only)" = 0 ]' || {
				echo "send-only groups still in ib0_mcg: $(groups_in_mcg send_only)"
				return 1
			}
		}
		ipoib_check "$who: the send-only groups left once unused" aged
		nc -l -p "$TCP_PORT" </dev/null >/tmp/tcp.out 2>&1 &
		local listener=$!
		wait_for 10 tcp_listening "$TCP_PORT"
		both_at $((base + 4)) 600
		ipoib_check "$who: 3 datagrams sent again to each of the $GROUPS_N groups" \
			./mcast_udp sendmany ib0 "$FIRST" "$GROUPS_N" "$MC_PORT" 3 2000
		both_at $((base + 5)) 600
		rejoined() {
			mcg_reaches send_only_joined "$GROUPS_N" 120 || {
				ip -s link show ib0
				return 1
			}
			wait_for $((60 * SLOW)) grep -q hello /tmp/tcp.out ||
				{ echo "the server's TCP connection never came"; return 1; }
		}
		local desc="$who: each group joined anew;"
		desc+=" the server's TCP connection accepted meanwhile"
		ipoib_check "$desc" rejoined
		kill "$listener" 2>/dev/null
		wait "$listener" 2>/dev/null
		both_at $((base + 6)) 600
		# Left as they age out, not all at once by the unload, so that the SM is not busy
		# with a thousand leaves when the next round's driver joins.
		wait_for $((90 * SLOW)) eval '[ "$(groups_in_mcg send_only)" = 0 ]'
	fi

	both_at $((base + 7)) 300
	done_ok() {
		ip link set ib0 down && rmmod ib_ipoib && ! test -d /sys/class/net/ib0 &&
			klog_clean_since
	}
	ipoib_check "$who: driver unloaded, kernel log clean" done_ok
}

ib_rounds 7399
ktap_finished
