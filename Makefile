# SPDX-License-Identifier: GPL-2.0-only
obj-$(CONFIG_INFINIBAND_IPOIB) += ib_ipoib.o
ib_ipoib-y := ipoib.o
obj-$(CONFIG_INFINIBAND_IPOIB_RUST_SELFTEST) += selftest/
