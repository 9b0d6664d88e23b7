#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Active-backup bonding of two IPoIB interfaces, the way IPoIB ports are bonded: ibbond
# (bond0 is the built-in bonding driver's own) over the interfaces of brxe2 and brxe3; the
# peer is brxe4's interface in namespace bondpeer. Each of the three soft-RoCE devices sits
# on a veth pair of its own, the far ends joined by a bridge: one link, on which taking a
# slave's veth down takes its port down and leaves the others up.
#
# The bond is an InfiniBand link with the active slave's address (fail_over_mac active,
# which IPoIB needs: a slave's address is its own queue pair), and pings go through it.
# Under a 20 s TCP stream the active slave's port goes down (the veth under it): the other
# slave takes over with its own address, the peer's neighbour entry follows it (the bond's
# gratuitous ARP), the stream ends with a figure above 0 and the new slave carried more than
# 1 MiB of it. The port comes back and its slave waits as backup. First in datagram mode,
# then in connected mode at MTU 65520 (a 60000-byte ping over a connection of the new
# slave).
#
# The bond is deleted: both slaves released, the one whose port stayed up pinging alone over
# a connection (rxe leaves the GSI queue pair of the other port in error after a CM message
# failed during its link flap, so that port makes no connection until its device is added
# again).
. "$(dirname "$0")/lib.sh"

one_host_begin 15
klog_mark
start_mark=$KLOG_MARK

bond_ports() {
	local i
	ip link add bbr0 type bridge && ip link set bbr0 up || return 1
	for i in 2 3 4; do
		ip link add "bv$i" type veth peer name "bw$i" &&
			ip addr add "192.0.2.2$i/24" dev "bv$i" &&
			ip link set "bw$i" master bbr0 && ip link set "bw$i" up &&
			ip link set "bv$i" up && rxe_add "brxe$i" "bv$i" || return 1
	done
}
ipoib_check "three soft-RoCE devices on veth pairs joined by a bridge (brxe2, brxe3, brxe4)" \
	bond_ports
ipoib_check "modprobe $MODULE" modprobe "$MODULE"

peer=$(if_of brxe4) s1=$(if_of brxe2) s2=$(if_of brxe3)
# The Ethernet device under each slave's port: taking it down takes the port down.
lower_of() { if [ "$1" = "$s1" ]; then echo bv2; else echo bv3; fi; }
P="ip netns exec bondpeer"

peer_up() {
	[ -n "$peer" ] && [ -n "$s1" ] && [ -n "$s2" ] ||
		{ echo "interfaces: '$peer' '$s1' '$s2'"; return 1; }
	ip netns add bondpeer && ip link set "$peer" netns bondpeer &&
		$P ip addr add 198.51.100.1/24 dev "$peer" && $P ip link set "$peer" up &&
		$P ip link set lo up
}
ipoib_check "peer: $peer in namespace bondpeer (198.51.100.1)" peer_up

# bond_up MODE [MTU]: ibbond (active-backup, link watched every 100 ms) over s1 and s2 in
# MODE, the peer in MODE too; every MTU set to MTU if given, else the mode's own.
bond_up() {
	local s
	echo "$1" >"/sys/class/net/$s1/mode" && echo "$1" >"/sys/class/net/$s2/mode" &&
		$P sh -c "echo $1 >/sys/class/net/$peer/mode" || return 1
	[ -z "${2:-}" ] || $P ip link set "$peer" mtu "$2" || return 1
	# A bond sets its MTU on each slave it takes: the slaves' own first (a new bond has
	# Ethernet's 1500, over the 1020 of datagram mode on this port).
	ip link add ibbond type bond mode active-backup miimon 100 fail_over_mac active &&
		ip link set ibbond mtu "${2:-$(cat "/sys/class/net/$s1/mtu")}" || return 1
	for s in "$s1" "$s2"; do
		ip link set "$s" down && ip link set "$s" master ibbond || return 1
	done
	ip addr add 198.51.100.2/24 dev ibbond && ip link set ibbond up || return 1
	ip -d link show ibbond
	# A bond of IPoIB interfaces is an IPoIB interface to the stack: their link type, their
	# header (ours), the active slave's address.
	ip -d link show ibbond | grep -q "link/infiniband" || return 1
	wait_for 30 eval '[ -n "$(active)" ]' || { echo "no active slave"; return 1; }
	[ "$(cat /sys/class/net/ibbond/address)" = "$(cat "/sys/class/net/$(active)/address")" ] &&
		[ "$(cat "/sys/class/net/$s1/mtu")" = "$(cat /sys/class/net/ibbond/mtu)" ] &&
		[ "$(cat "/sys/class/net/$s2/mtu")" = "$(cat /sys/class/net/ibbond/mtu)" ]
}
active() { cat /sys/class/net/ibbond/bonding/active_slave 2>/dev/null; }
bond_down() {
	ip link del ibbond || return 1
	# Released slaves are ours again, neither bonded nor holding the bond's address.
	! [ -e "/sys/class/net/$s1/master" ] && ! [ -e "/sys/class/net/$s2/master" ]
}

tx_of() { cat "/sys/class/net/$1/statistics/tx_bytes"; }

