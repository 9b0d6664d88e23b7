#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Benchmark, not a test: scripts/bench.sh --vs-c runs it with IPOIB_BENCH_RUNS set; without
# it the program skips. Our driver against the upstream C ipoib on the same InfiniBand
# fabric (rxe_ib on eth0 of both hosts, opensm on the server), in the same run: each run
# loads one driver on both hosts, then the other, the first alternating run by run (C, Rust,
# Rust, C, C, Rust, ...; IPOIB_BENCH_FIRST=rust starts with ours) so that drift and whatever
# one driver leaves behind hit both alike, and measures in datagram mode and in connected
# mode at MTU 65520: netperf TCP_STREAM, TCP_MAERTS, TCP_RR, UDP_STREAM with datagrams at
# the MTU, and four TCP streams at once, with the CPU both hosts spent. The client prints
# one line per measurement:
#   BENCH <driver> <mode> <test> <run> <value> <unit> <client CPU> <server CPU> <CPU unit>
# (Mbit/s and CPU seconds per MB moved, or the latency of a TCP_RR transaction in us and
# CPU us per transaction), or BENCH <driver> <mode> <test> <run> failed <why>.
. "$(dirname "$0")/lib.sh"

RUNS=${IPOIB_BENCH_RUNS:-}
SECS=5
# With IPOIB_PROFILE_SECS, each driver's TCP_STREAM (or IPOIB_PROFILE_TEST: TCP_RR) of each
# mode is then profiled (perf on both hosts, PROF lines as in two_hosts_profile.sh, the mode
# named <driver>-<mode>).
PROFILE_SECS=${IPOIB_PROFILE_SECS:-}
# With IPOIB_TRACE_SECS, each driver's TCP_RR of each mode is then traced on both hosts
# (tracefs events) and split into where a transaction's time goes: TRACE lines.
TRACE_SECS=${IPOIB_TRACE_SECS:-}
# With IPOIB_PRELUDE_SECS, each profiled or traced run follows a TCP_MAERTS of that many
# seconds (the server sending in bulk), as the benchmark's TCP_RR follows its streams.
PRELUDE_SECS=${IPOIB_PRELUDE_SECS:-}
PROFILE_TEST=${IPOIB_PROFILE_TEST:-TCP_STREAM}
FIRST=${IPOIB_BENCH_FIRST:-c}
case "$FIRST" in
c) SECOND=rust ;;
rust) SECOND=c ;;
*) echo "IPOIB_BENCH_FIRST: c or rust, not $FIRST" >&2; exit 1 ;;
esac
# drivers N: the drivers in the order run N loads them (the profiles and traces: run 1's).
drivers() {
	if [ $(($1 % 2)) = 1 ]; then echo "$FIRST $SECOND"; else echo "$SECOND $FIRST"; fi
}
case "$PROFILE_TEST" in
TCP_STREAM) PROFILE_OPTS=(-m 65536) ;;
TCP_RR) PROFILE_OPTS=() ;;
*) echo "IPOIB_PROFILE_TEST: TCP_STREAM or TCP_RR, not $PROFILE_TEST" >&2; exit 1 ;;
esac

ktap_print_header
two_hosts_roles IPOIB_BENCH_RUNS "a benchmark: scripts/bench.sh --vs-c runs it"
plan=$((2 + RUNS * 6))
[ -n "$PROFILE_SECS" ] && plan=$((plan + 4))
[ -n "$TRACE_SECS" ] && plan=$((plan + 4))
ktap_set_plan "$plan"
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT
klog_mark
START_MARK=$KLOG_MARK START_FIRST=$KLOG_FIRST

ipoib_check "$role: fabric up: port ACTIVE under opensm" ib_fabric_up
[ "$role" = server ] && netserver </dev/null >/dev/null 2>&1 3>&- 4>&-

