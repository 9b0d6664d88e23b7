// SPDX-License-Identifier: GPL-2.0

//! The IPoIB net_device: its operations (set-up as the C driver does it, link-layer
//! header, open/stop, transmit, NAPI, counters, ethtool), its sysfs files and `ip link`
//! attributes. Thin glue: what they do, the interface (`interface.rs`) does. Also binds
//! the interface to these operations for its child list ([`ChildInterface`]).

use crate::{
    child::{parse_pkey, ChildInterface, Children, Request},
    cq::NapiHandles,
    debugfs::DebugName,
    interface::{Interface, TX_TIMEOUT_MS},
    ipoib_ud::Completions,
    stats,
    wire::{self, EncapHeader, HwAddr, HARD_HEADER_LEN, HWADDR_LEN, MIN_MTU},
};
use core::fmt::Write;
use kernel::{
    c_str,
    net::{
        dev::{self, Configure, McAddrs, NetDevice, Setup, Stats64, TxResult},
        dev_attr::{Attribute, AttributeText},
        ethtool::{self, Coalesce, DrvInfo, LinkSettings},
        header,
        link::{self, attr_size, LinkAttributes, LinkInfo, NewLink},
        napi::{Budget, Napi, NapiContext, Poll, Polled},
        rtnl::{restart_syscall, Rtnl, RtnlGuard},
        skb::{Lent, SkBuff},
    },
    prelude::*,
    sync::{Arc, ArcBorrow},
};

/// `ARPHRD_INFINIBAND`: the hardware type of IPoIB interfaces.
const ARPHRD_INFINIBAND: u16 = 32;
const IFF_BROADCAST: u32 = 0x2;
const IFF_MULTICAST: u32 = 0x1000;

/// `/sys/class/net/ibN/mode`: `datagram` or `connected`, as in the C driver.
const ATTR_MODE: usize = 0;
/// `/sys/class/net/ibN/pkey`: the partition key, read-only.
const ATTR_PKEY: usize = 1;
/// `umcast`: whether multicast groups user space joined itself are left to it (C's
/// "user multicast"): 0 or 1 read, any number written (not 0: on; text is refused).
const ATTR_UMCAST: usize = 2;
/// `create_child` (a port's own interface): a P_Key written makes a child interface.
const ATTR_CREATE_CHILD: usize = 3;
/// `delete_child` (a port's own interface): deletes the child `create_child` made.
const ATTR_DELETE_CHILD: usize = 4;
/// `parent` (a child): the interface it was made on.
const ATTR_PARENT: usize = 5;

/// `IFLA_IPOIB_*` of `include/uapi/linux/if_link.h`: the `ip link ... type ipoib` attributes.
const IFLA_IPOIB_PKEY: u16 = 1;
const IFLA_IPOIB_MODE: u16 = 2;
const IFLA_IPOIB_UMCAST: u16 = 3;
/// The highest `IFLA_IPOIB_*` attribute.
pub(crate) const LINK_MAXTYPE: u32 = IFLA_IPOIB_UMCAST as u32;
/// `IPOIB_MODE_*`: the values of `IFLA_IPOIB_MODE`.
const IPOIB_MODE_DATAGRAM: u16 = 0;
const IPOIB_MODE_CONNECTED: u16 = 1;

/// The mode named by what was written to the `mode` file (one trailing newline allowed).
fn parse_mode(input: &[u8]) -> Option<bool> {
    match input.strip_suffix(b"\n").unwrap_or(input) {
        b"connected" => Some(true),
        b"datagram" => Some(false),
        _ => None,
    }
}

/// Applies `umcast`: any value but 0 turns it on, as in C.
fn set_umcast(dev: &NetDevice, iface: &Interface, value: u32) -> Result {
    let on = value != 0;
    if iface.set_umcast(on) && on {
        // Groups user space joined itself through the subnet administrator are then left
        // to it (from the next change of the multicast list, as in C); RoCE has none.
        if iface.on_infiniband() {
            pr_info!(
                "{}: umcast on: groups user space joins through the subnet administrator are left to it\n",
                dev.name()
            );
        } else {
            pr_info!(
                "{}: umcast on: changes nothing on RoCE, which has no subnet administrator\n",
                dev.name()
            );
        }
    }
    Ok(())
}

