// SPDX-License-Identifier: GPL-2.0

//! A hostile connected-mode peer of ib_ipoib (`modprobe rdma_rs_selftest ipoib_qpn=QPN`):
//! from rxe0 it connects to the IPoIB service of the interface whose UD QPN is `QPN` on rxe1
//! (RFC 4755 service ID), then sends messages no IPoIB peer sends: shorter than the
//! encapsulation header, of an ethertype IPoIB does not carry, noise as IPv4, and one larger
//! than the receive buffers the interface posted. The script checks what ib_ipoib counted.
//!
//! With `ipoib_peers=N` it is a crowd instead: N connections to the interface, one message
//! of an ethertype IPoIB does not carry on each (counted as a drop), all kept until the
//! module is unloaded, for the script to measure what they cost.
//!
//! With `ipoib_guid_hi/lo` it comes from ibp0 instead, over InfiniBand, to the port of that
//! GUID, and checks what the interface's reply sets there: the REQ's RNR retry count, echoed.

use super::{
    ipv4_gid, verbs_stream::Host, wait, Endpoint, Report, Waiter, F_BAD, F_REJ, F_REP, OWNER, PORT,
};
use core::sync::atomic::{AtomicU8, Ordering};
use kernel::{
    c_str,
    prelude::*,
    rdma::{
        cm::{self, CmId, CmIdRef, Event, GidAttr, PathRecord, QpState, ReqParams},
        cq::{CompletionQueue, WcStatus},
        device::{Device, Mtu},
        dma::{DmaBuffer, DmaDirection},
        pd::ProtectionDomain,
        qp::{QpCaps, QpChange, QpType, QueuePair},
    },
    sync::Arc,
};

/// The IPoIB connected-mode service ID of UD QPN `qpn` (RFC 4755).
fn service_id(qpn: u32) -> u64 {
    0x1000_0000_0000_0000 | u64::from(qpn & 0xff_ffff)
}

/// Our end: an RC queue pair that only sends.
struct Intruder {
    qp: Pin<KBox<QueuePair>>,
    signal: Arc<Waiter>,
    /// The RNR retry count of the interface's reply.
    rep_rnr_retry: AtomicU8,
}

impl cm::Handler for Intruder {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        match event {
            Event::RepReceived {
                rnr_retry_count, ..
            } => {
                self.rep_rnr_retry.store(rnr_retry_count, Ordering::SeqCst);
                let ok = id.modify_qp(&self.qp, QpState::Rtr).is_ok()
                    && id.modify_qp(&self.qp, QpState::Rts).is_ok()
                    && id.send_rtu().is_ok();
                self.signal.set(if ok { F_REP } else { F_BAD });
            }
            Event::RejReceived { .. } => self.signal.set(F_REJ),
            Event::DreqReceived => {
                let _ = id.send_drep();
            }
            _ => {}
        }
    }
}

/// Where the attack comes from: the port's resources and the path to the interface.
struct Attacker<'a> {
    device: &'a Device,
    pd: &'a Arc<ProtectionDomain>,
    send_cq: &'a Arc<CompletionQueue<Waiter>>,
    recv_cq: &'a Arc<CompletionQueue<Waiter>>,
    path: PathRecord,
    sgid_attr: GidAttr,
}

impl<'a> Attacker<'a> {
    /// From rxe0 to the interface of rxe1 (192.0.2.2), over RoCE.
    fn roce(a: &'a Endpoint) -> Result<Self> {
        Ok(Self {
            device: &a.device,
            pd: &a.pd,
            send_cq: &a.send_cq,
            recv_cq: &a.recv_cq,
            path: PathRecord::roce_v2(&a.gid, &ipv4_gid([192, 0, 2, 2]), Mtu::Mtu1024, [0; 6]),
            sgid_attr: GidAttr::get(&a.device, PORT, a.gid_index)?,
        })
    }

    /// From ibp0 to the port of `guid` on the subnet, over the path the SA gives.
    fn infiniband(host: &'a Host, guid: u64) -> Result<Self> {
        Ok(Self {
            device: &host.device,
            pd: &host.pd,
            send_cq: &host.send_cq,
            recv_cq: &host.recv_cq,
            path: host.path_to(guid)?,
            sgid_attr: GidAttr::get(&host.device, PORT, 0)?,
        })
    }
}