# netperf_cpu TEST [OPTIONS]: one netperf run toward the peer's ib0 with the CPU use of both
# hosts: "throughput,client util %,server util %,client CPUs,server CPUs".
netperf_cpu() {
	local t=$1
	shift
	timeout 90 netperf -H "$ib_peer" -t "$t" -l "$SECS" -c -C -P 0 -- "$@" \
		-o THROUGHPUT,LOCAL_CPU_UTIL,REMOTE_CPU_UTIL,LOCAL_CPU_COUNT,REMOTE_CPU_COUNT |
		tail -n 1
}
# four_streams: four TCP_STREAMs at once; their throughputs summed, CPU use averaged (each
# run sees the whole host's).
four_streams() {
	local i
	for i in 1 2 3 4; do netperf_cpu TCP_STREAM -m 65536 >"/tmp/np$i" & done
	wait
	cat /tmp/np1 /tmp/np2 /tmp/np3 /tmp/np4 | awk -F, '
		NF == 5 { n++; t += $1; lu += $2; ru += $3; lc = $4; rc = $5 }
		END { if (n == 4) printf "%f,%f,%f,%d,%d\n", t, lu / n, ru / n, lc, rc }'
}
# measure DRIVER MODE TEST RUN COMMAND...: runs COMMAND (a netperf_cpu line) and prints the
# BENCH line, or a failed one (no figure, or a figure of 0).
measure() {
	local drv=$1 mode=$2 test=$3 run=$4 out
	shift 4
	out=$("$@" 2>&1)
	echo "$out" | awk -F, -v head="BENCH $drv $mode $test $run" \
		-v rr="$([ "$test" = tcp_rr ] && echo 1)" '
		END {
			if (NF != 5 || $1 !~ /^[0-9.]+$/ || $1 <= 0) {
				gsub(/[^[:alnum:] ._:-]/, " ")
				print head " failed " (NF ? $0 : "no output")
				exit 1
			}
			if (rr) # a transaction rate: its latency, and CPU us per transaction
				printf "%s %.2f us %.2f %.2f us/tran\n", head, 1e6 / $1,
					$2 / 100 * $4 * 1e6 / $1, $3 / 100 * $5 * 1e6 / $1
			else # Mbit/s, and CPU seconds per MB (10^6 bytes) moved
				printf "%s %.3f Mbit/s %.5f %.5f s/MB\n", head, $1,
					$2 / 100 * $4 * 8 / $1, $3 / 100 * $5 * 8 / $1
		}'
}

# up DRIVER MODE: ib0 of DRIVER up in MODE (at MTU 65520 in connected mode), with carrier.
up() {
	load_driver "$1" && echo "$2" >/sys/class/net/ib0/mode || return 1
	[ "$2" = connected ] && { ip link set ib0 mtu 65520 || return 1; }
	ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
		wait_for 60 eval 'ip link show ib0 | grep -q LOWER_UP'
}
# block DRIVER MODE RUN STEP: both hosts bring ib0 up with DRIVER in MODE; the client
# measures; both unload. The hosts meet before and after, whatever failed.
block() {
	local drv=$1 mode=$2 run=$3 step=$4 mtu failed=0
	up "$drv" "$mode" || failed=1
	mtu=$(cat /sys/class/net/ib0/mtu 2>/dev/null)
	both_at $((7200 + step * 2)) || return 1
	if [ "$role" = client ]; then
		# The path works, and in connected mode carries a whole datagram of the MTU (no
		# IPv4 fragment made).
		local frags
		frags=$(frag_creates)
		[ "$failed" = 0 ] && wait_for 60 ping -c 1 -W 1 "$ib_peer" >/dev/null &&
			{ [ "$mode" = datagram ] ||
				{ ping -c 1 -W 5 -s $((mtu - 28)) "$ib_peer" >/dev/null &&
					[ "$(frag_creates)" = "$frags" ]; }; } || failed=1
		if [ "$failed" = 1 ]; then
			echo "BENCH $drv $mode all $run failed no path over ib0 (MTU ${mtu:-none})"
		else
			measure "$drv" "$mode" tcp_stream "$run" netperf_cpu TCP_STREAM \
				-m 65536 || failed=1
			measure "$drv" "$mode" tcp_maerts "$run" netperf_cpu TCP_MAERTS || failed=1
			measure "$drv" "$mode" tcp_rr "$run" netperf_cpu TCP_RR || failed=1
			measure "$drv" "$mode" udp_stream "$run" \
				netperf_cpu UDP_STREAM -m $((mtu - 28)) || failed=1
			measure "$drv" "$mode" tcp_4_streams "$run" four_streams || failed=1
		fi
	fi
	both_at $((7201 + step * 2)) 600 || return 1
	echo "$drv driver, $mode mode, MTU ${mtu:-none}"
	rmmod "$MODULE" && [ "$failed" = 0 ]
}

