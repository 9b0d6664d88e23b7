// SPDX-License-Identifier: GPL-2.0

//! The receive queue of a queue pair that has its own (not a shared receive queue).
//!
//! Receives are posted and completed by one context at a time, a NAPI round typically: the
//! buffers posted sit in a plain ring behind one lock, which [`RecvQueueGuard`] holds. A
//! round takes it once for a whole batch of completions and the buffers that replace them,
//! where a lock per post and an atomic operation per slot would cost more than the rest of
//! the receive.
//!
//! A request's `wr_id` is `serial << 32 | index`: the buffer's slot, and the queue's serial
//! at the time, renewed by a reset, so that a completion of a request the reset discarded
//! matches none posted afterwards.

use super::{sealed::Sealed, QueuePair, RecvBuffer};
use crate::{
    alloc::{flags::GFP_KERNEL, KVec},
    bindings,
    error::{
        code::{EINVAL, ENOSPC, EOPNOTSUPP},
        to_result, Result,
    },
    ffi::c_int,
    rdma::{cq::WorkCompletion, slots::next_serial},
    sync::lock::{spinlock_bh::SpinLockBhBackend, Guard},
};

/// The buffers posted to a queue pair's own receive queue, by slot.
///
/// # Invariants
///
/// - A slot holds `Some` exactly while the device may write the buffer: from just before
///   the request naming the slot with `serial` is posted until its completion is taken, or,
///   for requests a reset discarded, until the reset takes the buffers back.
/// - While `resets` is not 0, nothing is posted.
pub(crate) struct RecvState<P> {
    serial: u32,
    /// Where the next post looks for a free slot first: requests complete in the order
    /// posted, so it is free unless the queue is full.
    next: usize,
    resets: u32,
    slots: KVec<Option<P>>,
}

impl<P> RecvState<P> {
    /// A queue of `n` free slots.
    pub(crate) fn new(n: u32) -> Result<Self> {
        let n = n.min(u32::MAX - 1) as usize;
        let mut slots = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            slots.push(None, GFP_KERNEL)?;
        }
        // INVARIANT: every slot is free.
        Ok(Self {
            serial: next_serial(),
            next: 0,
            resets: 0,
            slots,
        })
    }

    /// Buffers posted and not taken back (counted: asked for seldom, outside the datapath).
    #[inline]
    pub(crate) fn posted(&self) -> usize {
        self.slots.iter().filter(|slot| slot.is_some()).count()
    }

    /// A free slot, `next` unless the queue is full or completed out of order; `None` when
    /// the queue is full.
    #[inline]
    fn free_slot(&mut self) -> Option<usize> {
        let n = self.slots.len();
        let mut index = self.next;
        if let Some(None) = self.slots.get(index) {
            self.next = if index + 1 < n { index + 1 } else { 0 };
            return Some(index);
        }
        for _ in 0..n {
            if self.slots.get(index).is_some_and(Option::is_none) {
                self.next = if index + 1 < n { index + 1 } else { 0 };
                return Some(index);
            }
            index = if index + 1 < n { index + 1 } else { 0 };
        }
        None
    }

    /// A reset begins (`true`) or ends: posts are refused while one is under way.
    pub(crate) fn count_reset(&mut self, begins: bool) {
        self.resets = if begins {
            self.resets.saturating_add(1)
        } else {
            self.resets.saturating_sub(1)
        };
    }

    /// Renews the serial: completions of the requests posted so far name no slot any more.
    #[inline]
    pub(crate) fn renew(&mut self) {
        self.serial = next_serial();
    }

    /// Takes one posted buffer out, whatever its request, for a device that no longer
    /// writes to any (a reset, a failed destroy).
    #[inline]
    pub(crate) fn take_any(&mut self) -> Option<P> {
        self.slots.iter_mut().find_map(Option::take)
    }
}

/// A queue pair's own receive queue, locked ([`QueuePair::lock_recvs`]): receives are
/// posted and their completions taken back through it, with no lock or atomic operation of
/// their own. Held by one context at a time; not to be held across a call into the stack,
/// whose paths could come back to the queue pair.
pub struct RecvQueueGuard<'a, B: RecvBuffer> {
    qp: &'a QueuePair<B>,
    state: Guard<'a, RecvState<<B as Sealed>::Posted>, SpinLockBhBackend>,
}

impl<'a, B: RecvBuffer> RecvQueueGuard<'a, B> {
    pub(super) fn new(
        qp: &'a QueuePair<B>,
        state: Guard<'a, RecvState<<B as Sealed>::Posted>, SpinLockBhBackend>,
    ) -> Self {
        Self { qp, state }
    }

    /// Posts `buf` to receive one message (on UD: 40 bytes of GRH space, then the
    /// datagram). `EINVAL` unless the device may write all of the buffer, or during a
    /// reset; `ENOSPC` when the queue is full. On failure the buffer is freed.
    #[inline]
    pub fn post(&mut self, buf: B) -> Result {
        self.post_in(None, buf)
    }

