# SPDX-License-Identifier: GPL-2.0
# Shared helpers of the ipoib selftests: KTAP output, soft-RoCE topologies, kernel log checks.

. "$(dirname "${BASH_SOURCE[0]}")/../../../kselftest/ktap_helpers.sh"

MODULE=ib_ipoib

# ipoib_skip DESCRIPTION REASON: a skipped test, with the reason in the KTAP directive.
ipoib_skip() {
	__ktap_test "ok" "$1" "SKIP $2"
	KTAP_CNT_SKIP=$((KTAP_CNT_SKIP + 1))
}

# ipoib_check DESCRIPTION COMMAND...: pass if COMMAND succeeds; its output goes to the log.
ipoib_check() {
	local desc=$1
	shift
	if "$@"; then ktap_test_pass "$desc"; else ktap_test_fail "$desc"; fi
}

# wait_for SECONDS COMMAND...: retry COMMAND every 0.2 s until it succeeds or time runs out.
wait_for() {
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@"; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# gid_index_link_local DEV: index of the RoCE v2 link-local (fe80::) GID on port 1 of DEV,
# the kind of GID an IPoIB address carries.
gid_index_link_local() {
	local f
	for f in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		case "$(cat "$f" 2>/dev/null)" in
		fe80:*) grep -q "RoCE v2" \
			"/sys/class/infiniband/$1/ports/1/gid_attrs/types/${f##*/}" 2>/dev/null &&
			echo "${f##*/}" && return 0 ;;
		esac
	done
	return 1
}

# Kernel log bookmarks: klog_mark, then klog_since prints what was logged after it.
# The guests boot with a 16 MiB log buffer; should it wrap all the same, line counts no
# longer mark a place, and klog_since reads the whole log rather than nothing.
klog_mark() {
	KLOG_MARK=$(dmesg | wc -l)
	KLOG_FIRST=$(dmesg | head -n 1)
}
klog_since() {
	if [ "${KLOG_MARK:-0}" != 0 ] && [ "$(dmesg | head -n 1)" != "${KLOG_FIRST:-}" ]; then
		echo "klog: the kernel log wrapped since the mark; reading all of it" >&2
		dmesg
		return
	fi
	dmesg | tail -n +"$((KLOG_MARK + 1))"
}

# Reports of kernel trouble; any of these in the log fails a test.
KLOG_TROUBLE='WARNING:|BUG:|Oops|Call Trace|circular locking|possible recursive locking|KASAN'
KLOG_TROUBLE+='|unreferenced object|suspected memory leak|UBSAN|general protection|Kernel panic'
KLOG_TROUBLE+='|refcount_t:|inconsistent lock state|sleeping function called from invalid context'
KLOG_TROUBLE+='|hung_task|soft lockup|before their queue pair drained'
# An allocation failure report (warn_alloc: the fault-injection program fails allocations on
# purpose) dumps a stack that is not trouble: without_alloc_reports leaves those dumps out.
without_alloc_reports() {
	awk '/page allocation failure:|vmalloc error:/ { skip = 80 }
		skip > 0 { skip--; if ($0 ~ /<\/TASK>/) skip = 0; next }
		{ print }'
}
klog_clean_since() { ! klog_since | without_alloc_reports | grep -E "$KLOG_TROUBLE"; }
# if_of DEV: the interface the module logged for port 1 of RDMA device DEV since the mark.
if_of() { klog_since | sed -n "s/.*$MODULE: $1 port 1: \(ib[0-9]*\) address.*/\1/p" | tail -n 1; }

# udp_flood SECONDS ADDR [NETNS]: starts sending 1000-byte UDP datagrams to ADDR's discard
# port, as fast as they go, from namespace NETNS if given, in the background; $! is then the
# flood's own process (timeout's), so that killing it stops the flood. (A function run with
# `&` would be a subshell, whose death leaves the flood running into the next check.)
udp_flood() {
	local ns=()
	local flood="exec 3>/dev/udp/$2/9; while :; do printf '%1000s' x >&3 2>/dev/null; done"
	[ -n "${3:-}" ] && ns=(ip netns exec "$3")
	timeout "$1" "${ns[@]}" bash -c "$flood" &
}

