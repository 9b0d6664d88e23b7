// SPDX-License-Identifier: GPL-2.0

//! debugfs: directories, and read-only files whose text a Rust object writes at each read.
//!
//! C headers: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h),
//! [`include/linux/seq_file.h`](srctree/include/linux/seq_file.h).
//!
//! Every file shares one set of file operations, kept in the kernel image rather than in the
//! module that creates the file: debugfs may still call a file's `release` after the file
//! was removed, and even after that module is gone. Calls into the module's [`Show`] happen
//! only through debugfs's removal protection, which removing a file waits for.

use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{from_err_ptr, Result},
    ffi::{c_int, c_void},
    str::CStr,
    sync::Arc,
    types::Opaque,
};
use core::{fmt, ptr::NonNull};

/// A debugfs directory; removed, with anything left in it, when the last reference goes.
/// A directory keeps its parent, so that removing the parent cannot free its dentry first.
///
/// ```
/// use kernel::{c_str, debugfs::Dir};
///
/// let parent = Dir::new(c_str!("rust_doctest_debugfs"), None)?;
/// let child = Dir::new(c_str!("child"), Some(&parent))?;
/// // The parent's last reference is the child's now: both go with the child, child first.
/// drop(parent);
/// drop(child);
/// # Ok::<(), Error>(())
/// ```
///
/// # Invariants
///
/// `dentry` is a dentry made by `debugfs_create_dir` in `_parent` (at the root if `None`)
/// and removed only in `drop`.
pub struct Dir {
    dentry: NonNull<bindings::dentry>,
    _parent: Option<Arc<Dir>>,
}

// SAFETY: debugfs dentries may be used and removed from any thread.
unsafe impl Send for Dir {}
// SAFETY: `Dir` offers no method that changes it.
unsafe impl Sync for Dir {}

impl Dir {
    /// Creates the directory `name` at the root of debugfs, or in `parent`. Fails with
    /// `ENODEV` when debugfs is not available.
    pub fn new(name: &CStr, parent: Option<&Arc<Dir>>) -> Result<Arc<Self>> {
        let raw_parent = parent.map_or(core::ptr::null_mut(), |p| p.dentry.as_ptr());
        // SAFETY: `name` is NUL-terminated; `raw_parent` is null or a live directory of
        // ours.
        let dentry =
            from_err_ptr(unsafe { bindings::debugfs_create_dir(name.as_char_ptr(), raw_parent) })?;
        let dentry = NonNull::new(dentry).ok_or(crate::error::code::ENOMEM)?;
        // INVARIANT: made just above in `parent`, which is kept.
        Ok(Arc::new(
            Self {
                dentry,
                _parent: parent.cloned(),
            },
            GFP_KERNEL,
        )?)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the dentry is ours and removed only here, before
        // the parent it holds.
        unsafe { bindings::debugfs_remove(self.dentry.as_ptr()) };
    }
}

/// The text of a file being read (`struct seq_file`); written to with [`core::fmt::Write`].
///
/// # Invariants
///
/// A `&mut SeqFile` refers to the seq_file of a file being shown, ours alone for the
/// lifetime of the reference (only `show_callback` makes one).
#[repr(transparent)]
pub struct SeqFile(Opaque<bindings::seq_file>);

impl fmt::Write for SeqFile {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // SAFETY: The seq_file is valid and ours while shown (type invariant); `s` is valid
        // for reads of its length. An overflow is recorded in the seq_file,
        // which then shows the file again with a larger buffer.
        unsafe { bindings::seq_write(self.0.get(), s.as_ptr().cast(), s.len()) };
        Ok(())
    }
}

/// What a debugfs file shows.
pub trait Show: Send + Sync + 'static {
    /// Writes the file's whole text to `out` (process context; called again from the start
    /// if the text did not fit).
    fn show(&self, out: &mut SeqFile) -> Result;
}

/// What the shared file operations find in a file's inode: the object shown, and how.
///
/// # Invariants
///
/// `data` points to a `T` that `show` was instantiated for (`show_erased::<T>`), alive as
/// long as the entry is reachable from a file.
struct Entry {
    show: unsafe fn(*const c_void, &mut SeqFile) -> Result,
    data: *const c_void,
}

/// # Safety
///
/// `data` must point to a live `T`.
unsafe fn show_erased<T: Show>(data: *const c_void, out: &mut SeqFile) -> Result {
    // SAFETY: The caller guarantees that `data` is a live `T`.
    unsafe { &*data.cast::<T>() }.show(out)
}

