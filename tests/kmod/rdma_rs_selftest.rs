// SPDX-License-Identifier: GPL-2.0

//! Self-test of the Rust RDMA verbs abstractions (`kernel::rdma`), loaded by the kselftest
//! `one_host_verbs.sh` on the one-host soft-RoCE topology: `rxe0` on 192.0.2.1 and `rxe1` on
//! 192.0.2.2. Each check prints one KTAP line to the kernel log (`rdma_rs_selftest: ok 1 ...`);
//! the script turns them into test results.

use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{
    c_str,
    net::{mcast::Ipv6McMembership, skb::SkBuff},
    new_condvar, new_mutex,
    prelude::*,
    rdma::{
        ah::{AddressHandle, AhAttr},
        client::{self, Client},
        cm::{
            self, CmId, CmIdRef, Event, GidAttr, GidType, ListenHandler, Listener, PathRecord,
            QpState, ReqParams, Request,
        },
        cq::{CompletionHandler, CompletionQueue, WcOpcode, WcStatus, WorkCompletion},
        device::{Device, DeviceRef, Gid, Mtu},
        dma::{DmaBuffer, DmaDirection},
        pd::ProtectionDomain,
        qp::SharedQueue,
        qp::{
            QpCaps, QpChange, QpEvent, QpEventHandler, QpType, QueuePair, RecvBuffer, RnrTimer,
            Sent, State,
        },
        sa::{JoinState, McHandler, McJoin, McMemberRecord, PathHandler, PathQuery, SaClient},
        srq::{SharedReceiveQueue, SrqEvent, SrqEventHandler},
    },
    sync::{Arc, CondVar, Mutex},
    time::{ktime_ms_delta, msecs_to_jiffies, Ktime},
};

module! {
    type: VerbsSelftest,
    name: "rdma_rs_selftest",
    author: "ipoib-rs developers",
    description: "Self-test of the Rust RDMA verbs abstractions on soft-RoCE",
    license: "GPL",
}

mod ipoib_intruder;
mod verbs_stream;

kernel::module_param!(
    /// The UD QPN of an ib_ipoib interface on rxe1 to attack instead of the usual checks.
    IPOIB_QPN,
    "rdma_rs_selftest",
    "ipoib_qpn",
    u32,
    0,
    "Run only the hostile connected-mode peer against the ib_ipoib interface of this UD QPN on rxe1"
);

kernel::module_param!(
    /// With `ipoib_qpn`: how many connections to open and keep instead of the attack.
    IPOIB_PEERS,
    "rdma_rs_selftest",
    "ipoib_peers",
    u32,
    0,
    "With ipoib_qpn: open this many connections to the interface, one message on each, kept until unloaded"
);

kernel::module_param!(
    /// With `ipoib_qpn`: the upper half of the interface's port GUID on InfiniBand.
    IPOIB_GUID_HI,
    "rdma_rs_selftest",
    "ipoib_guid_hi",
    u32,
    0,
    "With ipoib_qpn: the upper 32 bits of the port GUID of the interface, reached from ibp0 over InfiniBand instead of rxe1"
);

kernel::module_param!(
    /// With `ipoib_qpn`: the lower half of the interface's port GUID on InfiniBand.
    IPOIB_GUID_LO,
    "rdma_rs_selftest",
    "ipoib_guid_lo",
    u32,
    0,
    "With ipoib_qpn: the lower 32 bits of that port GUID"
);

kernel::module_param!(
    /// A stream of the benchmark's in-kernel reference instead of the checks.
    STREAM,
    "rdma_rs_selftest",
    "stream",
    u32,
    0,
    "Receive (or, with stream_guid_hi/lo, send) a raw verbs stream on ibp0 instead of the checks: 1 RC, 2 UD"
);

kernel::module_param!(
    /// The upper half of the stream receiver's port GUID.
    STREAM_GUID_HI,
    "rdma_rs_selftest",
    "stream_guid_hi",
    u32,
    0,
    "With stream: the upper 32 bits of the receiver's port GUID (makes this host the sender)"
);

kernel::module_param!(
    /// The lower half of the stream receiver's port GUID.
    STREAM_GUID_LO,
    "rdma_rs_selftest",
    "stream_guid_lo",
    u32,
    0,
    "With stream: the lower 32 bits of the receiver's port GUID"
);

kernel::module_param!(
    /// The UD stream receiver's queue pair.
    STREAM_QPN,
    "rdma_rs_selftest",
    "stream_qpn",
    u32,
    0,
    "With stream=2 and a GUID: the receiver's UD QPN (it logs it)"
);

kernel::module_param!(
    /// How long the sender sends.
    STREAM_SECS,
    "rdma_rs_selftest",
    "stream_secs",
    u32,
    5,
    "With stream and a GUID: seconds to send (default 5)"
);

const OWNER: &CStr = c_str!("rdma_rs_selftest");
const PORT: u32 = 1;
const QKEY: u32 = 0x0b1b;
/// Space a UD receive buffer keeps for the GRH in front of the payload.
const GRH_LEN: usize = 40;
const PAYLOAD_LEN: usize = 200;
const RECV_LEN: usize = GRH_LEN + 256;
const RECVS: u32 = 8;

/// Wakes a waiting test when its completion queue has an event, or a CM handler sets a flag.
#[pin_data]
struct Waiter {
    events: AtomicU32,
    flags: AtomicU32,
    #[pin]
    lock: Mutex<()>,
    #[pin]
    cv: CondVar,
}

impl CompletionHandler for Waiter {
    fn completion(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
        self.cv.notify_all();
    }
}

/// One side of the test: a UD queue pair with its own send and receive queues.
struct Endpoint {
    device: DeviceRef,
    gid_index: u32,
    gid: Gid,
    pd: Arc<ProtectionDomain>,
    send_cq: Arc<CompletionQueue<Waiter>>,
    recv_cq: Arc<CompletionQueue<Waiter>>,
    qp: Pin<KBox<QueuePair>>,
}

fn waiter() -> Result<Arc<Waiter>> {
    Arc::pin_init(
        pin_init!(Waiter {
            events: AtomicU32::new(0),
            flags: AtomicU32::new(0),
            lock <- new_mutex!(()),
            cv <- new_condvar!(),
        }),
        GFP_KERNEL,
    )
}

/// The IPv4-mapped RoCE v2 GID of `ip`.
fn ipv4_gid(ip: [u8; 4]) -> Gid {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    Gid(g)
}

fn find_gid(device: &Device, gid: &Gid) -> Result<u32> {
    let len = device.port_attr(PORT)?.gid_table_len();
    (0..len)
        .find(|&i| device.query_gid(PORT, i).is_ok_and(|g| g == *gid))
        .ok_or(ENOENT)
}

impl Endpoint {
    fn new(name: &CStr, ip: [u8; 4]) -> Result<Self> {
        let device = Device::get_by_name(name)?;
        let gid = ipv4_gid(ip);
        let gid_index = find_gid(&device, &gid)?;
        let pd = ProtectionDomain::new(&device, OWNER)?;
        let send_cq = CompletionQueue::new(&device, 16, 0, waiter()?, OWNER)?;
        let recv_cq = CompletionQueue::new(&device, RECVS * 2, 0, waiter()?, OWNER)?;
        let caps = QpCaps {
            max_send_wr: 8,
            max_recv_wr: RECVS,
            // Room for an skb's linear part and two page fragments (`skb_send`).
            max_send_sge: 3,
            max_recv_sge: 1,
        };
        let qp = QueuePair::new(
            QpType::Ud,
            &pd,
            send_cq.clone(),
            recv_cq.clone(),
            None,
            caps,
            OWNER,
        )?;
        qp.modify(&QpChange::to_init().port(PORT).pkey_index(0).qkey(QKEY))?;
        qp.modify(&QpChange::to_ready_to_receive())?;
        qp.modify(&QpChange::to_ready_to_send().send_psn(0))?;
        Ok(Self {
            device,
            gid_index,
            gid,
            pd,
            send_cq,
            recv_cq,
            qp,
        })
    }