SELFTEST=rdma_rs_selftest
# send_peer PORT TEXT: hands TEXT to the peer's recv_peer PORT (which may start later).
send_peer() { wait_for 60 eval "echo '$2' 2>/dev/null >/dev/tcp/\$peer/$1"; }
recv_peer() { timeout "${2:-120}" nc -l -p "$1" </dev/null; }
# stream_of NAME ROLE: "kbit/s bytes ms" of the STREAM line this host's module logged.
stream_of() {
	local re="s/.*$SELFTEST: STREAM $1 $2"
	re+=" \([0-9]*\) kbit\/s \([0-9]*\) bytes \([0-9]*\) ms.*/\1 \2 \3/p"
	klog_since | sed -n "$re" | tail -n 1
}
# verbs KIND NAME MODE RUN STEP: the in-kernel reference (rdma_rs_selftest's stream mode,
# KIND 1 RC or 2 UD) from the client to the server; the client prints its BENCH line, with
# the receiver's rate (what arrived) and both hosts' CPU seconds per MB.
verbs() {
	local kind=$1 name=$2 mode=$3 run=$4 port=$((7400 + $5 * 3)) b0 b1 guid qpn=0 got mine
	klog_mark
	b0=$(cpu_busy)
	if [ "$role" = server ]; then
		modprobe "$SELFTEST" stream="$kind" &
		local pid=$!
		if [ "$kind" = 2 ]; then
			wait_for 30 eval 'klog_since | grep -q "stream: ud receiver qpn"'
			qpn=$(klog_since |
				sed -n 's/.*stream: ud receiver qpn \(0x[0-9a-f]*\).*/\1/p' |
				tail -n 1)
		else
			wait_for 30 eval 'klog_since | grep -q "stream: rc receiver listening"'
		fi
		send_peer "$port" "$(ib_port_guid) $((qpn))"
		wait "$pid"
		b1=$(cpu_busy)
		got=$(stream_of "$name" receiver)
		echo "# receiver: ${got:-no figure}"
		send_peer $((port + 1)) "${got:-failed} $((b1 - b0))"
		rmmod "$SELFTEST"
		[ -n "$got" ]
		return
	fi
	read -r guid qpn < <(recv_peer "$port")
	[ -n "$guid" ] ||
		{ echo "BENCH verbs $mode ${name}_stream $run failed" \
			"no word from the receiver"; return 1; }
	modprobe "$SELFTEST" stream="$kind" stream_guid_hi=$((0x${guid:0:8})) \
		stream_guid_lo=$((0x${guid:8:8})) stream_qpn="$qpn" stream_secs="$SECS"
	b1=$(cpu_busy)
	mine=$(stream_of "$name" sender)
	echo "# sender: ${mine:-no figure}" \
		"($(klog_since | grep -m 1 "STREAM $name" || echo no STREAM line))"
	rmmod "$SELFTEST"
	# The receiver's "kbit/s bytes ms busy", or "failed busy".
	got=$(recv_peer $((port + 1)))
	echo "$got $mine $((b1 - b0))" | awk -v head="BENCH verbs $mode ${name}_stream $run" '
		# receiver: $1 kbit/s, $2 bytes, $3 ms, $4 busy jiffies; sender: $5..$7, $8
		NF == 8 && $1 > 0 && $2 > 0 && $6 > 0 {
			printf "%s %.3f Mbit/s %.5f %.5f s/MB\n", head, $1 / 1000,
				$8 / 100 / ($6 / 1e6), $4 / 100 / ($2 / 1e6)
			exit 0
		}
		{ print head " failed receiver: " $0; exit 1 }'
}

