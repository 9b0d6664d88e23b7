#!/usr/bin/env bash
# Stress run on the debug kernel (KASAN, kmemleak, lockdep) by default: two guests in
# connected mode; the client switches ib0's mode IPOIB_RS_STRESS_CYCLES times (default 100)
# under a TCP stream, deletes and re-adds its rxe device 20 times under streams, reloads
# the module IPOIB_RS_STRESS_CYCLES times, every other time under a stream, and last flaps
# its Ethernet link 50 times under a stream (two_hosts_stress.sh). Any splat, leak report
# or hang fails it; the counts are in the log folder it prints.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

export IPOIB_RS_FLAVOUR=${IPOIB_RS_FLAVOUR:-debug}
cycles=${IPOIB_RS_STRESS_CYCLES:-100}
"$REPO/scripts/setup.sh"
"$REPO/scripts/build.sh"
"$REPO/scripts/initramfs.sh"
IPOIB_RS_VM_TIMEOUT=${IPOIB_RS_VM_TIMEOUT:-3000} IPOIB_RS_GUEST_ARGS="ipoibrs.stresscycles=$cycles" \
	exec "$REPO/scripts/vm.sh" two-hosts two_hosts_stress.sh
