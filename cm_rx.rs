// SPDX-License-Identifier: GPL-2.0

//! Connected mode, receive side: connections peers open to us through the port's listener.
//! Their queue pairs take buffers from the shared receive queue and complete on the
//! interface's receive CQ. A DREQ, a failure or idleness closes one: its queue pair goes to
//! the error state, and once the device reports that it took its last buffer from the
//! shared queue (last WQE reached) the work item destroys it, so no buffer is lost with
//! the queue pair mid-message.
//!
//! Without a shared receive queue each connection has a ring of its own, filled when it is
//! accepted (in the CM's request handler, as the C driver does: `recv_queue_size` buffers of
//! 64 KiB) and freed with its queue pair, which closing puts in the error state and the work
//! item destroys at once (there is no shared queue to drain into). At most
//! `max_nonsrq_conn_qp` such connections are accepted (further requests get a REJ, "no QP"),
//! as in the C driver.

use crate::{
    ipoib_cm::{CmPort, RxSeen},
    srq,
    stats::{bump, now_ms},
    wire::{CmPrivateData, MIN_MTU},
};
use core::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use kernel::{
    prelude::*,
    rbtree::{RBTreeNode, RBTreeNodeReservation},
    rdma::{
        cm::{self, CmIdRef, Event, Handler, ListenHandler, QpState, Request},
        dma::ScatterBuffer,
        qp::{QpEvent, QpEventHandler, QpType, QueuePair},
    },
    sync::Arc,
};

/// Whether a receive connection's queue pair is done with the shared receive queue, as its
/// last-WQE-reached event tells.
pub(crate) struct RxDrain {
    drained: AtomicBool,
    port: Arc<CmPort>,
}

impl RxDrain {
    pub(crate) fn drained(&self) -> bool {
        self.drained.load(Ordering::Acquire)
    }
}

impl QpEventHandler for RxDrain {
    fn event(&self, event: QpEvent) {
        // Devices repeat the event; the first one has the work item run.
        if event == QpEvent::LastWqeReached && !self.drained.swap(true, Ordering::AcqRel) {
            self.port.schedule_work();
        }
    }
}

/// A connection a peer opened to us: its queue pair receives from the shared receive queue,
/// or into a ring of its own.
pub(crate) struct RxConnection {
    pub(crate) qp: Pin<KBox<QueuePair<ScatterBuffer>>>,
    /// Whether the queue pair has its own ring (no shared receive queue).
    pub(crate) own_ring: bool,
    pub(crate) port: Arc<CmPort>,
    pub(crate) drain: Arc<RxDrain>,
    /// Closed or failed: the work item destroys it once drained.
    dead: AtomicBool,
    /// When it was closed (ms, monotonic; 0 while open). Set before `dead`, so that whoever
    /// sees the connection dead also sees when it closed.
    closed_at: AtomicI64,
    /// The peer's queue pair of the connection, and its UD queue pair (from the REQ).
    pub(crate) peer_qpn: u32,
    pub(crate) peer_ud_qpn: u32,
}