step=0
for run in $(seq "$RUNS"); do
	ipoib_check "$role: run $run, in-kernel RC stream: measured" \
		verbs 1 rc connected "$run" "$step"
	ipoib_check "$role: run $run, in-kernel UD stream: measured" \
		verbs 2 ud datagram "$run" "$step"
	step=$((step + 1))
	for drv in $(drivers "$run"); do
		for mode in datagram connected; do
			ipoib_check "$role: run $run, $drv driver, $mode mode: measured" \
				block "$drv" "$mode" "$run" "$step"
			module_loaded && rmmod "$MODULE"
			step=$((step + 1))
		done
	done
done
# observed RECORD SECS TEST DRIVER MODE STEP [OPTIONS]: both hosts bring ib0 up with DRIVER
# in MODE; the client runs netperf TEST (with OPTIONS) for SECS while both hosts RECORD it
# (perf_record or trace_record).
observed() {
	local record=$1 secs=$2 test=$3 drv=$4 mode=$5 step=$6 failed=0 prelude
	shift 6
	up "$drv" "$mode" || failed=1
	both_at $((7200 + step * 2)) || return 1
	if [ -n "$PRELUDE_SECS" ]; then
		if [ "$role" = client ] && [ "$failed" = 0 ]; then
			wait_for 60 ping -c 1 -W 1 "$ib_peer" >/dev/null &&
				prelude=$(timeout $((PRELUDE_SECS + 60)) netperf -H "$ib_peer" \
					-t TCP_MAERTS -l "$PRELUDE_SECS" -P 0 -- -m 65536 |
					tail -n 1) &&
				echo "# prelude: TCP_MAERTS $prelude" || failed=1
		fi
		both_at $((7600 + step)) $((PRELUDE_SECS + 120)) || return 1
	fi
	if [ "$role" = server ]; then
		"$record" "$drv-$mode" sleep $((secs + 3)) || failed=1
	else
		sleep 1
		[ "$failed" = 0 ] && wait_for 60 ping -c 1 -W 1 "$ib_peer" >/dev/null &&
			"$record" "$drv-$mode" netperf -H "$ib_peer" -t "$test" -l "$secs" -P 0 \
				-- "$@" -o THROUGHPUT || failed=1
	fi
	both_at $((7201 + step * 2)) 600 || return 1
	rmmod "$MODULE" && [ "$failed" = 0 ]
}
# each_driver_mode WHAT RECORD SECS TEST [OPTIONS]: observed for each driver and mode.
each_driver_mode() {
	local what=$1 drv mode
	shift
	for drv in $(drivers 1); do
		for mode in datagram connected; do
			ipoib_check "$role: $drv driver, $mode mode: $what" \
				observed "$1" "$2" "$3" "$drv" "$mode" "$step" "${@:4}"
			module_loaded && rmmod "$MODULE"
			step=$((step + 1))
		done
	done
}
[ -n "$PROFILE_SECS" ] &&
	each_driver_mode "$PROFILE_TEST profiled" perf_record "$PROFILE_SECS" "$PROFILE_TEST" \
		"${PROFILE_OPTS[@]}"
