#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A subnet manager restart under load, on the InfiniBand fabric (rxe_ib on eth0 of both
# hosts, opensm on the server), with the C ipoib as the control: in the first round the
# server runs C and the client ours, in the second the other way round. Run on both hosts
# with IPOIB_ROLE, IPOIB_LOCAL_IP and IPOIB_PEER_IP set.
#
# Both hosts in connected mode at MTU 65520. While the client sends 48 MiB over TCP (a MiB a
# second until opensm is up again) and the server pings it as fast as answers come, opensm
# is restarted, which asks every port to register again (a client reregister): a light
# flush, as C's. The stream arrives intact (sha256), at most a tenth of the pings is lost,
# and on each host carrier_changes is unchanged and the connected-mode queue pairs are the
# same ones (`rdma res show qp`). Then a child on 0x8001 goes down and comes up with ib0.
# Unload, clean log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
# Per round: 7 checks on the server (it receives and pings), 6 on the client.
ktap_set_plan $([ "$role" = server ] && echo 14 || echo 12)
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT

STREAM_PORT=5320 SM_UP_PORT=5321 STREAM_MIB=48

[ "$role" = server ] && opensm_start
wait_for 90 ib_port_is ACTIVE || ktap_exit_fail_msg "$role: port not ACTIVE under opensm"

carrier_changes() { cat /sys/class/net/ib0/carrier_changes; }
# The local QPNs of the driver's RC queue pairs (its connections), sorted.
rc_qpns() {
	rdma res show qp type RC | grep "comm \[$MODULE\]" |
		sed -n 's/.* lqpn \([0-9]*\) .*/\1/p' | sort -n | paste -sd' '
}