/// A read-only debugfs file showing a `T`; removed on drop, after which `T` is no longer
/// called.
///
/// # Invariants
///
/// `dentry` was made by `debugfs_create_file` with `_entry` as its private data, which
/// points to `data`; it is removed in `drop`, before `_entry` and `data` are freed.
pub struct File<T: Show> {
    dentry: NonNull<bindings::dentry>,
    /// What the file's inode points to; only read through it.
    _entry: KBox<Entry>,
    data: Arc<T>,
    _dir: Arc<Dir>,
}

// SAFETY: The dentry and entry are only used to remove the file, from any thread; readers
// of the file reach `data` (a `T: Send + Sync`) through the entry from their own threads.
unsafe impl<T: Show> Send for File<T> {}
// SAFETY: No method changes the object; `T` is `Sync`.
unsafe impl<T: Show> Sync for File<T> {}

impl<T: Show> File<T> {
    /// Creates the file `name` (mode 0400) in `dir`, showing `data`.
    pub fn new(dir: &Arc<Dir>, name: &CStr, data: Arc<T>) -> Result<Self> {
        // INVARIANT: `data` is the `T` of `show_erased::<T>`, kept by the `File` as long as
        // the entry.
        let entry = KBox::new(
            Entry {
                show: show_erased::<T>,
                data: (&*data as *const T).cast(),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `name` is NUL-terminated; `dir` is a live directory; `entry` and the
        // object it points to live until the file is removed (type invariant); `FOPS` is
        // static.
        let dentry = from_err_ptr(unsafe {
            bindings::debugfs_create_file(
                name.as_char_ptr(),
                0o400,
                dir.dentry.as_ptr(),
                (&*entry as *const Entry).cast_mut().cast(),
                &FOPS.0,
            )
        })?;
        let dentry = NonNull::new(dentry).ok_or(crate::error::code::ENOMEM)?;
        // INVARIANT: made just above with `entry`, which points to `data`.
        Ok(Self {
            dentry,
            _entry: entry,
            data,
            _dir: dir.clone(),
        })
    }

    /// The object shown.
    #[inline]
    pub fn data(&self) -> &Arc<T> {
        &self.data
    }
}

impl<T: Show> Drop for File<T> {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the dentry is ours and removed only here. debugfs
        // waits for the calls in progress and refuses new ones, so `_entry` and `data` are
        // unused once this returns.
        unsafe { bindings::debugfs_remove(self.dentry.as_ptr()) };
    }
}

/// The file operations of every [`File`]: `single_open` over the entry in the inode.
///
/// # Invariants
///
/// The operations are never changed; their `owner` is null (they live in the kernel
/// image, never unloaded).
struct FileOperations(bindings::file_operations);

// SAFETY: The operations are never changed and only read by the VFS.
unsafe impl Sync for FileOperations {}

static FOPS: FileOperations = FileOperations(bindings::file_operations {
    open: Some(open_callback),
    read: Some(bindings::seq_read),
    llseek: Some(bindings::seq_lseek),
    release: Some(bindings::single_release),
    // SAFETY: The other members are optional callbacks, flags and a null owner (the
    // operations are in the kernel image, which is never unloaded).
    ..unsafe { core::mem::MaybeUninit::zeroed().assume_init() }
});

/// # Safety
///
/// Called by the VFS (through debugfs's removal protection) for a file made by
/// [`File::new`], whose inode's private data is its entry.
unsafe extern "C" fn open_callback(
    inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> c_int {
    // SAFETY: The inode is valid during the call; its private data is the file's entry.
    let entry = unsafe { (*inode).i_private };
    // SAFETY: `file` is being opened; `show_callback` matches what `single_open` calls.
    unsafe { bindings::single_open(file, Some(show_callback), entry) }
}

/// # Safety
///
/// Called by `seq_read` for a file opened by `open_callback`, through debugfs's removal
/// protection: the entry and its object are alive.
unsafe extern "C" fn show_callback(m: *mut bindings::seq_file, _v: *mut c_void) -> c_int {
    // SAFETY: `seq_read` passes its valid seq_file.
    let entry = unsafe { (*m).private }.cast::<Entry>();
    // SAFETY: `single_open` stored the entry as the seq_file's private data; the file was not
    // removed, so the entry is alive.
    let entry = unsafe { &*entry };
    // SAFETY: `SeqFile` is `repr(transparent)` over the valid `seq_file` we are handed, ours
    // for the call.
    // INVARIANT: The seq_file of a file being shown, ours for the call.
    let out = unsafe { &mut *m.cast::<SeqFile>() };
    // SAFETY: `data` is the `T` `show` was made for, alive as long as the entry (type
    // invariant of `Entry`).
    match unsafe { (entry.show)(entry.data, out) } {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}