# kernel_kib: KiB of slab and vmalloc memory in use, once freed objects went back (RCU)
# and caches were dropped: what connections and interfaces take.
kernel_kib() {
	sleep 1
	echo 3 >/proc/sys/vm/drop_caches
	awk '$1 == "Slab:" || $1 == "VmallocUsed:" { kib += $2 } END { print kib }' /proc/meminfo
}

# kasan_kernel: the kernel runs KASAN (each allocation carries redzones; freed memory waits
# in its quarantine before the totals above see it back).
kasan_kernel() { grep -q ' kasan_report$' /proc/kallsyms; }

# kmemleak_clear / kmemleak_none: on a kmemleak kernel, forget what it reported so far; then
# whether a scan (two: an object is reported once unreferenced in two) finds leaks now,
# printing them.
KMEMLEAK=/sys/kernel/debug/kmemleak
kmemleak_clear() { echo clear >$KMEMLEAK; }
kmemleak_none() {
	local out
	echo scan >$KMEMLEAK && echo scan >$KMEMLEAK || return 1
	out=$(cat $KMEMLEAK)
	[ -z "$out" ] || { echo "$out" | head -n 40; return 1; }
}

port_state() { cat "/sys/class/infiniband/$1/ports/$2/state" 2>/dev/null; }
port_active() { port_state "$1" "$2" | grep -q ACTIVE; }

# rxe_add NAME NETDEV: soft-RoCE device NAME on NETDEV, waited for until its port is active.
rxe_add() {
	rdma link add "$1" type rxe netdev "$2" || return 1
	wait_for 10 port_active "$1" 1
}

# gid_index DEV IPV4: index of the RoCE v2 GID that carries IPV4 on port 1 of DEV.
gid_index() {
	local mapped f types=/sys/class/infiniband/$1/ports/1/gid_attrs/types
	mapped=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$2" | tr . ' '))
	for f in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		if [ "$(cat "$f" 2>/dev/null)" = "$mapped" ] &&
			grep -q "RoCE v2" "$types/${f##*/}" 2>/dev/null; then
			echo "${f##*/}"
			return 0
		fi
	done
	return 1
}

# One host: veth0 (192.0.2.1) and veth1 (192.0.2.2) with rxe0 and rxe1 on them.
ONE_HOST_IP0=192.0.2.1
ONE_HOST_IP1=192.0.2.2
one_host_topology() {
	[ -d /sys/class/infiniband/rxe0 ] && [ -d /sys/class/infiniband/rxe1 ] && return 0
	sysctl -qw net.ipv4.conf.all.accept_local=1 || return 1
	ip link add veth0 type veth peer name veth1 || return 1
	ip addr add "$ONE_HOST_IP0/24" dev veth0 &&
		ip addr add "$ONE_HOST_IP1/24" dev veth1 &&
		ip link set veth0 up && ip link set veth1 up || return 1
	rxe_add rxe0 veth0 && rxe_add rxe1 veth1
}

# one_host_begin PLAN: the start of a one-host program: its KTAP header, all of it skipped
# if the module is not installed, the topology up, the module not loaded, PLAN tests.
one_host_begin() {
	ktap_print_header
	if ! modinfo "$MODULE" >/dev/null 2>&1; then
		ktap_skip_all "module $MODULE not installed"
		exit "$KSFT_SKIP"
	fi
	one_host_topology || ktap_exit_fail_msg "soft-RoCE topology did not come up"
	module_loaded && rmmod "$MODULE"
	ktap_set_plan "$1"
}

# Two hosts: rxe0 on eth0, which carries IPOIB_LOCAL_IP/24.
two_hosts_topology() {
	[ -d /sys/class/infiniband/rxe0 ] && return 0
	ip addr add "$IPOIB_LOCAL_IP/24" dev eth0 && ip link set eth0 up || return 1
	rxe_add rxe0 eth0
}

# Every port of every RDMA device, as "DEV PORT" lines.
all_ports() {
	local d p
	for d in /sys/class/infiniband/*; do
		for p in "$d"/ports/*; do echo "${d##*/} ${p##*/}"; done
	done
}

module_loaded() { grep -q "^$MODULE " /proc/modules; }
# RC queue pairs the module holds (connected mode: one per connection).
rc_qp_count() { rdma res show qp type RC | grep -c "comm \[$MODULE\]"; }

