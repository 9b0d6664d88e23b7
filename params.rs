// SPDX-License-Identifier: GPL-2.0

//! Module parameters: `modprobe ib_ipoib NAME=VALUE`, listed by `modinfo ib_ipoib`.

kernel::module_param!(
    /// Whether interfaces offer connected mode (flag 0x80 in their address) and accept
    /// connections.
    pub(crate) CM_ENABLED,
    "ib_ipoib",
    "cm_enabled",
    bool,
    true,
    "Offer connected mode (RFC 4755) where the device can (default 1; 0: datagram only)"
);

kernel::module_param!(
    /// Whether interfaces that offer connected mode start in it.
    pub(crate) CONNECTED_MODE,
    "ib_ipoib",
    "connected_mode",
    bool,
    true,
    "Start interfaces in connected mode where offered (default 1; 0: datagram); /sys/class/net/ibN/mode switches later"
);

kernel::module_param!(
    /// Seconds a receive connection may stay idle before it is closed.
    pub(crate) CM_STALE_SECS,
    "ib_ipoib",
    "cm_stale_secs",
    u32,
    512,
    "Close receive connections idle this many seconds (default 512, as the C driver)"
);

kernel::module_param!(
    /// Send buffers of an interface. The default is the C driver's, so that the two compare
    /// at the same depth (with 64, the earlier default, no difference stood out of the
    /// spread of `bench.sh --vs-c`).
    pub(crate) SEND_QUEUE_SIZE,
    "ib_ipoib",
    "send_queue_size",
    u32,
    128,
    "Sends in flight per interface, datagram and connected mode together (default 128, as the C driver; 16..8192)"
);

kernel::module_param!(
    /// Receive buffers of the UD queue pair and of the shared receive queue. The default is
    /// the C driver's: a datagram that finds no buffer is lost.
    pub(crate) RECV_QUEUE_SIZE,
    "ib_ipoib",
    "recv_queue_size",
    u32,
    256,
    "Receive buffers of the UD queue pair and of the connections' shared queue (default 256, as the C driver; 16..8192)"
);

kernel::module_param!(
    /// Whether connected mode receives through one shared receive queue.
    pub(crate) CM_SRQ,
    "ib_ipoib",
    "cm_srq",
    bool,
    true,
    "Connected mode receives through one shared receive queue where the device has one (default 1); 0 gives each connection its own receive ring, as on devices without one"
);

kernel::module_param!(
    /// Receive connections an interface accepts without a shared receive queue.
    pub(crate) MAX_NONSRQ_CONN_QP,
    "ib_ipoib",
    "max_nonsrq_conn_qp",
    u32,
    128,
    "Receive connections per interface without a shared receive queue, each with its own ring of recv_queue_size buffers (default 128, 0..4096)"
);

/// The cap on receive connections without a shared receive queue: the parameter within its
/// range.
pub(crate) fn max_nonsrq_conn_qp() -> usize {
    MAX_NONSRQ_CONN_QP.get().min(4096) as usize
}

/// The queue sizes a module load accepts. C's upper bound; below 16 a queue would stop at
/// every few packets (C raises what it is given to 128 sends and 2 receives, silently).
const QUEUE_SIZES: core::ops::RangeInclusive<u32> = 16..=8192;

/// Refuses a load whose queue sizes are out of range, with a line saying which, rather than
/// using another size than the one asked for.
pub(crate) fn check() -> kernel::error::Result {
    for (name, value) in [
        ("send_queue_size", SEND_QUEUE_SIZE.get()),
        ("recv_queue_size", RECV_QUEUE_SIZE.get()),
    ] {
        if !QUEUE_SIZES.contains(&value) {
            kernel::pr_err!(
                "{name}={value} is out of range ({}..{})\n",
                QUEUE_SIZES.start(),
                QUEUE_SIZES.end()
            );
            return Err(kernel::error::code::EINVAL);
        }
    }
    Ok(())
}

/// The send queue size (checked at load by [`check`]).
pub(crate) fn send_queue_size() -> u32 {
    SEND_QUEUE_SIZE.get()
}

/// The receive queue size (checked at load by [`check`]).
pub(crate) fn recv_queue_size() -> u32 {
    RECV_QUEUE_SIZE.get()
}

kernel::module_param!(
    /// Whether the driver logs what it does with connections and destinations, as the C
    /// driver's `debug_level`.
    pub(crate) DEBUG_LEVEL,
    "ib_ipoib",
    "debug_level",
    writable u32,
    0,
    "Log connections and destinations if > 0 (default 0; writable at run time)"
);

kernel::module_param!(
    /// Whether the driver logs multicast joins and leaves, as the C driver's
    /// `mcast_debug_level`.
    pub(crate) MCAST_DEBUG_LEVEL,
    "ib_ipoib",
    "mcast_debug_level",
    writable u32,
    0,
    "Log multicast joins and leaves if > 0 (default 0; writable at run time)"
);

kernel::module_param!(
    /// Whether the driver logs each datagram sent and received and each completion, as the
    /// C driver's `data_debug_level`.
    pub(crate) DATA_DEBUG_LEVEL,
    "ib_ipoib",
    "data_debug_level",
    writable u32,
    0,
    "Log every datagram and its completion if > 0 (default 0; writable at run time)"
);

kernel::module_param!(
    /// Whether the driver logs each message sent and received over a connection and each
    /// completion, as the C driver's `cm_data_debug_level`.
    pub(crate) CM_DATA_DEBUG_LEVEL,
    "ib_ipoib",
    "cm_data_debug_level",
    writable u32,
    0,
    "Log every connected-mode message and its completion if > 0 (default 0; writable at run time)"
);

/// Logs a line when `debug_level` is set (the C driver's `ipoib_dbg`).
macro_rules! ipoib_dbg {
    ($($arg:tt)*) => {
        if $crate::params::DEBUG_LEVEL.get() > 0 {
            kernel::pr_info!($($arg)*);
        }
    };
}

/// Logs a line when `mcast_debug_level` is set (the C driver's `ipoib_dbg_mcast`).
macro_rules! ipoib_dbg_mcast {
    ($($arg:tt)*) => {
        if $crate::params::MCAST_DEBUG_LEVEL.get() > 0 {
            kernel::pr_info!($($arg)*);
        }
    };
}

/// Logs a line when `data_debug_level` is set (the C driver's `ipoib_dbg_data`): per
/// datagram, so only while someone debugs.
macro_rules! ipoib_dbg_data {
    ($($arg:tt)*) => {
        if $crate::params::DATA_DEBUG_LEVEL.get() > 0 {
            kernel::pr_info!($($arg)*);
        }
    };
}

/// Logs a line when `cm_data_debug_level` is set (the C driver's `ipoib_cm`'s data
/// debugging): per message of a connection.
macro_rules! ipoib_dbg_cm_data {
    ($($arg:tt)*) => {
        if $crate::params::CM_DATA_DEBUG_LEVEL.get() > 0 {
            kernel::pr_info!($($arg)*);
        }
    };
}

pub(crate) use {ipoib_dbg, ipoib_dbg_cm_data, ipoib_dbg_data, ipoib_dbg_mcast};
