// SPDX-License-Identifier: GPL-2.0

//! The subnet administrator (SA) as an interface's parts use it on an InfiniBand port: the
//! port's registered SA client with the partition and GID it asks from ([`SaPort`]), and
//! the way answers reach the interface ([`Answer`], [`SaOwner`]).
//!
//! The SA answers on its own work queue. Its callbacks only keep the answer and have the
//! owner's work item run: the query or join an answer belongs to may not be dropped from
//! its callback, and acting on it (address handles, attaching the queue pair, the carrier)
//! takes locks the work items hold. A RoCE port has no SA: its parts have no [`SaPort`].

use crate::wire::Gid;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::{
    new_condvar, new_spinlock,
    prelude::*,
    rdma::{
        cm::PathRecord,
        device::{self, Device, DeviceRef},
        sa::{McHandler, McJoin, McMemberRecord, PathHandler, PathQuery, SaClient},
    },
    sync::{Arc, CondVar, SpinLock},
};

/// How long a path query may take before it counts as failed, as in the C driver.
const PATH_QUERY_TIMEOUT_MS: u32 = 1000;

/// What an answer is to: the work item that takes it in differs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// A path record query (the resolve work item).
    Path,
    /// A multicast join (the multicast work item).
    Join,
}

/// The interface, as the SA's answers reach it.
pub(crate) trait SaOwner: Send + Sync {
    /// An answer of kind `what` arrived: have the work item run that takes it in.
    fn answered(self: Arc<Self>, what: Answered);
}

/// The latest answer to one path query or multicast join, kept until taken.
#[pin_data]
pub(crate) struct Answer<R: Copy + Send + 'static> {
    #[pin]
    latest: SpinLock<Option<Result<R>>>,
    /// Whether `latest` holds an answer: the work items look at every query and group on
    /// each run, thousands at scale, and most have none; this spares them the lock.
    ready: AtomicBool,
    /// Told of each answer; `None`: a caller waits on `arrived` instead.
    owner: Option<(Arc<dyn SaOwner>, Answered)>,
    #[pin]
    arrived: CondVar,
}

impl<R: Copy + Send + 'static> Answer<R> {
    /// An empty answer whose arrival `owner` hears of, if given.
    pub(crate) fn new(owner: Option<(Arc<dyn SaOwner>, Answered)>) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                latest <- new_spinlock!(None, "Answer::latest"),
                ready: AtomicBool::new(false),
                owner,
                arrived <- new_condvar!("Answer::arrived"),
            }),
            GFP_KERNEL,
        )
    }

    /// Whether an answer came that was not taken yet.
    pub(crate) fn latest_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Takes the latest answer, if one came since the last call. One that comes as this
    /// returns `None` is taken by the next call: its owner hears of it after it is stored.
    pub(crate) fn take(&self) -> Option<Result<R>> {
        if !self.latest_ready() {
            return None;
        }
        let mut latest = self.latest.lock();
        self.ready.store(false, Ordering::Relaxed);
        latest.take()
    }

    /// Waits until an answer comes, and takes it. The SA answers every query, at the
    /// latest with `ETIMEDOUT` when its timeout passed.
    fn wait(&self) -> Result<R> {
        let mut latest = self.latest.lock();
        loop {
            if let Some(answer) = latest.take() {
                self.ready.store(false, Ordering::Relaxed);
                return answer;
            }
            self.arrived.wait(&mut latest);
        }
    }

    fn put(&self, answer: Result<R>) {
        {
            let mut latest = self.latest.lock();
            *latest = Some(answer);
            self.ready.store(true, Ordering::Release);
        }
        self.arrived.notify_all();
        if let Some((owner, what)) = &self.owner {
            owner.clone().answered(*what);
        }
    }
}

impl PathHandler for Answer<PathRecord> {
    fn path(&self, result: Result<&PathRecord>) {
        self.put(result.copied());
    }
}

impl McHandler for Answer<McMemberRecord> {
    fn joined(&self, result: Result<&McMemberRecord>) {
        self.put(result.copied());
    }
}

/// A path query under way.
pub(crate) type PathLookup = PathQuery<Answer<PathRecord>>;
/// A multicast membership asked of the SA.
pub(crate) type SaMembership = McJoin<Answer<McMemberRecord>>;

/// An InfiniBand port as its interfaces ask its SA: the module's SA client and the port.
pub(crate) struct SaPort {
    client: Arc<SaClient>,
    pub(crate) device: DeviceRef,
    pub(crate) port: u32,
}

impl SaPort {
    /// The SA of `port` of `device`, asked through `client`.
    pub(crate) fn new(client: &Arc<SaClient>, device: &Device, port: u32) -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                client: client.clone(),
                device: device.get_ref()?,
                port,
            },
            GFP_KERNEL,
        )?)
    }

    /// Asks for the path from `sgid` to `dgid` in partition `pkey`; `answer` gets it.
    pub(crate) fn query_path(
        &self,
        sgid: &Gid,
        dgid: &Gid,
        pkey: u16,
        answer: Arc<Answer<PathRecord>>,
    ) -> Result<PathLookup> {
        let rec = PathRecord::ib_query(&device::Gid(sgid.0), &device::Gid(dgid.0), pkey);
        PathQuery::start(
            &self.client,
            &self.device,
            self.port,
            &rec,
            PATH_QUERY_TIMEOUT_MS,
            answer,
        )
    }

    /// The path from `sgid` to `dgid` in partition `pkey`, waited for (process context).
    pub(crate) fn path(&self, sgid: &Gid, dgid: &Gid, pkey: u16) -> Result<PathRecord> {
        let answer = Answer::new(None)?;
        let _query = self.query_path(sgid, dgid, pkey, answer.clone())?;
        answer.wait()
    }

    /// Asks to join as `rec` says; `answer` gets the group's record, and news of its loss.
    pub(crate) fn join(
        &self,
        rec: &McMemberRecord,
        answer: Arc<Answer<McMemberRecord>>,
    ) -> Result<SaMembership> {
        McJoin::start(&self.client, &self.device, self.port, rec, answer)
    }
}
