// SPDX-License-Identifier: GPL-2.0

//! Completion events: both completion queues of an interface drive its NAPI context.

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
