// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events of an RDMA device: ports going up or down, address changes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::device::{Device, DeviceRef};
use crate::{bindings, prelude::*, sync::Arc, types::Opaque};

/// An asynchronous event of a device or one of its ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// The port became active.
    PortActive(u32),
    /// The port went down.
    PortError(u32),
    /// The port's LID changed (InfiniBand).
    LidChange(u32),
    /// The port's P_Key table changed.
    PkeyChange(u32),
    /// The subnet manager changed (InfiniBand).
    SmChange(u32),
    /// The subnet manager asks clients to register again (InfiniBand).
    ClientReregister(u32),
    /// The port's GID table changed (on RoCE: an IP address came or went).
    GidChange(u32),
    /// The device failed.
    DeviceFatal,
    /// An event for a CQ, QP, SRQ or WQ, with its raw code.
    Other(u32),
}

impl AsyncEvent {
    fn from_raw(ev: &bindings::ib_event) -> Self {
        // SAFETY: For port events the core sets the `port_num` member of the union; it is only
        // read for those.
        let port = || unsafe { ev.element.port_num };
        match ev.event {
            bindings::ib_event_type_IB_EVENT_PORT_ACTIVE => Self::PortActive(port()),
            bindings::ib_event_type_IB_EVENT_PORT_ERR => Self::PortError(port()),
            bindings::ib_event_type_IB_EVENT_LID_CHANGE => Self::LidChange(port()),
            bindings::ib_event_type_IB_EVENT_PKEY_CHANGE => Self::PkeyChange(port()),
            bindings::ib_event_type_IB_EVENT_SM_CHANGE => Self::SmChange(port()),
            bindings::ib_event_type_IB_EVENT_CLIENT_REREGISTER => Self::ClientReregister(port()),
            bindings::ib_event_type_IB_EVENT_GID_CHANGE => Self::GidChange(port()),
            bindings::ib_event_type_IB_EVENT_DEVICE_FATAL => Self::DeviceFatal,
            other => Self::Other(other),
        }
    }
}

/// Receives the asynchronous events of a device. Runs in process context (the core's work
/// queue), one event at a time.
pub trait EventHandler: Send + Sync + 'static {
    /// `event` happened on `device`.
    fn event(&self, device: &Device, event: AsyncEvent);
}

/// A registered event handler; unregistered on drop, after which it is not called again.
///
/// # Invariants
///
/// `handler` is registered with the core for `device`, with `event_callback::<T>`, while
/// this object exists.
#[pin_data(PinnedDrop)]
#[repr(C)]
pub struct EventRegistration<T: EventHandler> {
    #[pin]
    handler: Opaque<bindings::ib_event_handler>,
    data: Arc<T>,
    device: DeviceRef,
}

// SAFETY: The registration may be dropped from any thread in process context.
unsafe impl<T: EventHandler> Send for EventRegistration<T> {}
// SAFETY: Shared references give access to nothing but the `Sync` handler.
unsafe impl<T: EventHandler> Sync for EventRegistration<T> {}

/// # Safety
///
/// Called by the core only, with the `ib_event_handler` of a live `EventRegistration<T>`.
unsafe extern "C" fn event_callback<T: EventHandler>(
    handler: *mut bindings::ib_event_handler,
    event: *mut bindings::ib_event,
) {
    // SAFETY: `handler` is the first field of a `repr(C)` `EventRegistration<T>` that stays
    // alive until unregistered, which waits for running callbacks.
    let reg = unsafe { &*handler.cast::<EventRegistration<T>>() };
    // SAFETY: `event` is valid for the call and names a registered device.
    let event = unsafe { &*event };
    reg.data.event(&reg.device, AsyncEvent::from_raw(event));
}

impl<T: EventHandler> EventRegistration<T> {
    /// Registers `data` for the events of `device`.
    pub fn new(device: &Device, data: Arc<T>) -> impl PinInit<Self, Error> {
        let device = device.get_ref();
        try_pin_init!(Self {
            handler <- Opaque::ffi_init(|_| {}),
            data,
            device: device?,
        })
        .pin_chain(|this| {
            let raw = this.handler.get();
            // SAFETY: `raw` is pinned inside `this`, which is fully initialised; the handler
            // struct is set up as `INIT_IB_EVENT_HANDLER` does.
            unsafe {
                bindings::ib_init_event_handler(
                    raw,
                    this.device.as_raw(),
                    Some(event_callback::<T>),
                )
            };
            // SAFETY: `raw` is set up just above, pinned, and not registered yet.
            // INVARIANT: registered here, unregistered in `drop`.
            unsafe { bindings::ib_register_event_handler(raw) };
            Ok(())
        })
    }
}

impl<T: EventHandler> EventRegistration<T> {
    /// The registered handler.
    #[inline]
    pub fn handler(&self) -> &Arc<T> {
        &self.data
    }
}

#[pinned_drop]
impl<T: EventHandler> PinnedDrop for EventRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant the handler is registered; unregistering waits for
        // running callbacks.
        unsafe { bindings::ib_unregister_event_handler(self.handler.get()) };
    }
}
