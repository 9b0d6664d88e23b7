// SPDX-License-Identifier: GPL-2.0

//! InfiniBand and RDMA.
//!
//! Safe interfaces over the RDMA core for upper-layer protocols written in Rust.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

pub mod client;
pub mod device;
