// SPDX-License-Identifier: GPL-2.0

//! Completion events: every completion queue of an interface drives one of its NAPI
//! contexts, as in C: send queues the send context, receive queues the receive one.

use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{
    net::napi::NapiHandle,
    rdma::cq::{CompletionHandler, CompletionQueue},
    sync::Arc,
};

/// The handles of an interface's two NAPI contexts.
#[derive(Clone)]
pub(crate) struct NapiHandles {
    /// Send completions, packets held for an address handle or a connection, the queue's
    /// wake-up.
    pub(crate) send: NapiHandle,
    /// Received packets.
    pub(crate) recv: NapiHandle,
}

/// Queues looked at together, each with a request of its own (the transmit connections'):
/// one of them asked for a look since NAPI last took the group's request. A round that
/// finds no request skips the whole group, rather than taking each queue's lock to learn
/// that none fired.
pub(crate) struct CqGroup {
    fired: AtomicBool,
}

impl CqGroup {
    pub(crate) fn new() -> Self {
        Self {
            fired: AtomicBool::new(false),
        }
    }

    /// Whether a queue of the group asked for a look, clearing the request: the caller then
    /// looks at every queue of the group, taking each one's own request.
    pub(crate) fn take(&self) -> bool {
        self.fired.swap(false, Ordering::AcqRel)
    }
}

/// Events of one completion queue: each schedules the NAPI context the queue belongs to and
/// remembers that this queue needs polling, so a round polls and re-arms only the queues
/// that fired.
///
/// Whoever takes the request ([`CqEvents::take`]) polls the queue and then re-arms it, or
/// puts the request back ([`CqEvents::kick`], [`CqEvents::mark`]): a queue without a
/// request is armed, so a completion always brings NAPI back to it.
pub(crate) struct CqEvents {
    napi: NapiHandle,
    fired: AtomicBool,
    group: Option<Arc<CqGroup>>,
}

impl CqEvents {
    pub(crate) fn new(napi: NapiHandle) -> Self {
        Self::with_group(napi, None)
    }

    /// Events of a queue of `group`: each request is the group's too.
    pub(crate) fn in_group(napi: NapiHandle, group: Arc<CqGroup>) -> Self {
        Self::with_group(napi, Some(group))
    }

    fn with_group(napi: NapiHandle, group: Option<Arc<CqGroup>>) -> Self {
        Self {
            napi,
            fired: AtomicBool::new(false),
            group,
        }
    }

    /// Asks NAPI to look at this queue (completions, or for a connection packets to send).
    pub(crate) fn kick(&self) {
        self.mark();
        self.napi.schedule();
    }

    /// Asks the next NAPI round, already due, to look at this queue again.
    pub(crate) fn mark(&self) {
        // The queue's own request first: whoever takes the group's then finds it.
        self.fired.store(true, Ordering::Release);
        if let Some(group) = &self.group {
            group.fired.store(true, Ordering::Release);
        }
    }

    /// Whether NAPI was asked to look, clearing the request.
    pub(crate) fn take(&self) -> bool {
        self.fired.swap(false, Ordering::AcqRel)
    }
}

impl CompletionHandler for CqEvents {
    fn completion(&self) {
        self.kick();
    }
}

/// How long a send CQ on which NAPI found completed sends is left unarmed before NAPI looks
/// again, in ms (datagram mode's and each transmit connection's): while sends go on, a
/// round every few milliseconds instead of one per send.
pub(crate) const SEND_REAP_MS: u32 = 10;

/// Arms `cq` again after NAPI drained it; a completion that came after the last poll (or a
/// device that cannot arm) puts the request back and schedules another round. Returns
/// whether it did.
pub(crate) fn rearm(cq: &CompletionQueue<CqEvents>) -> bool {
    let missed = cq.request_notify().unwrap_or(true);
    if missed {
        cq.handler().kick();
    }
    missed
}
