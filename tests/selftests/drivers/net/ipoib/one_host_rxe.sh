#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The one-host soft-RoCE topology comes up and carries RC traffic between its two devices
# (ibv_rc_pingpong).
. "$(dirname "$0")/lib.sh"

ktap_print_header
ktap_set_plan 4

if ! command -v rdma >/dev/null || ! [ -d /sys/class/infiniband ]; then
	ktap_skip_all "no RDMA core or no rdma tool"
	exit "$KSFT_SKIP"
fi
klog_mark
ipoib_check "one host: veth pair with rxe0 and rxe1" one_host_topology
ipoib_check "one host: both ports ACTIVE" eval 'port_active rxe0 1 && port_active rxe1 1'
g0=$(gid_index rxe0 "$ONE_HOST_IP0")
g1=$(gid_index rxe1 "$ONE_HOST_IP1")
ipoib_check "one host: RoCE v2 GIDs for both addresses (rxe0 $g0, rxe1 $g1)" \
	test -n "$g0" -a -n "$g1"

rc_pingpong() {
	ibv_rc_pingpong -d rxe0 -g "$g0" -n 100 -s 4096 >/tmp/pp-server.log 2>&1 &
	local server=$!
	wait_for 10 tcp_listening 18515 || { cat /tmp/pp-server.log; kill "$server"; return 1; }
	ibv_rc_pingpong -d rxe1 -g "$g1" -n 100 -s 4096 127.0.0.1 >/tmp/pp-client.log 2>&1
	local rc=$?
	wait "$server" || rc=1
	sed 's/^/  /' /tmp/pp-client.log
	return $rc
}
ipoib_check "one host: RC ping-pong rxe1 -> rxe0 (100 x 4 KiB)" rc_pingpong
ktap_finished