/// Sends `bytes` as one RC message; returns the completion status.
fn send(at: &Attacker<'_>, qp: &QueuePair, bytes: &[u8]) -> Result<WcStatus> {
    let mut buf = DmaBuffer::new(at.device, bytes.len(), DmaDirection::ToDevice, GFP_KERNEL)?;
    buf.as_mut_slice().copy_from_slice(bytes);
    qp.post_send(buf, bytes.len())?;
    let mut wc = wait(at.send_cq, 10000).ok_or(EAGAIN)?;
    qp.complete_send(&mut wc).ok_or(EINVAL)?;
    Ok(wc.status())
}

fn expect_success(status: Result<WcStatus>) -> Result {
    match status? {
        WcStatus::Success => Ok(()),
        other => {
            pr_info!("# send status {:?}\n", other);
            Err(EIO)
        }
    }
}

/// A connection attempt from `at` to the IPoIB service of UD QPN `qpn` over a new queue pair
/// of type `qp_type`, announcing `mtu` and asking RNR retry count `rnr_retry`: the CM
/// identifier, our end, and whether the peer accepted (`Ok`) or refused (`EPERM`).
fn connect(
    at: &Attacker<'_>,
    qp_type: QpType,
    mtu: u32,
    qpn: u32,
    rnr_retry: u8,
) -> Result<(CmId<Intruder>, Arc<Intruder>, Result)> {
    let signal = super::waiter()?;
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
    };
    let qp = QueuePair::new(
        qp_type,
        at.pd,
        at.send_cq.clone(),
        at.recv_cq.clone(),
        None,
        caps,
        OWNER,
    )?;
    // The REQ only names the queue pair; a UC one is never used, so it stays in RESET.
    if qp_type == QpType::Rc {
        qp.modify(&QpChange::to_init().port(PORT).pkey_index(0).local_write())?;
    }
    let end = Arc::new(
        Intruder {
            qp,
            signal: signal.clone(),
            rep_rnr_retry: AtomicU8::new(0),
        },
        GFP_KERNEL,
    )?;
    let id = CmId::new(at.device, end.clone())?;
    // What an IPoIB peer announces: its UD QPN (any here) and the largest message it takes.
    let mut private = [0u8; 8];
    private[..4].copy_from_slice(&0x00ab_cdefu32.to_be_bytes());
    private[4..].copy_from_slice(&mtu.to_be_bytes());
    let params = ReqParams {
        path: &at.path,
        sgid_attr: &at.sgid_attr,
        service_id: service_id(qpn),
        private_data: &private,
        srq: false,
        responder_resources: 0,
        retry_count: 7,
        rnr_retry_count: rnr_retry,
        max_cm_retries: 15,
        cm_response_timeout: 20,
        starting_psn: cm::random_psn(),
    };
    id.id().send_req(&end.qp, &params)?;
    signal.wait_flag(F_REP | F_REJ | F_BAD, 5000)?;
    let outcome = match signal.flags.load(Ordering::SeqCst) {
        F_REP => Ok(()),
        F_REJ => Err(EPERM),
        other => {
            pr_info!("# connection flags {:#x}\n", other);
            Err(EIO)
        }
    };
    Ok((id, end, outcome))
}

