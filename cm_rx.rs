// SPDX-License-Identifier: GPL-2.0

//! Connected mode, receive side: connections peers open to us through the port's listener.
//! Their queue pairs take buffers from the shared receive queue and complete on the
//! interface's receive CQ; a DREQ, a failure or idleness has the work item destroy them.

use crate::{
    ipoib_cm::{now_ms, CmPort},
    wire::CmPrivateData,
};
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{
    prelude::*,
    rbtree::{RBTreeNode, RBTreeNodeReservation},
    rdma::{
        cm::{self, CmIdRef, Event, Handler, ListenHandler, QpState, Request},
        qp::QueuePair,
    },
    sync::Arc,
};

/// A connection a peer opened to us: its queue pair receives from the shared receive queue.
pub(crate) struct RxConnection {
    pub(crate) qp: Pin<KBox<QueuePair>>,
    pub(crate) port: Arc<CmPort>,
    /// Closed or failed: the work item destroys it.
    pub(crate) dead: AtomicBool,
}

impl RxConnection {
    fn close(&self) {
        self.dead.store(true, Ordering::Release);
        self.port.schedule_work();
    }
}

impl Handler for RxConnection {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        match event {
            Event::DreqReceived => {
                let _ = id.send_drep();
                // Buffers this queue pair took from the SRQ come back flushed.
                let _ = self.qp.set_error();
                self.close();
            }
            Event::RejReceived { .. }
            | Event::Timeout
            | Event::DrepReceived
            | Event::TimewaitExit => {
                let _ = self.qp.set_error();
                self.close();
            }
            Event::RtuReceived | Event::RepReceived { .. } | Event::Other(_) => {}
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
        // The peer's data is only checked: it announces its UD QPN and receive size, which
        // matter for the connection it opens toward us, not for this one.
        CmPrivateData::parse(req.private_data()).map_err(|_| EINVAL)?;
        // Nothing is sent, but a send queue must exist.
        let qp = port.new_rc_qp(port.recv_cq.clone(), 1)?;
        let psn = cm::random_psn();
        req.id().modify_qp_for_rep(&qp, psn)?;
        req.id().modify_qp(&qp, QpState::Rts)?;
        let conn = Arc::new(
            RxConnection {
                qp,
                port: port.clone(),
                dead: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?;
        let key = port.rx_serial.fetch_add(1, Ordering::Relaxed);
        let seen = RBTreeNode::new(conn.qp.id(), now_ms(), GFP_KERNEL)?;
        let old = port.rx_seen.lock().insert(seen);
        drop(old);
        let mut rx = port.rx.lock();
        // Room first: once accepted, the identifier must be kept.
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let id = req.accept(conn.clone())?;
        let private = port.private_data();
        // The requester retries forever when our shared receive queue runs dry, rather than
        // failing the connection (the C driver passes the REQ's count, 0, on).
        if let Err(e) = id.id().send_rep(&conn.qp, psn, &private, true, 7) {
            pr_info!(
                "{} port {}: reply to a connection request failed ({:?})\n",
                port.name(),
                port.port,
                e
            );
            conn.dead.store(true, Ordering::Release);
        }
        let old = rx.insert(node.into_node(key, id));
        drop(rx);
        drop(old);
        if conn.dead.load(Ordering::Acquire) {
            port.schedule_work();
        }
        Ok(())
    }
}
