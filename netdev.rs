// SPDX-License-Identifier: GPL-2.0

//! The IPoIB network interface: set-up as the C driver does it, link-layer header,
//! open/stop, transmit, NAPI and counters.

use crate::{
    child::{parse_pkey, Children, Request},
    ipoib_ud::UdPort,
    stats,
    wire::{self, EncapHeader, HwAddr, HARD_HEADER_LEN, HWADDR_LEN, MIN_MTU},
};
use core::fmt::Write;
use kernel::{
    c_str,
    net::{
        dev::{McAddrs, NetDevice, Operations, Setup, Stats64, TxResult},
        dev_attr::{Attribute, AttributeText},
        ethtool::{Coalesce, DrvInfo, LinkSettings},
        link::{attr_size, LinkAttributes, LinkInfo, NewLink},
        napi::Napi,
        rtnl::{restart_syscall, Rtnl, RtnlGuard},
        skb::SkBuff,
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
/// "user multicast"), 0 or 1.
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

/// Applies `umcast` 0 or 1 (`EINVAL` otherwise).
fn set_umcast(dev: &NetDevice, port: &UdPort, value: u32) -> Result {
    let on = match value {
        0 => false,
        1 => true,
        _ => return Err(EINVAL),
    };
    if port.set_umcast(on) && on {
        // Such groups are those joined through an InfiniBand subnet administrator, which
        // RoCE ports do not have: say that nothing changes there.
        pr_info!(
            "{}: umcast on: groups user space joins through the subnet administrator are left to it (none on RoCE)\n",
            dev.name()
        );
    }
    Ok(())
}

/// Completes the set-up of an interface whose datapath is `port`: the values known only
/// once the port is queried.
pub(crate) fn configure(port: &UdPort) -> impl FnOnce(&mut Setup) -> Result {
    let (mtu, max_mtu) = (port.mtu, port.mode_max_mtu());
    // Packets the stack may queue for us: twice the send ring, as the C driver does.
    let tx_queue_len = 2 * port.send_ring;
    let scatter_gather = port.scatter_gather;
    let broadcast = port.broadcast;
    move |setup| {
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

#[vtable]
impl Operations for IpoibNetdev {
    type Data = Arc<UdPort>;

    fn setup(dev: &mut Setup) {
        dev.set_type(ARPHRD_INFINIBAND);
        dev.set_hard_header_len(HARD_HEADER_LEN as u16);
        dev.set_flags(IFF_BROADCAST | IFF_MULTICAST);
        // A queue length from `setup` keeps the device queued (a zero one would make it a
        // queue-less device); the registration sets the real one, twice the send ring.
        dev.set_tx_queue_len(2 * 64);
        // Packets too big for a peer are reported back through their route.
        dev.keep_dst();
        dev.set_watchdog_timeout(crate::ipoib_ud::TX_TIMEOUT_MS);
        let bcast = HwAddr::broadcast(wire::DEFAULT_PKEY);
        if dev.set_addr_len(HWADDR_LEN as u8).is_err()
            || dev.set_broadcast(bcast.as_bytes()).is_err()
        {
            pr_err!("setup: address sizes rejected\n");
        }
    }

    fn open(dev: &NetDevice, port: ArcBorrow<'_, UdPort>) -> Result {
        UdPort::start(port)?;
        if port.carrier_ready() {
            dev.carrier_on();
        } else {
            // A new device starts with its carrier on.
            dev.carrier_off();
            if !port.has_partition() {
                pr_info!(
                    "{}: P_Key 0x{:04x} is not in the port's P_Key table: no carrier\n",
                    dev.name(),
                    port.pkey()
                );
            }
        }
        dev.start_queue();
        Ok(())
    }

    fn stop(dev: &NetDevice, port: ArcBorrow<'_, UdPort>) -> Result {
        dev.stop_queue();
        dev.carrier_off();
        port.stop();
        Ok(())
    }

    fn start_xmit(skb: SkBuff, dev: &NetDevice, port: ArcBorrow<'_, UdPort>) -> TxResult {
        UdPort::xmit(port, skb, dev);
        TxResult::Ok
    }

    fn header_create(
        skb: &mut SkBuff,
        _dev: &NetDevice,
        ethertype: u16,
        daddr: Option<&[u8]>,
    ) -> Result<u32> {
        let daddr = daddr.ok_or(EINVAL)?;
        let dest = HwAddr::from_bytes(daddr).map_err(|_| EINVAL)?;
        skb.push(wire::ENCAP_HEADER_LEN as u32)?
            .copy_from_slice(&EncapHeader { ethertype }.to_bytes());
        // The destination rides in front as a pseudo header, read back by transmit.
        skb.push(HWADDR_LEN as u32)?
            .copy_from_slice(dest.as_bytes());
        Ok(HARD_HEADER_LEN as u32)
    }

    fn tx_timeout(dev: &NetDevice, port: ArcBorrow<'_, UdPort>) {
        UdPort::tx_timeout(port, dev);
    }

    fn change_mtu(_dev: &NetDevice, port: ArcBorrow<'_, UdPort>, new_mtu: u32) -> Result {
        if new_mtu < MIN_MTU || new_mtu > port.max_mtu() {
            return Err(EINVAL);
        }
        Ok(())
    }

    fn napi_poll(_dev: &NetDevice, port: ArcBorrow<'_, UdPort>, napi: &Napi, budget: u32) -> u32 {
        let done = port.poll(napi, budget);
        if port.take_recovery_due() {
            UdPort::schedule_recovery(port);
        }
        done
    }

    fn set_rx_mode(dev: &NetDevice, port: ArcBorrow<'_, UdPort>, mc: &McAddrs<'_>) {
        UdPort::set_multicast_list(port, dev, mc);
    }

    fn get_stats64(_dev: &NetDevice, port: ArcBorrow<'_, UdPort>, stats: &mut Stats64) {
        port.fill_stats(stats);
    }

    fn get_drvinfo(_dev: &NetDevice, port: ArcBorrow<'_, UdPort>, info: &mut DrvInfo) {
        port.fill_drvinfo(info);
    }

    fn get_link_settings(_dev: &NetDevice, port: ArcBorrow<'_, UdPort>) -> Result<LinkSettings> {
        Ok(port.ethtool.link_settings())
    }

    fn get_coalesce(_dev: &NetDevice, port: ArcBorrow<'_, UdPort>) -> Result<Coalesce> {
        Ok(port.ethtool.coalesce())
    }

    fn set_coalesce(dev: &NetDevice, port: ArcBorrow<'_, UdPort>, wanted: Coalesce) -> Result {
        port.set_coalesce(wanted, dev.name())
    }

    const ETHTOOL_STATS: &'static [&'static CStr] = stats::ETHTOOL_STATS;

    fn get_ethtool_stats(_dev: &NetDevice, port: ArcBorrow<'_, UdPort>, values: &mut [u64]) {
        port.fill_ethtool_stats(values);
    }

    const ATTRIBUTES: &'static [Attribute] = &[
        Attribute::read_write(c_str!("mode")),
        Attribute::read_only(c_str!("pkey")),
        Attribute::read_write(c_str!("umcast")),
        Attribute::write_only(c_str!("create_child")),
        Attribute::write_only(c_str!("delete_child")),
        Attribute::read_only(c_str!("parent")),
    ];

    fn attribute_visible(_dev: &NetDevice, port: ArcBorrow<'_, UdPort>, index: usize) -> bool {
        match index {
            ATTR_CREATE_CHILD | ATTR_DELETE_CHILD => port.parent().is_none(),
            ATTR_PARENT => port.parent().is_some(),
            _ => true,
        }
    }

    fn attribute_show(
        _dev: &NetDevice,
        port: ArcBorrow<'_, UdPort>,
        index: usize,
        text: &mut AttributeText<'_>,
    ) -> Result {
        match index {
            ATTR_MODE => {
                let mode = if port.connected() {
                    "connected"
                } else {
                    "datagram"
                };
                writeln!(text, "{mode}")
            }
            ATTR_PKEY => writeln!(text, "0x{:04x}", port.pkey()),
            ATTR_UMCAST => writeln!(text, "{}", u8::from(port.umcast())),
            ATTR_PARENT => {
                let parent = port.parent().ok_or(EINVAL)?;
                writeln!(text, "{}", parent.name())
            }
            _ => return Err(EINVAL),
        }
        .map_err(|_| EINVAL)
    }

    fn attribute_store(
        dev: &NetDevice,
        port: ArcBorrow<'_, UdPort>,
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
                port.set_mode(dev, &rtnl, connected)
            }
            ATTR_UMCAST => set_umcast(dev, &port, parse_pkey(input).ok_or(EINVAL)?),
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
                    Children::create(&port.into(), dev, &rtnl, pkey, request).map(|_| ())
                } else {
                    port.children().delete_legacy(&rtnl, pkey)
                }
            }
            _ => Err(EINVAL),
        }
    }

    const LINK_INFO_SIZE: usize = 3 * attr_size(2);

    fn change_link(
        dev: &NetDevice,
        port: ArcBorrow<'_, UdPort>,
        rtnl: &Rtnl,
        attrs: &LinkAttributes<'_>,
    ) -> Result {
        if let Some(umcast) = attrs.u16(IFLA_IPOIB_UMCAST)? {
            set_umcast(dev, &port, u32::from(umcast))?;
        }
        // The P_Key of an interface is fixed; the C driver ignores it here too.
        match attrs.u16(IFLA_IPOIB_MODE)? {
            None => Ok(()),
            Some(IPOIB_MODE_DATAGRAM) => port.set_mode(dev, rtnl, false),
            Some(IPOIB_MODE_CONNECTED) => port.set_mode(dev, rtnl, true),
            Some(other) => {
                pr_info!("{}: unknown mode {}\n", dev.name(), other);
                Err(EINVAL)
            }
        }
    }

    fn fill_link_info(
        _dev: &NetDevice,
        port: ArcBorrow<'_, UdPort>,
        info: &mut LinkInfo<'_>,
    ) -> Result {
        let mode = if port.connected() {
            IPOIB_MODE_CONNECTED
        } else {
            IPOIB_MODE_DATAGRAM
        };
        info.put_u16(IFLA_IPOIB_PKEY, port.pkey())?;
        info.put_u16(IFLA_IPOIB_MODE, mode)?;
        info.put_u16(IFLA_IPOIB_UMCAST, u16::from(port.umcast()))
    }

    fn new_link(
        link: NewLink<'_, Self>,
        parent: &NetDevice,
        port: ArcBorrow<'_, UdPort>,
        rtnl: &Rtnl,
        attrs: &LinkAttributes<'_>,
    ) -> Result {
        // Without a P_Key the child shares its parent's partition.
        let pkey = attrs.u16(IFLA_IPOIB_PKEY)?.unwrap_or(port.pkey());
        let (child, dev) = Children::create(&port.into(), parent, rtnl, pkey, Request::Link(link))?;
        // The mode and umcast asked for apply as to an existing interface; on failure the
        // new one is deleted.
        Self::change_link(&dev, child.as_arc_borrow(), rtnl, attrs)
    }

    fn del_link(dev: &NetDevice, port: ArcBorrow<'_, UdPort>, _rtnl: &Rtnl) -> Result {
        match port.parent_port() {
            Some(parent) => parent.children().forget(dev),
            None => Err(EINVAL),
        }
    }
}