    fn post_recvs(&self, n: u32) -> Result {
        for _ in 0..n {
            let buf = DmaBuffer::new(&self.device, RECV_LEN, DmaDirection::FromDevice, GFP_KERNEL)?;
            self.qp.post_recv(buf)?;
        }
        Ok(())
    }

    /// The route from this endpoint to `peer`.
    fn route_to(&self, peer: &Endpoint) -> Result<AhAttr> {
        // rxe routes RoCE v2 through the IP stack, which finds the next hop itself.
        let (dmac, hop_limit) = ([0u8; 6], 64);
        let sgid_index = u8::try_from(self.gid_index)?;
        Ok(AhAttr::roce(PORT, sgid_index, &peer.gid, hop_limit, dmac))
    }

    fn address_of(&self, peer: &Endpoint) -> Result<Arc<AddressHandle>> {
        self.qp.address_handle(&self.route_to(peer)?)
    }

    fn send(&self, ah: &Arc<AddressHandle>, to: u32, qkey: u32, fill: u8) -> Result {
        let mut buf = DmaBuffer::new(
            &self.device,
            PAYLOAD_LEN,
            DmaDirection::ToDevice,
            GFP_KERNEL,
        )?;
        for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
            *b = fill.wrapping_add(i as u8);
        }
        self.qp.post_send_ud(buf, PAYLOAD_LEN, ah, to, qkey)?;
        let mut wc = wait(&self.send_cq, 2000).ok_or(EAGAIN)?;
        let Some(Sent::Buffer(buf)) = self.qp.complete_send(&mut wc) else {
            return Err(EINVAL);
        };
        if wc.status() != WcStatus::Success || buf.len() != PAYLOAD_LEN {
            return Err(EIO);
        }
        Ok(())
    }
}

/// Waits up to `ms` milliseconds for one completion on `cq`.
fn wait(cq: &CompletionQueue<Waiter>, ms: i64) -> Option<WorkCompletion> {
    let start = Ktime::ktime_get();
    loop {
        let mut wc = [WorkCompletion::new()];
        if cq.poll(&mut wc).ok()? == 1 {
            let [wc] = wc;
            return Some(wc);
        }
        if cq.request_notify().ok()? {
            continue;
        }
        if ktime_ms_delta(Ktime::ktime_get(), start) > ms {
            return None;
        }
        let w = cq.handler();
        let mut guard = w.lock.lock();
        // Woken, timed out or signalled: each case polls again, bounded by the deadline.
        let _ =
            w.cv.wait_interruptible_timeout(&mut guard, msecs_to_jiffies(20));
    }
}

/// Queue pairs on the shared receive queue report their events to the passive side's waiter.
impl QpEventHandler for Waiter {
    fn event(&self, event: QpEvent) {
        if event == QpEvent::LastWqeReached {
            self.set(F_LAST_WQE);
        }
    }
}

/// The shared receive queue reports its limit event to the passive side's waiter.
impl SrqEventHandler for Waiter {
    fn event(&self, event: SrqEvent) {
        if event == SrqEvent::LimitReached {
            self.set(F_SRQ_LIMIT);
        }
    }
}

impl Waiter {
    fn set(&self, flag: u32) {
        self.flags.fetch_or(flag, Ordering::SeqCst);
        self.cv.notify_all();
    }

    /// Waits up to `ms` milliseconds for `flag`.
    fn wait_flag(&self, flag: u32, ms: i64) -> Result {
        let start = Ktime::ktime_get();
        while self.flags.load(Ordering::SeqCst) & flag == 0 {
            if ktime_ms_delta(Ktime::ktime_get(), start) > ms {
                return Err(EAGAIN);
            }
            let mut guard = self.lock.lock();
            // Woken, timed out or signalled: each case checks again, bounded by the deadline.
            let _ = self
                .cv
                .wait_interruptible_timeout(&mut guard, msecs_to_jiffies(20));
        }
        Ok(())
    }
}

/// Counts and prints results as KTAP lines.
struct Report {
    n: u32,
    failed: u32,
}

impl Report {
    fn check(&mut self, name: &str, result: Result) {
        self.n += 1;
        match result {
            Ok(()) => pr_info!("ok {} {}\n", self.n, name),
            Err(e) => {
                self.failed += 1;
                pr_info!("not ok {} {} # {:?}\n", self.n, name, e);
            }
        }
    }
}

fn receive_one(rx: &Endpoint, from_qpn: u32, fill: u8) -> Result {
    let mut wc = wait(&rx.recv_cq, 2000).ok_or(EAGAIN)?;
    let buf = rx.qp.complete_recv(&mut wc).ok_or(EINVAL)?;
    if wc.status() != WcStatus::Success || wc.opcode() != WcOpcode::Recv {
        pr_info!(
            "# receive status {:?} opcode {:?}\n",
            wc.status(),
            wc.opcode()
        );
        return Err(EIO);
    }
    if wc.byte_len() as usize != GRH_LEN + PAYLOAD_LEN || wc.src_qp() != from_qpn {
        pr_info!(
            "# received {} bytes from QPN {:#x}\n",
            wc.byte_len(),
            wc.src_qp()
        );
        return Err(EINVAL);
    }
    let payload = &buf.as_slice()[GRH_LEN..GRH_LEN + PAYLOAD_LEN];
    if payload
        .iter()
        .enumerate()
        .any(|(i, &b)| b != fill.wrapping_add(i as u8))
    {
        return Err(EINVAL);
    }
    rx.post_recvs(1)
}

/// A receive completion, once its buffer is taken back, names no request any more: were it
/// completed again after the ring reposted its slot, it would take a buffer the device
/// still owns.
fn used_up(a: &Endpoint, b: &Endpoint, ah: &Arc<AddressHandle>) -> Result {
    a.send(ah, b.qp.qp_num(), QKEY, 8)?;
    let mut wc = wait(&b.recv_cq, 2000).ok_or(EAGAIN)?;
    let first = b.qp.complete_recv(&mut wc).ok_or(EINVAL)?;
    let again = b.qp.complete_recv(&mut wc);
    b.post_recvs(1)?;
    drop(first);
    if again.is_some() || wc.wr_id() != 0 {
        pr_info!("# completed twice, or its id kept ({:#x})\n", wc.wr_id());
        return Err(EINVAL);
    }
    Ok(())
}

/// Receives taken back and posted through one lock of the receive queue: three datagrams
/// completed in the order sent, three buffers posted in their place, the queue full again.
fn locked_batch(a: &Endpoint, b: &Endpoint, ah: &Arc<AddressHandle>) -> Result {
    let before = b.qp.recvs_posted();
    let mut wcs = KVec::new();
    for fill in 41..44u8 {
        a.send(ah, b.qp.qp_num(), QKEY, fill)?;
        wcs.push(wait(&b.recv_cq, 2000).ok_or(EAGAIN)?, GFP_KERNEL)?;
    }
    let mut rq = b.qp.lock_recvs()?;
    for (wc, fill) in wcs.iter_mut().zip(41..44u8) {
        let buf = rq.complete(wc).ok_or(EINVAL)?;
        let first = buf.as_slice().get(GRH_LEN).copied();
        if wc.status() != WcStatus::Success || first != Some(fill) {
            pr_info!(
                "# datagram {} came back as {:?}, {:?}\n",
                fill,
                first,
                wc.status()
            );
            return Err(EIO);
        }
        rq.post(buf)?;
    }
    let posted = rq.posted();
    drop(rq);
    if posted != before || b.qp.recvs_posted() != before {
        pr_info!("# {} posted through the lock, {} before\n", posted, before);
        return Err(EINVAL);
    }
    Ok(())
}

