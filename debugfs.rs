// SPDX-License-Identifier: GPL-2.0

//! debugfs files of an interface, under `ipoib/` as the C driver's: `<if>_mcg` (multicast
//! groups) and `<if>_path` (destinations), in its format, and `<if>_cm` (every connection of
//! connected mode). Created with the interface under its first name, renamed when it comes
//! up under another (the core renames a device only while it is down); nothing is shown
//! where debugfs is not built in. What the files show comes from the interface through
//! [`DebugView`], so this file does not depend on it.

use core::fmt::{self, Write};
use kernel::{net::dev::NetDevice, prelude::*, sync::Arc};

/// What an interface shows in its debugfs files; `now` is the time idle times end at
/// ([`crate::stats::now_ms`]).
pub(crate) trait DebugView: Send + Sync {
    /// `<if>_mcg`: the multicast groups, each as [`write_group`] writes it.
    fn show_groups(&self, out: &mut dyn Write) -> fmt::Result;
    /// `<if>_path`: the unicast destinations.
    fn show_paths(&self, out: &mut dyn Write, now: i64) -> fmt::Result;
    /// `<if>_cm`: the connections of connected mode, one line each.
    fn show_connections(&self, out: &mut dyn Write, now: i64) -> fmt::Result;
}

/// One multicast group in the C driver's `_mcg` format: complete once joined (RoCE joins
/// complete at once), nothing queued (held packets are the paths'); a send-only group is
/// one sent to without joining it in full.
pub(crate) fn write_group(
    out: &mut dyn Write,
    mgid: &[u8; 16],
    created_ms: i64,
    send_only: bool,
    complete: bool,
) -> fmt::Result {
    write!(
        out,
        "GID: {}\n  created: {:10}\n  queuelen: {:9}\n  complete: {:>9}\n  send_only: {:>8}\n\n",
        GidText(mgid),
        created_ms,
        0,
        if complete { "yes" } else { "no" },
        if send_only { "yes" } else { "no" }
    )
}

/// A GID as the C driver prints it: eight groups of hex digits, without leading zeros.
pub(crate) struct GidText<'a>(pub(crate) &'a [u8; 16]);

impl core::fmt::Display for GidText<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            let group = pair.iter().fold(0u16, |acc, &b| (acc << 8) | u16::from(b));
            if i > 0 {
                core::fmt::Write::write_char(f, ':')?;
            }
            core::write!(f, "{group:x}")?;
        }
        Ok(())
    }
}

#[cfg(CONFIG_DEBUG_FS)]
mod files {
    use super::*;
    use crate::stats::now_ms;
    use kernel::{
        debugfs::{Dir, File, SeqFile, Show},
        new_mutex,
        str::CString,
        sync::Mutex,
    };

    /// The `ipoib` directory at the root of debugfs, while the module is loaded.
    #[derive(Clone)]
    pub(crate) struct DebugRoot(Option<Arc<Dir>>);

    impl DebugRoot {
        /// Creates the directory; without debugfs (not mounted, or refused) there is none.
        pub(crate) fn new() -> Self {
            Self(Dir::new(kernel::c_str!("ipoib"), None).ok())
        }
    }

    struct Groups(Arc<dyn DebugView>);
    struct Paths(Arc<dyn DebugView>);
    struct Connections(Arc<dyn DebugView>);

    impl Show for Groups {
        fn show(&self, out: &mut SeqFile) -> Result {
            self.0.show_groups(out).map_err(|_| EINVAL)
        }
    }

    impl Show for Paths {
        fn show(&self, out: &mut SeqFile) -> Result {
            self.0.show_paths(out, now_ms()).map_err(|_| EINVAL)
        }
    }

    impl Show for Connections {
        fn show(&self, out: &mut SeqFile) -> Result {
            self.0.show_connections(out, now_ms()).map_err(|_| EINVAL)
        }
    }

    /// The file `<name>_<suffix>` in `dir`, showing `view`.
    fn file<T: Show>(dir: &Arc<Dir>, name: &CStr, suffix: &str, view: T) -> Result<File<T>> {
        let file_name = CString::try_from_fmt(kernel::fmt!("{name}_{suffix}"))?;
        File::new(dir, &file_name, Arc::new(view, GFP_KERNEL)?)
    }

    /// The three files of one interface under one name, removed on drop.
    struct Files {
        name: CString,
        _groups: File<Groups>,
        _paths: File<Paths>,
        _connections: File<Connections>,
    }

