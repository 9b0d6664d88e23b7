// SPDX-License-Identifier: GPL-2.0

//! IP over InfiniBand (RFC 4391, 4392, 4755), on InfiniBand ports (paths and groups from
//! the subnet administrator) and RoCE ports (routes derived from GIDs).
//!
//! Crate root: the module, its IB client, and the interfaces it creates, one per
//! InfiniBand or RoCE port of every RDMA device (`ib0`, `ib1`, ...), removed with the
//! device or the module.

// The pinned initialisers of the connected-mode state need more macro recursion than the
// default allows (as in Android's Rust binder).
#![recursion_limit = "512"]

use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{
    c_str,
    net::{
        dev::{NetDevice, Registration, SockAddr},
        link::{LinkKind, LinkRegistration},
    },
    prelude::*,
    rdma::{
        client::{self, Client, NetDevRequest},
        device::{Device, Protocol},
        event::{AsyncEvent, EventHandler, EventRegistration},
        sa::SaClient,
    },
    sync::{rcu, Arc},
    types::ARef,
};

mod child;
mod cm_rx;
mod cm_shared;
mod cm_tx;
mod cq;
mod debugfs;
mod ethtool;
mod events;
mod fabric;
mod flush;
mod held;
mod interface;
mod ipoib_cm;
mod ipoib_ud;
mod local_gid;
mod log_name;
mod mcast;
mod neigh;
mod netdev;
mod params;
mod partition;
mod path;
mod rx;
mod sa_group;
mod send_credits;
mod srq;
mod stats;
/// Wire formats, shared byte for byte with C peers; also built and tested on the host.
pub mod wire;

use debugfs::{debug_files_of, DebugFiles, DebugRoot};
use interface::{Interface, PortFacts};

/// The name the core's resource tracking shows for our queues and queue pairs.
pub(crate) const OWNER: &CStr = c_str!("ib_ipoib");
use netdev::{Contexts, IpoibNetdev};

module! {
    type: IpoibModule,
    name: "ib_ipoib",
    author: "ipoib-rs developers",
    description: "IP over InfiniBand, in Rust",
    license: "GPL",
    alias: ["rtnl-link-ipoib"],
}

struct IpoibModule {
    /// Dropped first: every port's interface goes, children with their parent.
    _client: client::Registration<IpoibClient>,
    /// Then the `ip link` kind, deleting any device of the kind left and waiting for it.
    _link: LinkRegistration<IpoibNetdev>,
}

/// What every interface is created with.
struct ClientContext {
    /// `ip link set ibN type ipoib mode ...` and `ip -d link show`.
    link_kind: Arc<LinkKind<IpoibNetdev>>,
    /// `ipoib/` in debugfs.
    debug_root: DebugRoot,
    /// How InfiniBand interfaces ask their subnet administrators (C: `ipoib_sa_client`).
    sa_client: Arc<SaClient>,
}

/// The `ip link` kind of IPoIB interfaces, as the C driver names it.
const LINK_KIND: &CStr = c_str!("ipoib");

impl kernel::Module for IpoibModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        params::check()?;
        let link = LinkKind::register(LINK_KIND, netdev::LINK_MAXTYPE)?;
        let context = Arc::new(
            ClientContext {
                link_kind: link.kind().clone(),
                debug_root: DebugRoot::new(),
                sa_client: SaClient::new()?,
            },
            GFP_KERNEL,
        )?;
        let client = client::Registration::new(context)?;
        pr_info!("loaded\n");
        Ok(Self {
            _client: client,
            _link: link,
        })
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

/// One interface: a port of a device and its `ibN`.
struct IpoibPort {
    port: u32,
    interface: Arc<Interface>,
    netdev: Registration<IpoibNetdev>,
    _debug: Option<DebugFiles>,
}

/// The interfaces of one device; also told of the device's events.
struct Ports {
    entries: KVec<IpoibPort>,
}

