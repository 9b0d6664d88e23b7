// SPDX-License-Identifier: GPL-2.0

//! The in-kernel reference of `scripts/bench.sh --vs-c`: raw RC and UD streams between two
//! hosts of the InfiniBand fabric through the kernel verbs, what IPoIB could reach at best
//! on the link. `modprobe rdma_rs_selftest stream=1` (RC) or `stream=2` (UD) on the
//! receiving host waits for a stream and reports its rate; with `stream_guid_hi`/`_lo` (the
//! receiver's port GUID) and, for UD, `stream_qpn` (the QPN the receiver logged), the module
//! sends for `stream_secs` seconds instead. The shape is ib_ipoib's with its default
//! parameters: RC messages of the connected-mode MTU (65520 bytes) into a shared receive
//! queue, UD datagrams of the port's MTU, 128 sends in flight, 256 receive buffers,
//! completions taken on events (armed queue, wake-up), never by busy polling. Each side logs
//! `STREAM <rc|ud> <sender|receiver> <kbit/s> kbit/s <bytes> bytes <ms> ms`, or
//! `STREAM <rc|ud> <role> failed <error>`; the receiver's rate is the reference.

use super::{wait, waiter, Waiter, F_BAD, F_DREQ, F_REP, F_RTU, OWNER, PORT};
use core::sync::atomic::Ordering;
use kernel::{
    c_str, new_mutex,
    prelude::*,
    rdma::{
        ah::AhAttr,
        cm::{
            self, CmId, CmIdRef, Event, GidAttr, ListenHandler, Listener, PathRecord, QpState,
            ReqParams, Request,
        },
        cq::{CompletionQueue, WcStatus, WorkCompletion},
        device::{Device, DeviceRef, Gid},
        dma::{DmaBuffer, DmaDirection},
        pd::ProtectionDomain,
        qp::{QpCaps, QpChange, QpType, QueuePair, RnrTimer, Sent, SharedQueue},
        sa::{PathHandler, PathQuery, SaClient},
        srq::SharedReceiveQueue,
    },
    sync::{Arc, Mutex},
    time::{ktime_ms_delta, Ktime},
};

/// The port of the fabric the benchmark runs on (`rdma link add ibp0 type rxe_ib`).
const DEVICE: &CStr = c_str!("ibp0");
/// ib_ipoib's default `send_queue_size` and `recv_queue_size`.
const SEND_DEPTH: u32 = 128;
const RECV_DEPTH: u32 = 256;
/// A connected-mode message: the largest IPoIB connected-mode MTU.
const RC_MSG: usize = 65520;
/// Space in front of a UD payload for the GRH.
const GRH_LEN: usize = 40;
const QKEY: u32 = 0x0b1b;
const SERVICE_ID: u64 = 0x1000_0000_0000_0003;
const PRIVATE_DATA: &[u8] = b"verbs-stream";
/// How long the receiver waits for the first message, and for the next one before it takes
/// the stream as ended: a UD stream has nothing to wait for; an RC stream outlasts a few
/// retransmissions (the local ACK timeout comes from the path's packet lifetime, opensm's
/// 0x12 plus one: a lost packet is sent again about 2 s later, so a 2 s wait can end a
/// stream whose sender is still retrying). The idle time at the end is not measured.
const FIRST_MS: i64 = 90_000;
const UD_IDLE_MS: i64 = 2_000;
const RC_IDLE_MS: i64 = 8_000;
/// How long the sender waits for a send completion: longer than the receiver waits, so that
/// the receiver gives up first.
const SEND_WAIT_MS: i64 = 20_000;
/// The SA answered a path query.
const F_PATH: u32 = 1 << 16;

/// Which stream, and this host's part in it.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    Rc,
    Ud,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Rc => "rc",
            Kind::Ud => "ud",
        }
    }
}

/// The sender's view of the receiver.
pub(crate) struct Peer {
    /// The receiver's port GUID.
    pub(crate) guid: u64,
    /// For UD: the receiver's queue pair.
    pub(crate) qpn: u32,
    pub(crate) secs: u32,
}