/// Completes the set-up of the net_device of `iface`: the values known only once the port
/// is queried, its NAPI contexts `napi`, and, for an interface of a port, the adapter it
/// belongs to (as C links only those, not the children, to it).
pub(crate) fn configure(
    iface: &Interface,
    napi: Contexts,
) -> impl FnOnce(&mut Configure<IpoibNetdev>) -> Result + '_ {
    let adapter = match iface.role().parent() {
        None => iface.device.parent(),
        Some(_) => None,
    };
    let (mtu, max_mtu) = (iface.mtu, iface.mode_max_mtu());
    // Packets the stack may queue for us: twice the send ring, as the C driver does.
    let tx_queue_len = 2 * iface.send_ring;
    let scatter_gather = iface.scatter_gather;
    let broadcast = iface.broadcast;
    // Ports are numbered from 1, `dev_port` from 0.
    let dev_port = u16::try_from(iface.port.saturating_sub(1)).unwrap_or(u16::MAX);
    move |setup| {
        setup.add_napi(napi.send);
        setup.add_napi(napi.recv);
        if let Some(adapter) = adapter {
            setup.set_parent(adapter);
        }
        setup.set_dev_port(dev_port);
        setup.set_tx_queue_len(tx_queue_len);
        if scatter_gather {
            setup.set_scatter_gather();
        }
        setup.set_broadcast(broadcast.as_bytes())?;
        setup.set_mtu(mtu, MIN_MTU, max_mtu)
    }
}

/// The operations of an IPoIB interface.
pub(crate) struct IpoibNetdev;

/// The link-layer header of IPoIB packets.
pub(crate) struct IpoibHeader;

/// The poll function of one of an interface's NAPI contexts (sends if `SEND`, receives
/// otherwise), and the batch of completions it polls into, made once rather than at every
/// round.
#[derive(Default)]
pub(crate) struct IpoibPoll<const SEND: bool>(Completions);

/// The send context's poll function.
pub(crate) type SendPoll = IpoibPoll<true>;
/// The receive context's poll function.
pub(crate) type RecvPoll = IpoibPoll<false>;

/// An interface's two NAPI contexts, as C's: send completions and what waits to be sent in
/// one, received packets in the other. A round of each handles its own queues only.
pub(crate) struct Contexts {
    send: NapiContext<SendPoll>,
    recv: NapiContext<RecvPoll>,
}

impl Contexts {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            send: NapiContext::new(SendPoll::default())?,
            recv: NapiContext::new(RecvPoll::default())?,
        })
    }

    /// Their handles, for the interface's queues.
    pub(crate) fn handles(&self) -> NapiHandles {
        NapiHandles {
            send: self.send.handle(),
            recv: self.recv.handle(),
        }
    }
}

/// Brings the children of `iface` up or down with it (`up`), under RTNL.
fn follow_parent(iface: &Interface, rtnl: &Rtnl, up: bool) {
    match iface.children().members(rtnl) {
        Ok(children) => {
            for (_, child) in children.iter() {
                let _ = child.set_up(rtnl, up);
            }
        }
        Err(e) => pr_warn!(
            "{}: children not brought {} with it ({e:?})\n",
            iface.log_name,
            if up { "up" } else { "down" }
        ),
    }
}

#[vtable]
impl dev::Operations for IpoibNetdev {
    type Data = Arc<Interface>;

    fn setup(dev: &mut Setup<Self>) {
        dev.set_type(ARPHRD_INFINIBAND);
        dev.set_header_ops::<IpoibHeader>();
        dev.set_ethtool_ops();
        dev.set_hard_header_len(HARD_HEADER_LEN as u16);
        dev.set_flags(IFF_BROADCAST | IFF_MULTICAST);
        // A queue length from `setup` keeps the device queued (a zero one would make it a
        // queue-less device); the registration sets the real one, twice the send ring.
        dev.set_tx_queue_len(2 * 64);
        // Packets too big for a peer are reported back through their route.
        dev.keep_dst();
        // An IPoIB frame has no room for an 802.1Q tag; partitions (children) are the
        // InfiniBand way to split a link.
        dev.set_vlan_challenged();
        dev.set_watchdog_timeout(TX_TIMEOUT_MS);
        let bcast = HwAddr::broadcast(wire::DEFAULT_PKEY);
        if dev.set_addr_len(HWADDR_LEN as u8).is_err()
            || dev.set_broadcast(bcast.as_bytes()).is_err()
        {
            pr_err!("setup: address sizes rejected\n");
        }
    }

