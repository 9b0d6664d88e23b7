#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Error paths under allocation failures (failslab). Each attempt must fail with an error or
# succeed, never crash, warn or leave state behind: the kernel log stays clean, and
# afterwards the interfaces still reach each other and the module unloads and loads again.
#
# - One kmalloc made to fail (/proc/self/fail-nth), at 25 points from the 1st allocation to
#   the 6400th (IPOIB_FAULTS_NTH), in the task that loads the module, brings an interface
#   up, switches its mode or adds an rxe device.
#
# - `ip link set up` with each of the allocations made under the module's code failing in
#   turn, up to the connection listener (the last): after each failed attempt the module
#   unloads at once (a failed open undoes what it started).
#
# - Random failures, only of allocations made under the module's own code (failslab's
#   stack-trace filter, CONFIG_FAULT_INJECTION_STACKTRACE_FILTER; rxe's paths excluded,
#   whose failures print allocation reports): while both sides switch modes and make
#   connections anew, allocations of any kind fail (the connection set-up work's queue
#   pairs, CQs and CM identifiers, the CM handlers' connections).
#
# - Under UDP floods both ways in connected mode and a mode switch, one in ten of the atomic
#   allocations made under the module's code fails for 10 s (the receive path's skbs in
#   NAPI, connections and neighbours made on the transmit path; the filter takes rxe's
#   frames below NAPI, since the test kernel's unwinder guesses). The receive path's
#   failures are counted as drops (with the drop count removed from the driver the check
#   fails), nothing warns, and the interfaces carry traffic again once it stops.
. "$(dirname "$0")/lib.sh"

FS=/sys/kernel/debug/failslab
NS=ipoibfaults
# Which allocation fails: dense among the first ones, sparser through the receive rings.
NTH="1 2 3 5 8 12 17 25 35 50 70 100 140 200 280 400 560 800 1100 1500 2000 2700 3600 4800 6400"
NTH="${IPOIB_FAULTS_NTH:-$NTH}"

ktap_print_header
if ! modinfo "$MODULE" >/dev/null 2>&1; then
	ktap_skip_all "module $MODULE not installed"
	exit "$KSFT_SKIP"
fi
if [ ! -d "$FS" ] || [ ! -e /proc/self/fail-nth ]; then
	ktap_skip_all "no failslab (CONFIG_FAILSLAB," \
		"CONFIG_FAULT_INJECTION_DEBUG_FS, debugfs mounted)"
	exit "$KSFT_SKIP"
fi
one_host_topology || ktap_exit_fail_msg "soft-RoCE topology did not come up"
module_loaded && rmmod "$MODULE"
ktap_set_plan 10
klog_mark
start_mark=$KLOG_MARK

# Failures only where a task asks for one (fail-nth), sleeping allocations included,
# silently.
echo 0 >$FS/probability
echo 0 >$FS/times
echo "${IPOIB_FAULTS_VERBOSE:-0}" >$FS/verbose
echo N >$FS/ignore-gfp-wait
echo Y >$FS/task-filter

# under_failslab N COMMAND...: runs COMMAND in a task whose Nth kmalloc fails (a process
# it forks starts afresh, so COMMAND must do the work itself).
under_failslab() {
	local nth=$1
	shift
	(echo "$nth" >/proc/self/fail-nth && exec "$@") >/tmp/faults.out 2>&1
}

# sweep NAME UNDO COMMAND...: COMMAND with each allocation of $NTH failing, then UNDO,
# which must succeed whatever COMMAND did. Prints how many attempts failed; fails if the
# kernel log shows trouble.
sweep() {
	local name=$1 undo=$2 n failed=0 total=0
	shift 2
	klog_mark
	for n in $NTH; do
		total=$((total + 1))
		under_failslab "$n" "$@" || failed=$((failed + 1))
		eval "$undo" ||
			{ echo "$name: '$undo' failed after allocation $n failed"; return 1; }
	done
	echo "$name: $failed of $total attempts failed under injection"
	if ! klog_clean_since; then
		klog_since | grep -E -B2 -A12 "$KLOG_TROUBLE" | head -n 40
		return 1
	fi
	# The injection must have hit: at least the smallest budgets fail.
	[ "$failed" -ge 1 ]
}

loads() {
	# An attempt may load the module with a device left out.
	sweep "modprobe" '! module_loaded || rmmod $MODULE' modprobe "$MODULE"
}
ipoib_check "modprobe under kmalloc failures: fails cleanly or loads, unloads" loads

