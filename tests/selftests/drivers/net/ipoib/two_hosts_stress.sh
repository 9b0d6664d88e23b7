#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Stress, not part of the default run: scripts/stress.sh runs it (on the debug kernel) with
# IPOIB_STRESS_CYCLES set; without it the program skips. In connected mode at MTU 65520,
# the client switches ib0's mode IPOIB_STRESS_CYCLES times under a TCP stream, deletes and
# re-adds its rxe device IPOIB_STRESS_READDS times (default 20) under streams, unloads and
# reloads the module IPOIB_STRESS_CYCLES times, every other time while a stream runs (the
# server serves and checks that its connections are cleaned up), and last flaps its
# Ethernet link IPOIB_STRESS_FLAPS times (default 50) under a stream. Each case prints what
# it did; any kernel trouble fails it.
. "$(dirname "$0")/lib.sh"

CYCLES=${IPOIB_STRESS_CYCLES:-}
FLAPS=${IPOIB_STRESS_FLAPS:-50}
READDS=${IPOIB_STRESS_READDS:-20}
SYNC=5006

ktap_print_header
two_hosts_roles IPOIB_STRESS_CYCLES "a stress run: scripts/stress.sh runs it"
ktap_set_plan 7
klog_mark
start_mark=$KLOG_MARK

ipoib_check "$role: rxe0 on eth0 ($IPOIB_LOCAL_IP) ACTIVE" two_hosts_topology
two_hosts_meet
ib0_up() {
	echo connected >/sys/class/net/ib0/mode &&
		ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP'
}
cm_up() {
	modprobe "$MODULE" && echo connected >/sys/class/net/ib0/mode &&
		ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP'
}
ipoib_check "$role: ib0 up in connected mode, MTU 65520" cm_up

if [ "$role" = server ]; then
	netserver </dev/null >/dev/null 2>&1 3>&- 4>&-
	# The client switches modes, then cycles its module; the server serves throughout.
	served() {
		local prog
		wait_peer "$SYNC" 3000 || return 1
		# shellcheck disable=SC2016 # an awk program
		prog='$1 ~ /^(rx_packets|cm_rx_accepted|cm_rx_drained|rx_errors):$/'
		# shellcheck disable=SC2016 # an awk program
		prog+=' { printf "%s %s ", $1, $2 }'
		echo "client done; ib0: $(ethtool -S ib0 | awk "$prog")"
		# Every connection the client opened went with its module.
		wait_for 30 eval '[ "$(ethtool_stat ib0 cm_rx_connections)" = 0 ]'
	}
	desc="$role: served $CYCLES mode switches,"
	desc+=" $READDS device re-adds and $CYCLES module reloads of the client"
	ipoib_check "$desc" served
	ipoib_skip "$role: mode switched $CYCLES times under a TCP stream" "the client switches"
	ipoib_skip "$role: Ethernet link flapped $FLAPS times under a TCP stream" "the client flaps"
	ipoib_skip "$role: rxe device deleted and re-added $READDS times under streams" \
		"the client does"
	wait_peer "$SYNC" 3000 || ktap_print_msg "the client did not report the end of its flaps"
	kill $(pidof netserver) 2>/dev/null