    fn open(dev: &NetDevice, iface: ArcBorrow<'_, Interface>, rtnl: &Rtnl) -> Result {
        // The core renames a device only while it is down.
        iface.log_name.update(dev);
        iface.follow_debug_name(dev);
        // A new device starts with its carrier on. Off first: on InfiniBand the multicast
        // work item turns it on once the broadcast group is joined, maybe before `start`
        // returns.
        dev.carrier_off();
        Interface::start(iface, dev)?;
        if iface.carrier_ready() {
            dev.carrier_on();
        } else if !iface.has_partition() {
            pr_info!(
                "{}: P_Key 0x{:04x} is not in the port's P_Key table: no carrier\n",
                dev.name(),
                iface.pkey()
            );
        }
        dev.start_queue();
        // Children come up with their parent (as in C); one that cannot keeps its reason to
        // itself, as `ip link set` on it would say.
        follow_parent(&iface, rtnl, true);
        Ok(())
    }

    fn get_iflink(dev: &NetDevice, iface: ArcBorrow<'_, Interface>) -> i32 {
        // A child sends through its parent: `ip link` shows `ib0.8001@ib0`.
        iface.role().parent().unwrap_or(dev).ifindex()
    }

    fn stop(dev: &NetDevice, iface: ArcBorrow<'_, Interface>, rtnl: &Rtnl) -> Result {
        dev.stop_queue();
        dev.carrier_off();
        iface.stop();
        // Children go down with their parent (as in C).
        follow_parent(&iface, rtnl, false);
        Ok(())
    }

    fn start_xmit(skb: SkBuff, dev: &NetDevice, iface: ArcBorrow<'_, Interface>) -> TxResult {
        Interface::xmit(iface, skb, dev);
        TxResult::Ok
    }

    fn tx_timeout(dev: &NetDevice, iface: ArcBorrow<'_, Interface>) {
        Interface::tx_timeout(iface, dev);
    }

    fn change_mtu(dev: &NetDevice, iface: ArcBorrow<'_, Interface>, new_mtu: u32) -> Result<u32> {
        if new_mtu < MIN_MTU || new_mtu > iface.max_mtu() {
            return Err(EINVAL);
        }
        Ok(iface.admit_mtu(dev, new_mtu))
    }

    fn set_rx_mode(dev: &NetDevice, iface: ArcBorrow<'_, Interface>, mc: &McAddrs<'_>) {
        Interface::set_multicast_list(iface, dev, mc);
    }

    fn get_stats64(_dev: &NetDevice, iface: ArcBorrow<'_, Interface>, stats: &mut Stats64) {
        iface.counters.fill(stats);
    }

