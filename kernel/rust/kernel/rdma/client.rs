// SPDX-License-Identifier: GPL-2.0

//! IB clients: upper-layer protocols told about every RDMA device as it comes and goes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::device::{Device, Gid};
use crate::{
    bindings, build_error,
    error::{code::EBUSY, code::EINVAL, to_result, Result, VTABLE_DEFAULT_ERROR},
    ffi::{c_int, c_void},
    net::dev::{NetDevice, SockAddr},
    prelude::vtable,
    str::CStr,
    sync::Arc,
    types::{ARef, ForeignOwnable, Opaque},
};
use core::{
    cell::UnsafeCell,
    marker::PhantomData,
    sync::atomic::{AtomicBool, Ordering},
};

/// An upper-layer protocol that wants to hear about RDMA devices.
///
/// The RDMA core calls [`Client::add`] for every device present at registration and for
/// every device registered later, and [`Client::remove`] for each device whose `add`
/// succeeded, when the device goes away or the client is unregistered. Calls for one device
/// never overlap.
#[vtable]
pub trait Client: ClientVTableProvider + Sized + 'static {
    /// The client's name, shown by the RDMA core.
    const NAME: &'static CStr;

    /// What the client keeps for each device it took on.
    type DeviceData: ForeignOwnable + Send + Sync;

    /// What the registration gives every call (state shared by all devices).
    type Context: Send + Sync;

    /// Takes on `device`. An error means the client ignores this device: no `remove` follows.
    fn add(ctx: &Self::Context, device: &Device) -> Result<Self::DeviceData>;

    /// Lets go of `device`, which is going away or is no longer served by this client.
    fn remove(ctx: &Self::Context, device: &Device, data: Self::DeviceData);

    /// `device`, which the client took on, has a new name (`rdma dev set NAME name NEW`),
    /// already in effect. Optional. Runs with the core's device locks held for reading: it
    /// must not register or unregister clients or devices.
    fn rename(
        _ctx: &Self::Context,
        _device: &Device,
        _data: <Self::DeviceData as ForeignOwnable>::Borrowed<'_>,
    ) {
        build_error!(VTABLE_DEFAULT_ERROR)
    }

    /// The client's network device that a connection request arriving on `device`, which
    /// the client took on, is for (`get_net_dev_by_params`): how the RDMA CM finds the
    /// interface of an IP address it listens on. `None` if none, or none alone, matches.
    /// Optional. Runs in process context with the core's lock of the device's client data
    /// held for reading.
    fn net_device(
        _ctx: &Self::Context,
        _device: &Device,
        _data: <Self::DeviceData as ForeignOwnable>::Borrowed<'_>,
        _request: &NetDevRequest<'_>,
    ) -> Option<ARef<NetDevice>> {
        build_error!(VTABLE_DEFAULT_ERROR)
    }
}

/// What a connection request tells of the network device it is for.
pub struct NetDevRequest<'a> {
    /// The port it arrived on.
    pub port: u32,
    /// Its partition.
    pub pkey: u16,
    /// The GID it was sent to, if known.
    pub gid: Option<Gid>,
    /// The IP address it is for, if known.
    pub addr: Option<&'a SockAddr>,
}

/// The `struct ib_client` of a [`Client`]: a static the RDMA core links into its client list.
///
/// Create it with [`crate::ib_client_vtable!`], which pairs it with its client type.
///
/// # Invariants
///
/// `client` is a fully initialised `struct ib_client` whose callbacks are the trampolines of
/// `T`; `registered` is true exactly while a [`Registration`] of it exists. `context` is
/// written only by the one [`Registration`] while the client is not registered with the
/// core (before registering, after unregistering), and holds its context in between.
pub struct ClientVTable<T: Client> {
    client: Opaque<bindings::ib_client>,
    registered: AtomicBool,
    context: UnsafeCell<Option<Arc<T::Context>>>,
    _client: PhantomData<T>,
}

// SAFETY: Only the RDMA core touches `client`, under its own locking; `registered` is atomic;
// `context` is only read while registered and only written while not (type invariant), and
// `T::Context` is `Sync`.
unsafe impl<T: Client> Sync for ClientVTable<T> {}

