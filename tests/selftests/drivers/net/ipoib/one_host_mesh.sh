#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Many connections at once: MESH_N (nine) soft-RoCE devices on veth pairs joined by a
# bridge, the IPoIB interface of each in its own network namespace, in connected mode with
# MTU 65520. Every interface pings every other with 60000-byte packets, so MESH_N*(MESH_N-1)
# transmit connections (72) and as many receive connections carry traffic together; a second
# round reuses them all. The memory they take is printed per connection.
. "$(dirname "$0")/lib.sh"

MESH_N=${MESH_N:-9}
PAIRS=$((MESH_N * (MESH_N - 1)))

ktap_print_header
ktap_set_plan 7
klog_mark
start_mark=$KLOG_MARK

mesh_topology() {
	local i
	ip link add mbr0 type bridge && ip link set mbr0 up || return 1
	for i in $(seq 1 "$MESH_N"); do
		ip link add "m$i" type veth peer name "mb$i" &&
			ip link set "mb$i" master mbr0 && ip link set "mb$i" up &&
			ip link set "m$i" up &&
			rdma link add "mrxe$i" type rxe netdev "m$i" || return 1
	done
	for i in $(seq 1 "$MESH_N"); do wait_for 10 port_active "mrxe$i" 1 || return 1; done
}
ipoib_check "$MESH_N rxe devices on veth pairs joined by a bridge" mesh_topology

klog_mark
# Loaded here, not left loaded by an earlier program.
module_loaded && rmmod "$MODULE"
ipoib_check "modprobe $MODULE" modprobe "$MODULE"

# Each interface goes into namespace msI as ib0, connected mode, MTU 65520, 198.51.100.I.
mesh_ifaces() {
	local i ifc
	for i in $(seq 1 "$MESH_N"); do
		ifc=$(klog_since |
			sed -n "s/.*$MODULE: mrxe$i port 1: \(ib[0-9]*\) address.*/\1/p" |
			tail -n 1)
		[ -n "$ifc" ] || { echo "no interface logged for mrxe$i"; return 1; }
		ip netns add "ms$i" && ip link set "$ifc" netns "ms$i" &&
			ip -n "ms$i" link set "$ifc" name ib0 &&
			ip -n "ms$i" link set ib0 mtu 65520 &&
			ip -n "ms$i" addr add "198.51.100.$i/24" dev ib0 &&
			ip -n "ms$i" link set ib0 up || return 1
	done
}
ipoib_check "$MESH_N interfaces in their own namespaces, MTU 65520" mesh_ifaces

mem_kib() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
avail_before=$(mem_kib MemAvailable)
slab_before=$(mem_kib Slab)

# ping_all: every namespace pings every other address once, sources in parallel.
ping_all() {
	local i j pids=() failed=0
	for i in $(seq 1 "$MESH_N"); do
		(
			for j in $(seq 1 "$MESH_N"); do
				[ "$i" = "$j" ] && continue
				ip netns exec "ms$i" ping -c 1 -W 10 -s 60000 \
					"198.51.100.$j" >/dev/null ||
					ip netns exec "ms$i" ping -c 2 -W 10 -s 60000 \
						"198.51.100.$j" >/dev/null ||
					{ echo "ms$i -> 198.51.100.$j failed"; exit 1; }
			done
		) &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || failed=1; done
	return $failed
}
mesh_connected() {
	local n
	ping_all || return 1
	n=$(rc_qp_count)
	echo "$n RC queue pairs of $MODULE for $PAIRS ordered pairs"
	[ "$n" = $((2 * PAIRS)) ]
}
ipoib_check "$PAIRS pings of 60000 bytes: one connection each way per pair" mesh_connected

avail_after=$(mem_kib MemAvailable)
slab_after=$(mem_kib Slab)
conns=$((2 * PAIRS))
echo "MEMORY $conns connections ($PAIRS transmit, $PAIRS receive): MemAvailable" \
	"-$((avail_before - avail_after)) KiB, Slab +$((slab_after - slab_before)) KiB"
echo "MEMORY per connection: $(((avail_before - avail_after) / conns)) KiB (MemAvailable)," \
	"$(((slab_after - slab_before) / conns)) KiB (Slab)"

# A second round goes over the same connections: none is made or lost.
mesh_reused() {
	local before after
	before=$(rc_qp_count)
	ping_all || return 1
	after=$(rc_qp_count)
	echo "RC queue pairs: $before before, $after after"
	[ "$before" = "$after" ]
}
ipoib_check "all $PAIRS connections carry a second round, none made or lost" mesh_reused

ipoib_check "rmmod with the interfaces in other namespaces" rmmod "$MODULE"
mesh_teardown() {
	local i
	for i in $(seq 1 "$MESH_N"); do
		ip netns del "ms$i"
		rdma link delete "mrxe$i" && ip link del "m$i" || return 1
	done
	ip link del mbr0
}
KLOG_MARK=$start_mark
ipoib_check "topology removed, kernel log clean" eval 'mesh_teardown && klog_clean_since'
ktap_finished
