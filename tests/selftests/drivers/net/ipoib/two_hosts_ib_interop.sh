#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Our driver against the upstream C ipoib on the InfiniBand fabric (rxe_ib on eth0 of both
# hosts, opensm on the server), in both directions: first the server runs C and the client
# ours, then the other way round. Run on both hosts with IPOIB_ROLE, IPOIB_LOCAL_IP and
# IPOIB_PEER_IP set.
#
# Each round, on both sides: carrier once the SA's broadcast group is joined, and MTU 1020
# from it (ours logs the group's MLID, Q_Key and MTU); ARP (the peer's address carries its
# port GID); pings at full MTU and fragmented. The wire as ib_capture sees it on eth0 (LRH,
# BTH, DETH and the CM's MADs parsed): datagrams both ways with Q_Key 0x0b1b and P_Key
# 0xffff, unicast without a GRH, broadcasts to the group's MLID with one.
#
# Connected mode at MTU 65520: 60000-byte pings unfragmented; each side's REQ with RFC 4755
# private data (its UD QPN, receive size 65524), transport and RNR retry counts 0 and its
# SRQ bit (0 from ours in its second round, loaded with cm_srq=0); each side's REP with RNR
# retry count 0 (the REQ's); RC packets with P_Key 0xffff; the connection in debugfs (ours:
# ib0_cm; C: the path with the peer's LID in ib0_path); IPv6 neighbour discovery and pings
# (send-only joins); netperf TCP_STREAM and TCP_RR.
#
# Ours connected toward C back in datagram mode (it still accepts connections): 3000-byte
# pings answered. C reloaded without connected mode (a datagram-only peer, ib_ipoib_ud.ko,
# no RC flag in its address): ours at MTU 65520 learns path MTU 1020 from its own ICMP and
# pings go as fragments. Four mode switches under a TCP stream on the round's client. 2 MiB
# over TCP each way with every tenth message RNR NAKed by each host's rxe (fail_rxe_rnr):
# neither side retries such a NAK on InfiniBand (RNR retry count 0), so the sending
# connections fail and are made again (ours: at least two more made), the data arrives
# intact, and the NAKs on the wire ask 0.64 ms from ours, 655 ms from C. Children on 0x8001
# with carrier pinging each other, with P_Key 0x8001 on the wire. Unload, clean log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
ktap_set_plan 41
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT
klog_mark

ipoib_check "$role: fabric up: port ACTIVE under opensm" ib_fabric_up
my_lid=$((0x$(ib_lid)))
# The other LID the SA has paths to.
peer_lid=$(saquery PR | sed -n 's/.*dlid\.*\([0-9]*\)$/\1/p' | sort -u |
	grep -vx "$my_lid" | head -n 1)
echo "# LIDs: ours $my_lid, the peer's $peer_lid"

# The QPN (hex, 6 digits) of a 20-byte IPoIB hardware address.
qpn_of() { echo "$1" | awk -F: '{ print $2 $3 $4 }'; }
my_qpn() { qpn_of "$(cat /sys/class/net/ib0/address)"; }
peer_qpn() { qpn_of "$(ip neigh show dev ib0 "$ib_peer" | awk '{ print $3 }')"; }
# capture SECONDS FILE: ib_capture on eth0 in the background (CAPTURE_PID).
capture() {
	./ib_capture eth0 "$1" >"$2" 2>&1 &
	CAPTURE_PID=$!
	wait_for 10 grep -q "^capturing on" "$2"
}
# captured FILE: waits for the capture (in this shell: its child) and prints FILE.
captured() { wait "$CAPTURE_PID"; cat "$1"; }
# nonzero TEST OPTIONS LABEL: netperf TEST to the peer's ib0 gives a figure above 0.
nonzero() {
	local line
	line=$(netperf_run "$ib_peer" "$1" "$2" "$3") || { echo "$line"; return 1; }
	echo "$line"
	echo "$line" | awk '{ exit !($(NF - 1) > 0) }'
}

