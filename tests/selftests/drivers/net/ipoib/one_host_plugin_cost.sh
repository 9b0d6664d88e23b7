#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The cost benchmark's marks, for tests/bench/cost_plugin.sh, which boots this guest with
# the ipoib-cost QEMU plugin loaded and checks what it counted (without the plugin the
# marks are no-ops: this program only checks that they ran):
#   window 1: a user-space loop of 1000000 iterations of two instructions (2000000);
#   window 2: the same loop of 3000000 iterations (6000000);
#   window 3: 4000 KiB copied from /dev/zero to /dev/null in the kernel (dd).
. "$(dirname "$0")/lib.sh"
MARK=$(dirname "$0")/cost_mark

ktap_print_header
ktap_set_plan 2
ipoib_check "user-space loops of 1000000 and 3000000 iterations marked (windows 1, 2)" \
	eval '"$MARK" spin 1 1000000 && "$MARK" spin 2 3000000'
kernel_window() {
	"$MARK" start 3 && dd if=/dev/zero of=/dev/null bs=4k count=1000 2>/dev/null &&
		"$MARK" stop 3
}
ipoib_check "4000 KiB copied by the kernel marked (window 3)" kernel_window
ktap_finished