# failover MODE: a TCP stream from ibbond to the peer; once the active slave carries it,
# its port goes down. The other slave becomes active with its own address, the peer's
# neighbour entry for the bond follows it, the stream ends normally with a figure above 0
# and the new slave carried at least 1 MiB of it. The port comes back; its slave waits as
# the backup.
failover() {
	local old new lower tx0 pid out lladdr
	$P netserver </dev/null >/dev/null 2>&1 3>&- 4>&- || return 1
	wait_for 10 tcp_listening 12865 bondpeer || return 1
	old=$(active)
	[ -n "$old" ] || { echo "no active slave"; return 1; }
	timeout 120 netperf -H 198.51.100.1 -t TCP_STREAM -l 20 -P 0 -- -m 65536 \
		-o THROUGHPUT,THROUGHPUT_UNITS >/tmp/bond.netperf 2>&1 &
	pid=$!
	tx0=$(tx_of "$old")
	wait_for 20 eval '[ $(($(tx_of "$old") - tx0)) -gt 1048576 ]' || {
		echo "no stream on $old"
		kill "$pid"
		return 1
	}
	lower=$(lower_of "$old")
	echo "$old carries the stream; taking $lower (its port) down"
	ip link set "$lower" down
	wait_for 20 eval '[ -n "$(active)" ] && [ "$(active)" != "$old" ]' || {
		echo "still active: '$(active)'"
		ip link set "$lower" up
		kill "$pid"
		return 1
	}
	new=$(active)
	tx0=$(tx_of "$new")
	echo "failed over to $new"
	wait "$pid"
	out=$(tail -n 1 /tmp/bond.netperf)
	echo "netperf: $out; $new sent $(($(tx_of "$new") - tx0)) bytes since"
	lladdr=$($P ip neigh show 198.51.100.2 dev "$peer" |
		sed -n 's/.* lladdr \([0-9a-f:]*\).*/\1/p')
	echo "the peer's entry for the bond: $lladdr"
	ip link set "$lower" up
	[ "$(cat /sys/class/net/ibbond/address)" = "$(cat "/sys/class/net/$new/address")" ] &&
		[ "$lladdr" = "$(cat "/sys/class/net/$new/address")" ] &&
		echo "$out" | awk -F, 'NF == 2 { ok = $1 + 0 > 0 } END { exit !ok }' &&
		[ $(($(tx_of "$new") - tx0)) -gt 1048576 ] || return 1
	wait_for 30 eval '[ "$(cat "/sys/class/net/$old/carrier" 2>/dev/null)" = 1 ]' &&
		[ "$(active)" = "$new" ]
}

for mode in datagram connected; do
	mtu=
	[ "$mode" = connected ] && mtu=65520
	desc="$mode: ibbond (active-backup) over $s1 and $s2${mtu:+, MTU $mtu}:"
	desc+=" an InfiniBand link with the active slave's address"
	ipoib_check "$desc" bond_up "$mode" $mtu
	ipoib_check "$mode: the peer answers ping through ibbond" \
		wait_for 30 ping -c 1 -W 2 198.51.100.1
	desc="$mode: the active slave's port goes down under a TCP stream:"
	desc+=" the other slave takes it over, with its address, the peer follows,"
	desc+=" the stream goes on; the port back, its slave waits as backup"
	ipoib_check "$desc" failover
	$P sh -c 'kill $(pidof netserver)' 2>/dev/null
	if [ "$mode" = connected ]; then
		rc_on() { ethtool_stat "$(active)" cm_tx_connections; }
		desc="$mode: a big ping after the failover goes over a"
		desc+=" connection of the new active slave"
		ipoib_check "$desc" \
			eval 'wait_for 30 ping -c 1 -W 2 -s 60000 198.51.100.1 &&' \
				'[ "$(rc_on)" -ge 1 ]'
	fi
	ipoib_check "$mode: ibbond deleted, both slaves released" bond_down
done

# The slave whose port stayed up (rxe leaves the GSI queue pair of a port in error when a
# CM message failed to go out while its link was down, so the other one could make no
# connection until its device is added again; C's would have the same trouble).
alone() {
	ip addr add 198.51.100.2/24 dev "$s2" && ip link set "$s2" up &&
		wait_for 30 ping -c 1 -W 2 -s 60000 198.51.100.1 && return 0
	cat "/sys/kernel/debug/ipoib/${s2}_cm" "/sys/kernel/debug/ipoib/${peer}_cm"
	rdma res show qp link brxe3/1
	return 1
}
ipoib_check "a released slave works alone (a 60000-byte ping from $s2 over a connection)" alone
ip addr del 198.51.100.2/24 dev "$s2" 2>/dev/null
ip netns del bondpeer 2>/dev/null
ipoib_check "unloaded, kernel log clean" eval 'wait_for 10 eval "rmmod $MODULE" && klog_clean_since'
remove_ports() {
	local i
	for i in 2 3 4; do rdma link del "brxe$i" && ip link del "bv$i" || return 1; done
	ip link del bbr0
}
ipoib_check "the three soft-RoCE devices, their veth pairs and the bridge removed" remove_ports
ktap_finished