impl RxConnection {
    /// Stops the connection: its queue pair goes to the error state, which makes the device
    /// report the last buffer it takes from the shared queue; the work item destroys it then.
    pub(crate) fn close(&self) {
        // The first close keeps its time. Stored before `dead`: the work item, finding the
        // connection dead with the time still unset, would take it for long closed and
        // destroy it before its queue pair drained.
        let _ = self.closed_at.compare_exchange(
            0,
            now_ms().max(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if !self.dead.swap(true, Ordering::AcqRel) {
            // Buffers this queue pair took come back flushed.
            let _ = self.qp.set_error();
        }
        if self.own_ring {
            // No shared queue to give buffers back to: the ring goes with the queue pair,
            // and completions still queued for it find no connection and are dropped.
            self.drain.drained.store(true, Ordering::Release);
        }
        self.port.schedule_work();
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// When it was closed, if it was.
    pub(crate) fn closed_at(&self) -> Option<i64> {
        self.is_dead()
            .then(|| self.closed_at.load(Ordering::Acquire))
    }
}

impl Handler for RxConnection {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        match event {
            Event::DreqReceived => {
                let _ = id.send_drep();
                self.close();
            }
            Event::RejReceived { .. }
            | Event::Timeout
            | Event::DrepReceived
            | Event::TimewaitExit => self.close(),
            Event::RtuReceived
            | Event::RepReceived { .. }
            | Event::MraReceived { .. }
            | Event::Other(_) => {}
        }
    }
}

/// Takes connection requests for the port's service.
pub(crate) struct CmListen {
    pub(crate) port: Arc<CmPort>,
}

impl ListenHandler for CmListen {
    fn request(&self, req: Request<'_>) -> Result {
        let port = &self.port;
        if !port.open.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        // Only RC connections carry IPoIB. The peer's data announces its UD QPN and receive
        // size, which matter for the connection it opens toward us, not for this one; a size
        // that could not carry the smallest IPv4 packet is malformed. Refused requests get
        // a REJ.
        let peer = CmPrivateData::parse(req.private_data())
            .ok()
            .filter(|p| p.payload_mtu().is_some_and(|m| m >= MIN_MTU));
        let (Some(QpType::Rc), Some(peer)) = (req.qp_type(), peer) else {
            bump(&port.counters.cm_rx_rejected, 1);
            crate::params::ipoib_dbg!(
                "{} port {}: connection request refused (not RC, or bad private data)\n",
                port.name(),
                port.port
            );
            return Err(EINVAL);
        };
        let own_ring = port.srq.is_none();
        let slot = if own_ring {
            let Some(slot) = NonSrqSlot::take(port) else {
                bump(&port.counters.cm_rx_rejected, 1);
                crate::params::ipoib_dbg!(
                    "{} port {}: connection request refused: {} connections with rings of their own (max_nonsrq_conn_qp)\n",
                    port.name(),
                    port.port,
                    port.nonsrq_max
                );
                let _ = req.id().send_rej(cm::REJ_NO_QP);
                return Err(ENOSPC);
            };
            Some(slot)
        } else {
            None
        };
        let drain = Arc::new(
            RxDrain {
                drained: AtomicBool::new(false),
                port: port.clone(),
            },
            GFP_KERNEL,
        )?;
        // Nothing is sent, but a send queue must exist.
        let ring = if own_ring { port.ring_size } else { 0 };
        let qp = port.new_rc_qp(port.recv_cq.clone(), 1, Some(drain.clone()), ring)?;
        for _ in 0..ring {
            qp.post_recv(srq::recv_buffer(&port.device)?)
                .map_err(|(e, _)| e)?;
        }
        let psn = cm::random_psn();
        req.id().modify_qp_for_rep(&qp, psn)?;
        req.id().modify_qp(&qp, QpState::Rts)?;
        let conn = Arc::new(
            RxConnection {
                qp,
                own_ring,
                port: port.clone(),
                drain,
                dead: AtomicBool::new(false),
                closed_at: AtomicI64::new(0),
                peer_qpn: req.remote_qpn(),
                peer_ud_qpn: peer.qpn,
            },
            GFP_KERNEL,
        )?;
        let key = port.rx_serial.fetch_add(1, Ordering::Relaxed);
        let seen = RxSeen {
            last: now_ms(),
            packets: 0,
        };
        let seen = RBTreeNode::new(conn.qp.id(), seen, GFP_KERNEL)?;
        let ring_node = match slot {
            Some(_) => Some(RBTreeNode::new(conn.qp.id(), conn.clone(), GFP_KERNEL)?),
            None => None,
        };
        let mut rx = port.rx.lock();
        // Room first: once accepted, the identifier must be kept.
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let id = req.accept(conn.clone())?;
        // Listed only once accepted: a refused request leaves nothing behind.
        let old = port.rx_seen.lock().insert(seen);
        drop(old);
        if let (Some(slot), Some(ring_node)) = (slot, ring_node) {
            // Listed before the reply, so NAPI finds the ring of the first message; the
            // place is given back when the connection is destroyed.
            let old = port.rx_rings.lock().insert(ring_node);
            drop(old);
            slot.keep();
        }
        let private = port.private_data();
        // The requester retries forever when our receive queue runs dry, rather than failing
        // the connection (the C driver passes the REQ's count, 0, on).
        let replied = id.id().send_rep(&conn.qp, psn, &private, !own_ring, 7);
        bump(&port.counters.cm_rx_accepted, u64::from(replied.is_ok()));
        crate::params::ipoib_dbg!(
            "{} port {}: connection from QPN 0x{:06x} (UD QPN 0x{:06x}) accepted on QPN 0x{:06x}\n",
            port.name(),
            port.port,
            conn.peer_qpn,
            conn.peer_ud_qpn,
            conn.qp.qp_num()
        );
        let old = rx.insert(node.into_node(key, id));
        drop(rx);
        drop(old);
        if let Err(e) = replied {
            pr_info!(
                "{} port {}: reply to a connection request failed ({:?})\n",
                port.name(),
                port.port,
                e
            );
            conn.close();
        }
        Ok(())
    }
}

/// A place among the `max_nonsrq_conn_qp` receive connections with rings of their own,
/// given back if the connection is not made.
struct NonSrqSlot<'a> {
    port: &'a CmPort,
}

impl<'a> NonSrqSlot<'a> {
    /// Takes a place, if one is free.
    fn take(port: &'a CmPort) -> Option<Self> {
        let max = port.nonsrq_max;
        port.nonsrq_conns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Self { port })
    }

    /// The connection is made: the place is given back when it is destroyed.
    fn keep(self) {
        core::mem::forget(self);
    }
}

impl Drop for NonSrqSlot<'_> {
    fn drop(&mut self) {
        self.port.nonsrq_conns.fetch_sub(1, Ordering::AcqRel);
    }
}