# port_logged LOG DEV PORT: the module's add line for DEV/PORT is in LOG with the port's
# real link layer and state (sysfs), active MTU (ibv_devinfo) and GID 0 (sysfs).
port_logged() {
	local ll state mtu gid kind
	ll=$(cat "/sys/class/infiniband/$2/ports/$3/link_layer")
	state=$(port_state "$2" "$3" | cut -d' ' -f2)
	mtu=$(ibv_devinfo -d "$2" -i "$3" | sed -n 's/.*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
	gid=$(cat "/sys/class/infiniband/$2/ports/$3/gids/0")
	case "$ll" in
	InfiniBand) kind="InfiniBand (InfiniBand link)" ;;
	*) kind="RoCE (Ethernet link)" ;;
	esac
	local want="$MODULE: $2 port $3: $kind, state $state, active MTU $mtu, GID\[0\] $gid,"
	want+=" broadcast 00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"
	echo "$1" | grep -q "$want" || { echo "expected in the kernel log: $want"; return 1; }
}
port_removed_logged() { echo "$1" | grep -q "$MODULE: $2 port $3: removed"; }

# Two-host helpers; the tests set role (server|client) and peer (the other host's eth0).

# netperf_run HOST TEST "TEST-OPTIONS" LABEL: prints "NETPERF LABEL: figure unit"; fails
# unless the figure is above 0.
netperf_run() {
	local out prog
	out=$(timeout 90 netperf -H "$1" -t "$2" -l 5 -P 0 -- ${3:-} \
		-o THROUGHPUT,THROUGHPUT_UNITS 2>&1) ||
		{ echo "$out"; return 1; }
	# A figure of 0 is a failure (a path that carries nothing, as a PMTU black hole).
	# shellcheck disable=SC2016 # an awk program
	prog='NF == 2 { print "NETPERF " what ": " $1 " " $2; ok = $1 + 0 > 0 } END { exit !ok }'
	echo "$out" | tail -n 1 | awk -F, -v what="$4" "$prog"
}

# no_rc_qps: the module holds no RC queue pair (no connection was made).
no_rc_qps() {
	rdma res show qp type RC
	! rdma res show qp type RC | grep -q "comm \[$MODULE\]"
}

# rping_client ADDRESS: rping to ADDRESS; all 3 pings exchanged. Not rping's exit status:
# its event thread may exit the process with an error when the main thread destroys the
# event channel under it at the end ("rdma_get_cm_event: Bad file descriptor"), after a
# complete exchange.
rping_client() {
	local out
	out=$(timeout 60 rping -c -a "$1" -C 3 -v 2>&1)
	echo "$out"
	[ "$(grep -c "ping data" <<<"$out")" -eq 3 ]
}

# ethtool_stat DEV NAME: the counter NAME of `ethtool -S DEV` (empty if absent).
ethtool_stat() { ethtool -S "$1" 2>/dev/null | awk -v n="$2:" '$1 == n { print $2 }'; }

# rnr_every N: has rxe answer every Nth RC message that needs a receive buffer "receiver not
# ready" (an RNR NAK), through its fault attribute fail_rxe_rnr; 0 stops it.
RNR_FAULT=/sys/kernel/debug/fail_rxe_rnr
rnr_every() {
	[ -d "$RNR_FAULT" ] || { echo "no $RNR_FAULT (CONFIG_FAULT_INJECTION_DEBUG_FS)"; return 1; }
	if [ "$1" = 0 ]; then
		echo 0 >"$RNR_FAULT/probability"
		return
	fi
	echo 0 >"$RNR_FAULT/verbose" && echo -1 >"$RNR_FAULT/times" &&
		echo "$1" >"$RNR_FAULT/interval" && echo 100 >"$RNR_FAULT/probability"
}

# snmp_stat PROTO NAME: the counter NAME of PROTO (Ip, Udp, ...) in /proc/net/snmp, found
# by its name in the header line.
snmp_stat() {
	local prog
	# shellcheck disable=SC2016 # an awk program
	prog='$1 == p { if (c) { print $c; exit } for (i = 2; i <= NF; i++) if ($i == n) c = i }'
	awk -v p="$1:" -v n="$2" "$prog" /proc/net/snmp
}

# frag_creates: IPv4 fragments this host made so far.
frag_creates() { snmp_stat Ip FragCreates; }

