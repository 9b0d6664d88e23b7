#!/usr/bin/env bash
# Run the driver's kselftests in QEMU guests (TCG) and report one line per test.
#
#   scripts/vm.sh one-host [PROG...]   one guest: veth pair, two rxe devices
#   scripts/vm.sh two-hosts [PROG...]  two guests joined by -netdev dgram on 127.0.0.1
#   scripts/vm.sh two-hosts-ib [PROG...]  the same two guests as an InfiniBand fabric
#                                      (rxe_ib, opensm on host0, the C ipoib as control)
#
# Each guest's serial console (kernel log) and result channel are kept under
# $OUT/logs/<run>/. A guest that does not boot and finish, or whose console shows an Oops,
# BUG, WARNING, call trace, lockdep, KASAN or kmemleak report, fails the run.
# Prints "ok - NAME", "not ok - NAME" or "ok - NAME # SKIP why" per test, then
# "N passed, N failed, N skipped"; exits 1 on any failure.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

topology=${1:?usage: vm.sh one-host|two-hosts|two-hosts-ib [PROG...]}
shift
dest=$OUT/$FLAVOUR
for f in bzImage initramfs.cpio; do
	[ -f "$dest/$f" ] || die "$dest/$f missing: run scripts/build.sh and scripts/initramfs.sh"
done
# The debug kernel (KASAN, lockdep, kmemleak) runs about four times slower under TCG: its
# guests get four times the time, and tell their programs (ipoibrs.slow), whose waits on
# the other guest scale by it.
case "$FLAVOUR" in
debug) SLOW=4 ;;
*) SLOW=1 ;;
esac
# The InfiniBand fabric's programs run longest (two drivers in turn, SM restarts, 1000
# groups): about 20 minutes on the default kernel.
case "$topology" in
two-hosts-ib) base_timeout=1800 ;;
*) base_timeout=900 ;;
esac
VM_TIMEOUT=${IPOIB_RS_VM_TIMEOUT:-$((base_timeout * SLOW))}
run=${IPOIB_RS_RUN:-$(date +%Y%m%d-%H%M%S)-$topology}
logs=$OUT/logs/$run
mkdir -p "$logs"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing: run scripts/setup.sh"

TROUBLE='Oops|BUG:|WARNING:|Call Trace|circular locking|possible recursive locking|inconsistent lock state|KASAN|unreferenced object|suspected memory leak|UBSAN|general protection fault|Kernel panic|refcount_t:|sleeping function called from invalid context|hung_task|soft lockup|before their queue pair drained'

# without_alloc_reports: the kernel log on stdin, less the stack dumps of allocation failure
# reports (from "page allocation failure:" or "vmalloc error:" to the dump's end, 80 lines
# at most).
without_alloc_reports() {
	awk '/page allocation failure:|vmalloc error:/ { skip = 80 }
		skip > 0 { skip--; if ($0 ~ /<\/TASK>/) skip = 0; next }
		{ print }'
}

pids=()
# start_guest NAME CMDLINE-EXTRA [QEMU-ARGS...]: boot a guest in the background.
start_guest() {
	local name=$1 extra=$2
	shift 2
	# An empty list would have the guest run every program, and the check of what ran none.
	case "$extra " in
	*"ipoibrs.progs= "*) die "no programs for $topology: the Makefile's TEST_PROGS could not be read" ;;
	esac
	# The cost benchmark's plugin (IPOIB_RS_QEMU_PLUGIN, set by bench.sh --cost) counts the
	# guest's instructions into $logs/$name.cost.
	local plugin=()
	[ -n "${IPOIB_RS_QEMU_PLUGIN:-}" ] &&
		plugin=(-plugin "$IPOIB_RS_QEMU_PLUGIN,outfile=$logs/$name.cost")
	timeout --signal=KILL "$VM_TIMEOUT" qemu-system-x86_64 \
		-accel tcg -m 2G -smp 2 -nodefaults -display none -no-reboot \
		-kernel "$dest/bzImage" -initrd "$dest/initramfs.cpio" \
		-append "console=ttyS0 loglevel=7 log_buf_len=16M oops=panic panic=-1 rcupdate.rcu_cpu_stall_timeout=100 ipoibrs.host=$name ipoibrs.slow=$SLOW $extra ${IPOIB_RS_GUEST_ARGS:-}" \
		-serial "file:$logs/$name.console" -serial "file:$logs/$name.results" \
		-device isa-debug-exit,iobase=0xf4,iosize=0x04 \
		-monitor "unix:$logs/$name.monitor,server=on,wait=off" \
		"${plugin[@]}" "$@" >"$logs/$name.qemu" 2>&1 &
	pids+=($!)
	log "guest $name started (qemu pid $!), console: $logs/$name.console"
}

