#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Two hosts on one Ethernet link, soft-RoCE on each: the fabric carries RC traffic between
# them and ib_ipoib takes on the port on both. Run on both hosts with IPOIB_ROLE=server or
# client, IPOIB_LOCAL_IP and IPOIB_PEER_IP set; the client prints the raw RC bandwidth.
. "$(dirname "$0")/lib.sh"

SYNC_PORT=5001
BW_PORT=18515

ktap_print_header
if [ -z "${IPOIB_ROLE:-}" ] || [ -z "${IPOIB_LOCAL_IP:-}" ] || [ -z "${IPOIB_PEER_IP:-}" ]; then
	ktap_skip_all "needs a second host: set IPOIB_ROLE, IPOIB_LOCAL_IP and IPOIB_PEER_IP"
	exit "$KSFT_SKIP"
fi
ktap_set_plan 6
role=$IPOIB_ROLE peer=$IPOIB_PEER_IP
klog_mark
start_mark=$KLOG_MARK

ipoib_check "$role: rxe0 on eth0 ($IPOIB_LOCAL_IP) ACTIVE" two_hosts_topology
ipoib_check "$role: peer $peer answers ping" wait_for 60 ping -c 1 -W 1 "$peer"
gidx=$(gid_index rxe0 "$IPOIB_LOCAL_IP")

# Raw RC send bandwidth between the hosts: the baseline IPoIB is judged against.
rc_bandwidth() {
	local args=(-d rxe0 -x "$gidx" -c RC -s 65536 -n 200 -p "$BW_PORT" -F)
	if [ "$role" = server ]; then
		timeout 120 ib_send_bw "${args[@]}" >/tmp/bw.log 2>&1
	else
		wait_for 60 eval 'timeout 120 ib_send_bw "${args[@]}" "$peer" >/tmp/bw.log 2>&1'
	fi
	local rc=$?
	grep -A1 '#bytes' /tmp/bw.log | sed 's/^/  /'
	[ $rc = 0 ] || cat /tmp/bw.log
	return $rc
}
ipoib_check "$role: ib_send_bw RC 64 KiB x 200 between the hosts" rc_bandwidth

klog_mark
ipoib_check "$role: modprobe $MODULE" modprobe "$MODULE"
ipoib_check "$role: rxe0 port 1 logged with link, MTU and GID 0" port_logged "$(klog_since)" rxe0 1

# Finish together: the client tells the server it is done, so neither tears down early.
finish() {
	if [ "$role" = server ]; then
		timeout 180 nc -l -p "$SYNC_PORT" </dev/null >/dev/null
	else
		wait_for 60 eval 'echo done >/dev/tcp/$peer/$SYNC_PORT'
	fi
}
finish || ktap_print_msg "peer did not finish in time"
rmmod "$MODULE"
KLOG_MARK=$start_mark
ipoib_check "$role: unloaded, kernel log clean" eval '! module_loaded && klog_clean_since'
ktap_finished
