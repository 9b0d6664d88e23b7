// SPDX-License-Identifier: GPL-2.0

//! Paths: how a destination's GID becomes the path record connections to it are requested
//! over (the C driver's `ipoib_path`).
//!
//! All resolution goes through [`PathResolver`]. On RoCE, the only kind of port so far, a
//! destination's route follows from its GID alone, as the RDMA CM derives it. An InfiniBand
//! port will ask the subnet administrator for a path record here instead.

use crate::wire::Gid;
use kernel::{
    prelude::*,
    rdma::{
        cm::{GidAttr, PathRecord},
        device::{self, Device, Mtu},
    },
};

/// The GID table entry our addresses and paths start from, as in the C driver.
pub(crate) const GID_INDEX: u32 = 0;

/// Resolves the destinations of one port.
#[derive(Clone, Copy)]
pub(crate) struct PathResolver {
    port: u32,
}

impl PathResolver {
    /// The resolver of `port` (a RoCE port).
    pub(crate) fn new(port: u32) -> Self {
        Self { port }
    }

    /// The path a connection to `dest` is requested over, with `mtu`, and the local GID
    /// entry it starts from (process context).
    pub(crate) fn connection_path(
        &self,
        device: &Device,
        dest: &Gid,
        mtu: Mtu,
    ) -> Result<(PathRecord, GidAttr)> {
        let sgid = GidAttr::get(device, self.port, GID_INDEX)?;
        let path = PathRecord::roce_v2_link_local(&sgid.gid(), &device::Gid(dest.0), mtu)?;
        Ok((path, sgid))
    }
}