progs=$(IFS=,; echo "$*")
job="ipoibrs.job=selftests ipoibrs.progs=${progs:-}"
# default_progs PREFIX [EXCLUDED]: the kselftest programs of a topology, as the Makefile
# lists them, less those starting with EXCLUDED (the benchmarks, the profile and the
# stress run only run when asked for).
default_progs() {
	sed -n 's/^[[:space:]]*\(TEST_PROGS :=\)\{0,1\}[[:space:]]*\([a-z_]*\.sh\).*/\2/p' \
		"$REPO/tests/selftests/drivers/net/ipoib/Makefile" |
		grep "^$1" | grep -v "^${2:-//}" | grep -v -e _bench.sh -e _cost.sh -e _stress.sh -e _profile.sh |
		paste -sd,
}
guests=()
case "$topology" in
one-host)
	[ -n "$progs" ] || job="ipoibrs.job=selftests ipoibrs.progs=$(default_progs one_host_)"
	start_guest host0 "$job"
	guests=(host0)
	;;
two-hosts | two-hosts-ib)
	if [ -z "$progs" ]; then
		if [ "$topology" = two-hosts ]; then
			job="ipoibrs.job=selftests ipoibrs.progs=$(default_progs two_hosts two_hosts_ib)"
		else
			job="ipoibrs.job=selftests ipoibrs.progs=$(default_progs two_hosts_ib)"
		fi
	fi
	# Two UDP ports on loopback, one per guest end of the link.
	base=$((20000 + RANDOM % 20000))
	pa=$base pb=$((base + 1))
	net() {
		echo "-netdev dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=$1,remote.type=inet,remote.host=127.0.0.1,remote.port=$2"
	}
	# shellcheck disable=SC2046
	start_guest host0 "$job ipoibrs.role=server ipoibrs.ip=192.0.2.1 ipoibrs.peer=192.0.2.2" \
		$(net "$pa" "$pb") -device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:01
	# shellcheck disable=SC2046
	start_guest host1 "$job ipoibrs.role=client ipoibrs.ip=192.0.2.2 ipoibrs.peer=192.0.2.1" \
		$(net "$pb" "$pa") -device virtio-net-pci,netdev=n0,mac=52:54:00:00:00:02
	guests=(host0 host1)
	;;
*) die "unknown topology $topology" ;;
esac

# Stop our guests (by PID) if we are interrupted.
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' INT TERM
# timeout(1) exits 137 when it killed its QEMU at the limit.
statuses=()
for p in "${pids[@]}"; do
	status=0
	wait "$p" || status=$?
	statuses+=("$status")
done
trap - INT TERM

passed=0 failed=0 skipped=0
# The only skips the suite expects: a check of a two-host program that the other host makes
# ("the client runs it"). Any other (a module or tool missing, no second host) fails.
expected_skip() { echo "$1" | grep -qE '^ *the (client|server) '; }
report() { # report ok|fail|skip NAME [WHY]
	case $1 in
	ok) echo "ok - $2"; passed=$((passed + 1)) ;;
	fail) echo "not ok - $2${3:+ # $3}"; failed=$((failed + 1)) ;;
	skip) echo "ok - $2 # SKIP ${3:-}"; skipped=$((skipped + 1)) ;;
	esac
}