/// A receive taken back and replaced in its slot (`complete_with`): the buffer the closure
/// returns is posted in the slot just emptied, so the ring stays as full; one the closure
/// keeps leaves the slot empty, and a completion used up takes nothing.
fn refilled_in_place(a: &Endpoint, b: &Endpoint, ah: &Arc<AddressHandle>) -> Result {
    let before = b.qp.recvs_posted();
    a.send(ah, b.qp.qp_num(), QKEY, 51)?;
    let mut wc = wait(&b.recv_cq, 2000).ok_or(EAGAIN)?;
    let mut rq = b.qp.lock_recvs()?;
    let (seen, posted) = rq
        .complete_with(&mut wc, |buf, wc| {
            let seen = buf.as_slice().get(GRH_LEN).copied();
            (Some(buf), (seen, wc.status()))
        })
        .ok_or(EINVAL)?;
    let again = rq.complete_with(&mut wc, |buf, _| (Some(buf), ()));
    drop(rq);
    posted?;
    let refilled = b.qp.recvs_posted();
    if seen != (Some(51), WcStatus::Success) || again.is_some() || refilled != before {
        pr_info!(
            "# came back as {:?}, completed again: {}, {} posted of {}\n",
            seen,
            again.is_some(),
            refilled,
            before
        );
        return Err(EINVAL);
    }
    a.send(ah, b.qp.qp_num(), QKEY, 52)?;
    let mut wc = wait(&b.recv_cq, 2000).ok_or(EAGAIN)?;
    let mut rq = b.qp.lock_recvs()?;
    let kept = rq
        .complete_with(&mut wc, |buf, _| (None, buf))
        .ok_or(EINVAL)?;
    let left = rq.posted();
    drop(rq);
    kept.1?;
    let landed = kept.0.as_slice().get(GRH_LEN).copied();
    // The slot left empty is posted again, for the tests that follow.
    b.post_recvs(1)?;
    if b.qp.recvs_posted() != before || left + 1 != before || landed != Some(52) {
        pr_info!(
            "# {} of {} posted after keeping one, datagram {:?}\n",
            left,
            before,
            landed
        );
        return Err(EINVAL);
    }
    Ok(())
}

/// `Ok` if `result` is the refusal `EINVAL`; `EEXIST` if it was taken, its own error else.
fn refused<T>(result: Result<T>) -> Result {
    match result {
        Err(e) if e == EINVAL => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Err(EEXIST),
    }
}

/// A UD queue pair of one request each way, receiving into `B`, in `pd` with these
/// completion queues.
fn small_ud_qp<B: RecvBuffer>(
    pd: &Arc<ProtectionDomain>,
    send_cq: &Arc<CompletionQueue<Waiter>>,
    recv_cq: &Arc<CompletionQueue<Waiter>>,
) -> Result<Pin<KBox<QueuePair<B>>>> {
    let caps = QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
    };
    QueuePair::with_buffers(
        QpType::Ud,
        pd,
        send_cq.clone(),
        recv_cq.clone(),
        None,
        caps,
        None,
        OWNER,
    )
}

/// Brings a UD queue pair to RTS on `PORT`, taking datagrams of `QKEY`.
fn ud_up<B: RecvBuffer>(qp: &QueuePair<B>) -> Result {
    qp.modify(&QpChange::to_init().port(PORT).pkey_index(0).qkey(QKEY))?;
    qp.modify(&QpChange::to_ready_to_receive())?;
    qp.modify(&QpChange::to_ready_to_send().send_psn(0))
}

/// A datagram received into an skb is its data where it landed: the skb comes back with
/// the GRH space and the payload, at the address its tailroom had. An skb with fragments or
/// without tailroom is refused (`EINVAL`).
fn skb_receive(a: &Endpoint, b: &Endpoint, ah: &Arc<AddressHandle>) -> Result {
    let qp = small_ud_qp::<SkBuff>(&b.pd, &b.send_cq, &b.recv_cq)?;
    ud_up(&qp)?;
    let room = (GRH_LEN + PAYLOAD_LEN) as u32;
    let mut paged = SkBuff::alloc(None, room, GFP_KERNEL)?;
    paged.append_paged(&[1, 2, 3], GFP_KERNEL)?;
    refused(qp.post_recv(paged))?;
    let mut full = SkBuff::alloc(None, room, GFP_KERNEL)?;
    let tailroom = full.tailroom();
    full.put(tailroom)?;
    refused(qp.post_recv(full))?;
    if qp.recvs_posted() != 0 {
        return Err(EINVAL);
    }
    let skb = SkBuff::alloc(None, room, GFP_KERNEL)?;
    let landing = skb.data().as_ptr();
    qp.post_recv(skb)?;
    a.send(ah, qp.qp_num(), QKEY, 41)?;
    let mut wc = wait(&b.recv_cq, 2000).ok_or(EAGAIN)?;
    let skb = qp.complete_recv(&mut wc).ok_or(EINVAL)?;
    let payload = skb.data().get(GRH_LEN..).ok_or(EINVAL)?;
    let expected = (0..PAYLOAD_LEN).map(|i| 41u8.wrapping_add(i as u8));
    if wc.status() != WcStatus::Success
        || skb.len() != wc.byte_len()
        || skb.data().as_ptr() != landing
        || payload.len() != PAYLOAD_LEN
        || !payload.iter().copied().eq(expected)
    {
        pr_info!(
            "# status {:?}, {} bytes of {} received, in place: {}\n",
            wc.status(),
            skb.len(),
            wc.byte_len(),
            skb.data().as_ptr() == landing
        );
        return Err(EIO);
    }
    Ok(())
}

/// An skb goes out from where it lies, its linear part and each page fragment a segment of
/// its own, mapped in the send's slot: the datagram arrives whole and in order, and the
/// completion gives the skb back as it was. One whose offset is past its linear part is
/// refused (`EINVAL`), nothing left held.
fn skb_send(a: &Endpoint, b: &Endpoint, ah: &Arc<AddressHandle>) -> Result {
    const LEAD: usize = 4;
    const FILL: u8 = 51;
    let byte = |i: usize| FILL.wrapping_add(i as u8);
    let mut short = SkBuff::alloc(None, 8, GFP_KERNEL)?;
    short.put(8)?;
    refused(a.qp.post_skb_ud(short, 9, ah, b.qp.qp_num(), QKEY))?;
    if a.qp.sends_in_flight() != 0 {
        return Err(EBUSY);
    }
    // Bytes `LEAD..` of the linear part, then two fragments, make the datagram.
    let (head, middle) = (PAYLOAD_LEN / 2, PAYLOAD_LEN * 3 / 4);
    let mut skb = SkBuff::alloc(None, (LEAD + head) as u32, GFP_KERNEL)?;
    for (i, b) in skb.put((LEAD + head) as u32)?.iter_mut().enumerate() {
        *b = if i < LEAD { 0xee } else { byte(i - LEAD) };
    }
    let mut rest = [0u8; PAYLOAD_LEN];
    for (i, b) in rest.iter_mut().enumerate() {
        *b = byte(i);
    }
    skb.append_paged(rest.get(head..middle).ok_or(EINVAL)?, GFP_KERNEL)?;
    skb.append_paged(rest.get(middle..).ok_or(EINVAL)?, GFP_KERNEL)?;
    let (len, frags) = (skb.len(), skb.nr_frags());
    if frags < 2 {
        pr_info!("# {} fragments made\n", frags);
        return Err(EINVAL);
    }
    a.qp.post_skb_ud(skb, LEAD as u32, ah, b.qp.qp_num(), QKEY)?;
    let mut wc = wait(&a.send_cq, 2000).ok_or(EAGAIN)?;
    let Some(Sent::Skb(skb)) = a.qp.complete_send(&mut wc) else {
        return Err(EINVAL);
    };
    if wc.status() != WcStatus::Success || skb.len() != len || skb.nr_frags() != frags {
        pr_info!(
            "# send status {:?}; {} bytes in {} fragments back\n",
            wc.status(),
            skb.len(),
            skb.nr_frags()
        );
        return Err(EIO);
    }
    receive_one(b, a.qp.qp_num(), FILL)
}