impl<T: Client> ClientVTable<T> {
    /// Builds the `struct ib_client` for `T`. Use [`crate::ib_client_vtable!`] instead.
    #[doc(hidden)]
    pub const fn new() -> Self {
        // INVARIANT: Every field the RDMA core reads before registration is set here; the rest
        // (`uses`, `uses_zero`, `client_id`) is initialised by `ib_register_client`.
        Self {
            client: Opaque::new(bindings::ib_client {
                name: T::NAME.as_char_ptr(),
                add: Some(add_callback::<T>),
                remove: Some(remove_callback::<T>),
                rename: if T::HAS_RENAME {
                    Some(rename_callback::<T>)
                } else {
                    None
                },
                get_net_dev_by_params: if T::HAS_NET_DEVICE {
                    Some(net_device_callback::<T>)
                } else {
                    None
                },
                // SAFETY: The remaining fields are optional callbacks, integers and a
                // completion, all valid when zeroed (`None` for the callbacks).
                ..unsafe { core::mem::MaybeUninit::zeroed().assume_init() }
            }),
            registered: AtomicBool::new(false),
            context: UnsafeCell::new(None),
            _client: PhantomData,
        }
    }

    /// The registration's context.
    ///
    /// # Safety
    ///
    /// The client must be registered with the core for `'a`.
    unsafe fn context<'a>(&self) -> Option<&'a T::Context> {
        // SAFETY: Registered, so `context` is not written (type invariant) for `'a`.
        unsafe { (*self.context.get()).as_deref() }
    }
}

/// Gives a [`Client`] its one static [`ClientVTable`]. Implemented by
/// [`crate::ib_client_vtable!`].
///
/// # Safety
///
/// `vtable` must return a reference to the same static on every call.
pub unsafe trait ClientVTableProvider: Sized + 'static {
    /// The client's static `struct ib_client`.
    fn vtable() -> &'static ClientVTable<Self>
    where
        Self: Client;
}

/// Declares the static `struct ib_client` of a [`Client`] type.
///
/// # Examples
///
/// ```ignore
/// struct MyClient;
/// kernel::ib_client_vtable!(MyClient);
/// impl kernel::rdma::client::Client for MyClient { /* ... */ }
/// ```
#[macro_export]
macro_rules! ib_client_vtable {
    ($client:ty) => {
        // SAFETY: `VTABLE` is a static local to this function, returned on every call.
        unsafe impl $crate::rdma::client::ClientVTableProvider for $client {
            fn vtable() -> &'static $crate::rdma::client::ClientVTable<Self> {
                static VTABLE: $crate::rdma::client::ClientVTable<$client> =
                    $crate::rdma::client::ClientVTable::new();
                &VTABLE
            }
        }
    };
}