# interrupt_counts: "NAME COUNT" lines: each interrupt and IPI of /proc/interrupts (summed
# over the CPUs; a numbered one named by its number and device), each softirq of
# /proc/softirqs, the context switches and CPU time of /proc/stat, the cpuidle states.
interrupt_counts() {
	local prog
	awk '$1 ~ /:$/ && $2 ~ /^[0-9]+$/ {
		n = 0; for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i
		k = $1; sub(":", "", k); if (k ~ /^[0-9]+$/) k = k "-" $NF
		print "irq_" k, n }' /proc/interrupts
	# shellcheck disable=SC2016 # an awk program
	prog='NR > 1 { n = 0; for (i = 2; i <= NF; i++) n += $i;'
	# shellcheck disable=SC2016 # an awk program
	prog+=' k = $1; sub(":", "", k); print "softirq_" k, n }'
	awk "$prog" /proc/softirqs
	# CPU time in us (USER_HZ ticks): busy and idle, and each idle state's entries and time
	# (a polling state keeps the vCPU, and so the emulator, busy while the guest is idle).
	echo "cpu_busy_us $(($(cpu_busy) * 10000))"
	awk '$1 == "ctxt" { print "context_switches", $2 }
		$1 == "cpu" { printf "cpu_idle_us %.0f\n", ($5 + $6) * 10000 }' /proc/stat
	local d
	for d in /sys/devices/system/cpu/cpu*/cpuidle/state*; do
		[ -r "$d/name" ] || continue
		echo "idle_$(tr ' ' _ <"$d/name")_entries $(cat "$d/usage")"
		echo "idle_$(tr ' ' _ <"$d/name")_us $(cat "$d/time")"
	done | awk '{ n[$1] += $2 } END { for (k in n) printf "%s %.0f\n", k, n[k] }'
}
TRACE_EVENTS="net/net_dev_start_xmit net/netif_receive_skb napi/napi_poll"
TRACE_EVENTS+=" workqueue/workqueue_execute_start workqueue/workqueue_execute_end"
TRACE_EVENTS+=" irq/softirq_entry irq/softirq_exit"
# trace_record NAME COMMAND...: runs COMMAND while tracefs records the events a TCP_RR
# transaction passes on this host, then prints TRACE lines: per interval, its median and
# mean in us and how often it was seen; per kind of event, how many came per transaction.
# Intervals (each from an event to the first of the other kind after it): ib0 sends to
# rxe's task starting (the requester) and to the frame leaving on eth0; a frame arriving on
# eth0 to rxe's task starting (the responder) and to the packet reaching the stack on ib0;
# a packet received on ib0 to the next one sent (the application's turn) and a packet sent
# to the next received (the round trip seen from this host).
trace_record() {
	local name=$1 t=/sys/kernel/tracing e
	shift
	[ -d $t/events ] || mount -t tracefs nodev $t || return 1
	echo 0 >$t/tracing_on && echo >$t/trace && echo 16384 >$t/buffer_size_kb || return 1
	for e in $TRACE_EVENTS; do
		echo 1 >"$t/events/$e/enable" || return 1
	done
	# Of the softirqs, NET_RX only (NAPI: ours, virtio's and the stack's receive path).
	echo 'vec == 3' >$t/events/irq/softirq_entry/filter &&
		echo 'vec == 3' >$t/events/irq/softirq_exit/filter || return 1
	interrupt_counts >/tmp/trace.before
	echo 1 >$t/tracing_on
	"$@" >/tmp/trace.out 2>&1
	local rc=$?
	echo 0 >$t/tracing_on
	interrupt_counts >/tmp/trace.after
	for e in $TRACE_EVENTS; do
		echo 0 >"$t/events/$e/enable"
	done
	[ "$rc" = 0 ] || { cat /tmp/trace.out; return 1; }
	# The client's netperf: its transaction rate.
	[ -s /tmp/trace.out ] &&
		echo "TRACE $name $role transactions_per_s $(tail -n 1 /tmp/trace.out)"
	awk '
		function since(from, name) { if (from > 0) print name, (now - from) * 1e6 }
		/^#/ { next }
		{
			now = 0
			for (i = 1; i <= NF; i++) {
				if ($i ~ /^\[[0-9]+\]$/) cpu = $i
				if ($i ~ /^[0-9]+\.[0-9]+:$/) { now = $i + 0; ev = $(i + 1); break }
			}
			if (!now) next
			dev = ""
			if (match($0, /dev=[^ ]+/)) dev = substr($0, RSTART + 4, RLENGTH - 4)
			else if (match($0, /for device [^ ]+/))
				dev = substr($0, RSTART + 11, RLENGTH - 11)
		}
		ev == "net_dev_start_xmit:" && dev == "ib0" {
			n["ib0_sends"]++; since(rx_ib, "app_turn"); rx_ib = 0
			tx_ib = now; tx_ib_wq = now; tx_ib_eth = now; next
		}
		ev == "net_dev_start_xmit:" && dev == "eth0" {
			n["eth0_sends"]++; since(tx_ib_eth, "send_to_wire"); tx_ib_eth = 0; next
		}
		# Time spent per kind of work, per CPU: the rxe tasks and NET_RX softirqs.
		ev == "workqueue_execute_end:" && /do_work/ {
			if (wq[cpu]) n["rxe_task_us"] += (now - wq[cpu]) * 1e6
			wq[cpu] = 0; next
		}
		ev == "softirq_entry:" { sirq[cpu] = now; next }
		ev == "softirq_exit:" {
			if (sirq[cpu]) n["net_rx_softirq_us"] += (now - sirq[cpu]) * 1e6
			sirq[cpu] = 0; next
		}
		ev == "workqueue_execute_start:" && /do_work/ {
			wq[cpu] = now
			n["rxe_tasks"]++; since(tx_ib_wq, "send_to_rxe_task"); tx_ib_wq = 0
			since(rx_eth_wq, "wire_to_rxe_task"); rx_eth_wq = 0; next
		}
		ev == "netif_receive_skb:" && dev == "eth0" {
			n["eth0_receives"]++; rx_eth = now; rx_eth_wq = now; next
		}
		ev == "netif_receive_skb:" && dev == "ib0" {
			n["ib0_receives"]++; since(rx_eth, "wire_to_stack"); rx_eth = 0
			since(tx_ib, "round_trip"); tx_ib = 0; rx_ib = now; next
		}
		ev == "napi_poll:" && dev == "ib0" { n["ib0_napi_polls"]++; next }
		END {
			for (k in n) printf "count %.0f %s\n", n[k], k > "/tmp/trace.counts"
		}' $t/trace | sort -k1,1 -k2n | awk -v head="TRACE $name $role" '
		function flush() {
			if (c)
				printf "%s %s median %.0f mean %.0f us n %d\n", head, key,
					v[int((c + 1) / 2)], sum / c, c
		}
		$1 != key { flush(); key = $1; c = 0; sum = 0 }
		{ v[++c] = $2; sum += $2 }
		END { flush() }'
	# What else the host did meanwhile: interrupts, IPIs and softirqs of every kind, context
	# switches (only those that moved).
	awk 'NR == FNR { was[$1] = $2; next } $2 > was[$1] { print "count", $2 - was[$1], $1 }' \
		/tmp/trace.before /tmp/trace.after >>/tmp/trace.counts
	awk -v head="TRACE $name $role" '
		{ c[$3] = $2 }
		END { tr = c["ib0_sends"]; if (!tr) tr = 1
			for (k in c)
				printf "%s %s per_ib0_send %.2f n %d\n", head, k, c[k] / tr, c[k]
		}' /tmp/trace.counts
	rm -f /tmp/trace.counts /tmp/trace.before /tmp/trace.after
}
[ -n "$TRACE_SECS" ] && each_driver_mode "TCP_RR traced" trace_record "$TRACE_SECS" TCP_RR
[ "$role" = server ] && kill $(pidof netserver) 2>/dev/null
KLOG_MARK=$START_MARK KLOG_FIRST=$START_FIRST
ipoib_check "$role: unloaded, kernel log clean" eval '! module_loaded && klog_clean_since'
ktap_finished
