// SPDX-License-Identifier: GPL-2.0

//! Child interfaces: more interfaces on the port of one, each in a partition of its own
//! (P_Key), made with `ip link add link ib0 name ib0.8001 type ipoib pkey 0x8001` or by
//! writing the P_Key to `/sys/class/net/ib0/create_child` (deleted through `delete_child`),
//! as in the C driver.
//!
//! The networking core owns a child's device; its parent keeps the list of its children and
//! deletes them before it goes away. The list holds each child's interface, and each child
//! its parent's: the cycle is broken when the child leaves the list, which every deletion
//! does (`ip link del`, `delete_child`, and the removal of the parent).
//!
//! A deleted child may still have work queued (its device is gone, its work items are not
//! yet run), which must end before the module may go. Deleted under RTNL, which some of
//! that work takes, it cannot be waited for there: the child's interface stays on the
//! list, retired, until a work item of the parent has waited for it
//! ([`Children::reap`]), or the parent's removal does.
//!
//! The list is part of the interface's state, so this file does not name the interface: it
//! reaches it through [`ChildInterface`], which `netdev.rs` implements for it.

use crate::{
    debugfs::{debug_files_of, DebugFiles, DebugName, DebugRoot, DebugView},
    wire::{HwAddr, PKEY_FULL_MEMBER},
};
use kernel::{
    net::{
        dev::{Configure, NetDevice},
        link::{self, LinkDevice, LinkKind, NewLink},
        rtnl::{Rtnl, RtnlGuard},
    },
    new_mutex,
    prelude::*,
    str::CString,
    sync::{Arc, Mutex},
    types::ARef,
};

/// What the child list needs of the interfaces it lists.
pub(crate) trait ChildInterface: DebugView + Sized + 'static {
    /// The operations their net_devices are registered with.
    type Ops: link::Operations<Data = Arc<Self>>;
    /// The NAPI contexts of an interface, made before it, driven by it and added to its
    /// net_device.
    type Contexts;
    /// Makes the NAPI contexts of a new interface.
    fn contexts() -> Result<Self::Contexts>;
    /// The interface's children (none for a child).
    fn children(&self) -> &Children<Self>;
    /// The partition, full-membership bit set.
    fn pkey(&self) -> u16;
    /// The hardware address.
    fn hw_addr(&self) -> HwAddr;
    /// Completes the set-up of the interface's net_device, whose NAPI contexts are `napi`.
    fn configure(&self, napi: Self::Contexts) -> impl FnOnce(&mut Configure<Self::Ops>) -> Result;
    /// The interface's net_device is registered as `dev` (its name is now known).
    fn registered(&self, dev: &NetDevice);
    /// Takes the handle that renames the interface's debugfs files.
    fn attach_debug_name(&self, name: DebugName);
    /// Makes the interface of a child of `parent` (whose net_device is `parent_dev`) in
    /// partition `pkey`, driving `napi`, under RTNL.
    fn new_child(
        parent: &Arc<Self>,
        parent_dev: &NetDevice,
        pkey: u16,
        napi: &Self::Contexts,
    ) -> Result<Arc<Self>>;
    /// Waits for the interface's work (once its net_device is unregistered).
    fn flush_work(&self);
    /// Has [`Children::reap`] run on `this`'s children soon, in process context without
    /// RTNL.
    fn reap_children_later(this: &Arc<Self>);
}

/// Where an interface stands among those of its port.
pub(crate) enum Role<I: ChildInterface> {
    /// The port's own interface (`ibN`), which may have children.
    Parent,
    /// A child interface of `parent`, whose interface is `interface`.
    Child {
        parent: ARef<NetDevice>,
        /// Kept for the port facts; the parent's list holds us in turn.
        interface: Arc<I>,
    },
}