    /// Takes back the buffer of the receive that `wc` completes, synchronised for the CPU,
    /// and uses `wc` up; `None` if `wc` is not a receive completion of this queue, or was
    /// used up already.
    #[inline]
    pub fn complete(&mut self, wc: &mut WorkCompletion) -> Option<B> {
        let (_, buf) = self.take_completed(wc)?;
        Some(buf)
    }

    /// Takes back the buffer of the receive that `wc` completes, as [`Self::complete`], and
    /// hands it to `f` with `wc`, which returns the buffer to post in its place, if any (the
    /// same one or a fresh one), and what to return with the post's result. The buffer goes
    /// in the slot just emptied, as a ring refilled in place. `None` if `wc` names no buffer
    /// of ours. On failure the buffer is freed, as by [`Self::post`].
    // Always inline: a NAPI round does this for each datagram it takes.
    #[inline(always)]
    pub fn complete_with<R>(
        &mut self,
        wc: &mut WorkCompletion,
        f: impl FnOnce(B, &WorkCompletion) -> (Option<B>, R),
    ) -> Option<(R, Result)> {
        let (index, buf) = self.take_completed(wc)?;
        let (next, made) = f(buf, wc);
        let posted = match next {
            Some(next) => self.post_in(Some(index), next),
            None => Ok(()),
        };
        Some((made, posted))
    }

    /// The slot and buffer of the receive that `wc` completes, taken out; uses `wc` up.
    #[inline(always)]
    fn take_completed(&mut self, wc: &mut WorkCompletion) -> Option<(usize, B)> {
        if wc.qp() != self.qp.qp.as_ptr() {
            return None;
        }
        let wr_id = wc.wr_id();
        if (wr_id >> 32) as u32 != self.state.serial {
            return None;
        }
        let index = (wr_id & 0xffff_ffff) as usize;
        let posted = self.state.slots.get_mut(index)?.take()?;
        wc.consume();
        Some((index, B::take_back(posted, Some(wc.byte_len()))))
    }

    /// Posts `buf` to receive into slot `index`, free, or into the first free slot. As
    /// [`Self::post`] otherwise: a buffer the device may not write is refused before the
    /// queue is found full.
    // Always inline: a NAPI round posts one for each datagram it takes, and the call's own
    // cost (saving registers, moving the buffer through the stack) was a fifth of the post.
    #[inline(always)]
    fn post_in(&mut self, index: Option<usize>, buf: B) -> Result {
        let qp = self.qp.qp.as_ptr();
        // SAFETY: `qp` is valid, and so its device, whose operations are set while it is
        // registered.
        let Some(post_recv) = (unsafe { (*(*qp).device).ops.post_recv }) else {
            return Err(EOPNOTSUPP);
        };
        if self.state.resets != 0 {
            return Err(EINVAL);
        }
        let lkey = self.qp.pd.local_dma_lkey();
        // SAFETY: The domain, which holds the device, is dropped after the queue's buffers
        // (field order of `QueuePair`).
        let mut posted = unsafe { B::hand_over(buf, self.qp.pd.device()) }?;
        let mut scratch = <B as Sealed>::Sges::default();
        let (sg_list, n) =
            B::sges(&mut posted, lkey, &mut scratch).map(|list| (list.as_mut_ptr(), list.len()))?;
        let index = match index {
            Some(index) => index,
            None => self.state.free_slot().ok_or(ENOSPC)?,
        };
        let num_sge = c_int::try_from(n).map_err(|_| EINVAL)?;
        let wr_id = (u64::from(self.state.serial) << 32) | index as u64;
        let wr = bindings::ib_recv_wr {
            next: core::ptr::null_mut(),
            __bindgen_anon_1: bindings::ib_recv_wr__bindgen_ty_1 { wr_id },
            // On the stack, or kept by the buffer where they stay as it moves into its slot.
            sg_list,
            num_sge,
        };
        let Some(slot @ None) = self.state.slots.get_mut(index) else {
            return Err(ENOSPC);
        };
        // INVARIANT: the buffer is in its slot before the device may write it.
        *slot = Some(posted);
        let mut bad = core::ptr::null();
        // SAFETY: `qp` is valid; `wr` is valid for the call and describes a buffer the queue
        // keeps until the request completes. Called as `ib_post_recv` (inline in C) calls it.
        let ret = unsafe { post_recv(qp, &wr, &mut bad) };
        if ret != 0 {
            // Not posted: no completion will name the slot.
            if let Some(posted) = slot.take() {
                drop(B::take_back(posted, None));
            }
            return to_result(ret);
        }
        Ok(())
    }

    /// Buffers posted and not completed.
    #[inline]
    pub fn posted(&self) -> usize {
        self.state.posted()
    }
}