round() {
	local drv=$1 n=$2 base=$((7410 + $2 * 20))
	local who="$role ($drv)" cc0 qps0

	klog_mark
	up() {
		if [ "$drv" = rust ]; then modprobe ib_ipoib; else insmod "$C_IPOIB"; fi &&
			wait_for 10 test -d /sys/class/net/ib0 || return 1
		echo connected >/sys/class/net/ib0/mode && ip link set ib0 mtu 65520 &&
			ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
			wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP'
	}
	ipoib_check "$who: ib0 up in connected mode, MTU 65520, carrier" up
	both_at $((base + 1))
	connected() {
		wait_for 60 ping -c 1 -W 1 "$ib_peer" &&
			ping -c 2 -W 5 -s 60000 "$ib_peer" || return 1
		# Both ends' connections up (the peer's pings too) before they are counted.
		both_at $((base + 2)) || return 1
		cc0=$(carrier_changes) qps0=$(rc_qpns)
		echo "carrier_changes $cc0, RC queue pairs: $qps0"
		[ -n "$qps0" ]
	}
	ipoib_check "$who: connections up (60000-byte pings answered)" connected
	both_at $((base + 3))

	if [ "$role" = server ]; then
		bulk_receive "$STREAM_PORT" >/tmp/stream.out 2>&1 &
		local receiver=$!
		wait_for 10 tcp_listening "$STREAM_PORT"
		both_at $((base + 4))
		ping -A -w 40 -q "$ib_peer" >/tmp/flood.out 2>&1 &
		local flood=$!
		# The restart, once the stream runs.
		wait_for 30 eval '[ "$(stat -c %s "$BULK" 2>/dev/null || echo 0)" -gt 0 ]'
		local mark=$KLOG_MARK
		klog_mark
		opensm_stop
		opensm_start
		# The new SM's first sweep asks this port to register again (rxe_ib logs the event).
		wait_for 90 eval 'klog_since | grep -q "port event client reregister"'
		KLOG_MARK=$mark
		# The restart must fall within the stream: not all of it arrived once the port was
		# told to register again.
		local during
		during=$(stat -c %s "$BULK" 2>/dev/null || echo 0)
		tell_peer "$SM_UP_PORT"
		stream() {
			wait "$receiver"
			local rc=$?
			cat /tmp/stream.out
			echo "$during bytes of $((STREAM_MIB << 20)) had arrived when the" \
				"new SM asked for reregistration"
			[ "$rc" = 0 ] && [ "$during" -gt 0 ] &&
				[ "$during" -lt $((STREAM_MIB << 20)) ]
		}
		local desc="$who: $STREAM_MIB MiB over TCP from the peer"
		desc+=" ($( [ "$drv" = rust ] && echo c || echo rust)) intact across the SM restart"
		ipoib_check "$desc" stream
		flooded() {
			wait "$flood"
			cat /tmp/flood.out
			# Answered throughout: at most a tenth lost.
			awk '/packets transmitted/ { t = $1; r = $4 }
				END { exit !(t > 0 && r * 10 >= t * 9) }' /tmp/flood.out
		}
		ipoib_check "$who: pings answered across the SM restart (at most a tenth lost)" \
			flooded
	else
		bulk_make "$STREAM_MIB"
		local sum
		sum=$(sha256sum <"$BULK" | cut -d' ' -f1)
		both_at $((base + 4))
		# Over one connection, a MiB a second until the server says the new SM asked the
		# ports to register again, the rest at once: the stream lasts longer than the
		# restart however fast the link is. Then its sha256, as bulk_send sends it.
		rm -f /tmp/sm_up
		(wait_peer "$SM_UP_PORT" 120 && touch /tmp/sm_up) &
		paced_send() {
			timeout $((180 * SLOW)) bash -c '
				for i in $(seq 0 $(('"$STREAM_MIB"' - 1))); do
					dd if="$0" bs=1M skip=$i count=1 2>/dev/null
					[ -e /tmp/sm_up ] || sleep 1
				done >/dev/tcp/$1/$2' "$BULK" "$ib_peer" "$STREAM_PORT" || return 1
			wait_for $((120 * SLOW)) eval 'echo "$sum" >/dev/tcp/$ib_peer/$STREAM_PORT'
		}
		ipoib_check "$who: $STREAM_MIB MiB sent over TCP across the SM restart" paced_send
		rm -f "$BULK"
	fi
	both_at $((base + 5)) 300
	unchanged() {
		local cc qps
		# Ours says what it was told.
		if [ "$drv" = rust ]; then
			klog_since | grep -q "client reregister requested" ||
				{ echo "no client reregister seen"; return 1; }
		fi
		cc=$(carrier_changes) qps=$(rc_qpns)
		echo "carrier_changes $cc0 -> $cc; RC queue pairs: $qps0 -> $qps"
		[ "$cc" = "$cc0" ] && [ "$qps" = "$qps0" ]
	}
	ipoib_check \
		"$who: the SM restart (client reregister) kept the carrier and the connections" \
		unchanged

	both_at $((base + 6)) 300
	is_up() { ip link show "$1" | grep -q "[<,]UP[,>]"; }
	children_follow() {
		ip link add link ib0 name ib0.8001 type ipoib pkey 0x8001 &&
			ip link set ib0.8001 up &&
			wait_for 60 eval 'ip link show ib0.8001 | grep -q LOWER_UP' ||
			return 1
		ip link set ib0 down || return 1
		is_up ib0.8001 &&
			{ echo "ib0.8001 still up with ib0 down"; ip link show ib0.8001; return 1; }
		ip link set ib0 up || return 1
		is_up ib0.8001 ||
			{ echo "ib0.8001 not up again with ib0"; ip link show ib0.8001; return 1; }
		wait_for 60 eval 'ip link show ib0.8001 | grep -q LOWER_UP' ||
			{ echo "ib0.8001 without carrier"; return 1; }
		ip link show ib0.8001
	}
	ipoib_check "$who: a child goes down and comes up with its parent" children_follow

	both_at $((base + 7)) 300
	done_ok() {
		ip link del ib0.8001 2>/dev/null
		ip link set ib0 down && rmmod ib_ipoib && ! test -d /sys/class/net/ib0 &&
			klog_clean_since
	}
	ipoib_check "$who: driver unloaded, kernel log clean" done_ok
}

ib_rounds 7499
ktap_finished