/// Runs this host's part and logs its result.
pub(crate) fn run(kind: Kind, peer: Option<Peer>) {
    let role = if peer.is_some() { "sender" } else { "receiver" };
    let result = match (kind, peer) {
        (Kind::Rc, None) => rc_receiver(),
        (Kind::Rc, Some(p)) => rc_sender(&p),
        (Kind::Ud, None) => ud_receiver(),
        (Kind::Ud, Some(p)) => ud_sender(&p),
    };
    match result {
        Ok(t) => {
            let ms = t.ms.max(1) as u64;
            pr_info!(
                "STREAM {} {} {} kbit/s {} bytes {} ms\n",
                kind.name(),
                role,
                t.bytes * 8 / ms,
                t.bytes,
                ms
            );
        }
        Err(e) => pr_info!("STREAM {} {} failed {:?}\n", kind.name(), role, e),
    }
}

/// Bytes moved, and the milliseconds they took.
struct Tally {
    bytes: u64,
    ms: i64,
}

/// The port's device, protection domain and completion queues.
pub(crate) struct Host {
    pub(crate) device: DeviceRef,
    gid: Gid,
    pub(crate) pd: Arc<ProtectionDomain>,
    pub(crate) send_cq: Arc<CompletionQueue<Waiter>>,
    pub(crate) recv_cq: Arc<CompletionQueue<Waiter>>,
}

impl Host {
    pub(crate) fn new() -> Result<Self> {
        let device = Device::get_by_name(DEVICE)?;
        let gid = device.query_gid(PORT, 0)?;
        let pd = ProtectionDomain::new(&device, OWNER)?;
        let send_cq = CompletionQueue::new(&device, SEND_DEPTH + 1, 0, waiter()?, OWNER)?;
        let recv_cq = CompletionQueue::new(&device, RECV_DEPTH + 1, 0, waiter()?, OWNER)?;
        Ok(Self {
            device,
            gid,
            pd,
            send_cq,
            recv_cq,
        })
    }

    fn buffer(&self, len: usize, direction: DmaDirection) -> Result<DmaBuffer> {
        DmaBuffer::new(&self.device, len, direction, GFP_KERNEL)
    }

    /// The SA's path to the port of `guid` on our subnet.
    pub(crate) fn path_to(&self, guid: u64) -> Result<PathRecord> {
        let mut dgid = self.gid;
        dgid.0[8..].copy_from_slice(&guid.to_be_bytes());
        let signal = waiter()?;
        let answer = Arc::pin_init(
            pin_init!(PathAnswer {
                path <- new_mutex!(None),
                signal,
            }),
            GFP_KERNEL,
        )?;
        let client = SaClient::new()?;
        let rec = PathRecord::ib_query(&self.gid, &dgid, 0xffff);
        let _query = PathQuery::start(&client, &self.device, PORT, &rec, 5000, answer.clone())?;
        answer.signal.wait_flag(F_PATH, 10_000)?;
        let path = *answer.path.lock();
        path.ok_or(ENXIO)
    }
}

/// Where the SA's answer lands.
#[pin_data]
struct PathAnswer {
    #[pin]
    path: Mutex<Option<PathRecord>>,
    signal: Arc<Waiter>,
}

impl PathHandler for PathAnswer {
    fn path(&self, result: Result<&PathRecord>) {
        if let Ok(path) = result {
            *self.path.lock() = Some(*path);
        }
        self.signal.set(F_PATH);
    }
}

/// Takes receive completions on `cq` as they come, handing each buffer to `repost`, until
/// none came for `idle_ms`; counts their bytes less `header` each (the GRH space of UD), and
/// runs the clock from the first.
fn receive(
    cq: &CompletionQueue<Waiter>,
    header: u32,
    idle_ms: i64,
    mut repost: impl FnMut(&mut WorkCompletion) -> Result,
) -> Result<Tally> {
    let mut first = wait(cq, FIRST_MS).ok_or(EAGAIN)?;
    repost(&mut first)?;
    if first.status() != WcStatus::Success {
        return Err(EIO);
    }
    let start = Ktime::ktime_get();
    let mut last = start;
    let mut bytes = 0u64;
    while let Some(mut wc) = wait(cq, idle_ms) {
        repost(&mut wc)?;
        if wc.status() != WcStatus::Success {
            break;
        }
        bytes += u64::from(wc.byte_len().saturating_sub(header));
        last = Ktime::ktime_get();
    }
    Ok(Tally {
        bytes,
        ms: ktime_ms_delta(last, start),
    })
}

