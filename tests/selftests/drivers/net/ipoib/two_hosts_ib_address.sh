#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The hardware address set by the user (`ip link set ib0 address`, `ip link add ...
# address`), on the InfiniBand fabric (rxe_ib on eth0 of both hosts, opensm on the server),
# with the C ipoib as the control: in the first round the server runs C and the client ours,
# in the second the other way round. Run on both hosts with IPOIB_ROLE, IPOIB_LOCAL_IP and
# IPOIB_PEER_IP set.
#
# Only the GUID half of the address may change (C's ipoib_set_mac): refused while ib0 is up
# (EBUSY); refused with another QPN or a GUID of 0 (EINVAL); a new GUID accepted while ib0
# is down, and taken by its child ib0.8001 too. rxe_ib's ports have one GID (the port
# GUID's), so that GUID is in no GID table: ib0 comes up without joining the broadcast
# group, so without carrier (ours asks the SA for no join, and logs why). The port's own
# GUID set back, on the child too: carrier, and the peer's pings, which resolve the address
# anew, are answered. A child made with `address` has the GID
# asked for. Unload, clean log.
. "$(dirname "$0")/lib.sh"

ktap_print_header
two_hosts_roles
ktap_set_plan 16
ib_fabric_topology || ktap_exit_fail_msg "$role: $IB_DEV not added on eth0"
two_hosts_meet
trap 'opensm_stop' EXIT

[ "$role" = server ] && opensm_start
wait_for 90 ib_port_is ACTIVE || ktap_exit_fail_msg "$role: port not ACTIVE under opensm"

address() { cat "/sys/class/net/$1/address"; }
# gid_of ADDRESS: the GID half of an IPoIB hardware address (its last 16 bytes).
gid_of() { echo "${1#*:*:*:*:}"; }
# with_byte ADDRESS N VALUE: ADDRESS with its byte N (from 0) replaced by VALUE (hex).
with_byte() {
	local -a b
	IFS=: read -ra b <<<"$1"
	b[$2]=$3
	(IFS=:; echo "${b[*]}")
}
# refused ADDRESS ERROR: `ip link set ib0 address ADDRESS` fails with ERROR, and ib0's
# address is unchanged.
refused() {
	local before out
	before=$(address ib0)
	if out=$(ip link set ib0 address "$1" 2>&1); then
		echo "address $1 accepted"
		return 1
	fi
	echo "$out"
	grep -q "$2" <<<"$out" && [ "$(address ib0)" = "$before" ]
}
carrier() { ip link show "$1" | grep -q LOWER_UP; }

round() {
	local drv=$1 n=$2 base=$((7810 + $2 * 20))
	local who="$role ($drv)" own new
	klog_mark
	up() {
		load_driver "$drv" && ip addr add "$ib_local/24" dev ib0 && ip link set ib0 up &&
			wait_for 60 carrier ib0
	}
	ipoib_check "$who: ib0 up, carrier" up
	own=$(address ib0)
	# Another GUID: the port's with its last byte changed.
	new=$(with_byte "$own" 19 "$(printf '%02x' $((0x${own##*:} ^ 0x5a)))")
	ipoib_check "$who: the address refused while ib0 is up (EBUSY)" \
		refused "$new" "Device or resource busy"
	ip link add link ib0 name ib0.8001 type ipoib pkey 0x8001
	ip link set ib0 down
	invalid() {
		local other
		other=$(with_byte "$own" 3 \
			"$(printf '%02x' $((0x$(echo "$own" | cut -d: -f4) ^ 1)))")
		refused "$other" \
			"Invalid argument" &&
			refused "$(cut -d: -f1-12 <<<"$own"):00:00:00:00:00:00:00:00" \
				"Invalid argument"
	}
	ipoib_check "$who: down, an address with another QPN or with a GUID of 0 refused (EINVAL)" \
		invalid
	taken() {
		ip link set ib0 address "$new" || return 1
		echo "ib0 $(address ib0), ib0.8001 $(address ib0.8001)"
		[ "$(address ib0)" = "$new" ] &&
			[ "$(gid_of "$(address ib0.8001)")" = "$(gid_of "$new")" ]
	}
	ipoib_check "$who: down, a new GUID taken by ib0 and its child" taken
	# The SA would refuse joins with a GID the port lacks; ours does not even ask (as C), and
	# says why.
	no_join() {
		local fails
		fails=$(ethtool_stat ib0 mcast_join_failures)
		ip link set ib0 up || return 1
		! wait_for $((20 * SLOW)) carrier ib0 ||
			{ echo "carrier on with a GUID in no GID table"; return 1; }
		[ "$drv" = c ] && return 0
		echo "mcast_join_failures $fails -> $(ethtool_stat ib0 mcast_join_failures)"
		[ "$(ethtool_stat ib0 mcast_join_failures)" = "$fails" ] &&
			klog_since | grep "ib0: address .*: GID not in port 1's GID table"
	}
	ipoib_check "$who: up with a GUID the port's GID table lacks: no group joined, no carrier" \
		no_join
	back() {
		ip link set ib0 down && ip link set ib0 address "$own" && ip link set ib0 up &&
			wait_for 60 carrier ib0 || { ip link show ib0; return 1; }
		[ "$(gid_of "$(address ib0.8001)")" = "$(gid_of "$own")" ] ||
			{ echo "ib0.8001 kept $(address ib0.8001)"; return 1; }
		both_at $((base + 1)) || return 1
		wait_for 30 ping -c 1 -W 1 "$ib_peer"
	}
	ipoib_check "$who: the port's GUID back: carrier, the peer reached" back
	both_at $((base + 2))
	made() {
		local asked
		asked=$(with_byte "$new" 18 \
			"$(printf '%02x' $((0x$(echo "$new" | cut -d: -f19) ^ 0x33)))")
		ip link add link ib0 name ib0.8002 address "$asked" \
			type ipoib pkey 0x8002 || return 1
		echo "asked $asked, got $(address ib0.8002)"
		[ "$(gid_of "$(address ib0.8002)")" = "$(gid_of "$asked")" ]
	}
	ipoib_check "$who: a child made with an address has the GID asked for" made
	done_ok() {
		ip link del ib0.8002 && ip link del ib0.8001 && ip link set ib0 down &&
			rmmod "$MODULE" && ! test -d /sys/class/net/ib0 && klog_clean_since
	}
	ipoib_check "$who: children deleted, driver unloaded, kernel log clean" done_ok
}

ib_rounds 7899
ktap_finished