# finish_together SECONDS: the client tells the server (waiting up to SECONDS) that it is
# done, so neither host tears down while the other still tests.
SYNC_PORT=5001
finish_together() {
	if [ "$role" = server ]; then
		wait_peer "$SYNC_PORT" "$1"
	else
		tell_peer "$SYNC_PORT"
	fi
}

# two_hosts_roles [VAR REASON]: skips the program unless both hosts are named
# (IPOIB_ROLE, IPOIB_LOCAL_IP, IPOIB_PEER_IP) and, if given, VAR is set (REASON says who
# sets it); then sets role, peer, and ib0's addresses ib_local and ib_peer.
two_hosts_roles() {
	if [ -z "${IPOIB_ROLE:-}" ] || [ -z "${IPOIB_LOCAL_IP:-}" ] ||
		[ -z "${IPOIB_PEER_IP:-}" ]; then
		ktap_skip_all "needs a second host:" \
			"set IPOIB_ROLE, IPOIB_LOCAL_IP and IPOIB_PEER_IP"
		exit "$KSFT_SKIP"
	fi
	if [ -n "${1:-}" ] && [ -z "${!1:-}" ]; then
		ktap_skip_all "$2 ($1)"
		exit "$KSFT_SKIP"
	fi
	role=$IPOIB_ROLE peer=$IPOIB_PEER_IP
	case "$role" in
	server) ib_local=198.51.100.1 ib_peer=198.51.100.2 ;;
	*) ib_local=198.51.100.2 ib_peer=198.51.100.1 ;;
	esac
}

