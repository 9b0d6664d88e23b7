// SPDX-License-Identifier: GPL-2.0

//! Test device for the Rust net_device abstractions (`kernel::net::dev`, `kernel::net::skb`),
//! driven by the kselftest `one_host_netdev.sh`.
//!
//! Loading it registers `rsnettest0`: a point-to-point device without ARP that counts what
//! it transmits, builds a 4-byte marker header through `header_ops` that transmit checks and
//! pulls off again (exercising skb push/pull), loops every packet back through its NAPI
//! context and counts it as received, reports
//! its counters through `get_stats64`, accepts MTUs up to 9000 except odd ones, and logs
//! open and stop. Unloading unregisters it.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{
    c_str,
    net::{
        dev::{self, NetDevice, Registration, Setup, Stats64, TxResult},
        header,
        napi::{Budget, Napi, NapiContext, NapiHandle, Poll, Polled},
        rtnl::Rtnl,
        skb::{Lent, SkBuff},
    },
    new_spinlock_bh,
    prelude::*,
    sync::{Arc, ArcBorrow, SpinLockBh},
};

module! {
    type: NetSelftest,
    name: "net_rs_selftest",
    author: "ipoib-rs developers",
    description: "Test device for the Rust net_device abstractions",
    license: "GPL",
}

const ARPHRD_NONE: u16 = 0xfffe;
const IFF_POINTOPOINT: u32 = 0x10;
const IFF_NOARP: u32 = 0x80;
const MARKER: [u8; 4] = [0x52, 0x55, 0x53, 0x54];

/// State of the test device: counters, and the packets waiting for the NAPI poll that
/// loops them back.
#[pin_data]
struct Counters {
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    tx_dropped: AtomicU64,
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    /// NAPI rounds, and the count the poll function's own state (`Rounds`) kept of them:
    /// the same if the state lives from one round to the next.
    polls: AtomicU64,
    state_rounds: AtomicU64,
    #[pin]
    backlog: SpinLockBh<KVec<SkBuff>>,
    napi: NapiHandle,
}

const ETH_P_IP: u16 = 0x0800;

struct TestDevice;

/// The device's header: the marker.
struct Marker;

/// The device's poll function, and the rounds it counted.
struct Rounds(u64);

#[vtable]
impl dev::Operations for TestDevice {
    type Data = Arc<Counters>;

    fn setup(dev: &mut Setup<Self>) {
        dev.set_type(ARPHRD_NONE);
        dev.set_header_ops::<Marker>();
        dev.set_hard_header_len(MARKER.len() as u16);
        dev.set_flags(IFF_POINTOPOINT | IFF_NOARP);
        dev.set_tx_queue_len(100);
        // 68 is the IPv4 minimum; both bounds are checked by the core before change_mtu.
        if dev.set_mtu(1500, 68, 9000).is_err() || dev.set_addr_len(0).is_err() {
            pr_err!("setup rejected its own values\n");
        }
    }

    fn open(dev: &NetDevice, _data: ArcBorrow<'_, Counters>, _rtnl: &Rtnl) -> Result {
        dev.start_queue();
        dev.carrier_on();
        pr_info!("{}: open\n", dev.name());
        Ok(())
    }

    fn stop(dev: &NetDevice, data: ArcBorrow<'_, Counters>, _rtnl: &Rtnl) -> Result {
        dev.stop_queue();
        dev.carrier_off();
        pr_info!(
            "{}: stop after {} NAPI rounds, {} counted in the poll state\n",
            dev.name(),
            data.polls.load(Ordering::Relaxed),
            data.state_rounds.load(Ordering::Relaxed)
        );
        Ok(())
    }

    fn start_xmit(mut skb: SkBuff, _dev: &NetDevice, data: ArcBorrow<'_, Counters>) -> TxResult {
        // The stack built the header through `Marker::create`: the marker must lead, and the
        // packet after it must be what was sent.
        let ok = skb.data().starts_with(&MARKER) && skb.pull(MARKER.len() as u32).is_ok();
        let len = u64::from(skb.len());
        if ok {
            data.tx_packets.fetch_add(1, Ordering::Relaxed);
            data.tx_bytes.fetch_add(len, Ordering::Relaxed);
            // Loop the packet back through NAPI, up to a bounded backlog.
            let mut backlog = data.backlog.lock();
            if backlog.len() < 64 && backlog.push(skb, GFP_ATOMIC).is_ok() {
                drop(backlog);
                data.napi.schedule();
            }
        } else {
            data.tx_dropped.fetch_add(1, Ordering::Relaxed);
        }
        TxResult::Ok
    }