modprobe "$MODULE" || ktap_exit_fail_msg "modprobe $MODULE failed without injection"
KLOG_MARK=$start_mark
ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
[ -n "$ib_a" ] && [ -n "$ib_b" ] || ktap_exit_fail_msg "interfaces of rxe0 and rxe1 not found"

ipoib_check "ip link set $ib_a up under kmalloc failures: fails cleanly or comes up" \
	sweep "link up" "ip link set $ib_a down" ip link set "$ib_a" up
# A failed open must undo what it started. With the stack-trace filter, fail-nth counts only
# the allocations made under our module's code, so N walks through those of our open one by
# one, up to the connection listener, made last; after each failed attempt the module must
# unload at once (a half-open interface kept its neighbour ageing requeueing itself, and
# removal waited for it for ever).
# only_module_allocations: the stack-trace filter set to the module's text (or cleared).
only_module_allocations() {
	local start size
	start=$(cat /sys/module/$MODULE/sections/.text) &&
		size=$(awk -v m=$MODULE '$1 == m { print $2 }' /proc/modules) &&
		[ -n "$size" ] || return 1
	echo 32 >$FS/stacktrace-depth
	echo "$start" >$FS/require-start
	printf '0x%x\n' $((start + size)) >$FS/require-end
}
all_allocations() {
	echo 0 >$FS/require-start
	echo 0xffffffffffffffff >$FS/require-end
}
open_undone() {
	local n ifc=$ib_a pid failed=0 ok=0
	klog_mark
	for n in $(seq 1 40); do
		only_module_allocations || { echo "no module text"; return 1; }
		if under_failslab "$n" ip link set "$ifc" up; then
			ip link set "$ifc" down
			# Past the open's allocations once a few in a row go through.
			ok=$((ok + 1))
			[ "$ok" -lt 3 ] && continue
			break
		fi
		ok=0 failed=$((failed + 1))
		all_allocations
		rmmod "$MODULE" &
		pid=$!
		if ! wait_for 30 eval '! kill -0 $pid 2>/dev/null'; then
			echo "rmmod still running 30 s after allocation $n of the open failed"
			return 1
		fi
		wait "$pid" && modprobe "$MODULE" &&
			wait_for 10 eval 'ifc=$(if_of rxe0); [ -n "$ifc" ]' ||
			return 1
	done
	all_allocations
	echo "$failed failed opens, each undone"
	klog_since | grep -m 1 "cannot listen for connections" || {
		echo "no attempt failed at the listener"
		return 1
	}
	klog_clean_since
}
if [ -e $FS/require-start ]; then
	desc="ip link set $ib_a up failing at each of its allocations in turn: nothing left running"
	ipoib_check "$desc" open_undone
	ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
else
	ipoib_skip "ip link set up failing at each of its allocations in turn" \
		"no stack-trace filter (CONFIG_FAULT_INJECTION_STACKTRACE_FILTER)"
fi
ipoib_check "mode switches of $ib_a (up) under kmalloc failures" eval '
	ip link set '"$ib_a"' up &&
	sweep "mode datagram" "echo connected >/sys/class/net/'"$ib_a"'/mode" \
		sh -c "echo datagram >/sys/class/net/'"$ib_a"'/mode" &&
	sweep "mode connected" "echo datagram >/sys/class/net/'"$ib_a"'/mode" \
		sh -c "echo connected >/sys/class/net/'"$ib_a"'/mode"'
dummy_device() {
	ip link add ipoibfault0 type dummy && ip link set ipoibfault0 up || return 1
	sweep "rdma link add" '[ ! -d /sys/class/infiniband/rxe9 ] || rdma link delete rxe9' \
		rdma link add rxe9 type rxe netdev ipoibfault0
	local rc=$?
	ip link del ipoibfault0
	return $rc
}
ipoib_check "a device added under kmalloc failures: taken on or left out, removed cleanly" \
	dummy_device

# Afterwards everything still works: datagram mode across namespaces, then unload.
works() {
	echo datagram >/sys/class/net/$ib_a/mode && echo datagram >/sys/class/net/$ib_b/mode &&
		ip netns add "$NS" && ip link set "$ib_b" netns "$NS" &&
		ip -n "$NS" addr add 198.51.100.2/24 dev "$ib_b" &&
		ip -n "$NS" link set "$ib_b" up &&
		ip addr add 198.51.100.1/24 dev "$ib_a" && ip link set "$ib_a" up &&
		wait_for 30 ping -c 1 -W 1 198.51.100.2
}
ipoib_check "$ib_a and $ib_b still reach each other afterwards" works