for i in "${!guests[@]}"; do
	g=${guests[$i]} failed_before=$failed
	console=$logs/$g.console results=$logs/$g.results
	# Nested cases of each program ("# ok N desc"), then the programs themselves. A program
	# that failed without a failing case (crash, timeout, bail-out) counts as one failure,
	# and so does one that passed without reporting any case.
	prog="" case_failed=0 cases=0
	while IFS= read -r line; do
		case "$line" in
		"# selftests: "*) prog=${line##*: } case_failed=0 cases=0 ;;
		"# ok "*"# SKIP"*)
			d=${line#\# ok }; d=${d#* }; cases=$((cases + 1))
			if expected_skip "${d#*# SKIP}"; then
				report skip "$topology/$g: ${d%%# SKIP*}" "${d#*# SKIP}"
			else
				report fail "$topology/$g: ${d%%# SKIP*}" "skipped, unexpectedly:${d#*# SKIP}"
			fi ;;
		"# ok "*) d=${line#\# ok }; cases=$((cases + 1)); report ok "$topology/$g: ${d#* }" ;;
		"# not ok "*)
			d=${line#\# not ok }; cases=$((cases + 1)) case_failed=1
			report fail "$topology/$g: ${d#* }" ;;
		"# 1..0 # SKIP"*) cases=1; report fail "$topology/$g: $prog" "skipped whole, unexpectedly:${line#*SKIP}" ;;
		"not ok "*"selftests: "*)
			[ "$case_failed" = 1 ] || report fail "$topology/$g: $prog" "${line##*# }" ;;
		"ok "*"selftests: "*)
			[ "$cases" -gt 0 ] || report fail "$topology/$g: $prog" "passed without reporting any test" ;;
		esac
	done < <(tr -d '\r' <"$results" 2>/dev/null)
	# Every program asked for must have run: one missing from the guest's kselftest tree
	# (or never reached) is a failure, not silence.
	wanted=${job#*ipoibrs.progs=}
	for p in $(echo "${wanted%% *}" | tr , ' '); do
		# Not a pipe into grep -q: grep leaving early would kill tr with SIGPIPE, which
		# pipefail would report as a missing program.
		grep -aqx "# selftests: drivers/net/ipoib: $p" < <(tr -d '\r' <"$results" 2>/dev/null) ||
			report fail "$topology/$g: $p" "did not run$(grep -a -m 1 'No such test' "$results" | sed 's/^/: /')"
	done

	# KUnit runs the kernel crate's doctests at boot: the same in every guest, so read them
	# from the first one. Ours are reported one by one, the rest as one suite line.
	if [ "$g" = "${guests[0]}" ]; then
		kunit=$(grep -a -E '^\[[ 0-9.]+\]     (not )?ok [0-9]+ rust_doctest_' "$console" |
			sed -E 's/^\[[^]]*\]     //' || true)
		if [ -z "$kunit" ]; then
			report fail "$topology/$g: kunit: rust doctests ran" "no KUnit output on the console"
		else
			while IFS= read -r line; do
				name=${line##* }
				case "$line" in
				"not ok"*) report fail "$topology/$g: kunit: $name" ;;
				*rdma_* | *net_dev_* | *net_skb_* | *net_mcast_* | *net_napi_* | *net_link_* | *net_header_* | *net_ethtool_* | *spinlock_bh_* | *kernel_debugfs_*)
					report ok "$topology/$g: kunit: $name" ;;
				esac
			done <<<"$kunit"
			total=$(echo "$kunit" | wc -l)
			if grep -a -qE '^\[[ 0-9.]+\] ok [0-9]+ rust_doctests_kernel' "$console"; then
				report ok "$topology/$g: kunit: rust_doctests_kernel suite ($total doctests)"
			else
				report fail "$topology/$g: kunit: rust_doctests_kernel suite ($total doctests)"
			fi
		fi
	fi
	guest_rc=$(sed -n 's/.*IPOIB-RS-GUEST: done rc=\([0-9]*\).*/\1/p' "$console" | tail -n 1)
	if [ -n "$guest_rc" ] && [ "$guest_rc" != 0 ] && [ "$failed" = "$failed_before" ]; then
		report fail "$topology/$g: guest booted and finished" "its test runner exited $guest_rc with no failing test"
	elif [ -n "$guest_rc" ]; then
		report ok "$topology/$g: guest booted and finished"
	elif [ "${statuses[$i]}" = 137 ]; then
		report fail "$topology/$g: guest booted and finished" "timed out after $VM_TIMEOUT s (killed at the limit); see $console"
	else
		report fail "$topology/$g: guest booted and finished" "no completion marker; see $console"
	fi
	# An allocation failure report (warn_alloc: the fault-injection programs fail allocations
	# on purpose) dumps a stack that is not trouble; anything else in the log is.
	# Not a test of the pipeline's status: with more than five matches, head leaves early,
	# grep dies of SIGPIPE, and pipefail would turn a console full of trouble into a clean one.
	trouble=$(without_alloc_reports <"$console" | grep -aE "$TROUBLE" | head -n 5 || true)
	if [ -n "$trouble" ]; then
		report fail "$topology/$g: kernel console clean" "$(echo "$trouble" | head -n 1)"
		echo "$trouble" | sed 's/^/#   /'
	else
		report ok "$topology/$g: kernel console clean"
	fi
done
echo "logs: $logs"
echo "summary of $topology: $passed passed, $failed failed, $skipped skipped"
echo "$passed $failed $skipped" >"$logs/counts"
[ "$failed" -eq 0 ]