    const ATTRIBUTES: &'static [Attribute] = &[
        Attribute::read_write(c_str!("mode")),
        Attribute::read_only(c_str!("pkey")),
        Attribute::read_write(c_str!("umcast")),
        Attribute::write_only(c_str!("create_child")),
        Attribute::write_only(c_str!("delete_child")),
        Attribute::read_only(c_str!("parent")),
    ];

    fn attribute_visible(_dev: &NetDevice, iface: ArcBorrow<'_, Interface>, index: usize) -> bool {
        match index {
            ATTR_CREATE_CHILD | ATTR_DELETE_CHILD => iface.role().parent().is_none(),
            ATTR_PARENT => iface.role().parent().is_some(),
            _ => true,
        }
    }

    fn attribute_show(
        _dev: &NetDevice,
        iface: ArcBorrow<'_, Interface>,
        index: usize,
        text: &mut AttributeText<'_>,
    ) -> Result {
        match index {
            ATTR_MODE => {
                let mode = if iface.connected() {
                    "connected"
                } else {
                    "datagram"
                };
                writeln!(text, "{mode}")
            }
            ATTR_PKEY => writeln!(text, "0x{:04x}", iface.pkey()),
            ATTR_UMCAST => writeln!(text, "{}", u8::from(iface.umcast())),
            ATTR_PARENT => {
                let parent = iface.role().parent().ok_or(EINVAL)?;
                writeln!(text, "{}", parent.name())
            }
            _ => return Err(EINVAL),
        }
        .map_err(|_| EINVAL)
    }

    fn attribute_store(
        dev: &NetDevice,
        iface: ArcBorrow<'_, Interface>,
        index: usize,
        input: &[u8],
    ) -> Result {
        match index {
            ATTR_MODE => {
                let Some(connected) = parse_mode(input) else {
                    pr_info!("{}: mode must be datagram or connected\n", dev.name());
                    return Err(EINVAL);
                };
                let Some(rtnl) = RtnlGuard::try_lock() else {
                    return Err(restart_syscall());
                };
                iface.set_mode(dev, &rtnl, connected)
            }
            ATTR_UMCAST => set_umcast(dev, &iface, parse_pkey(input).ok_or(EINVAL)?),
            ATTR_CREATE_CHILD | ATTR_DELETE_CHILD => {
                let creating = index == ATTR_CREATE_CHILD;
                let pkey = parse_pkey(input)
                    .and_then(|p| u16::try_from(p).ok())
                    .filter(|&p| !creating || (p != 0 && p != wire::PKEY_FULL_MEMBER))
                    .ok_or(EINVAL)?;
                let Some(rtnl) = RtnlGuard::try_lock() else {
                    return Err(restart_syscall());
                };
                if creating {
                    let request = Request::Legacy { written: pkey };
                    Children::<Interface>::create(&iface.into(), dev, &rtnl, pkey, request)
                        .map(|_| ())
                } else {
                    Children::<Interface>::delete_legacy(&iface.into(), &rtnl, pkey)
                }
            }
            _ => Err(EINVAL),
        }
    }

    fn set_address(
        dev: &NetDevice,
        iface: ArcBorrow<'_, Interface>,
        rtnl: &Rtnl,
        addr: &[u8],
    ) -> Result {
        Interface::set_address(iface, dev, rtnl, addr)
    }
}

#[vtable]
impl header::Operations for IpoibHeader {
    // Always inline: into its C trampoline, its only caller; the call between them cost 23
    // instructions a packet.
    #[inline(always)]
    fn create(
        skb: &mut SkBuff<Lent<'_>>,
        _dev: &NetDevice,
        ethertype: u16,
        daddr: Option<&[u8]>,
    ) -> Result<u32> {
        // A hardware address is 20 bytes; transmit parses it.
        let dest = daddr.filter(|d| d.len() == HWADDR_LEN).ok_or(EINVAL)?;
        // The destination rides in front of the encapsulation header as a pseudo header,
        // read back by transmit: both pushed at once.
        let (pseudo, encap) = skb.push(HARD_HEADER_LEN as u32)?.split_at_mut(HWADDR_LEN);
        pseudo.copy_from_slice(dest);
        encap.copy_from_slice(&EncapHeader { ethertype }.to_bytes());
        Ok(HARD_HEADER_LEN as u32)
    }
}

impl<const SEND: bool> Poll for IpoibPoll<SEND> {
    type Device = IpoibNetdev;

    // Always inline, with the send context's round (`Interface::poll_send`): into the C
    // trampoline, their only caller. The receive round stays a call: inlined too, it made
    // the datagram path costlier (other functions were left out of line instead).
    #[inline(always)]
    fn poll(
        &mut self,
        _dev: &NetDevice,
        iface: ArcBorrow<'_, Interface>,
        napi: &Napi,
        budget: Budget<'_>,
    ) -> Polled {
        if SEND {
            iface.poll_send(napi, budget, &mut self.0)
        } else {
            iface.poll_recv(napi, budget, &mut self.0)
        }
    }
}

#[vtable]
impl ethtool::Operations for IpoibNetdev {
    fn get_drvinfo(_dev: &NetDevice, iface: ArcBorrow<'_, Interface>, info: &mut DrvInfo) {
        iface.fill_drvinfo(info);
    }

    fn get_link_settings(
        _dev: &NetDevice,
        iface: ArcBorrow<'_, Interface>,
    ) -> Result<LinkSettings> {
        Ok(iface.ethtool.link_settings())
    }

    fn get_coalesce(_dev: &NetDevice, iface: ArcBorrow<'_, Interface>) -> Result<Coalesce> {
        Ok(iface.ethtool.coalesce())
    }

    fn set_coalesce(dev: &NetDevice, iface: ArcBorrow<'_, Interface>, wanted: Coalesce) -> Result {
        iface.set_coalesce(wanted, dev.name().as_c_str())
    }