# recovered: after an injection window, the kernel log is clean and the interfaces reach
# each other again. rxe fails a queue pair whose packet it cannot allocate, its CM's QP1
# included, and only re-adding the device brings QP1 back (a rxe limitation, not ours):
# without it no connection can be made, so the datagram path is what must recover then.
recovered() {
	if ! klog_clean_since; then
		klog_since | grep -E -B2 -A12 "$KLOG_TROUBLE" | head -n 40
		return 1
	fi
	if rdma res show qp lqpn 1 | grep -q "state ERR"; then
		echo "rxe left a QP1 in the error state: checking datagram mode"
		echo datagram >/sys/class/net/$ib_a/mode &&
			ip netns exec "$NS" sh -c "echo datagram >/sys/class/net/$ib_b/mode" ||
			return 1
	fi
	wait_for 60 ping -c 1 -W 1 198.51.100.2 && ip netns exec "$NS" ping -c 2 -W 2 198.51.100.1
}
# filter_to_module DEPTH [rxe]: failslab fails only allocations with the module's code among
# the stack's top DEPTH entries, and with "rxe", none with rxe's there (whose failures print
# allocation reports). The test kernel's unwinder guesses (it takes every text address
# on the stack): the module's NAPI poll, run in a softirq on top of rxe's work, has rxe's
# addresses below it.
filter_to_module() {
	local start size lo hi
	start=$(cat /sys/module/$MODULE/sections/.text) &&
		size=$(awk -v m=$MODULE '$1 == m { print $2 }' /proc/modules) || return 1
	# rxe is built in: its functions are one contiguous run of kernel text.
	lo=$(grep -E ' [tT] rxe_' /proc/kallsyms | sort | head -n 1 | cut -d' ' -f1)
	hi=$(grep -E ' [tT] rxe_' /proc/kallsyms | sort | tail -n 1 | cut -d' ' -f1)
	[ -n "$lo" ] && [ -n "$hi" ] && [ -n "$size" ] ||
		{ echo "no symbols to filter on"; return 1; }
	echo "$start" >$FS/require-start
	printf '0x%x\n' $((start + size)) >$FS/require-end
	if [ "${2:-}" = rxe ]; then
		echo "0x$lo" >$FS/reject-start
		printf '0x%x\n' $((0x$hi + 4096)) >$FS/reject-end
	fi
	echo "$1" >$FS/stacktrace-depth
}
filter_off() {
	echo 0 >$FS/require-start
	echo 0xffffffffffffffff >$FS/require-end
	echo 0 >$FS/reject-start
	echo 0 >$FS/reject-end
}
# storm_start TIMES PERCENT IGNORE_SLEEPING / storm_end: random failures of any task's
# allocations; storm_end prints how many were made to fail.
storm_start() {
	echo N >$FS/task-filter
	echo "$3" >$FS/ignore-gfp-wait
	echo 1 >$FS/interval
	echo "$1" >$FS/times
	echo "$2" >$FS/probability
	STORM_TIMES=$1
}
storm_end() {
	echo 0 >$FS/probability
	echo $((STORM_TIMES - $(cat $FS/times)))
	echo 0 >$FS/times
	echo N >$FS/ignore-gfp-wait
	echo Y >$FS/task-filter
	filter_off
}

# atomic_storm: under traffic both ways, one in ten of the atomic allocations made under the
# module's code fails for 10 s (the receive path's skbs in NAPI, connections and neighbours
# made on the transmit path), and a mode switch makes new connections meanwhile. The
# receive path's failures must show as dropped packets, and everything recovers.
peer_stat() { ip netns exec "$NS" ethtool -S "$ib_b" | awk -v n="$1:" '$1 == n { print $2 }'; }
atomic_storm() {
	local flooders injected drops0 drops switch
	if rdma res show qp lqpn 1 | grep -q "state ERR"; then
		echo "rxe left a QP1 in the error state before: the storm runs in datagram mode"
	else
		echo connected >/sys/class/net/$ib_a/mode &&
			ip netns exec "$NS" sh -c "echo connected >/sys/class/net/$ib_b/mode" ||
			return 1
	fi
	wait_for 30 ping -c 1 -W 1 198.51.100.2 || return 1
	klog_mark
	drops0=$(($(ethtool_stat "$ib_a" rx_dropped) + $(peer_stat rx_dropped)))
	filter_to_module 32 || return 1
	storm_start 1000000 10 Y
	udp_flood 10 198.51.100.2
	flooders=$!
	udp_flood 10 198.51.100.1 "$NS"
	flooders="$flooders $!"
	# shellcheck disable=SC2016 # expanded by eval
	wait_for 5 eval '[ $(($(ethtool_stat "$ib_a" rx_dropped) + $(peer_stat rx_dropped)))' \
		'-gt "$drops0" ]'
	# New connections while allocations fail: the peer drops its own and makes new ones.
	switch="echo datagram >/sys/class/net/$ib_b/mode;"
	switch+=" echo connected >/sys/class/net/$ib_b/mode"
	ip netns exec "$NS" sh -c "$switch"
	wait $flooders
	injected=$(storm_end)
	drops=$(($(ethtool_stat "$ib_a" rx_dropped) + $(peer_stat rx_dropped) - drops0))
	echo "$injected atomic allocations under $MODULE failed;" \
		"received packets dropped: $drops;" \
		"$ib_a: tx_dropped $(ethtool_stat "$ib_a" tx_dropped)," \
		"connections made $(ethtool_stat "$ib_a" cm_tx_established)"
	[ "$injected" -gt 0 ] && [ "$drops" -gt 0 ] && recovered &&
		ping -c 2 -W 2 -s 8000 198.51.100.2
}