impl<I: ChildInterface> Role<I> {
    /// The net_device a child was made on; `None` for a port's own interface.
    pub(crate) fn parent(&self) -> Option<&NetDevice> {
        match self {
            Role::Parent => None,
            Role::Child { parent, .. } => Some(parent),
        }
    }

    /// The interface a child was made on.
    pub(crate) fn parent_interface(&self) -> Option<&Arc<I>> {
        match self {
            Role::Parent => None,
            Role::Child { interface, .. } => Some(interface),
        }
    }
}

/// One child interface, as its parent lists it.
pub(crate) struct Child<I: ChildInterface> {
    /// The partition, full-membership bit set.
    pkey: u16,
    /// Made through `create_child`, so deletable by P_Key through `delete_child`.
    legacy: bool,
    dev: LinkDevice<I::Ops>,
    interface: Arc<I>,
    _debug: Option<DebugFiles>,
}

impl<I: ChildInterface> Child<I> {
    /// The child's net_device.
    pub(crate) fn device(&self) -> &NetDevice {
        self.dev.device()
    }

    /// The child's interface.
    pub(crate) fn interface(&self) -> &Arc<I> {
        &self.interface
    }
}

/// A place in the list of children.
enum Entry<I: ChildInterface> {
    /// Free for the next child.
    Free,
    /// A child.
    Live(Child<I>),
    /// A deleted child's interface, kept until its work is done.
    Retired(Arc<I>),
}

struct ChildList<I: ChildInterface> {
    /// A deleted child's place is retired, then freed for the next one.
    entries: KVec<Entry<I>>,
    /// Set when the parent goes: no child may be added any more.
    closed: bool,
}

/// The children of an interface.
#[pin_data]
pub(crate) struct Children<I: ChildInterface> {
    /// Taken in process context only: under RTNL to add and delete, and by port events.
    #[pin]
    list: Mutex<ChildList<I>>,
    /// What children are made with; `None` for a child, which may not have children.
    maker: Option<Maker<I>>,
}

/// What a port's own interface makes its children with.
pub(crate) struct Maker<I: ChildInterface> {
    /// The kind of children made through `create_child`.
    pub(crate) kind: Arc<LinkKind<I::Ops>>,
    /// Where their debugfs files go.
    pub(crate) debug_root: DebugRoot,
}

/// How a child is asked for.
pub(crate) enum Request<'a, I: ChildInterface> {
    /// `ip link add`: the core's device to register.
    Link(NewLink<'a, I::Ops>),
    /// A write to `create_child`: the P_Key as written, which names the interface.
    Legacy { written: u16 },
}

impl<I: ChildInterface> Children<I> {
    /// The list of an interface whose children `maker` makes (`None`: a child).
    pub(crate) fn new(maker: Option<Maker<I>>) -> impl PinInit<Self> {
        let closed = maker.is_none();
        pin_init!(Self {
            list <- new_mutex!(ChildList { entries: KVec::new(), closed }, "Children::list"),
            maker,
        })
    }