else
	switches() {
		local i pid ok=0
		wait_for 60 ping -c 1 -W 2 "$ib_peer" || return 1
		timeout 3000 netperf -H "$ib_peer" -t TCP_STREAM -l 3000 -P 0 -- -m 65536 \
			>/tmp/stream.log 2>&1 &
		pid=$!
		sleep 2
		for i in $(seq "$CYCLES"); do
			echo datagram >/sys/class/net/ib0/mode && sleep 0.1 &&
				echo connected >/sys/class/net/ib0/mode && ok=$((ok + 1))
			sleep 0.1
		done
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		echo "$ok of $CYCLES switches both ways;" \
			"ib0 tx_packets $(ethtool_stat ib0 tx_packets)," \
			"tx_errors $(ethtool_stat ib0 tx_errors)," \
			"connections made $(ethtool_stat ib0 cm_tx_established)"
		[ "$ok" = "$CYCLES" ] && wait_for 30 ping -c 1 -W 2 -s 60000 "$ib_peer"
	}
	ipoib_check "$role: mode switched $CYCLES times under a TCP stream" switches
	readds() {
		local i pid back=0
		for i in $(seq "$READDS"); do
			timeout 120 netperf -H "$ib_peer" -t TCP_STREAM -l 60 -P 0 -- -m 65536 \
				>/dev/null 2>&1 &
			pid=$!
			sleep 1
			rdma link delete rxe0 && wait_for 10 eval '[ ! -e /sys/class/net/ib0 ]' ||
				{ echo "ib0 not removed at cycle $i"; kill "$pid"; return 1; }
			# The stream lost its interface: it would only stall until its time is up.
			kill "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			rxe_add rxe0 eth0 && wait_for 10 eval '[ -e /sys/class/net/ib0 ]' &&
				ib0_up && wait_for 30 ping -c 1 -W 2 "$ib_peer" >/dev/null ||
				{ echo "ib0 not back at cycle $i"; return 1; }
			back=$((back + 1))
		done
		echo "$back of $READDS delete/re-add cycles under a stream," \
			"ib0 back and answering each time"
		[ "$back" = "$READDS" ]
	}
	ipoib_check "$role: rxe device deleted and re-added $READDS times under streams" readds
	reloads() {
		local i pid loaded=0 under=0
		for i in $(seq "$CYCLES"); do
			pid=
			if [ $((i % 2)) = 0 ]; then
				timeout 60 netperf -H "$ib_peer" -t TCP_STREAM -l 30 -P 0 \
					-- -m 65536 >/dev/null 2>&1 &
				pid=$!
				sleep 1
				under=$((under + 1))
			fi
			rmmod "$MODULE" || { echo "rmmod failed at cycle $i"; return 1; }
			# The stream lost its interface: it would only stall until its time is up.
			if [ -n "$pid" ]; then
				kill "$pid" 2>/dev/null
				wait "$pid" 2>/dev/null
			fi
			cm_up || { echo "reload failed at cycle $i"; return 1; }
			wait_for 30 ping -c 1 -W 2 "$ib_peer" ||
				{ echo "no ping after reload $i"; return 1; }
			loaded=$((loaded + 1))
		done
		echo "$loaded reloads, $under of them under a TCP stream"
		rmmod "$MODULE"
	}
	ipoib_check "$role: module reloaded $CYCLES times, every other one under a stream" reloads
	tell_peer "$SYNC"
	# Last, as rxe may leave the IB CM unusable (see flaps): the server waits for it.
	cm_up || echo "ib0 not up for the flaps"
	flaps() {
		local i pid back=0
		timeout 3000 netperf -H "$ib_peer" -t TCP_STREAM -l 3000 -P 0 -- -m 65536 \
			>/tmp/flaps.log 2>&1 &
		pid=$!
		sleep 2
		for i in $(seq "$FLAPS"); do
			ip link set eth0 down && sleep 0.3 && ip link set eth0 up &&
				wait_for 20 eval 'ip link show ib0 | grep -q LOWER_UP' &&
				back=$((back + 1))
			sleep 0.3
		done
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		echo "$back of $FLAPS flaps with the carrier back;" \
			"qp_recoveries $(ethtool_stat ib0 qp_recoveries)," \
			"connections made $(ethtool_stat ib0 cm_tx_established)," \
			"failed $(ethtool_stat ib0 cm_tx_failed)"
		[ "$back" = "$FLAPS" ] || { flap_state; return 1; }
		# rxe fails the IB CM's own queue pair (QP1) when one of its sends finds the link
		# down, and only re-adding the device brings it back: until then no connection can
		# be set up, and a peer in connected mode cannot answer us (a kernel limitation,
		# not ours). Then the device is re-added, and connected mode must work again.
		if rdma res show qp lqpn 1 | grep -q "state ERR"; then
			echo "QP1 of rxe0 left in the error state by rxe: device re-added"
			rdma link delete rxe0 && rxe_add rxe0 eth0 &&
				wait_for 10 eval '[ -e /sys/class/net/ib0 ]' && ib0_up ||
				{ flap_state; return 1; }
		fi
		wait_for 60 ping -c 1 -W 2 -s 60000 "$ib_peer" >/dev/null && return 0
		flap_state
		return 1
	}
	# What state the interface is in, for the log.
	flap_state() {
		ip -s link show ib0
		ip neigh show dev ib0
		ethtool -S ib0 | grep -v ": 0$"
		cat /sys/kernel/debug/ipoib/ib0_cm /sys/kernel/debug/ipoib/ib0_path
		rdma res show qp
		cat /sys/class/infiniband/rxe0/ports/1/state
		dmesg | grep ib_ipoib | tail -n 5
	}
	ipoib_check "$role: Ethernet link flapped $FLAPS times under a TCP stream" flaps
	tell_peer "$SYNC"
fi
module_loaded && rmmod "$MODULE"
KLOG_MARK=$start_mark
ipoib_check "$role: unloaded, kernel log clean" eval '! module_loaded && klog_clean_since'
ktap_finished