# two_hosts_meet: both hosts at the start of this program, a rendezvous over eth0 on a port
# derived from the program's name (6000..6999, a hash in bash: the guests have no cksum),
# so hosts in different programs do not
# meet; a peer that does not come fails the program here instead of leaving it to test
# alone.
two_hosts_meet() {
	local prog=${0##*/} port=0 i
	for ((i = 0; i < ${#prog}; i++)); do
		port=$(((port * 31 + $(printf '%d' "'${prog:i:1}")) % 1000))
	done
	port=$((6000 + port))
	both_at "$port" 300 ||
		ktap_exit_fail_msg "$role: the peer did not reach $prog" \
			"within $((300 * SLOW)) s (port $port)"
	ktap_print_msg "$role: both hosts at the start of $prog"
}

# tcp_listening PORT [NETNS]: a TCP socket (IPv4 or IPv6) listens on PORT, in NETNS if given.
tcp_listening() {
	local ns=()
	[ -n "${2:-}" ] && ns=(ip netns exec "$2")
	"${ns[@]}" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v p="$(printf ':%04X' "$1")" \
			'substr($2, length($2) - 4) == p && $4 == "0A" { f = 1 } END { exit !f }'
}

# How many times slower than the default kernel this one runs (the debug kernel: 4; set
# by the test harness): waits on the other host, which runs as slowly, scale by it.
SLOW=${IPOIB_SLOW:-1}

# Rendezvous over the Ethernet link: wait_peer PORT SECONDS waits for the peer's
# tell_peer PORT (which retries for up to 60 s until the peer listens), both scaled by SLOW.
wait_peer() { timeout "$(($2 * SLOW))" nc -l -p "$1" </dev/null >/dev/null; }
tell_peer() { wait_for $((60 * SLOW)) eval "echo go >/dev/tcp/\$peer/$1"; }

# The client's netperf and iperf3 runs, judged on the server by what ib0 received meanwhile
# (that the daemons run is no test of ours). serve starts the daemons (which must not keep
# the runner's output pipes, fds 3 and 4) and notes ib0's rx_bytes; served BYTES waits for
# the client's runs_done, then whether ib0 received more than BYTES since.
SERVED_PORT=5007
serve() {
	netserver </dev/null >/dev/null 2>&1 3>&- 4>&-
	iperf3 -s -D </dev/null >/dev/null 2>&1 3>&- 4>&-
	SERVED_RX0=$(cat /sys/class/net/ib0/statistics/rx_bytes)
}
served() {
	local got
	wait_peer "$SERVED_PORT" 300 ||
		{ echo "the client never said its runs were over"; return 1; }
	got=$(($(cat /sys/class/net/ib0/statistics/rx_bytes) - SERVED_RX0))
	echo "ib0 received $got bytes during the client's runs"
	[ "$got" -gt "$1" ]
}
runs_done() { tell_peer "$SERVED_PORT"; }

# A bulk transfer checked end to end over TCP: bulk_send PEER PORT MIB sends MIB MiB of
# random bytes (made by bulk_make, or then), then their sha256; bulk_receive PORT compares
# what arrived with it.
BULK=/tmp/bulk.bin
bulk_receive() {
	timeout $((120 * SLOW)) nc -l -p "$1" >"$BULK" </dev/null || return 1
	local want got
	want=$(timeout $((60 * SLOW)) nc -l -p "$1" </dev/null)
	got=$(sha256sum <"$BULK" | cut -d' ' -f1)
	echo "received $(stat -c %s "$BULK") bytes, sha256 $got, sender's $want"
	rm -f "$BULK"
	[ -n "$want" ] && [ "$want" = "$got" ]
}
# bulk_make MIB makes the bytes beforehand (slow under TCG), for a bulk_send that must start
# at once.
bulk_make() { head -c $(($1 << 20)) /dev/urandom >"$BULK"; }
bulk_send() {
	local to=$1 port=$2 sum
	[ "$(stat -c %s "$BULK" 2>/dev/null)" = $(($3 << 20)) ] || bulk_make "$3"
	sum=$(sha256sum <"$BULK" | cut -d' ' -f1)
	# bash's /dev/tcp closes the connection when the file is sent.
	wait_for $((30 * SLOW)) eval 'timeout $((120 * SLOW)) cat "$BULK" >/dev/tcp/$to/$port' ||
		return 1
	rm -f "$BULK"
	# The receiver listens for the sum once the last byte arrived, which may be long after
	# the last was handed to the socket: as long as it may take.
	wait_for $((120 * SLOW)) eval 'echo "$sum" >/dev/tcp/$to/$port'
}

# Whether ethtool reports scatter-gather on DEV as STATE (on or off).
sg_is() { ethtool -k "$1" | grep -q "^scatter-gather: $2"; }

# ktap_relay TEXT: reports the KTAP lines a test module logged ("ok N name", "not ok N
# name", "# message") as this program's own results.
ktap_relay() {
	local line d
	while IFS= read -r line; do
		case "$line" in
		"ok "*) d=${line#ok }; ktap_test_pass "${d#* }" ;;
		"not ok "*) d=${line#not ok }; ktap_test_fail "${d#* }" ;;
		"# "*) ktap_print_msg "${line#\# }" ;;
		esac
	done <<<"$1"
}

# The InfiniBand fabric (rxe_ib): port 1 of IB_DEV, on eth0 of each of two hosts joined back
# to back, brought up by opensm on the server; the C ipoib is the control.
IB_DEV=ibp0
C_IPOIB=/opt/ipoib-c/ib_ipoib.ko
# The C ipoib built without connected mode: a datagram-only peer.
C_IPOIB_UD=/opt/ipoib-c/ib_ipoib_ud.ko
OPENSM_PARTITIONS=/tmp/partitions.conf
ib_port() { cat "/sys/class/infiniband/$IB_DEV/ports/1/$1" 2>/dev/null; }
ib_port_is() { ib_port state | grep -q ": $1\$"; }
# hex_of FILE-VALUE: "0x1a" or "1a" or "5054:00ff:fe00:0001" as one lower-case hex word
hex_of() { printf '%x' "0x$(echo "${1#0x}" | tr -d :)"; }
ib_lid() { hex_of "$(ib_port lid)"; }
ib_port_guid() { ib_port gids/0 | cut -d: -f5- | tr -d :; }
# ib_fabric_topology: eth0 up with IPOIB_LOCAL_IP/24 (the hosts' rendezvous) and IB_DEV on
# it, with this host's name as its node description; waits for the port to train to INIT.
# An earlier program of the same boot may have set eth0 up and deleted IB_DEV.
ib_fabric_topology() {
	[ -d "/sys/class/infiniband/$IB_DEV" ] && return 0
	ip addr replace "$IPOIB_LOCAL_IP/24" dev eth0 && ip link set eth0 up || return 1
	rdma link add "$IB_DEV" type rxe_ib netdev eth0 || return 1
	hostname >"/sys/class/infiniband/$IB_DEV/node_desc"
	wait_for 10 ib_port_is INIT
}
# cpu_busy: CPU time spent busy since boot, all CPUs, in USER_HZ ticks (user, nice, system,
# irq, softirq of /proc/stat).
cpu_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
# adapter_links [CHILD]: ib0 sits on the adapter of IB_DEV as C puts it there (rxe_ib gives
# the port the device of eth0, as an HCA has its PCI function): /sys/class/net/ib0/device is
# the adapter, which lists IB_DEV under infiniband/ (how ibdev2netdev maps them), ethtool -i
# gives its name as bus-info and dev_port is the port's number less one; CHILD, a child
# interface, is linked to nothing (C links only a port's interface).
adapter_links() {
	local adapter ours bus
	adapter=$(readlink -f "/sys/class/infiniband/$IB_DEV/device") &&
		ours=$(readlink -f /sys/class/net/ib0/device) ||
		{ echo "no adapter link"; return 1; }
	bus=$(ethtool -i ib0 | sed -n 's/^bus-info: //p')
	echo "ib0 -> $ours; $IB_DEV -> $adapter; bus-info $bus;" \
		"dev_port $(cat /sys/class/net/ib0/dev_port)"
	[ "$ours" = "$adapter" ] && [ -d "$ours/infiniband/$IB_DEV" ] &&
		[ "$bus" = "$(basename "$adapter")" ] &&
		[ "$(cat /sys/class/net/ib0/dev_port)" = 0 ] || return 1
	[ -z "${1:-}" ] || [ ! -e "/sys/class/net/$1/device" ] ||
		{ echo "$1 linked to $(readlink -f "/sys/class/net/$1/device")"; return 1; }
}
# opensm_start: the subnet manager on this host's port, in the foreground of a background
# job under a time limit, with the partitions of the tests: the default one and 0x8001,
# each with an IPoIB broadcast group of MTU 1024 (code 3: Ethernet MTU 1500 gives rxe_ib a
# 1024-byte IB MTU). Sweeps every 2 s; transactions may take 1 s under TCG. Further
# arguments go to opensm.
opensm_start() {
	[ -f "$OPENSM_PARTITIONS" ] || cat >"$OPENSM_PARTITIONS" <<'PARTITIONS'
Default=0x7fff, ipoib, mtu=3, defmember=full : ALL=full ;
P8001=0x8001, ipoib, mtu=3 : ALL=full ;
PARTITIONS
	timeout 1200 opensm -g "0x$(ib_port_guid)" -P "$OPENSM_PARTITIONS" -f /tmp/opensm.log \
		-s 2 -t 1000 --retries 7 "$@" </dev/null >/tmp/opensm.out 2>&1 3>&- 4>&- &
	OPENSM_PID=$!
}
# load_driver rust|c: our module or the C ipoib loaded, ib0 there.
load_driver() {
	if [ "$1" = rust ]; then modprobe "$MODULE"; else insmod "$C_IPOIB"; fi &&
		wait_for 10 test -d /sys/class/net/ib0
}
opensm_stop() {
	[ -n "${OPENSM_PID:-}" ] || return 0
	kill "$OPENSM_PID" 2>/dev/null
	wait "$OPENSM_PID" 2>/dev/null
	OPENSM_PID=
}
# ib_fabric_up: the fabric from a fresh boot: IB_DEV on eth0, opensm on the server, the port
# ACTIVE after its sweep (a rendezvous on port 7101 first, so that both links are up).
ib_fabric_up() {
	ib_fabric_topology || return 1
	both_at 7101
	[ "$role" = server ] && opensm_start
	wait_for 90 ib_port_is ACTIVE && echo "LID 0x$(ib_lid), state $(ib_port state)"
}
# ib_rounds PORT: the program's `round DRIVER N` twice, ours and the C ipoib on opposite
# hosts (the server runs C first, the client ours; then the other way round), then a
# rendezvous on PORT and opensm stopped.
ib_rounds() {
	if [ "$role" = server ]; then
		round c 1
		round rust 2
	else
		round rust 1
		round c 2
	fi
	both_at "$1"
	opensm_stop
}
# both_at PORT [SECONDS]: a rendezvous of the two hosts over eth0 (SECONDS scaled by SLOW).
both_at() {
	if [ "$role" = server ]; then
		wait_peer "$1" "${2:-180}"
	else
		wait_for $((${2:-180} * SLOW)) eval "echo go 2>/dev/null >/dev/tcp/\$peer/$1"
	fi
}
# rxe_counter NAME: the hardware counter NAME of IB_DEV's port.
rxe_counter() {
	rdma statistic show link "$IB_DEV/1" | tr ' ' '\n' |
		awk -v n="$1" 'hit { print; exit } $0 == n { hit = 1 }'
}

# Profiles. Functions of the idle loop: samples in them are not work.
PERF_IDLE='idle|safe_halt|cpuidle|mwait|poll_idle|do_idle'

# perf_report MODE FILE: the profile's busy samples by module, by kind of work and by
# function, as PROF lines (PROF MODE ROLE ...; role set by two_hosts_roles).
perf_report() {
	local mode=$1 file=$2
	perf report -i "$file" --stdio -q --no-children --sort dso,sym \
		--percent-limit 0 2>/dev/null |
		awk -v mode="$mode" -v role="$role" -v idle="$PERF_IDLE" '
		# The kind of work a function does, by its module and name.
		function kind(dso, sym) {
			if (dso == "[ib_ipoib]") return "ib_ipoib"
			if (dso !~ /^\[kernel/) return "user-space"
			if (sym ~ /^rxe_|^rxe/) return "soft-RoCE"
			if (sym ~ /^ib_|^rdma_|^cm_|^mad|^ib_mad/) return "RDMA-core"
			if (sym ~ /virtnet|virtio|vring|^vp_/) return "virtio-NIC"
			if (sym ~ /lock|rcu|irq|softirq|_bh/) return "locks-irqs-softirqs"
			if (sym ~ /sched|switch|schedule|task|wake|^__sched|idle_|pick_next/)
				return "scheduler"
			if (sym ~ /^tcp|^__tcp|^ip_|^__ip|^ip6|^ipv6|^udp|^__udp|^inet/ ||
			    sym ~ /^raw|^icmp|^arp|^neigh|^__neigh|^fib/)
				return "TCP-IP"
			if (sym ~ /^dev_|^__dev_|^netif|^__netif|^napi|^__napi|^net_|^skb|^__skb/ ||
			    sym ~ /^kfree_skb|^consume_skb|^sk_|^__sk_|^sock|^__sock|^nf_|^sch_/ ||
			    sym ~ /^qdisc|^__qdisc|^eth_|^validate_xmit/)
				return "net-core"
			return "other-kernel"
		}
		$1 ~ /%$/ {
			pct = $1 + 0; dso = $2; sym = $4
			for (i = 5; i <= NF; i++) sym = sym " " $i
			if (sym ~ idle) next
			busy += pct; bydso[dso] += pct
			bykind[kind(dso, sym)] += pct; bysym[sym " " dso] += pct
		}
		END {
			if (busy == 0) exit 1
			printf "PROF %s %s busy %.1f all\n", mode, role, busy
			for (d in bydso)
				printf "PROF %s %s dso %.1f %s\n", mode, role,
					100 * bydso[d] / busy, d | "sort -k5 -rn"
			close("sort -k5 -rn")
			for (k in bykind)
				printf "PROF %s %s kind %.1f %s\n", mode, role,
					100 * bykind[k] / busy, k | "sort -k5 -rn"
			close("sort -k5 -rn")
			for (s in bysym)
				if (100 * bysym[s] / busy >= 0.2)
					printf "PROF %s %s sym %.1f %s\n", mode, role,
						100 * bysym[s] / busy, s | "sort -k5 -rn"
		}'
}

# perf_record MODE COMMAND...: a system-wide profile while COMMAND runs (cpu-clock samples:
# TCG emulates no PMU), then its report.
perf_record() {
	local mode=$1
	shift
	perf record -a -e cpu-clock -F 499 ${IPOIB_PERF_GRAPH:+-g} -o "/tmp/perf.$mode" -- "$@" \
		>/tmp/perf.out 2>&1 || { cat /tmp/perf.out; return 1; }
	perf_report "$mode" "/tmp/perf.$mode"
	# With IPOIB_PERF_GRAPH (call chains recorded): who spins on contended spinlocks.
	[ -z "${IPOIB_PERF_GRAPH:-}" ] ||
		perf report -i "/tmp/perf.$mode" --stdio --no-children \
			-S queued_spin_lock_slowpath -g caller,0.5,callee,function,percent \
			--percent-limit 0.5 2>/dev/null |
		grep -v '^#' | grep . | head -n 120 | sed "s/^/LOCKS $mode $role /"
}