    /// Makes a child of `port` (whose net_device is `parent`) in partition `pkey` (full
    /// membership is implied), under RTNL.
    pub(crate) fn create(
        port: &Arc<I>,
        parent: &NetDevice,
        rtnl: &Rtnl,
        pkey: u16,
        request: Request<'_, I>,
    ) -> Result<(Arc<I>, ARef<NetDevice>)> {
        let children = port.children();
        let name = parent.name();
        if pkey & !PKEY_FULL_MEMBER == 0 {
            pr_info!("{name}: P_Key 0x{pkey:04x} is not a partition\n");
            return Err(EINVAL);
        }
        let legacy = matches!(request, Request::Legacy { .. });
        let full = pkey | PKEY_FULL_MEMBER;
        {
            let mut list = children.list.lock();
            if children.maker.is_none() {
                pr_info!("{name}: a child interface cannot have children\n");
                return Err(EINVAL);
            }
            if list.closed {
                return Err(ENODEV);
            }
            // `delete_child` names children by P_Key: those it can delete must be unique,
            // and differ from the parent's (compared as written, as the C driver does).
            if legacy
                && (port.pkey() == pkey || list.children().any(|c| c.legacy && c.pkey == pkey))
            {
                pr_info!("{name}: a child with P_Key 0x{pkey:04x} exists\n");
                return Err(ENOTUNIQ);
            }
            // Room for the entry first: once registered, the child must make the list.
            if !list.entries.iter().any(|e| matches!(e, Entry::Free)) {
                list.entries.reserve(1, GFP_KERNEL)?;
            }
        }
        let napi = I::contexts()?;
        let interface = I::new_child(port, parent, full, &napi).inspect_err(|e| {
            pr_info!("{name}: no child in partition 0x{full:04x} ({e:?})\n");
        })?;
        let hw_addr = interface.hw_addr();
        let configure = interface.configure(napi);
        let maker = children.maker.as_ref().ok_or(EINVAL)?;
        let registered = match request {
            Request::Link(link) => {
                link.register(rtnl, hw_addr.as_bytes(), interface.clone(), configure)
            }
            Request::Legacy { written } => {
                let child_name = CString::try_from_fmt(kernel::fmt!(
                    "{}.{:04x}",
                    Truncated(name.as_bytes(), 10),
                    written
                ))?;
                maker.kind.as_arc_borrow().create(
                    rtnl,
                    &child_name,
                    hw_addr.as_bytes(),
                    interface.clone(),
                    configure,
                )
            }
        };
        let dev = registered.inspect_err(|e| {
            pr_info!("{name}: child in partition 0x{full:04x} not registered ({e:?})\n");
        })?;
        interface.registered(dev.device());
        pr_info!(
            "{}: child of {} in partition 0x{:04x}, address {}\n",
            dev.device().name(),
            name,
            full,
            hw_addr
        );
        let made = (interface.clone(), dev.device().into());
        let debug = debug_files_of(&maker.debug_root, dev.device(), interface.clone());
        if let Some(files) = &debug {
            interface.attach_debug_name(files.name());
        }
        let child = Child {
            pkey: full,
            legacy,
            dev,
            interface,
            _debug: debug,
        };
        let mut list = children.list.lock();
        if list.closed {
            // The parent started going meanwhile (its removal takes no RTNL to close the
            // list): the new child goes too, or it would hold the parent for ever.
            drop(list);
            pr_info!("{}: parent going, deleted\n", child.device().name());
            child.dev.delete(rtnl);
            return Err(ENODEV);
        }
        match list.entries.iter_mut().find(|e| matches!(e, Entry::Free)) {
            Some(slot) => *slot = Entry::Live(child),
            // Room was made above, and only RTNL holders add: this does not allocate.
            None => list.entries.push(Entry::Live(child), GFP_ATOMIC)?,
        }
        Ok(made)
    }

    /// Takes `dev` off the list, for `ip link del` (under RTNL); `ENOENT` if it is not a
    /// child of `port` listed here.
    pub(crate) fn forget(port: &Arc<I>, dev: &NetDevice) -> Result {
        let taken = port
            .children()
            .retire(|c| core::ptr::eq(c.device(), dev))
            .ok_or(ENOENT)?;
        // The core unregisters the device; the interface stays until its work is done.
        drop(taken);
        I::reap_children_later(port);
        Ok(())
    }

    /// Deletes the child of `port` made through `create_child` with P_Key `pkey` (a write
    /// to `delete_child`), under RTNL; `ENODEV` if there is none.
    pub(crate) fn delete_legacy(port: &Arc<I>, rtnl: &Rtnl, pkey: u16) -> Result {
        let taken = port
            .children()
            .retire(|c| c.legacy && c.pkey == pkey)
            .ok_or(ENODEV)?;
        pr_info!("{}: deleted\n", taken.device().name());
        taken.dev.delete(rtnl);
        I::reap_children_later(port);
        Ok(())
    }