    impl Files {
        fn new(dir: &Arc<Dir>, name: &CStr, view: &Arc<dyn DebugView>) -> Result<Self> {
            Ok(Self {
                name: CString::try_from_fmt(kernel::fmt!("{name}"))?,
                _groups: file(dir, name, "mcg", Groups(view.clone()))?,
                _paths: file(dir, name, "path", Paths(view.clone()))?,
                _connections: file(dir, name, "cm", Connections(view.clone()))?,
            })
        }
    }

    /// What the owner's [`DebugFiles`] and the interface's [`DebugName`] share: what the
    /// files show and the files (none after a rename that failed), until the owner lets go.
    #[pin_data]
    struct Shared {
        dir: Arc<Dir>,
        #[pin]
        state: Mutex<Option<(Arc<dyn DebugView>, Option<Files>)>>,
    }

    /// The files of one interface, removed on drop (which also lets go of the interface,
    /// so that the interface holding a [`DebugName`] makes no cycle).
    pub(crate) struct DebugFiles(Arc<Shared>);

    /// The interface's side of its files: renames them.
    pub(crate) struct DebugName(Arc<Shared>);

    impl DebugFiles {
        /// Creates `<name>_mcg`, `<name>_path` and `<name>_cm` in `root`; `None` without
        /// debugfs.
        pub(crate) fn new(
            root: &DebugRoot,
            name: &CStr,
            view: Arc<dyn DebugView>,
        ) -> Result<Option<Self>> {
            let Some(dir) = &root.0 else {
                return Ok(None);
            };
            let files = Files::new(dir, name, &view)?;
            let shared = Arc::pin_init(
                pin_init!(Shared {
                    dir: dir.clone(),
                    state <- new_mutex!(Some((view, Some(files))), "DebugFiles::state"),
                }),
                GFP_KERNEL,
            )?;
            Ok(Some(Self(shared)))
        }

        /// The handle through which the interface renames the files.
        pub(crate) fn name(&self) -> DebugName {
            DebugName(self.0.clone())
        }
    }

    impl Drop for DebugFiles {
        fn drop(&mut self) {
            let gone = self.0.state.lock().take();
            drop(gone);
        }
    }

    impl DebugName {
        /// Gives the files the name `name` if the interface has another one now (process
        /// context). The old ones go first, since another device may take the old name;
        /// should the new ones fail (another device still has that name), there are none
        /// until the next rename.
        pub(crate) fn follow(&self, name: &CStr) {
            let mut state = self.0.state.lock();
            let Some((view, files)) = state.as_mut() else {
                return;
            };
            if files
                .as_ref()
                .is_some_and(|f| f.name.as_bytes() == name.as_bytes())
            {
                return;
            }
            drop(files.take());
            match Files::new(&self.0.dir, name, view) {
                Ok(new) => *files = Some(new),
                Err(e) => pr_info!("{}: no debugfs files under this name ({:?})\n", name, e),
            }
        }
    }
}

#[cfg(not(CONFIG_DEBUG_FS))]
mod files {
    use super::*;

    /// Without debugfs there is no directory.
    #[derive(Clone)]
    pub(crate) struct DebugRoot;

    impl DebugRoot {
        pub(crate) fn new() -> Self {
            Self
        }
    }

    /// Without debugfs there are no files.
    pub(crate) struct DebugFiles;

    /// Nor names to follow.
    pub(crate) struct DebugName;

    impl DebugFiles {
        pub(crate) fn new(
            _root: &DebugRoot,
            _name: &CStr,
            _view: Arc<dyn DebugView>,
        ) -> Result<Option<Self>> {
            Ok(None)
        }

        pub(crate) fn name(&self) -> DebugName {
            DebugName
        }
    }

    impl DebugName {
        pub(crate) fn follow(&self, _name: &CStr) {}
    }
}

pub(crate) use files::*;

/// The files of the interface of `dev`, showing `view`: debugging aids only, so without
/// them (one line says why) the interface works all the same.
pub(crate) fn debug_files_of(
    root: &DebugRoot,
    dev: &NetDevice,
    view: Arc<dyn DebugView>,
) -> Option<DebugFiles> {
    DebugFiles::new(root, dev.name().as_c_str(), view).unwrap_or_else(|e| {
        pr_info!("{}: no debugfs files ({:?})\n", dev.name(), e);
        None
    })
}