/// The core would link the objects of two devices; the abstraction refuses them.
fn mixed_devices(a: &Endpoint, b: &Endpoint) -> Result {
    refused(small_ud_qp::<DmaBuffer>(&a.pd, &a.send_cq, &b.recv_cq))
}

/// State changes the transport does not take are refused: a UD queue pair sent to RTS
/// from RESET, brought to INIT without its Q_Key, or given access flags (RC only); the
/// change it does take then works. A send posted in INIT is refused and holds nothing.
fn qp_changes(a: &Endpoint, b: &Endpoint) -> Result {
    let qp = small_ud_qp::<DmaBuffer>(&a.pd, &a.send_cq, &a.recv_cq)?;
    let ah = qp.address_handle(&a.route_to(b)?)?;
    let init = QpChange::to_init().port(PORT).pkey_index(0);
    for wrong in [
        QpChange::to_ready_to_send().send_psn(0),
        init,
        init.qkey(QKEY).local_write(),
    ] {
        refused(qp.modify(&wrong))?;
    }
    qp.modify(&init.qkey(QKEY))?;
    if qp.state()? != State::Init {
        return Err(EINVAL);
    }
    // Not ready to send: the device refuses the request, whose buffer the queue pair
    // took before posting it; it must be freed, its slot free again.
    let buf = DmaBuffer::new(&a.device, PAYLOAD_LEN, DmaDirection::ToDevice, GFP_KERNEL)?;
    refused(qp.post_send_ud(buf, PAYLOAD_LEN, &ah, a.qp.qp_num(), QKEY))?;
    match qp.sends_in_flight() {
        0 => Ok(()),
        n => {
            pr_info!("# {} refused sends still held\n", n);
            Err(EBUSY)
        }
    }
}

/// The slots a queue pair keeps its posted buffers in: a post beyond them is refused
/// (`ENOSPC`); a reset hands back what was posted, and a completion of before the reset
/// that was not yet taken takes nothing afterwards, though a new buffer sits in its slot,
/// which the next datagram fills.
fn slots_across_reset(a: &Endpoint, b: &Endpoint, ah: &Arc<AddressHandle>) -> Result {
    let qp = small_ud_qp::<DmaBuffer>(&b.pd, &b.send_cq, &b.recv_cq)?;
    let up = ud_up::<DmaBuffer>;
    let buffer = || DmaBuffer::new(&b.device, RECV_LEN, DmaDirection::FromDevice, GFP_KERNEL);
    up(&qp)?;
    qp.post_recv(buffer()?)?;
    match qp.post_recv(buffer()?) {
        Err(e) if e == ENOSPC => {}
        other => {
            pr_info!("# a post beyond the slots gave {:?}\n", other);
            return Err(EINVAL);
        }
    }
    a.send(ah, qp.qp_num(), QKEY, 31)?;
    let mut stale = wait(&b.recv_cq, 2000).ok_or(EAGAIN)?;
    let mut back = 0;
    qp.reset(drop, |_| back += 1)?;
    if back != 1 || qp.recvs_posted() != 0 {
        pr_info!(
            "# reset gave back {} buffers, {} still posted\n",
            back,
            qp.recvs_posted()
        );
        return Err(EINVAL);
    }
    up(&qp)?;
    qp.post_recv(buffer()?)?;
    if qp.complete_recv(&mut stale).is_some() || qp.recvs_posted() != 1 {
        pr_info!("# a completion of before the reset took the new buffer\n");
        return Err(EINVAL);
    }
    a.send(ah, qp.qp_num(), QKEY, 32)?;
    let mut wc = wait(&b.recv_cq, 2000).ok_or(EAGAIN)?;
    let buf = qp.complete_recv(&mut wc).ok_or(EINVAL)?;
    let payload = buf
        .as_slice()
        .get(GRH_LEN..GRH_LEN + PAYLOAD_LEN)
        .ok_or(EINVAL)?;
    if wc.status() != WcStatus::Success || payload.first() != Some(&32) {
        return Err(EIO);
    }
    Ok(())
}

/// Memory the device must not write, or cannot reach, and a handle made for another queue
/// pair: each post is refused with `EINVAL` and its buffer freed.
fn foreign_posts(a: &Endpoint, b: &Endpoint, ah_a: &Arc<AddressHandle>) -> Result {
    let read_only = DmaBuffer::new(&b.device, RECV_LEN, DmaDirection::ToDevice, GFP_KERNEL)?;
    refused(b.qp.post_recv(read_only))?;
    let elsewhere = DmaBuffer::new(&a.device, RECV_LEN, DmaDirection::FromDevice, GFP_KERNEL)?;
    refused(b.qp.post_recv(elsewhere))?;
    let send = DmaBuffer::new(&b.device, PAYLOAD_LEN, DmaDirection::ToDevice, GFP_KERNEL)?;
    refused(b.qp.post_send_ud(send, PAYLOAD_LEN, ah_a, a.qp.qp_num(), QKEY))
}

/// Sends take no reference to their address handle: one dropped while its send is in
/// flight waits (counted) until the send is taken back, and only a reap after that destroys
/// it; a handle no send used goes at the next reap.
fn handle_waits_for_send(a: &Endpoint, b: &Endpoint) -> Result {
    const FILL: u8 = 41;
    // Handles dropped by earlier checks, whose sends are all over, go first.
    a.qp.reap_address_handles();
    if a.qp.sends_in_flight() != 0 || a.qp.address_handles_waiting() != 0 {
        pr_info!("# sends or handles left by earlier checks\n");
        return Err(EBUSY);
    }
    let ah = a.address_of(b)?;
    let mut buf = DmaBuffer::new(&a.device, PAYLOAD_LEN, DmaDirection::ToDevice, GFP_KERNEL)?;
    for (i, byte) in buf.as_mut_slice().iter_mut().enumerate() {
        *byte = FILL.wrapping_add(i as u8);
    }
    a.qp.post_send_ud(buf, PAYLOAD_LEN, &ah, b.qp.qp_num(), QKEY)?;
    drop(ah);
    let waiting = a.qp.address_handles_waiting();
    let early = a.qp.reap_address_handles();
    let mut wc = wait(&a.send_cq, 2000).ok_or(EAGAIN)?;
    let sent = matches!(a.qp.complete_send(&mut wc), Some(Sent::Buffer(buf))
        if buf.as_slice().first() == Some(&FILL));
    let late = a.qp.reap_address_handles();
    receive_one(b, a.qp.qp_num(), FILL)?;
    drop(a.address_of(b)?);
    let unused = a.qp.reap_address_handles();
    let left = a.qp.address_handles_waiting();
    if (waiting, early, sent, late, unused, left) != (1, 0, true, 1, 1, 0) {
        pr_info!(
            "# waiting {}, reaped before the completion {}, completion taken {}, reaped after {}, unused reaped {}, left {}\n",
            waiting,
            early,
            sent,
            late,
            unused,
            left
        );
        return Err(EINVAL);
    }
    Ok(())
}