/// Keeps `SEND_DEPTH` sends in flight for `secs` seconds (`post` posts a buffer, `complete`
/// takes one back), then waits for the last; the clock runs from the first post to the last
/// completion.
fn send(
    host: &Host,
    len: usize,
    secs: u32,
    post: impl Fn(DmaBuffer) -> Result,
    complete: impl Fn(&mut WorkCompletion) -> Option<Sent>,
) -> Result<Tally> {
    let start = Ktime::ktime_get();
    for _ in 0..SEND_DEPTH {
        post(host.buffer(len, DmaDirection::ToDevice)?)?;
    }
    let mut in_flight = SEND_DEPTH;
    let mut bytes = 0u64;
    let mut last = start;
    let until = i64::from(secs) * 1000;
    while in_flight > 0 {
        let mut wc = wait(&host.send_cq, SEND_WAIT_MS).ok_or(EAGAIN)?;
        let sent = complete(&mut wc).ok_or(EINVAL)?;
        in_flight -= 1;
        if wc.status() != WcStatus::Success {
            pr_info!("# stream: send status {:?}\n", wc.status());
            return Err(EIO);
        }
        bytes += len as u64;
        last = Ktime::ktime_get();
        if let Sent::Buffer(buf) = sent {
            if ktime_ms_delta(last, start) < until {
                post(buf)?;
                in_flight += 1;
            }
        }
    }
    Ok(Tally {
        bytes,
        ms: ktime_ms_delta(last, start),
    })
}

/// One end of the RC stream.
struct RcEnd {
    qp: Pin<KBox<QueuePair>>,
    signal: Arc<Waiter>,
}

impl cm::Handler for RcEnd {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        let flag = match event {
            Event::RepReceived { .. } => {
                let ok = id.modify_qp(&self.qp, QpState::Rtr).is_ok()
                    && id.modify_qp(&self.qp, QpState::Rts).is_ok()
                    && id.send_rtu().is_ok();
                if ok {
                    F_REP
                } else {
                    F_BAD
                }
            }
            Event::RtuReceived => match id.modify_qp(&self.qp, QpState::Rts) {
                Ok(()) => F_RTU,
                Err(_) => F_BAD,
            },
            Event::DreqReceived => {
                // Answered or not, the stream is over.
                let _ = id.send_drep();
                F_DREQ
            }
            Event::RejReceived { .. } | Event::Timeout => F_BAD,
            _ => return,
        };
        self.signal.set(flag);
    }
}

fn rc_qp(
    host: &Host,
    srq: Option<&Arc<SharedReceiveQueue>>,
    signal: Arc<Waiter>,
) -> Result<Arc<RcEnd>> {
    let caps = QpCaps {
        max_send_wr: SEND_DEPTH,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
    };
    let qp = QueuePair::new(
        QpType::Rc,
        &host.pd,
        host.send_cq.clone(),
        host.recv_cq.clone(),
        srq.map(|s| s.clone() as Arc<dyn SharedQueue>),
        caps,
        OWNER,
    )?;
    qp.modify(&QpChange::to_init().port(PORT).pkey_index(0).local_write())?;
    Ok(Arc::new(RcEnd { qp, signal }, GFP_KERNEL)?)
}

/// The receiving side: accepts one stream's request with a queue pair on the shared queue.
#[pin_data]
struct RcListener {
    host: Host,
    srq: Arc<SharedReceiveQueue>,
    signal: Arc<Waiter>,
    #[pin]
    conn: Mutex<Option<CmId<RcEnd>>>,
}

impl ListenHandler for RcListener {
    fn request(&self, req: Request<'_>) -> Result {
        if !req.private_data().starts_with(PRIVATE_DATA) || self.conn.lock().is_some() {
            return Err(EINVAL);
        }
        let end = rc_qp(&self.host, Some(&self.srq), self.signal.clone())?;
        let psn = cm::random_psn();
        req.id()
            .modify_qp_for_rep(&end.qp, psn, RnrTimer::at_least_us(640))?;
        req.id()
            .send_rep(&end.qp, psn, PRIVATE_DATA, true, req.rnr_retry_count())?;
        *self.conn.lock() = Some(req.accept(end)?);
        Ok(())
    }
}