impl Drop for Ports {
    fn drop(&mut self) {
        // Each interface is unregistered first (which stops it), so nothing queues work
        // afterwards; then the work it queued before is waited for.
        for p in core::mem::take(&mut self.entries) {
            let IpoibPort {
                interface, netdev, ..
            } = p;
            // Children first: they hold their parent.
            interface.children().delete_all();
            drop(netdev);
            interface.flush_work();
        }
    }
}

/// Whether a connection request found two interfaces with its address (said once).
static DUPLICATE_WARNED: AtomicBool = AtomicBool::new(false);

/// How many interfaces match a connection request, and the device the first stands for.
enum Found {
    None,
    One(ARef<NetDevice>),
    Several(ARef<NetDevice>),
}

/// The device an interface that matches a connection request stands for (C:
/// `ipoib_get_master_net_dev`, `ipoib_get_net_dev_match_addr`), which the RDMA CM checks
/// against the route to the requester: without an address, the bond (or other master, not a
/// VRF) the interface is enslaved to, else the interface; with one, the interface if it owns
/// the address, else the first device above it that does, if any.
fn stands_for(dev: &NetDevice, addr: Option<&SockAddr>) -> Option<ARef<NetDevice>> {
    let rcu = rcu::read_lock();
    match addr {
        None => Some(match dev.master_upper(&rcu) {
            Some(master) if !master.is_l3_master() => master.into(),
            _ => dev.into(),
        }),
        Some(a) if dev.has_address(a) => Some(dev.into()),
        Some(a) => dev
            .find_upper(&rcu, |upper| upper.has_address(a))
            .map(ARef::from),
    }
}

impl Ports {
    /// The interfaces (children included) that a connection request is for: on its port,
    /// in its partition (either membership), at its GID if it names one, owning `addr` if
    /// given.
    fn find(&self, request: &NetDevRequest<'_>, addr: Option<&SockAddr>) -> Found {
        let mut found = Found::None;
        let mut consider = |interface: &Interface, dev: &NetDevice| {
            let pkey_matches = (interface.pkey() ^ request.pkey) & !wire::PKEY_FULL_MEMBER == 0;
            let gid_matches = request
                .gid
                .map_or(true, |gid| gid.0 == interface.local().gid().0);
            if !pkey_matches || !gid_matches {
                return;
            }
            let Some(target) = stands_for(dev, addr) else {
                return;
            };
            found = match core::mem::replace(&mut found, Found::None) {
                Found::None => Found::One(target),
                // With the address (C's second pass), slaves of one bond stand for it once.
                Found::One(first) if addr.is_some() && core::ptr::eq(&*first, &*target) => {
                    Found::One(first)
                }
                Found::One(first) | Found::Several(first) => Found::Several(first),
            };
        };
        for p in self.entries.iter().filter(|p| p.port == request.port) {
            consider(&p.interface, p.netdev.device());
            p.interface
                .children()
                .for_each(|c| consider(c.interface(), c.device()));
        }
        found
    }
}

/// What the driver holds for one RDMA device. The event registration goes first, so no
/// event arrives for interfaces being removed.
struct IpoibDevice {
    events: Pin<KBox<EventRegistration<Ports>>>,
}

impl EventHandler for Ports {
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
        let Some(p) = self.entries.iter().find(|p| p.port == port) else {
            return;
        };
        let dev = p.netdev.device();
        pr_info!(
            "{} port {}: {} ({})\n",
            device.name(),
            port,
            what,
            dev.name()
        );
        Interface::port_event(&p.interface, dev, &event);
    }
}

#[vtable]
impl Client for IpoibClient {
    const NAME: &'static CStr = c_str!("ipoib");
    type DeviceData = KBox<IpoibDevice>;
    type Context = ClientContext;