/// A reset ends the sends in flight for their handles, as completions do; a handle whose
/// send the device refused waits for the next send, which takes that send's number; a
/// queue pair destroyed with handles waiting destroys them (the script finds no domain
/// left).
fn handles_across_reset(a: &Endpoint, b: &Endpoint) -> Result {
    let send_cq = CompletionQueue::new(&a.device, 4, 0, waiter()?, OWNER)?;
    let recv_cq = CompletionQueue::new(&a.device, 4, 0, waiter()?, OWNER)?;
    let qp = small_ud_qp::<DmaBuffer>(&a.pd, &send_cq, &recv_cq)?;
    // With another Q_Key: `b` drops them, its receive buffers stay for the checks after.
    let post = |ah: &AddressHandle| {
        let buf = DmaBuffer::new(&a.device, PAYLOAD_LEN, DmaDirection::ToDevice, GFP_KERNEL)?;
        qp.post_send_ud(buf, PAYLOAD_LEN, ah, b.qp.qp_num(), QKEY + 1)
    };
    // Refused in RESET: its number goes to the next send.
    let refused_ah = qp.address_handle(&a.route_to(b)?)?;
    refused(post(&refused_ah))?;
    drop(refused_ah);
    let before_send = qp.reap_address_handles();
    ud_up(&qp)?;
    let ah = qp.address_handle(&a.route_to(b)?)?;
    post(&ah)?;
    drop(ah);
    let before_reset = (qp.reap_address_handles(), qp.address_handles_waiting());
    // The send is not taken back by its completion: the reset takes it.
    qp.reset(drop, drop)?;
    let after_reset = (qp.reap_address_handles(), qp.address_handles_waiting());
    // One more, dropped with the queue pair.
    ud_up(&qp)?;
    let last = qp.address_handle(&a.route_to(b)?)?;
    post(&last)?;
    drop(last);
    let at_drop = qp.address_handles_waiting();
    drop(qp);
    if (before_send, before_reset, after_reset, at_drop) != (0, (0, 2), (2, 0), 1) {
        pr_info!(
            "# reaped before the send {}; reaped, waiting before the reset {:?}, after it {:?}; waiting at the drop {}\n",
            before_send,
            before_reset,
            after_reset,
            at_drop
        );
        return Err(EINVAL);
    }
    // The completion of the last send may be left in the queue; it goes with the CQ.
    Ok(())
}

/// The IPoIB broadcast group of P_Key 0xffff.
const MGID: Gid = Gid([
    0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
]);
const MULTICAST_QPN: u32 = 0xff_ffff;

/// `b` joins `MGID` (QP attach plus the IP-level join RoCE needs), `a` sends to it from its
/// IPv6 link-local GID (index 0); after leaving, `b` receives nothing.
fn multicast(a: &Endpoint, b: &Endpoint) -> Result {
    let ndev = b.device.netdev(PORT)?;
    let member = Ipv6McMembership::join(&ndev, &MGID.0)?;
    b.qp.attach_mcast(&MGID, 0)?;
    let mac = [0x33, 0x33, MGID.0[12], MGID.0[13], MGID.0[14], MGID.0[15]];
    let ah =
        a.qp.address_handle(&AhAttr::roce(PORT, 0, &MGID, 64, mac))?;
    a.send(&ah, MULTICAST_QPN, QKEY, 21)?;
    receive_one(b, a.qp.qp_num(), 21)?;
    // The same group through the member record RoCE builds locally for it.
    let port_gid = GidAttr::get(&a.device, PORT, 0)?;
    let rec = McMemberRecord::roce(&MGID, &port_gid, QKEY, Mtu::Mtu1024, 64);
    let rec_ah =
        a.qp.address_handle(&AhAttr::from_mcmember(&a.device, PORT, &rec)?)?;
    a.send(&rec_ah, MULTICAST_QPN, rec.qkey(), 22)?;
    receive_one(b, a.qp.qp_num(), 22)?;
    b.qp.detach_mcast(&MGID, 0)?;
    drop(member);
    a.send(&ah, MULTICAST_QPN, QKEY, 23)?;
    match wait(&b.recv_cq, 500) {
        None => Ok(()),
        Some(mut wc) => {
            let _ = b.qp.complete_recv(&mut wc);
            pr_info!("# received after leaving the group\n");
            Err(EEXIST)
        }
    }
}

/// `a` reaches `b` through an address handle made from a RoCE v2 path record.
fn path_ah(a: &Endpoint, b: &Endpoint) -> Result {
    let sgid = GidAttr::get(&a.device, PORT, a.gid_index)?;
    if sgid.gid() != a.gid || sgid.gid_type() != GidType::RoceV2 {
        pr_info!(
            "# GID attribute {} of type {:?}\n",
            sgid.gid(),
            sgid.gid_type()
        );
        return Err(EINVAL);
    }
    let path = PathRecord::roce_v2(&a.gid, &b.gid, Mtu::Mtu1024, [0; 6]);
    let with_sgid = AhAttr::from_path(&a.device, PORT, &path, Some(&sgid))?;
    let ah = a.qp.address_handle(&with_sgid)?;
    a.send(&ah, b.qp.qp_num(), QKEY, 13)?;
    receive_one(b, a.qp.qp_num(), 13)?;
    // Without a GID attribute the path's source GID is looked up in the table.
    let looked_up = AhAttr::from_path(&a.device, PORT, &path, None)?;
    let ah = a.qp.address_handle(&looked_up)?;
    a.send(&ah, b.qp.qp_num(), QKEY, 15)?;
    receive_one(b, a.qp.qp_num(), 15)
}

/// How many [`SaProbe`]s were dropped.
static SA_PROBE_DROPS: AtomicU32 = AtomicU32::new(0);

/// A path and multicast handler that must never be called on RoCE.
struct SaProbe {
    called: AtomicU32,
}