    /// Odd MTUs are refused; above 8000 the device runs at 8000 (as a link whose fabric
    /// carries less than was asked for).
    fn change_mtu(dev: &NetDevice, _data: ArcBorrow<'_, Counters>, new_mtu: u32) -> Result<u32> {
        if new_mtu % 2 == 1 {
            return Err(EINVAL);
        }
        let mtu = new_mtu.min(8000);
        pr_info!(
            "{}: MTU {} -> {} ({} asked)\n",
            dev.name(),
            dev.mtu(),
            mtu,
            new_mtu
        );
        Ok(mtu)
    }

    fn get_stats64(_dev: &NetDevice, data: ArcBorrow<'_, Counters>, stats: &mut Stats64) {
        stats.set_tx(
            data.tx_packets.load(Ordering::Relaxed),
            data.tx_bytes.load(Ordering::Relaxed),
        );
        stats.set_tx_errors(0, data.tx_dropped.load(Ordering::Relaxed));
        stats.set_rx(
            data.rx_packets.load(Ordering::Relaxed),
            data.rx_bytes.load(Ordering::Relaxed),
        );
    }
}

#[vtable]
impl header::Operations for Marker {
    fn create(
        skb: &mut SkBuff<Lent<'_>>,
        _dev: &NetDevice,
        _ethertype: u16,
        _daddr: Option<&[u8]>,
    ) -> Result<u32> {
        skb.push(MARKER.len() as u32)?.copy_from_slice(&MARKER);
        Ok(MARKER.len() as u32)
    }
}

impl Poll for Rounds {
    type Device = TestDevice;

    fn poll(
        &mut self,
        _dev: &NetDevice,
        data: ArcBorrow<'_, Counters>,
        napi: &Napi,
        budget: Budget<'_>,
    ) -> Polled {
        self.0 += 1;
        data.polls.fetch_add(1, Ordering::Relaxed);
        data.state_rounds.store(self.0, Ordering::Relaxed);
        let batch = core::mem::take(&mut *data.backlog.lock());
        let mut done = 0;
        for skb in batch {
            if done == budget.get() {
                // Over budget: keep the rest for the next round (the backlog is bounded).
                if data.backlog.lock().push(skb, GFP_ATOMIC).is_err() {
                    data.tx_dropped.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            // Received as a device's packet would be: copied into an skb of the round's own.
            match received(napi, &skb) {
                Ok(copy) => {
                    data.rx_packets.fetch_add(1, Ordering::Relaxed);
                    data.rx_bytes
                        .fetch_add(u64::from(copy.len()), Ordering::Relaxed);
                    napi.gro_receive(copy);
                }
                Err(_) => {
                    data.tx_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            skb.consume();
            done += 1;
        }
        if done < budget.get() {
            budget.complete(done).0
        } else {
            budget.exhausted()
        }
    }
}

/// A copy of the looped-back packet `skb` in an skb allocated for this NAPI round, as a
/// receive path makes one.
fn received(napi: &Napi, skb: &SkBuff) -> Result<SkBuff> {
    let mut copy = napi.alloc_skb(skb.len())?;
    skb.copy_bits(0, copy.put(skb.len())?)?;
    copy.reset_mac_header();
    copy.set_protocol(ETH_P_IP);
    Ok(copy)
}

struct NetSelftest {
    _dev: Registration<TestDevice>,
}

impl kernel::Module for NetSelftest {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let napi = NapiContext::new(Rounds(0))?;
        let napi_for_data = napi.handle();
        let counters = Arc::pin_init(
            pin_init!(Counters {
                tx_packets: AtomicU64::new(0),
                tx_bytes: AtomicU64::new(0),
                tx_dropped: AtomicU64::new(0),
                rx_packets: AtomicU64::new(0),
                rx_bytes: AtomicU64::new(0),
                polls: AtomicU64::new(0),
                state_rounds: AtomicU64::new(0),
                backlog <- new_spinlock_bh!(KVec::new()),
                napi: napi_for_data,
            }),
            GFP_KERNEL,
        )?;
        let reg =
            dev::Registration::<TestDevice>::new(c_str!("rsnettest%d"), &[], counters, |setup| {
                setup.add_napi(napi);
                Ok(())
            })?;
        pr_info!("registered {}\n", reg.device().name());
        Ok(Self { _dev: reg })
    }
}
