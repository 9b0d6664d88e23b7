// SPDX-License-Identifier: GPL-2.0

//! IP over InfiniBand (RFC 4391, 4392, 4755) for InfiniBand and RoCE ports.
//!
//! Crate root: the module and its IB client, which takes on every port of every RDMA device.

use kernel::{
    c_str,
    prelude::*,
    rdma::{
        client::{self, Client},
        device::{Device, Protocol},
        event::{AsyncEvent, EventHandler, EventRegistration},
    },
    sync::Arc,
};

/// Wire formats, shared byte for byte with C peers; also built and tested on the host.
pub mod wire;

use wire::HwAddr;

module! {
    type: IpoibModule,
    name: "ib_ipoib",
    author: "ipoib-rs developers",
    description: "IP over InfiniBand, in Rust",
    license: "GPL",
}

/// The default partition: P_Key 0xffff is the one every port has, and the only one on RoCE.
const DEFAULT_PKEY: u16 = 0xffff;

struct IpoibModule {
    _client: client::Registration<IpoibClient>,
}

impl kernel::Module for IpoibModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let client = client::Registration::new()?;
        pr_info!("loaded\n");
        Ok(Self { _client: client })
    }
}

impl Drop for IpoibModule {
    fn drop(&mut self) {
        pr_info!("unloading\n");
    }
}

/// The IB client: one per module, told of each RDMA device.
struct IpoibClient;

kernel::ib_client_vtable!(IpoibClient);

/// What the driver holds for one RDMA device.
struct IpoibDevice {
    /// Ports of the device that IPoIB serves (InfiniBand or RoCE).
    ports: KVec<u32>,
    /// Port and address events of the device.
    _events: Pin<KBox<EventRegistration<PortEvents>>>,
}

/// Follows the ports of one device.
struct PortEvents {
    /// The ports IPoIB serves on this device.
    ports: KVec<u32>,
}

impl EventHandler for PortEvents {
    fn event(&self, device: &Device, event: AsyncEvent) {
        let (port, what) = match event {
            AsyncEvent::PortActive(p) => (p, "port active"),
            AsyncEvent::PortError(p) => (p, "port down"),
            AsyncEvent::GidChange(p) => (p, "GID table changed"),
            AsyncEvent::PkeyChange(p) => (p, "P_Key table changed"),
            AsyncEvent::LidChange(p) => (p, "LID changed"),
            AsyncEvent::SmChange(p) => (p, "subnet manager changed"),
            AsyncEvent::ClientReregister(p) => (p, "client reregister requested"),
            AsyncEvent::DeviceFatal => {
                pr_err!("{}: device failed\n", device.name());
                return;
            }
            AsyncEvent::Other(_) => return,
        };
        if self.ports.contains(&port) {
            pr_info!("{} port {}: {}\n", device.name(), port, what);
        }
    }
}

impl Client for IpoibClient {
    const NAME: &'static CStr = c_str!("ipoib");
    type DeviceData = KBox<IpoibDevice>;

    fn add(device: &Device) -> Result<KBox<IpoibDevice>> {
        let mut ports = KVec::new();
        for port in device.ports() {
            if log_port(device, port)? {
                ports.push(port, GFP_KERNEL)?;
            }
        }
        if ports.is_empty() {
            pr_info!("{}: no InfiniBand or RoCE port, ignored\n", device.name());
            return Err(ENODEV);
        }
        let mut watched = KVec::with_capacity(ports.len(), GFP_KERNEL)?;
        for &p in ports.iter() {
            watched.push(p, GFP_KERNEL)?;
        }
        let handler = Arc::new(PortEvents { ports: watched }, GFP_KERNEL)?;
        let events = KBox::pin_init(EventRegistration::new(device, handler), GFP_KERNEL)?;
        Ok(KBox::new(
            IpoibDevice {
                ports,
                _events: events,
            },
            GFP_KERNEL,
        )?)
    }

    fn remove(device: &Device, data: KBox<IpoibDevice>) {
        for port in data.ports.iter() {
            pr_info!("{} port {}: removed\n", device.name(), port);
        }
    }
}

/// Logs what IPoIB sees of `port`; returns whether IPoIB can run on it.
fn log_port(device: &Device, port: u32) -> Result<bool> {
    let name = device.name();
    let protocol = device.protocol(port)?;
    if protocol == Protocol::Other {
        pr_info!("{name} port {port}: neither InfiniBand nor RoCE, skipped\n");
        return Ok(false);
    }
    let attr = device.port_attr(port)?;
    let mtu = attr.active_mtu().map_or(0, |m| m.bytes());
    let link = device.link_layer(port)?;
    match device.query_gid(port, 0) {
        Ok(gid) => pr_info!(
            "{name} port {port}: {protocol} ({link:?} link), state {}, active MTU {mtu}, GID[0] {gid}, broadcast {}\n",
            attr.state(),
            HwAddr::broadcast(DEFAULT_PKEY),
        ),
        Err(e) => pr_info!(
            "{name} port {port}: {protocol} ({link:?} link), state {}, active MTU {mtu}, GID[0] unset ({e:?})\n",
            attr.state(),
        ),
    }
    Ok(true)
}
