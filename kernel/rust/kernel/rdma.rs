// SPDX-License-Identifier: GPL-2.0

//! InfiniBand and RDMA.
//!
//! Safe interfaces over the RDMA core for upper-layer protocols written in Rust.
//!
//! Lifetimes follow the C rules through reference counts: everything built on a device
//! holds a [`device::DeviceRef`], queue pairs and address handles hold their protection
//! domain, queue pairs hold their completion queues, so a queue pair is always destroyed
//! before its completion queues, and those before the protection domain.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

/// Seals the traits through which queue pairs take C objects: only this crate's types,
/// which hold valid objects, implement them.
mod private {
    pub trait Sealed {}
}

pub mod ah;
pub mod client;
pub mod cm;
pub mod cq;
pub mod device;
pub mod dma;
pub mod event;
pub mod pd;
pub mod qp;
pub mod sa;
mod slots;
pub mod srq;
