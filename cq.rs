// SPDX-License-Identifier: GPL-2.0

//! Completion events: every completion queue of an interface drives its NAPI context.

use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{net::napi::NapiHandle, rdma::cq::CompletionHandler};

/// Schedules the interface's NAPI poll when a completion arrives.
pub(crate) struct CqEvents {
    napi: NapiHandle,
}

impl CqEvents {
    pub(crate) fn new(napi: NapiHandle) -> Self {
        Self { napi }
    }
}

impl CompletionHandler for CqEvents {
    fn completion(&self) {
        self.napi.schedule();
    }
}

/// Events of a transmit connection's own CQ: remembers that this queue needs polling, so
/// NAPI polls the queues that fired rather than all of them.
pub(crate) struct TxCqEvents {
    napi: NapiHandle,
    fired: AtomicBool,
}

impl TxCqEvents {
    pub(crate) fn new(napi: NapiHandle) -> Self {
        Self {
            napi,
            fired: AtomicBool::new(false),
        }
    }

    /// Asks NAPI to look at this connection (completions, or packets to send).
    pub(crate) fn kick(&self) {
        self.fired.store(true, Ordering::Release);
        self.napi.schedule();
    }

    /// Whether NAPI was asked to look, clearing the request.
    pub(crate) fn take(&self) -> bool {
        self.fired.swap(false, Ordering::AcqRel)
    }

    /// Whether NAPI was asked to look.
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

impl CompletionHandler for TxCqEvents {
    fn completion(&self) {
        self.kick();
    }
}
