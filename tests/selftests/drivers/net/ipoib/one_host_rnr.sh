#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Receive buffers used up under a stream. rxe's fault injection (fail_rxe_rnr) answers
# every fifth message "receiver not ready" (an RNR NAK), as if the receive queue were empty,
# and the sender tries again after the wait the NAK asks. 4 MiB over TCP each way at once
# arrive intact and no connection fails (on RoCE our connections retry such NAKs forever).
# Every NAK on the wire (ib_capture, which reads RoCE v2 too) asks a wait of 0.64 ms (code
# 12), not the CM's default of 655 ms (code 0), which would stall the sender that long each
# time. Both receive paths: the shared receive queue (round 1) and rings of their own
# (cm_srq=0, round 2).
. "$(dirname "$0")/lib.sh"

NS_PEER=ipoibpeer
OURS=198.51.100.1 PEER=198.51.100.2
# The RNR timer code our receive queue pairs advertise (0.64 ms).
TIMER=12

one_host_begin 5
klog_mark
start_mark=$KLOG_MARK
capture=$(dirname "$0")/ib_capture

# up SRQ: loads the module with cm_srq=SRQ, puts rxe1's interface in the peer's namespace
# and both in connected mode, MTU 65520, and checks they talk.
up() {
	modprobe "$MODULE" cm_srq="$1" || return 1
	ib_a=$(if_of rxe0) ib_b=$(if_of rxe1)
	[ -n "$ib_a" ] && [ -n "$ib_b" ] ||
		{ echo "interfaces not found: '$ib_a' '$ib_b'"; return 1; }
	ip netns add "$NS_PEER" && ip link set "$ib_b" netns "$NS_PEER" &&
		ip -n "$NS_PEER" addr add "$PEER/24" dev "$ib_b" &&
		ip -n "$NS_PEER" link set "$ib_b" mtu 65520 &&
		ip -n "$NS_PEER" link set "$ib_b" up &&
		ip addr add "$OURS/24" dev "$ib_a" && ip link set "$ib_a" mtu 65520 &&
		ip link set "$ib_a" up || return 1
	wait_for 30 ping -c 1 -W 1 "$PEER" && ping -c 2 -W 2 -s 60000 "$PEER"
}

# stream_dry LABEL: 4 MiB over TCP to the peer and 4 MiB back at once, every fifth message
# answered "not ready", watched on the veth: the data arrives intact, RNR NAKs were sent,
# every one asked for the short wait, and no connection failed over them.
stream_dry() {
	local sent failed0 cap i ok=0
	head -c $((4 << 20)) /dev/urandom >/tmp/rnr.bin
	sent=$(sha256sum </tmp/rnr.bin | cut -d' ' -f1)
	failed0=$(($(ethtool_stat "$ib_a" cm_tx_failed) + \
		$(ip netns exec "$NS_PEER" ethtool -S "$ib_b" |
			awk '$1 == "cm_tx_failed:" { print $2 }')))
	# Stopped (SIGTERM) once both ends have their data: it prints what it saw then.
	"$capture" veth0 100 >/tmp/rnr.cap 2>/tmp/rnr.cap.err &
	cap=$!
	wait_for 10 grep -q "^capturing on" /tmp/rnr.cap.err || return 1
	ip netns exec "$NS_PEER" timeout 90 nc -l -p 5003 </dev/null | sha256sum >/tmp/rnr.got0 &
	timeout 90 nc -l -p 5004 </dev/null | sha256sum >/tmp/rnr.got1 &
	wait_for 10 eval 'tcp_listening 5003 "$NS_PEER" && tcp_listening 5004' || return 1
	rnr_every 5 || return 1
	timeout 80 cat /tmp/rnr.bin >/dev/tcp/$PEER/5003 &
	ip netns exec "$NS_PEER" timeout 80 bash -c "cat /tmp/rnr.bin >/dev/tcp/$OURS/5004" &
	wait_for 90 eval '[ -s /tmp/rnr.got0 ] && [ -s /tmp/rnr.got1 ]'
	rnr_every 0
	kill "$cap" 2>/dev/null
	wait
	for i in 0 1; do
		echo "direction $i: sent sha256 $sent, received $(cut -d' ' -f1 </tmp/rnr.got$i)"
		[ "$(cut -d' ' -f1 </tmp/rnr.got$i)" = "$sent" ] && ok=$((ok + 1))
	done
	echo "what the veth carried:"
	cat /tmp/rnr.cap
	local failed=$(($(ethtool_stat "$ib_a" cm_tx_failed) + \
		$(ip netns exec "$NS_PEER" ethtool -S "$ib_b" |
			awk '$1 == "cm_tx_failed:" { print $2 }')))
	echo "$1: connections failed meanwhile: $((failed - failed0))"
	[ "$ok" = 2 ] && grep -q "^rnr-nak .* timer=$TIMER " /tmp/rnr.cap &&
		! grep "^rnr-nak" /tmp/rnr.cap | grep -qv " timer=$TIMER " &&
		[ "$failed" = "$failed0" ]
	local rc=$?
	rm -f /tmp/rnr.bin /tmp/rnr.got0 /tmp/rnr.got1 /tmp/rnr.cap
	return $rc
}

down() {
	rmmod "$MODULE" && ! module_loaded && ip netns del "$NS_PEER"
}

ipoib_check "modprobe $MODULE: connected mode, MTU 65520, shared receive queue" up 1
desc="4 MiB each way at once over TCP, every fifth message RNR NAKed: every NAK asks 0.64 ms,"
desc+=" no connection fails (shared queue)"
ipoib_check "$desc" stream_dry "shared queue"
ipoib_check "reloaded with cm_srq=0: receive rings of their own" eval 'down && up 0'
desc="4 MiB each way at once over TCP, every fifth message RNR NAKed: every NAK asks 0.64 ms,"
desc+=" no connection fails (own rings)"
ipoib_check "$desc" stream_dry "own rings"
KLOG_MARK=$start_mark
ipoib_check "rmmod, kernel log clean" eval 'down && klog_clean_since'
ktap_finished