# ours_storm: allocations under our module's code fail at random (one in five, 100 in all)
# while both sides switch modes and reconnect.
ours_storm() {
	local injected i switch
	echo connected >/sys/class/net/$ib_a/mode &&
		ip netns exec "$NS" sh -c "echo connected >/sys/class/net/$ib_b/mode" &&
		wait_for 30 ping -c 1 -W 1 198.51.100.2 || return 1
	klog_mark
	filter_to_module 32 rxe || return 1
	storm_start 100 20 N
	# Every switch closes the connections of that side; the pings make new ones. Commands
	# may fail here: only the outcome afterwards counts.
	switch="echo datagram >/sys/class/net/$ib_b/mode;"
	switch+=" echo connected >/sys/class/net/$ib_b/mode"
	for i in $(seq 1 10); do
		ip netns exec "$NS" sh -c "$switch" 2>/dev/null
		echo datagram >/sys/class/net/$ib_a/mode 2>/dev/null
		echo connected >/sys/class/net/$ib_a/mode 2>/dev/null
		ping -c 2 -W 1 198.51.100.2 >/dev/null 2>&1
		[ "$(cat $FS/times)" -gt 0 ] || break
	done
	injected=$(storm_end)
	echo "$injected allocations under $MODULE failed; $ib_a: connections made" \
		"$(ethtool_stat "$ib_a" cm_tx_established)," \
		"failed $(ethtool_stat "$ib_a" cm_tx_failed)"
	[ "$injected" -gt 0 ] && recovered
}
if [ -e $FS/require-start ]; then
	desc="allocations under $MODULE's code failing at random while"
	desc+=" connections are made anew: recovers"
	ipoib_check "$desc" ours_storm
else
	ipoib_skip "allocations under $MODULE's code failing while connections are made anew" \
		"no stack-trace filter (CONFIG_FAULT_INJECTION_STACKTRACE_FILTER)"
fi
if [ -e $FS/require-start ]; then
	desc="one in ten atomic allocations under $MODULE's code failing for 10 s under traffic"
	desc+=" both ways and a mode switch: received packets dropped and counted, recovers"
	ipoib_check "$desc" atomic_storm
else
	ipoib_skip "atomic allocations under $MODULE's code failing under traffic" \
		"no stack-trace filter (CONFIG_FAULT_INJECTION_STACKTRACE_FILTER)"
fi
ip netns del "$NS" 2>/dev/null
ipoib_check "module unloads" eval 'rmmod $MODULE && ! module_loaded'
# shellcheck disable=SC2016 # expanded by eval
ipoib_check "a clean load afterwards creates both interfaces" eval '
	klog_mark && modprobe $MODULE && [ -n "$(if_of rxe0)" ] && [ -n "$(if_of rxe1)" ] &&' \
	'rmmod $MODULE'
KLOG_MARK=$start_mark
klog_clean_since || ktap_print_msg "kernel log not clean (see above)"
# Leave soft-RoCE as the next program expects it: a QP1 rxe failed stays failed until its
# device is added again.
if rdma res show qp lqpn 1 | grep -q "state ERR"; then
	ktap_print_msg "re-adding rxe0 and rxe1 (a QP1 left in the error state)"
	rdma link delete rxe0 && rdma link delete rxe1 &&
		rxe_add rxe0 veth0 && rxe_add rxe1 veth1 ||
		ktap_print_msg "soft-RoCE devices not re-added"
fi
ktap_finished