impl Drop for SaProbe {
    fn drop(&mut self) {
        SA_PROBE_DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

impl PathHandler for SaProbe {
    fn path(&self, _result: Result<&PathRecord>) {
        self.called.fetch_add(1, Ordering::SeqCst);
    }
}

impl McHandler for SaProbe {
    fn joined(&self, _result: Result<&McMemberRecord>) {
        self.called.fetch_add(1, Ordering::SeqCst);
    }
}

/// RoCE has no subnet administrator: queries and joins are refused before anything is sent,
/// and their handlers are released without being called.
fn sa_on_roce(a: &Endpoint, b: &Endpoint) -> Result {
    let client = SaClient::new()?;
    let probe = Arc::new(
        SaProbe {
            called: AtomicU32::new(0),
        },
        GFP_KERNEL,
    )?;
    let rec = PathRecord::ib_query(&a.gid, &b.gid, 0xffff);
    let path = PathQuery::start(&client, &a.device, PORT, &rec, 1000, probe.clone());
    let join_rec = McMemberRecord::ib_join(&MGID, &a.gid, 0xffff, JoinState::FullMember);
    let join = McJoin::start(&client, &a.device, PORT, &join_rec, probe.clone());
    let refused =
        matches!(path, Err(e) if e == EOPNOTSUPP) && matches!(join, Err(e) if e == EOPNOTSUPP);
    let called = probe.called.load(Ordering::SeqCst);
    drop(probe);
    drop(client);
    let drops = SA_PROBE_DROPS.load(Ordering::SeqCst);
    if refused && called == 0 && drops == 1 {
        Ok(())
    } else {
        pr_info!(
            "# refused {} called {} handler dropped {}\n",
            refused,
            called,
            drops
        );
        Err(EIO)
    }
}

const SERVICE_ID: u64 = 0x1000_0000_0000_0001;
const UNUSED_SERVICE_ID: u64 = 0x1000_0000_0000_0002;
const RC_MSG: usize = 65536;
const F_REP: u32 = 1;
const F_RTU: u32 = 2;
const F_DREQ: u32 = 4;
const F_DREP: u32 = 8;
const F_REJ: u32 = 16;
const F_BAD: u32 = 32;
const F_LAST_WQE: u32 = 64;
const F_SRQ_LIMIT: u32 = 128;
const F_MRA: u32 = 256;

/// One end of an RC connection: its queue pair and what its CM events told it.
struct RcEnd {
    qp: Pin<KBox<QueuePair>>,
    srq: Option<Arc<SharedReceiveQueue>>,
    signal: Arc<Waiter>,
    rej_reason: AtomicU32,
}

impl RcEnd {
    /// A new RC end on `ep`, receiving into `srq` if given, else into its own queue.
    fn new(
        ep: &Endpoint,
        signal: Arc<Waiter>,
        srq: Option<Arc<SharedReceiveQueue>>,
    ) -> Result<Arc<Self>> {
        let caps = QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
        };
        let events = srq
            .as_ref()
            .map(|_| signal.clone() as Arc<dyn QpEventHandler>);
        let qp = QueuePair::with_events(
            QpType::Rc,
            &ep.pd,
            ep.send_cq.clone(),
            ep.recv_cq.clone(),
            srq.clone().map(|s| s as Arc<dyn SharedQueue>),
            caps,
            events,
            OWNER,
        )?;
        qp.modify(&QpChange::to_init().port(PORT).pkey_index(0).local_write())?;
        for _ in 0..2 {
            let buf = DmaBuffer::new(&ep.device, RC_MSG, DmaDirection::FromDevice, GFP_KERNEL)?;
            match &srq {
                Some(srq) => srq.post_recv(buf),
                None => qp.post_recv(buf),
            }?;
        }
        Ok(Arc::new(
            RcEnd {
                qp,
                srq,
                signal,
                rej_reason: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?)
    }
}

impl cm::Handler for RcEnd {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        match event {
            Event::RepReceived {
                private_data,
                rnr_retry_count,
                ..
            } => {
                let ok = private_data.starts_with(b"rep-data")
                    && rnr_retry_count == REP_RNR_RETRY
                    && id.modify_qp(&self.qp, QpState::Rtr).is_ok()
                    && id.modify_qp(&self.qp, QpState::Rts).is_ok()
                    && id.send_rtu().is_ok();
                self.signal.set(if ok { F_REP } else { F_BAD });
            }
            Event::RtuReceived => {
                let ok = id.modify_qp(&self.qp, QpState::Rts).is_ok();
                self.signal.set(if ok { F_RTU } else { F_BAD });
            }
            Event::DreqReceived => {
                let ok = id.send_drep().is_ok();
                self.signal.set(if ok { F_DREQ } else { F_BAD });
            }
            Event::DrepReceived => self.signal.set(F_DREP),
            Event::RejReceived { reason } => {
                self.rej_reason.store(reason, Ordering::SeqCst);
                self.signal.set(F_REJ);
            }
            Event::MraReceived { service_timeout } => {
                self.signal.set(if service_timeout == MRA_TIMEOUT {
                    F_MRA
                } else {
                    F_BAD
                });
            }
            Event::Timeout | Event::TimewaitExit | Event::Other(_) => {}
        }
    }
}

/// The passive side on rxe1: accepts requests carrying "ipoib-rs" with a fresh RC QP that
/// receives from the shared receive queue.
#[pin_data]
struct Passive {
    ep: Endpoint,
    srq: Arc<SharedReceiveQueue>,
    #[pin]
    conn: Mutex<Option<CmId<RcEnd>>>,
    /// A request answered only with an MRA, kept unanswered.
    #[pin]
    delayed: Mutex<Option<CmId<RcEnd>>>,
    signal: Arc<Waiter>,
}

/// The service timeout the passive side's MRA announces (about 4 s).
const MRA_TIMEOUT: u8 = 20;

impl ListenHandler for Passive {
    fn request(&self, req: Request<'_>) -> Result {
        if req.private_data().starts_with(b"ipoib-mra") {
            let end = RcEnd::new(&self.ep, self.signal.clone(), None)?;
            req.id().send_mra(MRA_TIMEOUT, b"later")?;
            *self.delayed.lock() = Some(req.accept(end)?);
            return Ok(());
        }
        if !req.private_data().starts_with(b"ipoib-rs") || req.rnr_retry_count() != REQ_RNR_RETRY {
            pr_info!("# REQ RNR retry count {}\n", req.rnr_retry_count());
            self.signal.set(F_BAD);
            return Err(EINVAL);
        }
        let end = RcEnd::new(&self.ep, self.signal.clone(), Some(self.srq.clone()))?;
        req.id()
            .modify_qp_for_rep(&end.qp, 0x1234, RnrTimer::at_least_us(640))?;
        req.id()
            .send_rep(&end.qp, 0x1234, b"rep-data", true, REP_RNR_RETRY)?;
        let id = req.accept(end)?;
        *self.conn.lock() = Some(id);
        Ok(())
    }
}

fn send_rc(ep: &Endpoint, end: &RcEnd, fill: u8) -> Result {
    let mut buf = DmaBuffer::new(&ep.device, RC_MSG, DmaDirection::ToDevice, GFP_KERNEL)?;
    for (i, b) in buf.as_mut_slice().iter_mut().enumerate() {
        *b = fill.wrapping_add((i / 7) as u8);
    }
    end.qp.post_send(buf, RC_MSG)?;
    let mut wc = wait(&ep.send_cq, 5000).ok_or_else(|| {
        pr_info!("# no RC send completion on {}\n", ep.device.name());
        EAGAIN
    })?;
    end.qp.complete_send(&mut wc).ok_or(EINVAL)?;
    if wc.status() != WcStatus::Success {
        pr_info!("# RC send status {:?}\n", wc.status());
        return Err(EIO);
    }
    Ok(())
}

fn recv_rc(ep: &Endpoint, end: &RcEnd, fill: u8) -> Result {
    let mut wc = wait(&ep.recv_cq, 5000).ok_or_else(|| {
        pr_info!("# no RC receive completion on {}\n", ep.device.name());
        EAGAIN
    })?;
    let buf = match &end.srq {
        Some(srq) => srq.complete_recv(&mut wc),
        None => end.qp.complete_recv(&mut wc),
    }
    .ok_or(EINVAL)?;
    if wc.status() != WcStatus::Success || wc.byte_len() as usize != RC_MSG {
        pr_info!(
            "# RC receive status {:?}, {} bytes\n",
            wc.status(),
            wc.byte_len()
        );
        return Err(EIO);
    }
    let bad = buf
        .as_slice()
        .iter()
        .enumerate()
        .any(|(i, &b)| b != fill.wrapping_add((i / 7) as u8));
    if bad {
        return Err(EINVAL);
    }
    Ok(())
}

/// Receives a message of `fill` into `srq`'s buffer where it lies and posts the buffer again
/// ([`SharedReceiveQueue::recycle`]); a second recycle of the same completion must find
/// nothing.
fn recv_rc_recycled(ep: &Endpoint, srq: &SharedReceiveQueue, fill: u8) -> Result {
    let mut wc = wait(&ep.recv_cq, 5000).ok_or(EAGAIN)?;
    let status = wc.status();
    let mut seen = Err(ENOENT);
    let reposted = srq.recycle(&mut wc, |buf, len| {
        let bad = buf
            .as_slice()
            .iter()
            .enumerate()
            .any(|(i, &b)| b != fill.wrapping_add((i / 7) as u8));
        seen = match (status, len as usize, bad) {
            (WcStatus::Success, RC_MSG, false) => Ok(()),
            _ => Err(EIO),
        };
    });
    reposted.ok_or(EINVAL)??;
    seen?;
    match srq.recycle(&mut wc, |_, _| {}) {
        None => Ok(()),
        Some(_) => Err(EEXIST),
    }
}

/// RNR retry counts of the REQ and the REP: neither 7 (all bits set) nor 0, with the lowest
/// bit clear in one, so that reading the wrong bits of either shows.
const REQ_RNR_RETRY: u8 = 6;
const REP_RNR_RETRY: u8 = 5;

fn req_params<'a>(path: &'a PathRecord, sgid_attr: &'a GidAttr, service_id: u64) -> ReqParams<'a> {
    ReqParams {
        path,
        sgid_attr,
        service_id,
        private_data: b"ipoib-rs",
        srq: false,
        responder_resources: 4,
        retry_count: 7,
        rnr_retry_count: REQ_RNR_RETRY,
        max_cm_retries: 15,
        cm_response_timeout: 20,
        starting_psn: cm::random_psn(),
    }
}

/// RC through the CM between rxe0 (active) and rxe1 (passive).
fn connected(report: &mut Report) -> Result {
    let a = Endpoint::new(c_str!("rxe0"), [192, 0, 2, 1])?;
    let b_gid = ipv4_gid([192, 0, 2, 2]);
    let passive_signal = waiter()?;
    let ep = Endpoint::new(c_str!("rxe1"), [192, 0, 2, 2])?;
    let signal = passive_signal.clone();
    let srq = SharedReceiveQueue::with_events(
        &ep.pd,
        8,
        1,
        Some(passive_signal.clone() as Arc<dyn SrqEventHandler>),
    )?;
    let passive = Arc::pin_init(
        pin_init!(Passive {
            ep,
            srq,
            conn <- new_mutex!(None),
            delayed <- new_mutex!(None),
            signal,
        }),
        GFP_KERNEL,
    )?;
    let listener = Listener::new(&passive.ep.device, SERVICE_ID, passive.clone())?;

    let active_signal = waiter()?;
    let active = RcEnd::new(&a, active_signal.clone(), None)?;
    let id = CmId::new(&a.device, active.clone())?;
    let sgid_attr = GidAttr::get(&a.device, PORT, a.gid_index)?;
    let path = PathRecord::roce_v2(&a.gid, &b_gid, Mtu::Mtu1024, [0; 6]);
    let connect = id
        .id()
        .send_req(&active.qp, &req_params(&path, &sgid_attr, SERVICE_ID))
        .and_then(|()| active_signal.wait_flag(F_REP, 5000))
        .and_then(|()| passive_signal.wait_flag(F_RTU, 5000))
        .and_then(|()| {
            match (active_signal.flags.load(Ordering::SeqCst)
                | passive_signal.flags.load(Ordering::SeqCst))
                & F_BAD
            {
                0 => Ok(()),
                _ => Err(EIO),
            }
        });
    report.check(
        "CM: REQ with private data, REP, RTU, their RNR retry counts read as sent; both QPs ready to send",
        connect,
    );

    // The passive end posted 2 buffers: one message leaves 1, below a limit of 2.
    let srq_limit = passive.srq.arm_limit(2).and_then(|()| {
        match passive_signal.flags.load(Ordering::SeqCst) & F_SRQ_LIMIT {
            0 => Ok(()),
            _ => Err(EEXIST),
        }
    });
    report.check(
        "SRQ: limit armed at 2 buffers; a limit beyond its size refused (EINVAL)",
        srq_limit.and_then(|()| match passive.srq.arm_limit(1 << 30) {
            Err(e) if e == EINVAL => Ok(()),
            _ => Err(EIO),
        }),
    );

    let transfer = (|| {
        let guard = passive.conn.lock();
        let b_end = guard.as_ref().ok_or(ENODEV)?.handler();
        send_rc(&a, &active, 3)?;
        recv_rc(&passive.ep, &b_end, 3)?;
        send_rc(&passive.ep, &b_end, 5)?;
        recv_rc(&a, &active, 5)
    })();
    report.check(
        "RC: 64 KiB message each way (passive side on an SRQ), contents intact",
        transfer,
    );
    report.check(
        "SRQ: limit event once fewer buffers than the limit are posted",
        passive_signal.wait_flag(F_SRQ_LIMIT, 2000),
    );

    // One buffer is left posted: the second message lands only if the first one's buffer
    // was posted again.
    let recycled = (|| {
        send_rc(&a, &active, 7)?;
        recv_rc_recycled(&passive.ep, &passive.srq, 7)?;
        send_rc(&a, &active, 9)?;
        recv_rc_recycled(&passive.ep, &passive.srq, 9)
    })();
    report.check(
        "SRQ: a buffer recycled in place holds the message and takes the next one; its completion is used up",
        recycled,
    );

    let disconnect = id
        .id()
        .send_dreq()
        .and_then(|()| passive_signal.wait_flag(F_DREQ, 5000))
        .and_then(|()| active_signal.wait_flag(F_DREP, 5000));
    report.check("CM: DREQ answered by DREP", disconnect);

    let drained = (|| {
        if passive_signal.flags.load(Ordering::SeqCst) & F_LAST_WQE != 0 {
            return Err(EINVAL);
        }
        let guard = passive.conn.lock();
        guard.as_ref().ok_or(ENODEV)?.handler().qp.set_error()?;
        passive_signal.wait_flag(F_LAST_WQE, 5000)
    })();
    report.check(
        "QP events: an SRQ queue pair put in error reports last WQE reached",
        drained,
    );

    let rej_signal = waiter()?;
    let rejected = RcEnd::new(&a, rej_signal.clone(), None)?;
    let rej_id = CmId::new(&a.device, rejected.clone())?;
    let rej = rej_id
        .id()
        .send_req(
            &rejected.qp,
            &req_params(&path, &sgid_attr, UNUSED_SERVICE_ID),
        )
        .and_then(|()| rej_signal.wait_flag(F_REJ, 5000))
        .and_then(|()| match rejected.rej_reason.load(Ordering::SeqCst) {
            cm::REJ_INVALID_SERVICE_ID => Ok(()),
            other => {
                pr_info!("# REJ reason {}\n", other);
                Err(EINVAL)
            }
        });
    report.check(
        "CM: REQ to a service nobody listens on gets REJ (invalid service ID)",
        rej,
    );

    // A passive side that needs time answers a REQ with an MRA first.
    let mra_signal = waiter()?;
    let delayed = RcEnd::new(&a, mra_signal.clone(), None)?;
    let mra_id = CmId::new(&a.device, delayed.clone())?;
    let mut mra_params = req_params(&path, &sgid_attr, SERVICE_ID);
    mra_params.private_data = b"ipoib-mra";
    let mra = mra_id
        .id()
        .send_req(&delayed.qp, &mra_params)
        .and_then(|()| mra_signal.wait_flag(F_MRA, 5000))
        .and_then(|()| match mra_signal.flags.load(Ordering::SeqCst) {
            F_MRA => Ok(()),
            other => {
                pr_info!("# requester flags {:#x}\n", other);
                Err(EIO)
            }
        });
    report.check(
        "CM: MRA with its service timeout reaches the requester, no REP yet",
        mra,
    );

    // Identifiers first (their handlers hold queue pairs), then the listener.
    drop(mra_id);
    *passive.delayed.lock() = None;
    drop(rej_id);
    drop(id);
    *passive.conn.lock() = None;
    drop(listener);
    Ok(())
}

fn run(report: &mut Report) -> Result {
    let a = Endpoint::new(c_str!("rxe0"), [192, 0, 2, 1]);
    let b = Endpoint::new(c_str!("rxe1"), [192, 0, 2, 2]);
    report.check(
        "PD, CQs and a ready UD QP on rxe0 and rxe1",
        a.as_ref().and(b.as_ref()).map(|_| ()).map_err(|e| *e),
    );
    let (a, b) = (a?, b?);
    report.check("post 8 receive buffers on rxe1", b.post_recvs(RECVS));
    let ah = a.address_of(&b);
    report.check(
        "address handle rxe0 -> rxe1",
        ah.as_ref().map(|_| ()).map_err(|e| *e),
    );
    let ah = ah?;

    report.check(
        "UD send rxe0 -> rxe1 completes",
        a.send(&ah, b.qp.qp_num(), QKEY, 7),
    );
    report.check(
        "received with the payload, length and source QPN",
        receive_one(&b, a.qp.qp_num(), 7),
    );
    report.check(
        "a completion taken back is used up: completing it again takes nothing",
        used_up(&a, &b, &ah),
    );
    report.check(
        "receive queue locked once: 3 datagrams taken back in order and 3 buffers posted in their place",
        locked_batch(&a, &b, &ah),
    );
    report.check(
        "receive refilled in place: the buffer returned is posted in the slot just completed, one kept leaves it empty, a used-up completion takes nothing",
        refilled_in_place(&a, &b, &ah),
    );
    report.check(
        "a queue pair on one device's PD with another device's completion queue refused (EINVAL)",
        mixed_devices(&a, &b),
    );
    report.check(
        "queue pair changes the transport does not take refused (EINVAL): RTS from RESET, INIT without a Q_Key, access flags on UD; a send before RTS refused, nothing left held",
        qp_changes(&a, &b),
    );
    report.check(
        "slots: a receive beyond them refused (ENOSPC); after a reset a completion of before it takes nothing, the next datagram lands in the new buffer",
        slots_across_reset(&a, &b, &ah),
    );
    report.check(
        "receive into an skb: the datagram is its data where it landed; an skb with fragments or no tailroom refused (EINVAL)",
        skb_receive(&a, &b, &ah),
    );
    report.check(
        "send of an skb from where it lies: linear part and two page fragments arrive whole and in order, the skb given back unchanged; an offset past the linear part refused (EINVAL), nothing held",
        skb_send(&a, &b, &ah),
    );
    report.check(
        "posts refused (EINVAL): a receive into a buffer mapped for sending, or another device's, a send through another queue pair's address handle",
        foreign_posts(&a, &b, &ah),
    );
    report.check(
        "an address handle dropped with a send in flight is destroyed only by a reap after that send was taken back; one no send used, by the next reap",
        handle_waits_for_send(&a, &b),
    );
    report.check(
        "address handles across a reset: the sends it ends are taken back for their handles; a refused post's handle waits for the next send; handles waiting go with their queue pair",
        handles_across_reset(&a, &b),
    );

    // A datagram with another Q_Key must be dropped by the receiver.
    let wrong =
        a.send(&ah, b.qp.qp_num(), QKEY + 1, 9)
            .and_then(|()| match wait(&b.recv_cq, 500) {
                None => Ok(()),
                Some(mut wc) => {
                    let _ = b.qp.complete_recv(&mut wc);
                    Err(EEXIST)
                }
            });
    report.check("datagram with a wrong Q_Key is not received", wrong);
    report.check(
        "next datagram with the right Q_Key is received",
        a.send(&ah, b.qp.qp_num(), QKEY, 11)
            .and_then(|()| receive_one(&b, a.qp.qp_num(), 11)),
    );

    report.check(
        "address handle from a RoCE v2 path record (with and without GID attribute, its type RoCE v2)",
        path_ah(&a, &b),
    );
    report.check(
        "multicast: attached group receives (AH from attributes and from a RoCE member record), detached does not",
        multicast(&a, &b),
    );
    report.check(
        "SA: path query and join refused on RoCE (EOPNOTSUPP), handlers released uncalled",
        sa_on_roce(&a, &b),
    );

    // Moving the receiver to the error state flushes every posted buffer back to us.
    let flushed = b.qp.set_error().and_then(|()| {
        let mut n = 0;
        while let Some(mut wc) = wait(&b.recv_cq, 500) {
            if wc.status() != WcStatus::Flushed || b.qp.complete_recv(&mut wc).is_none() {
                return Err(EIO);
            }
            n += 1;
        }
        if n == RECVS {
            Ok(())
        } else {
            pr_info!("# {} of {} buffers flushed\n", n, RECVS);
            Err(EIO)
        }
    });
    report.check("error state flushes all 8 posted buffers back", flushed);

    // Release in an order other than creation: the queue pair keeps its PD and CQs alive.
    let Endpoint {
        pd,
        send_cq,
        recv_cq,
        qp,
        ..
    } = b;
    drop(pd);
    drop(send_cq);
    drop(recv_cq);
    drop(ah);
    // Nothing is left of them: the script checks `rdma res` once the module is loaded.
    drop(qp);
    Ok(())
}

/// An IB client that reports renames of the devices it took on, for the script to check
/// after `rdma dev set ... name ...`.
struct RenameWatch;

kernel::ib_client_vtable!(RenameWatch);

#[vtable]
impl Client for RenameWatch {
    const NAME: &'static CStr = c_str!("rdma_rs_selftest");
    type DeviceData = KBox<AtomicU32>;
    type Context = ();

    fn add(_ctx: &(), _device: &Device) -> Result<KBox<AtomicU32>> {
        Ok(KBox::new(AtomicU32::new(0), GFP_KERNEL)?)
    }

    fn remove(_ctx: &(), _device: &Device, _renames: KBox<AtomicU32>) {}

    fn rename(_ctx: &(), device: &Device, renames: &AtomicU32) {
        let n = renames.fetch_add(1, Ordering::Relaxed) + 1;
        pr_info!(
            "# client: device renamed to {} (rename {})\n",
            device.name(),
            n
        );
    }
}

struct VerbsSelftest {
    _crowd: Option<ipoib_intruder::Crowd>,
    _rename_watch: Option<client::Registration<RenameWatch>>,
}

impl kernel::Module for VerbsSelftest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        pr_info!("TAP version 13\n");
        let mut report = Report { n: 0, failed: 0 };
        let stream = match STREAM.get() {
            1 => Some(verbs_stream::Kind::Rc),
            2 => Some(verbs_stream::Kind::Ud),
            _ => None,
        };
        if let Some(kind) = stream {
            let guid = u64::from(STREAM_GUID_HI.get()) << 32 | u64::from(STREAM_GUID_LO.get());
            let peer = (guid != 0).then(|| verbs_stream::Peer {
                guid,
                qpn: STREAM_QPN.get(),
                secs: STREAM_SECS.get(),
            });
            verbs_stream::run(kind, peer);
            return Ok(Self {
                _crowd: None,
                _rename_watch: None,
            });
        }
        let qpn = IPOIB_QPN.get();
        let peers = IPOIB_PEERS.get();
        let ipoib_guid = u64::from(IPOIB_GUID_HI.get()) << 32 | u64::from(IPOIB_GUID_LO.get());
        let mut crowd = None;
        if qpn != 0 && ipoib_guid != 0 {
            if let Err(e) = ipoib_intruder::run_infiniband(&mut report, qpn, ipoib_guid) {
                pr_info!("# intruder stopped early: {:?}\n", e);
                report.check("intruder (InfiniBand): connection set up", Err(e));
            }
        } else if qpn != 0 && peers != 0 {
            match ipoib_intruder::crowd(&mut report, qpn, peers) {
                Ok(c) => crowd = Some(c),
                Err(e) => {
                    pr_info!("# crowd stopped early: {:?}\n", e);
                    report.check(
                        "crowd: every connection accepted and carrying a message",
                        Err(e),
                    );
                }
            }
        } else if qpn != 0 {
            if let Err(e) = ipoib_intruder::run(&mut report, qpn) {
                pr_info!("# intruder stopped early: {:?}\n", e);
                report.check("intruder: ran to the end", Err(e));
            }
        }
        if qpn != 0 {
            pr_info!("1..{}\n", report.n);
            pr_info!("# {} failed\n", report.failed);
            return Ok(Self {
                _crowd: crowd,
                _rename_watch: None,
            });
        }
        if let Err(e) = run(&mut report) {
            pr_info!("# stopped early: {:?}\n", e);
            report.check("verbs checks ran to the end", Err(e));
        }
        if let Err(e) = connected(&mut report) {
            pr_info!("# connected mode checks stopped early: {:?}\n", e);
            report.check("connected mode set-up", Err(e));
        }
        let watch = client::Registration::new(Arc::new((), GFP_KERNEL)?);
        report.check(
            "IB client registered with a rename callback",
            watch.as_ref().map(|_| ()).map_err(|e| *e),
        );
        pr_info!("1..{}\n", report.n);
        pr_info!("# {} failed\n", report.failed);
        Ok(Self {
            _crowd: None,
            _rename_watch: watch.ok(),
        })
    }
}
