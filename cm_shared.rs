// SPDX-License-Identifier: GPL-2.0

//! What the connections of an interface share ([`CmShared`]: the device and port, the
//! protection domain, the receive CQ and shared receive queue, the send credits and
//! counters), how their queue pairs are made, and how they call on the connected mode that
//! owns them ([`CmOwner`], implemented in `ipoib_cm.rs`) without knowing it.

use crate::{
    cq::{CqEvents, CqGroup},
    ipoib_ud::send_sges,
    log_name::LogName,
    partition::PartitionIndex,
    path::PathResolver,
    send_credits::SendCredits,
    srq::{self, Srq},
    stats::Counters,
    wire::{self, CmPrivateData, CM_BUF_SIZE},
};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::{
    net::napi::NapiHandle,
    prelude::*,
    rdma::{
        cq::{CompletionQueue, RawCompletionQueue},
        device::{DeviceRef, Mtu},
        pd::ProtectionDomain,
        qp::{QpCaps, QpChange, QpEventHandler, QpType, QueuePair, RecvBuffer, SharedQueue},
    },
    sync::Arc,
};

/// Connected mode as its connections see it.
pub(crate) trait CmOwner: Send + Sync {
    /// What the connections share.
    fn shared(&self) -> &CmShared;
    /// Has the work item run, which sets connections up and destroys dead ones; one already
    /// queued does the job.
    fn schedule_work(self: Arc<Self>);
}

/// What the connections of an interface share. Set once, but for `open`.
pub(crate) struct CmShared {
    pub(crate) device: DeviceRef,
    pub(crate) port: u32,
    /// The interface's name in log lines.
    pub(crate) log_name: Arc<LogName>,
    /// The interface's partition in the port's P_Key table: its connections' too.
    pub(crate) partition: Arc<PartitionIndex>,
    /// Our UD QPN, announced in REQs and REPs.
    pub(crate) local_qpn: u32,
    /// The path MTU of connections on RoCE (the port's active MTU, in bytes; it follows
    /// the port). On InfiniBand the SA's path records say it.
    pub(crate) path_mtu: AtomicU32,
    /// Where the paths of transmit connections come from.
    pub(crate) resolver: PathResolver,
    /// Sends a transmit connection's queue pair and CQ take: all the interface's credits.
    pub(crate) send_ring: u32,
    pub(crate) pd: Arc<ProtectionDomain>,
    /// Where receive connections take their buffers from; `None`: from rings of their own.
    pub(crate) srq: Option<Arc<Srq>>,
    /// Buffers of a receive connection's own ring (without a shared receive queue).
    pub(crate) ring_size: u32,
    /// The interface's receive CQ, shared with the UD queue pair.
    pub(crate) recv_cq: Arc<CompletionQueue<CqEvents>>,
    pub(crate) credits: Arc<SendCredits>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) napi: NapiHandle,
    /// The transmit connections' CQs: NAPI looks at the connections when one asked.
    pub(crate) tx_events: Arc<CqGroup>,
    /// Whether connections are made and accepted (the interface is up).
    pub(crate) open: AtomicBool,
}

impl CmShared {
    /// The transport and RNR retry counts our connection requests ask for. On InfiniBand,
    /// which loses no packets, none, as the C driver asks (RFC 4755 peers expect it); RoCE
    /// may drop packets (rxe does under load), so there as many as allowed (7: forever for
    /// RNR).
    pub(crate) fn req_retries(&self) -> (u8, u8) {
        if self.resolver.has_sa() {
            (0, 0)
        } else {
            (7, 7)
        }
    }

    /// The RNR retry count of our reply to a request that asked for `requested`: on
    /// InfiniBand the requester's own, as C peers answer; on RoCE forever, so that a peer
    /// retries when our receive queue runs dry rather than failing the connection.
    pub(crate) fn rep_rnr_retry(&self, requested: u8) -> u8 {
        if self.resolver.has_sa() {
            requested
        } else {
            7
        }
    }

    /// The path MTU connections are requested with on RoCE.
    pub(crate) fn path_mtu(&self) -> Mtu {
        Mtu::from_bytes(self.path_mtu.load(Ordering::Relaxed)).unwrap_or(Mtu::Mtu256)
    }

    /// The interface's name, for the log.
    pub(crate) fn name(&self) -> &LogName {
        &self.log_name
    }

    /// The private data of our REQs and REPs: our UD QPN and receive size.
    pub(crate) fn private_data(&self) -> [u8; wire::CM_PRIVATE_DATA_LEN] {
        CmPrivateData {
            qpn: self.local_qpn,
            mtu: CM_BUF_SIZE,
        }
        .to_bytes()
    }

    /// A new RC queue pair completing on `cq`, with room for `send_wr` sends, reporting its
    /// events to `events`, in INIT: what both kinds of connection start from. It receives
    /// into a ring of its own of `own_ring` buffers (posted by the caller) if that is not
    /// zero, else from the shared receive queue, if any.
    pub(crate) fn new_rc_qp<B: RecvBuffer>(
        &self,
        cq: Arc<dyn RawCompletionQueue>,
        send_wr: u32,
        events: Option<Arc<dyn QpEventHandler>>,
        own_ring: u32,
    ) -> Result<Pin<KBox<QueuePair<B>>>> {
        let caps = QpCaps {
            max_send_wr: send_wr,
            max_recv_wr: own_ring,
            max_send_sge: send_sges(&self.device),
            max_recv_sge: if own_ring > 0 { srq::recv_sges() } else { 0 },
        };
        let srq = match own_ring {
            0 => self.srq.clone().map(|s| s as Arc<dyn SharedQueue>),
            _ => None,
        };
        let qp = QueuePair::with_buffers(
            QpType::Rc,
            &self.pd,
            cq.clone(),
            cq,
            srq,
            caps,
            events,
            crate::OWNER,
        )?;
        // INIT with local writes only: the CM moves it on to RTR and RTS.
        let pkey_index = self.partition.get().ok_or(ENODEV)?;
        qp.modify(
            &QpChange::to_init()
                .port(self.port)
                .pkey_index(pkey_index)
                .local_write(),
        )?;
        Ok(qp)
    }
}
