#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A profile, not a test: scripts/bench.sh --profile runs it with IPOIB_PROFILE_SECS set;
# without it the program skips. Where a TCP_RR transaction's time goes, in datagram mode
# and in connected mode at MTU 65520: the raw verbs latency of UD and RC sends
# (ib_send_lat, the floor under each mode), netperf TCP_RR over ib0, and on both hosts a
# system-wide perf profile taken while TCP_RR runs (cpu-clock samples: TCG emulates no
# PMU). The client prints "LAT <name> <value> <unit>" lines (with the RoCE packets per
# transaction, and the RC retransmissions of connected-mode UDP streams at Ethernet MTU 1500
# and 9000); both print "PROF <mode> <role> dso|kind|sym <share of busy samples %> <name>"
# lines, idle left out.
. "$(dirname "$0")/lib.sh"

SECS=${IPOIB_PROFILE_SECS:-}
SYNC=5006 LAT_PORT=18517

ktap_print_header
two_hosts_roles IPOIB_PROFILE_SECS "a profile: scripts/bench.sh --profile runs it"
if ! command -v perf >/dev/null; then
	ktap_skip_all "perf is not in the guest (the host lacks Debian's linux-perf)"
	exit "$KSFT_SKIP"
fi
ktap_set_plan 5
ipoib_check "$role: rxe0 on eth0 ($IPOIB_LOCAL_IP) ACTIVE" two_hosts_topology
two_hosts_meet

# rxe_pkts: RoCE packets rxe0 sent and received so far.
rxe_pkts() {
	local c=/sys/class/infiniband/rxe0/ports/1/hw_counters
	echo $(($(cat $c/sent_pkts) + $(cat $c/rcvd_pkts)))
}

# lat [ib_send_lat options]: the average one-way latency of 64-byte sends (us).
lat() {
	timeout 120 ib_send_lat -d rxe0 -p "$LAT_PORT" -s 64 -n 1000 "$@" "$peer" |
		awk '$1 ~ /^[0-9]+$/ && NF >= 6 { v = $6 } END { if (v != "") print v }'
}

profile() {
	local mode v
	module_loaded && rmmod "$MODULE"
	modprobe "$MODULE" && echo datagram >/sys/class/net/ib0/mode &&
		ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP' || return 1
	if [ "$role" = server ]; then
		netserver </dev/null >/dev/null 2>&1 3>&- 4>&-
		# ib_send_lat servers for the client's UD and RC runs, in turn.
		ib_send_lat -d rxe0 -p "$LAT_PORT" -s 64 -n 1000 -c UD >/dev/null 2>&1 &&
			ib_send_lat -d rxe0 -p "$LAT_PORT" -s 64 -n 1000 -c RC >/dev/null 2>&1 ||
			return 1
		for mode in datagram connected; do
			if [ "$mode" = connected ]; then
				echo connected >/sys/class/net/ib0/mode &&
					ip link set ib0 mtu 65520 || return 1
			fi
			# the client starts TCP_RR
			tell_peer "$SYNC" && wait_peer "$SYNC" 300 || return 1
			perf_record "$mode" sleep $((SECS + 2)) || return 1
		done
		tell_peer "$SYNC"
	else
		for mode in UD RC; do
			v=$(wait_for 30 eval 'lat -c $mode | grep .') || return 1
			echo "LAT raw_${mode,,}_send_lat $v us"
		done
		for mode in datagram connected; do
			if [ "$mode" = connected ]; then
				echo connected >/sys/class/net/ib0/mode &&
					ip link set ib0 mtu 65520 || return 1
			fi
			wait_peer "$SYNC" 300 && wait_for 60 ping -c 1 -W 2 "$ib_peer" || return 1
			tell_peer "$SYNC" && sleep 1
			local pkts0 pkts1 rr prog
			pkts0=$(rxe_pkts)
			rr="netperf_rr=\$(timeout 60 netperf -H $ib_peer -t TCP_RR -l $SECS -P 0"
			rr+=" -- -o THROUGHPUT | tail -n 1);"
			rr+=" echo \"LAT ${mode}_tcp_rr \$netperf_rr trans/s\" >/tmp/rr.out"
			perf_record "$mode" bash -c "$rr" ||
				return 1
			pkts1=$(rxe_pkts)
			cat /tmp/rr.out
			# RoCE packets this host sent and received per transaction (the profile's
			# own traffic is local).
			# shellcheck disable=SC2016 # an awk program
			prog='{ if ($3 > 0) printf "LAT %s_rxe_packets_per_transaction'
			# shellcheck disable=SC2016 # an awk program
			prog+=' %.2f packets\n", m, p / ($3 * s) }'
			awk -v p="$((pkts1 - pkts0))" -v m="$mode" -v s="$SECS" "$prog" /tmp/rr.out
		done
		wait_peer "$SYNC" 300
	fi
}
ipoib_check "$role: latencies and profiles taken in both modes" profile

# losses: connected-mode UDP streams at Ethernet MTU 1500 and 9000 with rxe's loss counters
# on the sender: RC has no congestion control, and every packet the virtual link drops makes
# the sender go back to it and send the rest of its window again.
losses() {
	local mtu c=/sys/class/infiniband/rxe0/ports/1/hw_counters r0 n0 v
	for mtu in 1500 9000; do
		module_loaded && rmmod "$MODULE"
		ip link set eth0 mtu "$mtu" && wait_for 20 port_active rxe0 1 &&
			modprobe "$MODULE" && ip addr add "$ib_local/24" dev ib0 &&
			ip link set ib0 up && ip link set ib0 mtu 65520 &&
			wait_for 10 eval 'ip link show ib0 | grep -q LOWER_UP' || return 1
		if [ "$role" = server ]; then
			tell_peer "$SYNC" && wait_peer "$SYNC" 300 || return 1
		else
			wait_peer "$SYNC" 120 &&
				wait_for 60 ping -c 1 -W 2 -s 60000 "$ib_peer" || return 1
			r0=$(cat $c/completer_retry_err) n0=$(cat $c/rcvd_seq_err)
			v=$(timeout 60 netperf -H "$ib_peer" -t UDP_STREAM -l "$SECS" -P 0 \
				-- -m 60000 -o THROUGHPUT | tail -n 1)
			echo "LAT connected_udp_eth$mtu $v Mbit/s"
			echo "LAT connected_rc_go_back_n_eth$mtu" \
				"$(($(cat $c/completer_retry_err) - r0)) retries"
			echo "LAT connected_rc_sequence_naks_eth$mtu" \
				"$(($(cat $c/rcvd_seq_err) - n0)) NAKs"
			tell_peer "$SYNC" || return 1
		fi
	done
	ip link set eth0 mtu 1500
}
ipoib_check "$role: RC losses at Ethernet MTU 1500 and 9000" losses
[ "$role" = server ] && kill "$(pidof netserver)" 2>/dev/null
ipoib_check "$role: module unloads" eval 'rmmod "$MODULE" && ! module_loaded'
KLOG_MARK=0
ipoib_check "$role: kernel log clean" klog_clean_since
ktap_finished