round() {
	local drv=$1 n=$2 base=$((7110 + $2 * 20))
	local who="$role ($drv)"

	klog_mark
	load() {
		# Ours without a shared receive queue in its second round (C always has one here).
		if [ "$drv" = rust ]; then modprobe ib_ipoib cm_srq=$((n == 1)); \
			else insmod "$C_IPOIB"; fi &&
			wait_for 10 test -d /sys/class/net/ib0
	}
	up() {
		local joined
		load || return 1
		echo datagram >/sys/class/net/ib0/mode
		ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
			wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP' || return 1
		echo "MTU $(cat /sys/class/net/ib0/mtu)"
		[ "$(cat /sys/class/net/ib0/mtu)" = 1020 ] || return 1
		[ "$drv" = c ] && return 0
		# Ours says what the SA's broadcast group gave it.
		joined="ib0: joined broadcast group ff12:401b:ffff:0:0:0:ffff:ffff"
		joined+=" \(MLID 0xc[0-9a-f]{3}, Q_Key 0xb1b, MTU 1024\)"
		klog_since | grep "joined broadcast group" &&
			klog_since | grep -Eq "$joined"
	}
	ipoib_check "$who: ib0 up, carrier once the broadcast group is joined, MTU 1020 from it" up
	both_at $((base + 1))
	capture 15 /tmp/cap.dg
	arp_ping() {
		# Our own ARP request, the multicast datagram dg_wire looks for: without the
		# flush, a peer that pinged first (its request maybe before our capture) leaves
		# none to send.
		ip neigh flush dev ib0
		wait_for 60 ping -c 1 -W 1 "$ib_peer" || return 1
		ip neigh show dev ib0 "$ib_peer"
		ip neigh show dev ib0 "$ib_peer" | grep -q "fe:80:00:00:00:00:00:00:50:54:00:ff:ff"
	}
	ipoib_check "$who: ARP and ping $ib_peer" arp_ping
	ipoib_check "$who: full-MTU and fragmented pings" \
		eval 'ping -c 2 -W 2 -s 992 "$ib_peer" && ping -c 2 -W 2 -s 3000 "$ib_peer"'
	# Datagrams both ways: unicast without a GRH (the SA's paths have none), multicast (the
	# first ARP request, to the broadcast group's MLID) with one; every one with the
	# group's Q_Key and the default partition.
	dg_wire() {
		local out ud
		captured /tmp/cap.dg
		out=$(cat /tmp/cap.dg)
		ud="pkey=0xffff qkey=0x00000b1b grh=0 "
		echo "$out" | grep -q "^ud slid=$my_lid dlid=$peer_lid $ud" &&
			echo "$out" | grep -q "^ud slid=$peer_lid dlid=$my_lid $ud" &&
			! echo "$out" | grep "^ud " | grep -v "pkey=0xffff qkey=0x00000b1b" &&
			echo "$out" | awk '$1 == "ud" { split($3, d, "="); mc = d[2] >= 49152
				if (mc) groups++; if (mc != ($6 == "grh=1")) bad++ }
				END { exit !(groups > 0 && !bad) }'
	}
	local desc="$who: on the wire:"
	desc+=" datagrams with Q_Key 0x0b1b and P_Key 0xffff, GRH only to groups"
	ipoib_check "$desc" dg_wire
	[ "$drv" = rust ] && cat /sys/kernel/debug/ipoib/ib0_path
	# netperf in datagram mode: the client streams to the server and exchanges requests. The
	# server checks that the stream arrived: over 256 KiB in its 5 s, a floor the debug kernel
	# (about 0.6 Mbit/s between the drivers in datagram mode) also clears.
	both_at $((base + 16))
	if [ "$role" = server ]; then
		netserver </dev/null >/dev/null 2>&1 3>&- 4>&-
		local rx0
		rx0=$(ethtool_stat ib0 rx_bytes)
		both_at $((base + 17)) 300
		ipoib_check "$who: datagram mode: netperf served (over 256 KiB received)" \
			eval '[ $(($(ethtool_stat ib0 rx_bytes) - rx0)) -gt 262144 ]'
	else
		# shellcheck disable=SC2016 # expanded by eval
		ipoib_check "$who: datagram mode: netperf TCP_STREAM and TCP_RR move data" \
			eval 'nonzero TCP_STREAM "" "ib interop $n datagram TCP_STREAM" &&' \
				'nonzero TCP_RR "" "ib interop $n datagram TCP_RR"'
		both_at $((base + 17)) 300
	fi

	# Connected mode: both ping, so each side requests a connection and accepts one.
	both_at $((base + 2))
	cm_up() {
		echo connected >/sys/class/net/ib0/mode && ifconfig ib0 mtu 65520 &&
			[ "$(cat /sys/class/net/ib0/mtu)" = 65520 ]
	}
	ipoib_check "$who: connected mode, ifconfig ib0 mtu 65520" cm_up
	both_at $((base + 3))
	capture 20 /tmp/cap.cm
	big_pings() {
		local before after
		wait_for 30 ping -c 1 -W 2 -s 60000 "$ib_peer" || return 1
		before=$(frag_creates)
		ping -c 3 -W 5 -s 60000 "$ib_peer" || return 1
		after=$(frag_creates)
		echo "IPv4 fragments made: $before -> $after"
		[ "$before" = "$after" ]
	}
	ipoib_check "$who: 60000-byte pings unfragmented over a connection" big_pings
	# RFC 4755's private data (UD QPN, receive size 65524) and C's counts on InfiniBand:
	# no transport or RNR retries asked, the reply's RNR count echoing the request's; each
	# REQ's SRQ bit saying whether its sender's receive side shares a queue (ours not in the
	# second round, loaded with cm_srq=0).
	cm_wire() {
		local out mine theirs my_srq=1 their_srq=1 req
		captured /tmp/cap.cm
		out=$(cat /tmp/cap.cm)
		mine=$(my_qpn) theirs=$(peer_qpn)
		if [ "$n" = 2 ]; then
			if [ "$drv" = rust ]; then my_srq=0; else their_srq=0; fi
		fi
		echo "our UD QPN 0x$mine, the peer's 0x$theirs; SRQ bits expected:" \
			"ours $my_srq, theirs $their_srq"
		req="^REQ slid=$peer_lid retry=0 rnr=0 qpn=0x$theirs mtu=65524 srq=$their_srq "
		echo "$out" | grep -q \
			"^REQ slid=$my_lid retry=0 rnr=0 qpn=0x$mine mtu=65524 srq=$my_srq " &&
			echo "$out" | grep -q "$req" &&
			echo "$out" | grep -q "^REP slid=$my_lid rnr=0 qpn=0x$mine mtu=65524 " &&
			echo "$out" | grep -q \
				"^REP slid=$peer_lid rnr=0 qpn=0x$theirs mtu=65524 " &&
			echo "$out" | grep -q "^rc slid=$my_lid dlid=$peer_lid pkey=0xffff " &&
			! echo "$out" | grep "^rc " | grep -v "pkey=0xffff"
	}
	local desc="$who: on the wire: REQ and REP private data,"
	desc+=" retry counts 0, SRQ bits, RC P_Key 0xffff"
	ipoib_check "$desc" cm_wire
	conn_shown() {
		local tx
		if [ "$drv" = rust ]; then
			cat /sys/kernel/debug/ipoib/ib0_cm
			tx="^tx peer .*$(peer_qpn | sed 's/../&:/g').* state Live .* mtu 65520 "
			grep -q "$tx" \
				/sys/kernel/debug/ipoib/ib0_cm &&
				grep -q "^rx .*peer-ud-qpn 0x$(peer_qpn) state live" \
					/sys/kernel/debug/ipoib/ib0_cm
		else
			cat /sys/kernel/debug/ipoib/ib0_path
			grep -q "DLID:     0x$(printf %04x "$peer_lid")" \
				/sys/kernel/debug/ipoib/ib0_path
		fi
	}
	ipoib_check "$who: debugfs shows the connection (ours: ib0_cm; C: the path in ib0_path)" \
		conn_shown
	nd_ping() {
		local peer6=2001:db8:1b::${ib_peer##*.}
		ip -6 addr add "2001:db8:1b::${ib_local##*.}/64" dev ib0 nodad || return 1
		wait_for 60 ping -6 -c 1 -W 2 "$peer6" || { ip -6 neigh show dev ib0; return 1; }
		ip -6 neigh show dev ib0 "$peer6" | grep -q "fe:80:00:00:00:00:00:00:50:54:00:ff:ff"
	}
	ipoib_check "$who: IPv6 neighbour discovery and ping" nd_ping

	# netperf in connected mode.
	both_at $((base + 4))
	if [ "$role" = server ]; then
		local rx1
		rx1=$(ethtool_stat ib0 rx_bytes)
		both_at $((base + 5)) 300
		ipoib_check "$who: connected mode: netperf served (over 256 KiB received)" \
			eval '[ $(($(ethtool_stat ib0 rx_bytes) - rx1)) -gt 262144 ]'
	else
		local desc="$who: connected mode: netperf TCP_STREAM and TCP_RR to the"
		desc+=" $([ "$drv" = c ] && echo rust || echo c) server move data"
		# shellcheck disable=SC2016 # expanded by eval
		ipoib_check "$desc" \
			eval 'nonzero TCP_STREAM "-m 65536" "ib interop $n TCP_STREAM" &&' \
				'nonzero TCP_RR "" "ib interop $n TCP_RR"'
		both_at $((base + 5)) 300
	fi

	# The C side back in datagram mode: it still accepts connections, so ours, still
	# connected, sends over its connection and gets datagrams back.
	both_at $((base + 6))
	if [ "$drv" = c ]; then
		ipoib_check "$who: back to datagram mode, MTU 1020" \
			eval 'echo datagram >/sys/class/net/ib0/mode &&' \
				'[ "$(cat /sys/class/net/ib0/mtu)" = 1020 ]'
		both_at $((base + 7))
	else
		both_at $((base + 7))
		local desc="$who: connected toward a peer back in datagram"
		desc+=" mode: 3000-byte pings answered"
		# shellcheck disable=SC2016 # expanded by eval
		ipoib_check "$desc" \
			eval 'wait_for 20 ping -c 1 -W 2 -s 3000 "$ib_peer" &&' \
				'ping -c 3 -W 2 -s 3000 "$ib_peer"'
	fi
	# A datagram-only peer: the C driver built without connected mode (no RC flag in its
	# address). Ours, connected at MTU 65520, tells the stack the path MTU.
	both_at $((base + 13))
	if [ "$drv" = c ]; then
		ud_only() {
			ip link set ib0 down && rmmod ib_ipoib && insmod "$C_IPOIB_UD" &&
				wait_for 10 test -d /sys/class/net/ib0 || return 1
			ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
				wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP' || return 1
			cat /sys/class/net/ib0/address
			grep -q "^00:" /sys/class/net/ib0/address
		}
		ipoib_check "$who: reloaded without connected mode: its address has no RC flag" \
			ud_only
		both_at $((base + 14))
		both_at $((base + 15))
		cm_back() {
			ip link set ib0 down && rmmod ib_ipoib && insmod "$C_IPOIB" &&
				wait_for 10 test -d /sys/class/net/ib0 || return 1
			echo datagram >/sys/class/net/ib0/mode
			ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
				wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP'
		}
		ipoib_check "$who: reloaded with connected mode" cm_back
	else
		both_at $((base + 14))
		pmtu() {
			local before after
			ip neigh flush dev ib0
			wait_for 60 ping -c 1 -W 1 "$ib_peer" || return 1
			ip neigh show dev ib0 "$ib_peer"
			before=$(frag_creates)
			ping -c 4 -W 2 -s 3000 "$ib_peer" | grep -q "bytes from" || return 1
			after=$(frag_creates)
			ip route get "$ib_peer"
			echo "IPv4 fragments made: $before -> $after"
			[ "$after" -gt "$before" ] && ip route get "$ib_peer" | grep -q "mtu 1020"
		}
		local desc="$who: connected toward a datagram-only peer:"
		desc+=" path MTU 1020 learnt, pings go"
		ipoib_check "$desc" pmtu
		both_at $((base + 15))
		ipoib_check "$who: the peer back with connected mode: reachable" \
			eval 'ip neigh flush dev ib0; ip route flush cache;' \
				'wait_for 60 ping -c 1 -W 1 "$ib_peer"'
	fi

	# Mode switches under a TCP stream, on this round's client.
	both_at $((base + 8))
	if [ "$role" = server ]; then
		both_at $((base + 9)) 300
		ipoib_check "$who: still reachable after the peer's mode switches" \
			wait_for 30 ping -c 1 -W 2 "$ib_peer"
	else
		switches() {
			local log=/tmp/switch.netperf
			timeout 60 netperf -H "$ib_peer" -t TCP_STREAM -l 12 -P 0 -- -m 16384 \
				-o THROUGHPUT >$log 2>&1 &
			local np=$! m
			for m in connected datagram connected datagram; do
				sleep 2
				echo "$m" >/sys/class/net/ib0/mode || return 1
			done
			wait "$np"
			cat "$log"
			awk -F, 'NF == 1 && $1 + 0 > 0 { ok = 1 } END { exit !ok }' "$log"
		}
		ipoib_check \
			"$who: four mode switches under a TCP stream; it finishes with data moved" \
			switches
		both_at $((base + 9)) 300
	fi

	# Receive buffers running out under a stream, both ways: each host's rxe answers every
	# tenth message "not ready" (its fail_rxe_rnr). On InfiniBand neither side retries such
	# a NAK (RNR retry 0, as C asks and ours echoes): the sending connection fails, is made
	# again, and TCP sends again. Ours asks a wait of 0.64 ms (code 12) in its NAKs, C the
	# CM's default, 655 ms (code 0).
	both_at $((base + 18))
	rnr_streams() {
		local timer=12 made0 ok=1
		[ "$drv" = c ] && timer=0
		echo connected >/sys/class/net/ib0/mode && ip link set ib0 mtu 65520 || return 1
		made0=$(ethtool_stat ib0 cm_tx_established)
		capture 300 /tmp/cap.rnr
		rnr_every 10 || return 1
		both_at $((base + 19))
		if [ "$role" = server ]; then
			bulk_receive $((7300 + n * 2)) &&
				bulk_send "$ib_peer" $((7301 + n * 2)) 2 || ok=0
		else
			bulk_send "$ib_peer" $((7300 + n * 2)) 2 &&
				bulk_receive $((7301 + n * 2)) || ok=0
		fi
		rnr_every 0
		kill "$CAPTURE_PID"
		# Waited for here, not in a pipeline's subshell: it prints as it stops.
		captured /tmp/cap.rnr >/dev/null
		grep "^rnr-nak" /tmp/cap.rnr
		[ "$ok" = 1 ] && grep -q "^rnr-nak slid=$my_lid timer=$timer " /tmp/cap.rnr &&
			! grep "^rnr-nak slid=$my_lid " /tmp/cap.rnr |
				grep -qv " timer=$timer " || return 1
		[ "$drv" = c ] && return 0
		# Ours: its sends the peer refused failed their connection, which was made again.
		echo "transmit connections made: $made0 -> $(ethtool_stat ib0 cm_tx_established)," \
			"tx_errors $(ethtool_stat ib0 tx_errors)"
		[ "$(ethtool_stat ib0 cm_tx_established)" -ge $((made0 + 2)) ]
	}
	local desc="$who: 2 MiB each way over TCP, every tenth message RNR NAKed: connections"
	desc+=" remade, data intact, NAKs ask $([ "$drv" = c ] && echo 655 || echo 0.64) ms"
	ipoib_check "$desc" rnr_streams
	rnr_every 0

	# A child on 0x8001 on both sides.
	both_at $((base + 10))
	child() {
		local addr=198.51.101.${ib_local##*.}
		# Children start in datagram mode under C and in connected mode under ours (the
		# connected_mode parameter); the parent in datagram mode here.
		echo datagram >/sys/class/net/ib0/mode
		ip link add link ib0 name ib0.8001 type ipoib pkey 0x8001 &&
			ip addr add "$addr/24" dev ib0.8001 && ip link set ib0.8001 up &&
			wait_for 60 eval 'ip link show ib0.8001 | grep -q LOWER_UP'
	}
	ipoib_check "$who: child ib0.8001 up with carrier" child
	both_at $((base + 11))
	capture 8 /tmp/cap.child
	child_ping() {
		local out
		wait_for 60 ping -c 1 -W 1 "198.51.101.${ib_peer##*.}" || return 1
		ping -c 2 -W 2 -s 992 "198.51.101.${ib_peer##*.}" || return 1
		captured /tmp/cap.child
		out=$(cat /tmp/cap.child)
		# Datagrams or connections (each side's child starts in its own default mode).
		echo "$out" | grep -Eq "^(ud|rc) slid=$my_lid .* pkey=0x8001 " &&
			echo "$out" | grep -Eq "^(ud|rc) slid=$peer_lid .* pkey=0x8001 "
	}
	ipoib_check "$who: the children ping each other; P_Key 0x8001 on the wire" child_ping

	both_at $((base + 12))
	kill $(pidof netserver) 2>/dev/null
	done_ok() {
		ip link del ib0.8001 && rmmod ib_ipoib && ! test -d /sys/class/net/ib0
	}
	ipoib_check "$who: child deleted, driver unloaded" done_ok
	ipoib_check "$who: kernel log clean" klog_clean_since
}

ib_rounds 7199
ktap_finished
