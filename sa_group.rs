// SPDX-License-Identifier: GPL-2.0

//! One multicast group joined through the subnet administrator (InfiniBand): the membership
//! asked for, the group's record once granted, the queue pair's attachment to its
//! multicast LID, and the retries after a failure (C: `struct ipoib_mcast` with its
//! backoff). The multicast work item drives it; the SA's answers wait in its [`Answer`].

use crate::{
    fabric::{Answer, Answered, SaMembership, SaOwner, SaPort},
    wire::Gid,
};
use kernel::{
    prelude::*,
    rdma::{
        device,
        qp::{QueuePair, RecvBuffer},
        sa::McMemberRecord,
    },
    sync::Arc,
};

/// The first wait after a failed join, as in the C driver (an SA too busy to answer in
/// time is given as long); it doubles with each failure in a row.
const BACKOFF_FIRST_MS: i64 = 2000;
/// The longest wait between joins, as in the C driver.
const BACKOFF_MAX_MS: i64 = 16_000;

/// What an answer of the SA changed.
pub(crate) enum Progress {
    /// No answer came since the last look.
    Unchanged,
    /// The group was joined (or joined again) with this record.
    Joined(McMemberRecord),
    /// The join failed or the group was lost; it is asked for again later.
    Failed(Error),
}

/// A group asked of the SA.
pub(crate) struct SaGroup {
    mgid: Gid,
    /// Sends only: the queue pair is not attached.
    send_only: bool,
    answer: Arc<Answer<McMemberRecord>>,
    /// The membership asked for; `None` after a failure, until the next attempt.
    membership: Option<SaMembership>,
    /// The group's record, once granted.
    record: Option<McMemberRecord>,
    /// The multicast LID the queue pair is attached with.
    attached: Option<u16>,
    /// Failed attempts in a row, and when the next may start (ms, monotonic).
    failures: u32,
    retry_at: i64,
    /// When it was made (ms, monotonic), for debugfs.
    created_ms: i64,
}

impl SaGroup {
    /// A group `mgid` not yet asked for, whose answers `owner` hears of.
    pub(crate) fn new(mgid: Gid, send_only: bool, owner: &Arc<dyn SaOwner>) -> Result<Self> {
        Ok(Self {
            mgid,
            send_only,
            answer: Answer::new(Some((owner.clone(), Answered::Join)))?,
            membership: None,
            record: None,
            attached: None,
            failures: 0,
            retry_at: 0,
            created_ms: crate::stats::now_ms(),
        })
    }

    /// When it was made (ms, monotonic).
    pub(crate) fn created_ms(&self) -> i64 {
        self.created_ms
    }

    /// The group.
    pub(crate) fn mgid(&self) -> &Gid {
        &self.mgid
    }

    /// The group's record, once joined.
    pub(crate) fn record(&self) -> Option<&McMemberRecord> {
        self.record.as_ref()
    }

    /// Asks `sa` to join as the record `rec` makes for the group says, unless asked already
    /// or a retry is not due at `now` (the record is made only then: the work item looks
    /// at every group on each run); a join that cannot start counts as failed.
    pub(crate) fn ask(
        &mut self,
        sa: &SaPort,
        rec: impl FnOnce(&Gid) -> McMemberRecord,
        now: i64,
    ) -> Result {
        if self.membership.is_some() || now < self.retry_at {
            return Ok(());
        }
        match sa.join(&rec(&self.mgid), self.answer.clone()) {
            Ok(m) => {
                self.membership = Some(m);
                Ok(())
            }
            Err(e) => {
                self.failed(now);
                Err(e)
            }
        }
    }

    /// Takes the SA's latest answer in (process context): on success `qp` is attached
    /// with the group's LID (unless sending only).
    pub(crate) fn take_answer(&mut self, qp: &QueuePair<impl RecvBuffer>, now: i64) -> Progress {
        match self.answer.take() {
            None => Progress::Unchanged,
            Some(Ok(rec)) => match self.attach(qp, rec.mlid()) {
                Ok(()) => {
                    self.record = Some(rec);
                    self.failures = 0;
                    Progress::Joined(rec)
                }
                Err(e) => {
                    self.leave(qp);
                    self.failed(now);
                    Progress::Failed(e)
                }
            },
            Some(Err(e)) => {
                self.leave(qp);
                self.failed(now);
                Progress::Failed(e)
            }
        }
    }

    fn attach(&mut self, qp: &QueuePair<impl RecvBuffer>, mlid: u16) -> Result {
        if self.send_only || self.attached == Some(mlid) {
            return Ok(());
        }
        self.detach(qp);
        qp.attach_mcast(&device::Gid(self.mgid.0), mlid)?;
        self.attached = Some(mlid);
        Ok(())
    }

    fn detach(&mut self, qp: &QueuePair<impl RecvBuffer>) {
        if let Some(mlid) = self.attached.take() {
            let _ = qp.detach_mcast(&device::Gid(self.mgid.0), mlid);
        }
    }

    fn failed(&mut self, now: i64) {
        self.failures = self.failures.saturating_add(1);
        let backoff = BACKOFF_FIRST_MS << self.failures.min(5).saturating_sub(1);
        self.retry_at = now + backoff.min(BACKOFF_MAX_MS);
    }

    /// How many attempts in a row have failed.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// When the next attempt is due, if it waits for one.
    pub(crate) fn retry_at(&self) -> Option<i64> {
        self.membership.is_none().then_some(self.retry_at)
    }

    /// Leaves the group: `qp` is detached and the membership given back (process context,
    /// not from an SA callback).
    pub(crate) fn leave(&mut self, qp: &QueuePair<impl RecvBuffer>) {
        self.detach(qp);
        self.record = None;
        // Dropping it leaves the group, once no callback runs.
        self.membership = None;
    }
}
