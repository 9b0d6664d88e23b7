#!/usr/bin/env bash
# The main job: build everything, boot two guests on soft-RoCE, load ib_ipoib on both, bring
# ib0 up between them in datagram mode and then in connected mode at MTU 65520, and print
# what the driver logged, the raw RC bandwidth and the netperf figures of both modes (with
# TCP over the Ethernet link underneath for comparison).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

"$REPO/scripts/setup.sh"
"$REPO/scripts/build.sh"
"$REPO/scripts/initramfs.sh"
run=$(date +%Y%m%d-%H%M%S)-main
rc=0
IPOIB_RS_RUN=$run "$REPO/scripts/vm.sh" two-hosts || rc=$?
logs=$OUT/logs/$run
echo
for g in host0 host1; do
	echo "== $g: ib_ipoib in the kernel log"
	grep -a 'ib_ipoib: ' "$logs/$g.console" | sed 's/^\[[^]]*\] /  /' || true
done
echo "== raw RC send bandwidth host1 -> host0 (ib_send_bw, 64 KiB messages)"
grep -a -A1 '#bytes' "$logs/host1.results" | sed 's/^# *//; s/^/  /' || true
echo "== netperf host1 -> host0, datagram then connected mode (5 s each; soft-RoCE under TCG, on the"
echo "   test kernel with lockdep: compare, don't quote; scripts/bench.sh measures on the bench kernel)"
grep -a 'NETPERF ' "$logs/host1.results" | sed 's/^.*NETPERF /  /' || true
echo "== iperf3 host1 -> host0, connected mode, 8 streams"
grep -a 'SUM.*receiver' "$logs/host1.results" | sed 's/^# *//; s/^/  /' || true
echo "logs: $logs"
exit $rc
