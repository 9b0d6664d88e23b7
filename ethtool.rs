// SPDX-License-Identifier: GPL-2.0

//! What `ethtool` shows and sets beyond the counters: the driver and its device, the link
//! speed, and the coalescing of receive events through the moderation of the receive CQ.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    c_str,
    net::ethtool::{Coalesce, DrvInfo, LinkSettings},
    prelude::*,
    rdma::{
        cq::{CompletionHandler, CompletionQueue},
        device::{Device, FW_VERSION_LEN},
    },
};

/// What `ethtool -i` shows: the driver, where the RDMA device `device` sits, and its
/// firmware.
pub(crate) fn fill_drvinfo(device: &Device, info: &mut DrvInfo) {
    info.set_driver(c_str!("ib_ipoib"));
    info.set_version(c_str!("1.0.0"));
    let mut fw = [0u8; FW_VERSION_LEN];
    info.set_fw_version(device.fw_version(&mut fw));
    // Where the adapter sits (its PCI address), as C gives it; a software device sits
    // nowhere, and is named itself (C would have no name to give).
    match device.parent() {
        Some(parent) => info.set_bus_info_of(parent),
        None => info.set_bus_info(device.name().as_bytes()),
    }
}

/// The largest moderation the CQ takes, in events and in microseconds.
const MODERATION_MAX: u32 = u16::MAX as u32;

/// The link as ethtool sees it. The speed is cached: querying a RoCE port takes RTNL, which
/// ethtool calls hold.
pub(crate) struct EthtoolState {
    speed_mbps: AtomicU32,
    rx_usecs: AtomicU32,
    rx_frames: AtomicU32,
}

impl EthtoolState {
    /// The state of a port of speed `speed_mbps`, without coalescing.
    pub(crate) fn new(speed_mbps: u32) -> Self {
        Self {
            speed_mbps: AtomicU32::new(speed_mbps),
            rx_usecs: AtomicU32::new(0),
            rx_frames: AtomicU32::new(0),
        }
    }

    /// Takes the port's speed, as queried again (on a port event, and periodically).
    pub(crate) fn set_speed(&self, speed_mbps: u32) {
        self.speed_mbps.store(speed_mbps, Ordering::Relaxed);
    }

    /// Takes the speed `other` knows (that of the parent interface, for a child).
    pub(crate) fn copy_speed(&self, other: &Self) {
        let speed = other.speed_mbps.load(Ordering::Relaxed);
        self.speed_mbps.store(speed, Ordering::Relaxed);
    }

    /// Speed and duplex for `ethtool DEV`: IB links are full duplex.
    pub(crate) fn link_settings(&self) -> LinkSettings {
        LinkSettings {
            speed_mbps: self.speed_mbps.load(Ordering::Relaxed),
            full_duplex: true,
        }
    }

    /// What `ethtool -c` shows.
    pub(crate) fn coalesce(&self) -> Coalesce {
        Coalesce {
            rx_usecs: self.rx_usecs.load(Ordering::Relaxed),
            rx_max_frames: self.rx_frames.load(Ordering::Relaxed),
        }
    }

    /// Applies `ethtool -C` to `cq`, the receive CQ of the interface `name`. `EINVAL` past
    /// what the CQ takes; `EOPNOTSUPP` where the device cannot moderate, the values then
    /// staying as they were.
    pub(crate) fn set_coalesce<H: CompletionHandler>(
        &self,
        cq: &CompletionQueue<H>,
        wanted: Coalesce,
        name: &CStr,
    ) -> Result {
        let (Ok(frames), Ok(usecs)) = (
            u16::try_from(wanted.rx_max_frames),
            u16::try_from(wanted.rx_usecs),
        ) else {
            pr_info!(
                "{name}: coalescing refused: rx-frames and rx-usecs go up to {MODERATION_MAX}\n"
            );
            return Err(EINVAL);
        };
        match cq.set_moderation(frames, usecs) {
            Ok(()) => {
                self.rx_usecs.store(wanted.rx_usecs, Ordering::Relaxed);
                self.rx_frames
                    .store(wanted.rx_max_frames, Ordering::Relaxed);
                Ok(())
            }
            Err(e) if e == EOPNOTSUPP => {
                pr_info!(
                    "{name}: the RDMA device cannot moderate completions; coalescing unchanged\n"
                );
                Err(e)
            }
            Err(e) => {
                pr_warn!("{name}: coalescing not applied ({e:?})\n");
                Err(e)
            }
        }
    }
}