/// # Safety
///
/// Called by the RDMA core only, with a registered device, for the client `T::vtable()`.
unsafe extern "C" fn add_callback<T: Client>(raw: *mut bindings::ib_device) -> c_int {
    // SAFETY: The core passes a registered device that stays valid during the call.
    let device = unsafe { Device::from_raw(raw) };
    // SAFETY: The core calls us only while the client is registered.
    let Some(ctx) = (unsafe { T::vtable().context() }) else {
        return EINVAL.to_errno();
    };
    match T::add(ctx, device) {
        Ok(data) => {
            let ptr = data.into_foreign();
            // SAFETY: `raw` is valid, and `T::vtable()` is the client being called (the only
            // `struct ib_client` whose `add` is this function, per `ClientVTableProvider`).
            unsafe { bindings::ib_set_client_data(raw, T::vtable().client.get(), ptr.cast_mut()) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a device whose `add` succeeded, with the data that
/// [`add_callback`] stored.
unsafe extern "C" fn remove_callback<T: Client>(raw: *mut bindings::ib_device, data: *mut c_void) {
    // SAFETY: The core passes a registered device that stays valid during the call.
    let device = unsafe { Device::from_raw(raw) };
    // SAFETY: `data` is null or came from `into_foreign` in `add_callback`, and the core
    // hands it back exactly once, here.
    if let Some(data) = unsafe { T::DeviceData::try_from_foreign(data) } {
        // SAFETY: The core calls us only while the client is registered (removal for
        // unregistration runs before `ib_unregister_client` returns).
        if let Some(ctx) = unsafe { T::vtable().context() } {
            T::remove(ctx, device, data);
        }
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a device whose `add` succeeded, with the data that
/// [`add_callback`] stored, before [`remove_callback`] for it.
unsafe extern "C" fn rename_callback<T: Client>(raw: *mut bindings::ib_device, data: *mut c_void) {
    // SAFETY: The core passes a registered device that stays valid during the call.
    let device = unsafe { Device::from_raw(raw) };
    if data.is_null() {
        return;
    }
    // SAFETY: `data` came from `into_foreign` in `add_callback` and is released only by
    // `remove_callback`, which the core does not run concurrently with this call.
    let data = unsafe { T::DeviceData::borrow(data) };
    // SAFETY: The core calls us only while the client is registered.
    if let Some(ctx) = unsafe { T::vtable().context() } {
        T::rename(ctx, device, data);
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a device whose `add` succeeded, with the data that
/// [`add_callback`] stored, before [`remove_callback`] for it; `gid` and `addr` are null
/// or valid for the call, `addr` as large as its family's address structure.
unsafe extern "C" fn net_device_callback<T: Client>(
    raw: *mut bindings::ib_device,
    port: u32,
    pkey: u16,
    gid: *const bindings::ib_gid,
    addr: *const bindings::sockaddr,
    data: *mut c_void,
) -> *mut bindings::net_device {
    if data.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: The core passes a registered device that stays valid during the call.
    let device = unsafe { Device::from_raw(raw) };
    // SAFETY: `data` came from `into_foreign` in `add_callback`; the core holds its client
    // data lock, so `remove_callback` does not release it during this call.
    let data = unsafe { T::DeviceData::borrow(data) };
    let request = NetDevRequest {
        port,
        pkey,
        gid: (!gid.is_null()).then(|| {
            // SAFETY: Null or valid for the call (the caller's guarantee).
            let gid = unsafe { &*gid };
            // SAFETY: Every bit pattern of the union is a valid byte array.
            Gid(unsafe { gid.raw })
        }),
        // SAFETY: As above, and as large as its family needs.
        addr: (!addr.is_null()).then(|| unsafe { SockAddr::from_raw(addr) }),
    };
    // SAFETY: The core calls us only while the client is registered.
    let Some(ctx) = (unsafe { T::vtable().context() }) else {
        return core::ptr::null_mut();
    };
    match T::net_device(ctx, device, data, &request) {
        // The caller releases the reference with `dev_put`.
        Some(dev) => ARef::into_raw(dev).as_ptr().cast(),
        None => core::ptr::null_mut(),
    }
}

/// A registered [`Client`]: unregisters on drop, after the core has called
/// [`Client::remove`] for every device the client took on.
///
/// # Invariants
///
/// `T::vtable()` is registered with the RDMA core for as long as this object exists.
pub struct Registration<T: Client> {
    _client: PhantomData<T>,
}

// SAFETY: The registration only holds a reference to a static; dropping it may happen on any
// thread in process context.
unsafe impl<T: Client> Send for Registration<T> {}
// SAFETY: A shared reference to the registration gives access to nothing.
unsafe impl<T: Client> Sync for Registration<T> {}

impl<T: Client> Registration<T> {
    /// Registers `T` with `ctx` for its calls; its `add` runs for every present device
    /// before this returns.
    ///
    /// Fails with `EBUSY` if `T` is already registered.
    pub fn new(ctx: Arc<T::Context>) -> Result<Self> {
        let vtable = T::vtable();
        if vtable.registered.swap(true, Ordering::AcqRel) {
            return Err(EBUSY);
        }
        // SAFETY: Not registered with the core, and we own the right to register (the swap
        // above): nobody else reads or writes `context` now.
        unsafe { *vtable.context.get() = Some(ctx) };
        // SAFETY: `vtable.client` is initialised (type invariant of `ClientVTable`), lives in
        // a static, and is not registered (checked through `registered` above).
        let ret = to_result(unsafe { bindings::ib_register_client(vtable.client.get()) });
        if let Err(e) = ret {
            // SAFETY: Registration failed: no callback runs; we still own the vtable.
            drop(unsafe { (*vtable.context.get()).take() });
            vtable.registered.store(false, Ordering::Release);
            return Err(e);
        }
        // INVARIANT: the client was registered just above.
        Ok(Self {
            _client: PhantomData,
        })
    }
}

impl<T: Client> Drop for Registration<T> {
    fn drop(&mut self) {
        let vtable = T::vtable();
        // SAFETY: By the type invariant the client is registered.
        unsafe { bindings::ib_unregister_client(vtable.client.get()) };
        // SAFETY: Unregistered: no callback runs any more, and the vtable is still ours.
        drop(unsafe { (*vtable.context.get()).take() });
        vtable.registered.store(false, Ordering::Release);
    }
}