    const ETHTOOL_STATS: &'static [&'static CStr] = stats::ETHTOOL_STATS;

    fn get_ethtool_stats(_dev: &NetDevice, iface: ArcBorrow<'_, Interface>, values: &mut [u64]) {
        iface.fill_ethtool_stats(values);
    }
}

#[vtable]
impl link::Operations for IpoibNetdev {
    const LINK_INFO_SIZE: usize = 3 * attr_size(2);

    fn change_link(
        dev: &NetDevice,
        iface: ArcBorrow<'_, Interface>,
        rtnl: &Rtnl,
        attrs: &LinkAttributes<'_>,
    ) -> Result {
        if let Some(umcast) = attrs.u16(IFLA_IPOIB_UMCAST)? {
            set_umcast(dev, &iface, u32::from(umcast))?;
        }
        // The P_Key of an interface is fixed; the C driver ignores it here too.
        match attrs.u16(IFLA_IPOIB_MODE)? {
            None => Ok(()),
            Some(IPOIB_MODE_DATAGRAM) => iface.set_mode(dev, rtnl, false),
            Some(IPOIB_MODE_CONNECTED) => iface.set_mode(dev, rtnl, true),
            Some(other) => {
                pr_info!("{}: unknown mode {}\n", dev.name(), other);
                Err(EINVAL)
            }
        }
    }

    fn fill_link_info(
        _dev: &NetDevice,
        iface: ArcBorrow<'_, Interface>,
        info: &mut LinkInfo<'_>,
    ) -> Result {
        let mode = if iface.connected() {
            IPOIB_MODE_CONNECTED
        } else {
            IPOIB_MODE_DATAGRAM
        };
        info.put_u16(IFLA_IPOIB_PKEY, iface.pkey())?;
        info.put_u16(IFLA_IPOIB_MODE, mode)?;
        info.put_u16(IFLA_IPOIB_UMCAST, u16::from(iface.umcast()))
    }

    fn new_link(
        link: NewLink<'_, Self>,
        parent: &NetDevice,
        iface: ArcBorrow<'_, Interface>,
        rtnl: &Rtnl,
        attrs: &LinkAttributes<'_>,
    ) -> Result {
        // Without a P_Key the child shares its parent's partition.
        let pkey = attrs.u16(IFLA_IPOIB_PKEY)?.unwrap_or(iface.pkey());
        let address = match link.address()? {
            Some(addr) => Some(iface.child_address(parent, addr)?),
            None => None,
        };
        let (child, dev) =
            Children::<Interface>::create(&iface.into(), parent, rtnl, pkey, Request::Link(link))?;
        if let Some(id) = address {
            child.take_address(&dev, rtnl, id)?;
        }
        // The mode and umcast asked for apply as to an existing interface; on failure the
        // new one is deleted.
        Self::change_link(&dev, child.as_arc_borrow(), rtnl, attrs)
    }

    fn del_link(dev: &NetDevice, iface: ArcBorrow<'_, Interface>, _rtnl: &Rtnl) -> Result {
        match iface.role().parent_interface() {
            Some(parent) => Children::forget(parent, dev),
            None => Err(EINVAL),
        }
    }
}

impl ChildInterface for Interface {
    type Ops = IpoibNetdev;
    type Contexts = Contexts;

    fn contexts() -> Result<Contexts> {
        Contexts::new()
    }

    fn attach_debug_name(&self, name: DebugName) {
        Interface::attach_debug_name(self, name)
    }

    fn children(&self) -> &Children<Self> {
        Interface::children(self)
    }

    fn pkey(&self) -> u16 {
        Interface::pkey(self)
    }

    fn hw_addr(&self) -> HwAddr {
        self.local()
    }

    fn registered(&self, dev: &NetDevice) {
        self.log_name.update(dev);
    }

    fn configure(&self, napi: Contexts) -> impl FnOnce(&mut Configure<IpoibNetdev>) -> Result {
        configure(self, napi)
    }

    fn new_child(
        parent: &Arc<Self>,
        parent_dev: &NetDevice,
        pkey: u16,
        napi: &Contexts,
    ) -> Result<Arc<Self>> {
        Interface::new_child(parent, parent_dev, pkey, &napi.handles())
    }

    fn flush_work(&self) {
        Interface::flush_work(self)
    }

    fn reap_children_later(this: &Arc<Self>) {
        Interface::reap_children_later(this)
    }
}
