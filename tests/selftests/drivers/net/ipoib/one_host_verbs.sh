#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The Rust RDMA verbs abstractions between rxe0 and rxe1: rdma_rs_selftest.ko runs its
# checks when loaded and logs one KTAP line each; they are reported here as test cases.
#
# The checks: PD, CQs, UD QPs, address handles and DMA buffers; a UD datagram from rxe0 to
# rxe1 with its payload, length and source QPN checked; a completion used up once its buffer
# is taken back (completing it again takes nothing); refused with EINVAL: a queue pair
# mixing two devices' objects, a buffer mapped for sending posted as a receive, another
# device's buffer, another queue pair's address handle, and queue pair changes the transport
# does not take (RTS from RESET, INIT without a Q_Key, access flags on UD); a send the
# device refuses (posted in INIT) freed, its slot emptied; a wrong Q_Key dropped; posted
# buffers flushed back on error; objects released out of order; address handles from a RoCE
# v2 path record and from a RoCE multicast member record; an RC connection through the IB CM
# onto an SRQ; the SRQ limit event; the last-WQE-reached event of a queue pair on an SRQ; an
# MRA reaching the requester; REJ for an unknown service; SA path queries and joins refused
# on RoCE with their handlers released; an IB client's rename callback (rdma dev set rxe0
# name rxt0, and back); the REQ's and REP's RNR retry counts (6 and 5) read back as sent
# (the kernel crate reads them through C helpers: bindgen's accessor for the REQ's reads two
# padding bits and the field's lowest bit); a receive beyond the queue pair's slots refused;
# a completion from before a reset taking nothing afterwards; a datagram received into an
# skb is its data where it landed (an skb with fragments or without tailroom refused); an
# address handle dropped with a send in flight destroyed only by a reap after the send was
# taken back, by its completion or by a reset (a refused post's handle waiting for the next
# send).
#
# Exactly CHECKS checks (below) must report (a run that stops early fails one), and none of
# its PDs, CQs, QPs or MRs may be left in `rdma res`.
. "$(dirname "$0")/lib.sh"

SELFTEST=rdma_rs_selftest

ktap_print_header
if ! modinfo "$SELFTEST" >/dev/null 2>&1; then
	ktap_skip_all "module $SELFTEST not built (CONFIG_INFINIBAND_IPOIB_RUST_SELFTEST)"
	exit "$KSFT_SKIP"
fi
one_host_topology || ktap_exit_fail_msg "soft-RoCE topology did not come up"

klog_mark
modprobe "$SELFTEST" || ktap_exit_fail_msg "modprobe $SELFTEST failed"
results=$(klog_since | sed -n "s/^.*$SELFTEST: //p")
cases=$(echo "$results" | grep -cE '^(not )?ok [0-9]+ ')
ktap_set_plan $((cases + 4))
ktap_relay "$results"
if echo "$results" | grep -q '^not ok'; then
	for f in /sys/class/infiniband/rxe*/ports/1/hw_counters/*; do
		v=$(cat "$f")
		[ "$v" = 0 ] || ktap_print_msg "${f#/sys/class/infiniband/} $v"
	done
fi
# Every check the module has, once each: a run that stopped early reports fewer.
CHECKS=32
ipoib_check "$SELFTEST reported all its $CHECKS checks" \
	eval "echo \"\$results\" | grep -qx \"1..$cases\" && [ $cases = $CHECKS ]"
# Its objects, released in and out of creation order, are all gone once it has run. (The
# RDMA core keeps an owner's name to 15 characters.)
released() {
	local kind n left=0
	for kind in pd cq qp mr; do
		n=$(rdma res show "$kind" | grep -c "comm \[${SELFTEST:0:15}")
		echo "$kind: $n of $SELFTEST left"
		left=$((left + n))
	done
	[ "$left" = 0 ]
}
ipoib_check "$SELFTEST's PDs, CQs, QPs and MRs all released" released
# The module's IB client hears renames of the devices it took on (and the name returns).
rename_round_trip() {
	rdma dev set rxe0 name rxt0 && rdma dev set rxt0 name rxe0 || return 1
	klog_since | grep -q "$SELFTEST: # client: device renamed to rxt0 (rename 1)" &&
		klog_since | grep -q "$SELFTEST: # client: device renamed to rxe0 (rename 2)"
}
ipoib_check "IB client rename callback: rxe0 -> rxt0 -> rxe0 reported" rename_round_trip
ipoib_check "$SELFTEST unloads, kernel log clean" eval 'rmmod "$SELFTEST" && klog_clean_since'
ktap_finished