    fn add(ctx: &ClientContext, device: &Device) -> Result<KBox<IpoibDevice>> {
        let mut entries = KVec::new();
        for port in device.ports() {
            if !log_port(device, port)? {
                continue;
            }
            match add_port(ctx, device, port) {
                Ok(p) => entries.push(p, GFP_KERNEL)?,
                Err(e) => pr_err!("{} port {}: no interface ({:?})\n", device.name(), port, e),
            }
        }
        if entries.is_empty() {
            pr_info!(
                "{}: no usable InfiniBand or RoCE port, ignored\n",
                device.name()
            );
            return Err(ENODEV);
        }
        let ports = Arc::new(Ports { entries }, GFP_KERNEL)?;
        let events = KBox::pin_init(EventRegistration::new(device, ports), GFP_KERNEL)?;
        Ok(KBox::new(IpoibDevice { events }, GFP_KERNEL)?)
    }

    fn net_device(
        _ctx: &ClientContext,
        device: &Device,
        data: &IpoibDevice,
        request: &NetDevRequest<'_>,
    ) -> Option<ARef<NetDevice>> {
        if device.protocol(request.port).ok()? != Protocol::InfiniBand {
            return None;
        }
        let ports = data.events.handler();
        // The partition and GID alone first; if several interfaces share them (children
        // of one P_Key), the one with the IP address.
        let found = ports.find(request, None);
        match (found, request.addr) {
            (Found::One(dev), _) => Some(dev),
            (Found::Several(_), Some(addr)) => match ports.find(request, Some(addr)) {
                Found::One(dev) => Some(dev),
                // As C: the first, and a warning (once: requests come from the network).
                Found::Several(first) => {
                    if !DUPLICATE_WARNED.swap(true, Ordering::Relaxed) {
                        pr_warn!(
                            "{}: duplicate IP address on IPoIB interfaces\n",
                            device.name()
                        );
                    }
                    Some(first)
                }
                Found::None => None,
            },
            _ => None,
        }
    }

    fn remove(_ctx: &ClientContext, device: &Device, data: KBox<IpoibDevice>) {
        let ports = data.events.handler().clone();
        drop(data);
        for p in ports.entries.iter() {
            pr_info!(
                "{} port {}: removed ({})\n",
                device.name(),
                p.port,
                p.netdev.device().name()
            );
        }
    }
}

/// Creates the interface of `port`.
fn add_port(ctx: &ClientContext, device: &Device, port: u32) -> Result<IpoibPort> {
    let napi = Contexts::new()?;
    let facts = PortFacts::query(device, port)?;
    let maker = child::Maker::<Interface> {
        kind: ctx.link_kind.clone(),
        debug_root: ctx.debug_root.clone(),
    };
    let interface = Interface::new(device, port, &facts, &napi.handles(), &ctx.sa_client, maker)?;
    let mut netdev = Registration::<IpoibNetdev>::new(
        c_str!("ib%d"),
        interface.local().as_bytes(),
        interface.clone(),
        netdev::configure(&interface, napi),
    )?;
    netdev.set_link_kind(ctx.link_kind.clone());
    interface.log_name.update(netdev.device());
    pr_info!(
        "{} port {}: {} address {}, {} mode\n",
        device.name(),
        port,
        netdev.device().name(),
        interface.local(),
        if interface.connected() {
            "connected"
        } else {
            "datagram"
        }
    );
    let debug = debug_files_of(&ctx.debug_root, netdev.device(), interface.clone());
    if let Some(files) = &debug {
        interface.attach_debug_name(files.name());
    }
    Ok(IpoibPort {
        port,
        interface,
        netdev,
        _debug: debug,
    })
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
            wire::HwAddr::broadcast(wire::DEFAULT_PKEY),
        ),
        Err(e) => pr_info!(
            "{name} port {port}: {protocol} ({link:?} link), state {}, active MTU {mtu}, GID[0] unset ({e:?})\n",
            attr.state(),
        ),
    }
    Ok(true)
}