fn rc_receiver() -> Result<Tally> {
    let host = Host::new()?;
    let srq = SharedReceiveQueue::new(&host.pd, RECV_DEPTH, 1)?;
    for _ in 0..RECV_DEPTH {
        srq.post_recv(host.buffer(RC_MSG, DmaDirection::FromDevice)?)?;
    }
    let signal = waiter()?;
    let listening = Arc::pin_init(
        pin_init!(RcListener {
            host,
            srq,
            signal,
            conn <- new_mutex!(None),
        }),
        GFP_KERNEL,
    )?;
    let listener = Listener::new(&listening.host.device, SERVICE_ID, listening.clone())?;
    pr_info!("# stream: rc receiver listening\n");
    let srq = &listening.srq;
    let tally = receive(&listening.host.recv_cq, 0, RC_IDLE_MS, |wc| {
        let buf = srq.complete_recv(wc).ok_or(EINVAL)?;
        srq.post_recv(buf)
    });
    // The identifier first (its handler holds the queue pair), then the listener.
    drop(listener);
    let conn = listening.conn.lock().take();
    drop(conn);
    tally
}

fn rc_sender(peer: &Peer) -> Result<Tally> {
    let host = Host::new()?;
    let path = host.path_to(peer.guid)?;
    let signal = waiter()?;
    let end = rc_qp(&host, None, signal.clone())?;
    let id = CmId::new(&host.device, end.clone())?;
    let sgid_attr = GidAttr::get(&host.device, PORT, 0)?;
    id.id().send_req(
        &end.qp,
        &ReqParams {
            path: &path,
            sgid_attr: &sgid_attr,
            service_id: SERVICE_ID,
            private_data: PRIVATE_DATA,
            srq: false,
            responder_resources: 4,
            // A reference stream must not end on a lost packet or an empty receive queue.
            retry_count: 7,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            cm_response_timeout: 20,
            starting_psn: cm::random_psn(),
        },
    )?;
    signal.wait_flag(F_REP | F_BAD, 10_000)?;
    if signal.flags.load(Ordering::SeqCst) & F_BAD != 0 {
        return Err(EIO);
    }
    let tally = send(
        &host,
        RC_MSG,
        peer.secs,
        |buf| end.qp.post_send(buf, RC_MSG),
        |wc| end.qp.complete_send(wc),
    );
    // Answered or not, the receiver ends on its idle time.
    let _ = id.id().send_dreq();
    drop(id);
    tally
}

/// A UD queue pair ready to send and receive with `QKEY`.
fn ud_qp(host: &Host) -> Result<Pin<KBox<QueuePair>>> {
    let caps = QpCaps {
        max_send_wr: SEND_DEPTH,
        max_recv_wr: RECV_DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
    };
    let qp = QueuePair::new(
        QpType::Ud,
        &host.pd,
        host.send_cq.clone(),
        host.recv_cq.clone(),
        None,
        caps,
        OWNER,
    )?;
    qp.modify(&QpChange::to_init().port(PORT).pkey_index(0).qkey(QKEY))?;
    qp.modify(&QpChange::to_ready_to_receive())?;
    qp.modify(&QpChange::to_ready_to_send().send_psn(0))?;
    Ok(qp)
}

fn ud_mtu(host: &Host) -> Result<usize> {
    let mtu = host.device.port_attr(PORT)?.active_mtu().ok_or(EINVAL)?;
    Ok(mtu.bytes() as usize)
}

fn ud_receiver() -> Result<Tally> {
    let host = Host::new()?;
    let len = GRH_LEN + ud_mtu(&host)?;
    let qp = ud_qp(&host)?;
    for _ in 0..RECV_DEPTH {
        qp.post_recv(host.buffer(len, DmaDirection::FromDevice)?)?;
    }
    pr_info!("# stream: ud receiver qpn {:#x}\n", qp.qp_num());
    receive(&host.recv_cq, GRH_LEN as u32, UD_IDLE_MS, |wc| {
        let buf = qp.complete_recv(wc).ok_or(EINVAL)?;
        qp.post_recv(buf)
    })
}

fn ud_sender(peer: &Peer) -> Result<Tally> {
    let host = Host::new()?;
    let path = host.path_to(peer.guid)?;
    let len = ud_mtu(&host)?;
    let qp = ud_qp(&host)?;
    let ah = qp.address_handle(&AhAttr::from_path(&host.device, PORT, &path, None)?)?;
    send(
        &host,
        len,
        peer.secs,
        |buf| qp.post_send_ud(buf, len, &ah, peer.qpn, QKEY),
        |wc| qp.complete_send(wc),
    )
}