    /// Waits for the work of deleted children, then lets their interfaces go (process
    /// context, without RTNL, which their work may take).
    pub(crate) fn reap(&self) {
        loop {
            let retired = self.list.lock().entries.iter_mut().find_map(|e| {
                if !matches!(e, Entry::Retired(_)) {
                    return None;
                }
                match core::mem::replace(e, Entry::Free) {
                    Entry::Retired(interface) => Some(interface),
                    _ => None,
                }
            });
            let Some(interface) = retired else {
                return;
            };
            interface.flush_work();
        }
    }

    /// Deletes every child, as the parent goes (process context, without RTNL): no child
    /// may be added afterwards. Returns once their work, and that of children deleted
    /// before, is done.
    pub(crate) fn delete_all(&self) {
        let taken = {
            let mut list = self.list.lock();
            list.closed = true;
            core::mem::take(&mut list.entries)
        };
        for entry in taken {
            let interface = match entry {
                Entry::Free => continue,
                Entry::Retired(interface) => interface,
                Entry::Live(Child { dev, interface, .. }) => {
                    let rtnl = RtnlGuard::lock();
                    dev.delete(&rtnl);
                    interface
                }
            };
            // Unregistered: nothing queues work any more.
            interface.flush_work();
        }
    }

    /// Takes the first child `matches` accepts off the list, leaving its interface retired
    /// in its place.
    fn retire(&self, matches: impl Fn(&Child<I>) -> bool) -> Option<Child<I>> {
        let mut list = self.list.lock();
        let slot = list
            .entries
            .iter_mut()
            .find(|e| matches!(e, Entry::Live(c) if matches(c)))?;
        let Entry::Live(child) = core::mem::replace(slot, Entry::Free) else {
            return None;
        };
        *slot = Entry::Retired(child.interface.clone());
        Some(child)
    }

    /// Calls `f` on each child (process context).
    pub(crate) fn for_each(&self, f: impl FnMut(&Child<I>)) {
        self.list.lock().children().for_each(f);
    }

    /// The children and their net_devices, for what must run without the list's lock (a
    /// child brought up or down takes its own list's, of the same lock class); under RTNL,
    /// which keeps children from being added or deleted meanwhile.
    pub(crate) fn members(&self, _rtnl: &Rtnl) -> Result<KVec<(Arc<I>, ARef<NetDevice>)>> {
        let list = self.list.lock();
        let mut members = KVec::new();
        for c in list.children() {
            members.push((c.interface().clone(), ARef::from(c.device())), GFP_KERNEL)?;
        }
        Ok(members)
    }
}

impl<I: ChildInterface> ChildList<I> {
    fn children(&self) -> impl Iterator<Item = &Child<I>> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Live(child) => Some(child),
            _ => None,
        })
    }
}

/// At most the first `.1` bytes of a name, shown as text.
struct Truncated<'a>(&'a [u8], usize);

impl core::fmt::Display for Truncated<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let end = self.0.len().min(self.1);
        for &b in &self.0[..end] {
            core::fmt::Write::write_char(f, char::from(b))?;
        }
        Ok(())
    }
}

/// The P_Key written to `create_child` or `delete_child`: a number as C's `%i` reads it
/// (decimal, `0x` hexadecimal or `0` octal), one trailing newline allowed.
pub(crate) fn parse_pkey(input: &[u8]) -> Option<u32> {
    let text = input.strip_suffix(b"\n").unwrap_or(input);
    let (digits, radix) = match text {
        [b'0', b'x' | b'X', rest @ ..] => (rest, 16),
        [b'0', rest @ ..] if !rest.is_empty() => (rest, 8),
        _ => (text, 10),
    };
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u32, |value, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        let digit = u32::from(digit);
        if digit >= radix {
            return None;
        }
        value.checked_mul(radix)?.checked_add(digit)
    })
}