/// Runs the hostile peer against the interface with UD QPN `qpn` on rxe1.
pub(crate) fn run(report: &mut Report, qpn: u32) -> Result {
    let a = Endpoint::new(c_str!("rxe0"), [192, 0, 2, 1])?;
    let at = Attacker::roce(&a)?;
    let refused = |attempt: Result<(CmId<Intruder>, Arc<Intruder>, Result)>| match attempt?.2 {
        Err(e) if e == EPERM => Ok(()),
        Ok(()) => Err(EINVAL),
        Err(e) => Err(e),
    };
    report.check(
        "intruder: REQ for an unreliable connection (UC) refused with a REJ",
        refused(connect(&at, QpType::Uc, 65524, qpn, 7)),
    );
    report.check(
        "intruder: REQ announcing a receive size of 0 refused with a REJ",
        refused(connect(&at, QpType::Rc, 0, qpn, 7)),
    );
    // Not the 7 our REQs ask on RoCE, so that the reply shows it is not an echo.
    let (id, end, connected) = connect(&at, QpType::Rc, 65524, qpn, 6)?;
    report.check(
        "intruder: REQ to ib_ipoib's service accepted (REP, RTU)",
        connected,
    );
    connected?;
    report.check(
        "intruder: the REP's RNR retry count is 7 (RoCE: forever), not the REQ's 6",
        rep_rnr_retry_is(&end, 7),
    );

    report.check(
        "intruder: 2-byte message (shorter than the encapsulation header) sent",
        expect_success(send(&at, &end.qp, &[0x08, 0x00])),
    );
    report.check(
        "intruder: message of ethertype 0x1234 sent",
        expect_success(send(&at, &end.qp, &[0x12, 0x34, 0, 0, 1, 2, 3, 4])),
    );
    let mut noise = [0u8; 64];
    for (i, b) in noise.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37);
    }
    noise[..4].copy_from_slice(&[0x08, 0x00, 0, 0]);
    report.check(
        "intruder: 60 bytes of noise as IPv4 sent",
        expect_success(send(&at, &end.qp, &noise)),
    );
    // More than the 65524-byte buffers of the interface's shared receive queue: the receiver
    // fails the message (and its queue pair), the sender learns it from the completion.
    let oversize = KVec::from_elem(0x5au8, 65536 + 256, GFP_KERNEL)?;
    let refused = match send(&at, &end.qp, &oversize) {
        Ok(WcStatus::Success) => Err(EINVAL),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    report.check(
        "intruder: message over the receive buffers refused by the receiver",
        refused,
    );
    drop(id);
    Ok(())
}

/// Whether the interface's reply set RNR retry count `expected`.
fn rep_rnr_retry_is(end: &Intruder, expected: u8) -> Result {
    match end.rep_rnr_retry.load(Ordering::SeqCst) {
        n if n == expected => Ok(()),
        n => {
            pr_info!("# REP RNR retry count {}, expected {}\n", n, expected);
            Err(EIO)
        }
    }
}

/// On InfiniBand, from ibp0 to the interface with UD QPN `qpn` on the port of `guid`: a
/// connection whose REQ asks an RNR retry count no IPoIB peer asks (6); the reply must
/// echo it, as C IPoIB's does.
pub(crate) fn run_infiniband(report: &mut Report, qpn: u32, guid: u64) -> Result {
    let host = Host::new()?;
    let at = Attacker::infiniband(&host, guid)?;
    let (id, end, connected) = connect(&at, QpType::Rc, 65524, qpn, 6)?;
    report.check(
        "intruder (InfiniBand): REQ to ib_ipoib's service accepted (REP, RTU)",
        connected,
    );
    connected?;
    report.check(
        "intruder (InfiniBand): the REP's RNR retry count echoes the REQ's 6",
        rep_rnr_retry_is(&end, 6),
    );
    report.check(
        "intruder (InfiniBand): message of ethertype 0x1234 sent",
        expect_success(send(&at, &end.qp, &[0x12, 0x34, 0, 0, 1, 2, 3, 4])),
    );
    drop(id);
    Ok(())
}

/// Connections kept open until the module goes; the connections go before their endpoint.
pub(crate) struct Crowd {
    connections: KVec<(CmId<Intruder>, Arc<Intruder>)>,
    _endpoint: Endpoint,
}

/// Opens `n` connections from rxe0 to the interface with UD QPN `qpn` on rxe1, with one
/// message on each.
pub(crate) fn crowd(report: &mut Report, qpn: u32, n: u32) -> Result<Crowd> {
    let a = Endpoint::new(c_str!("rxe0"), [192, 0, 2, 1])?;
    let at = Attacker::roce(&a)?;
    let mut connections = KVec::with_capacity(n as usize, GFP_KERNEL)?;
    // The first connection refused, or message lost, ends the round: the check fails.
    let opened = (|| -> Result {
        for _ in 0..n {
            let (id, end, outcome) = connect(&at, QpType::Rc, 65524, qpn, 7)?;
            outcome?;
            expect_success(send(&at, &end.qp, &[0x12, 0x34, 0, 0, 1, 2, 3, 4]))?;
            connections.push((id, end), GFP_KERNEL)?;
        }
        Ok(())
    })();
    pr_info!("# crowd: {} of {} connections open\n", connections.len(), n);
    report.check(
        "crowd: every connection accepted and carrying a message",
        opened,
    );
    Ok(Crowd {
        connections,
        _endpoint: a,
    })
}

impl Drop for Crowd {
    fn drop(&mut self) {
        pr_info!("# crowd: closing {} connections\n", self.connections.len());
    }
}
