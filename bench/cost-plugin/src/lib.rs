// SPDX-License-Identifier: GPL-2.0

//! ipoib-cost: a QEMU TCG plugin that counts the guest instructions executed between two
//! marks the guest makes, per code address and per vCPU.
//!
//! Wall-clock figures under TCG move by tens of percent with the host's load; the number of
//! instructions a fixed amount of guest work executes does not. `scripts/bench.sh --cost`
//! loads this plugin into both guests of the InfiniBand fabric and turns its counts into
//! instructions per packet in the IPoIB driver, in rxe, in the rest of the kernel and in all.
//!
//! # Marks
//!
//! The guest marks a window by executing a no-op the plugin recognises when it translates
//! it: `nopl disp32(%rax,%rax,1)` (`0f 1f 84 00` and a 32-bit displacement) whose
//! displacement is `0x1b0c_0000 | op << 12 | window`, `op` 1 to start window `window`
//! (0 to 4095) and 2 to stop it (`cost_mark` in the selftests). A no-op needs no privilege,
//! no device and no guest driver, changes nothing in the guest and costs it one instruction;
//! the plugin sees it on whichever vCPU runs it, at the exact point in the instruction
//! stream.
//!
//! # Output
//!
//! `outfile=PATH` (required): for each window stopped, appended:
//!
//! ```text
//! window ID vcpus N
//! ADDRESS INSNS-VCPU0 ... INSNS-VCPU(N-1)   one line per kernel block executed (hex address)
//! user INSNS-VCPU0 ...                      all user-space blocks together
//! end ID
//! ```
//!
//! A block's instructions are counted when it starts executing: a block left early by an
//! interrupt or fault counts whole, as QEMU's own instruction-counting plugins do.

use qemu_plugin_sys::{
    qemu_info_t, qemu_plugin_cb_flags, qemu_plugin_id_t, qemu_plugin_insn_data,
    qemu_plugin_insn_size, qemu_plugin_outs, qemu_plugin_register_vcpu_insn_exec_cb,
    qemu_plugin_register_vcpu_tb_exec_cb, qemu_plugin_register_vcpu_tb_trans_cb, qemu_plugin_tb,
    qemu_plugin_tb_get_insn, qemu_plugin_tb_n_insns, qemu_plugin_tb_vaddr, QEMU_PLUGIN_VERSION,
};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The plugin API version this plugin is built for; QEMU refuses a plugin without it.
#[no_mangle]
pub static qemu_plugin_version: c_int = QEMU_PLUGIN_VERSION as c_int;

/// Most vCPUs a guest may have: each block keeps one counter per vCPU.
const MAX_VCPUS: usize = 8;
/// The mark's displacement: this in the upper half, the operation and window below.
const MARK_MAGIC: u32 = 0x1b0c_0000;
const MARK_START: u32 = 1;
const MARK_STOP: u32 = 2;
/// Guest virtual addresses from here up are the kernel's (x86-64, 4- or 5-level paging).
const KERNEL_START: u64 = 0xff00_0000_0000_0000;

/// One translated block: where it starts, how many instructions it has, and how many times
/// each vCPU started it. Blocks live as long as the plugin (QEMU calls back with their
/// address until it exits), so they are leaked on purpose.
struct Block {
    vaddr: u64,
    insns: u64,
    /// Written only by the thread running vCPU `i` (one writer per counter), read by any.
    execs: [AtomicU64; MAX_VCPUS],
}

struct Registry {
    blocks: Vec<&'static Block>,
    /// (address, instructions) to index in `blocks`: a block translated again (after QEMU
    /// flushed its cache, or on another vCPU) counts on the same record.
    index: HashMap<(u64, u64), usize>,
    /// The counters when the open window started, by index in `blocks` (blocks translated
    /// since then started from 0).
    base: Vec<[u64; MAX_VCPUS]>,
    window: Option<u32>,
    vcpus: usize,
    out: BufWriter<File>,
}

static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();

fn say(text: &str) {
    if let Ok(s) = CString::new(format!("ipoib-cost: {text}\n")) {
        // SAFETY: `s` is a NUL-terminated string that outlives the call.
        unsafe { qemu_plugin_outs(s.as_ptr()) };
    }
}

fn registry() -> Option<std::sync::MutexGuard<'static, Registry>> {
    REGISTRY.get()?.lock().ok()
}

impl Registry {
    fn block(&mut self, vaddr: u64, insns: u64) -> &'static Block {
        if let Some(&i) = self.index.get(&(vaddr, insns)) {
            return self.blocks[i];
        }
        let block: &'static Block = Box::leak(Box::new(Block {
            vaddr,
            insns,
            execs: Default::default(),
        }));
        self.index.insert((vaddr, insns), self.blocks.len());
        self.blocks.push(block);
        block
    }

    fn counts(block: &Block) -> [u64; MAX_VCPUS] {
        std::array::from_fn(|i| block.execs[i].load(Ordering::Relaxed))
    }

    fn start(&mut self, window: u32) {
        if let Some(open) = self.window {
            say(&format!(
                "window {window} started while {open} was open: {open} dropped"
            ));
        }
        self.base = self.blocks.iter().map(|b| Self::counts(b)).collect();
        self.window = Some(window);
    }

    fn stop(&mut self, window: u32) {
        if self.window != Some(window) {
            say(&format!("window {window} stopped but not started: ignored"));
            return;
        }
        self.window = None;
        if let Err(e) = self.write(window) {
            say(&format!("cannot write window {window}: {e}"));
        }
    }

    fn write(&mut self, window: u32) -> std::io::Result<()> {
        let n = self.vcpus;
        let mut user = [0u64; MAX_VCPUS];
        writeln!(self.out, "window {window} vcpus {n}")?;
        for (i, block) in self.blocks.iter().enumerate() {
            let now = Self::counts(block);
            let base = self.base.get(i).copied().unwrap_or_default();
            let insns: [u64; MAX_VCPUS] =
                std::array::from_fn(|v| now[v].wrapping_sub(base[v]) * block.insns);
            if insns.iter().all(|&x| x == 0) {
                continue;
            }
            if block.vaddr < KERNEL_START {
                for v in 0..n {
                    user[v] += insns[v];
                }
                continue;
            }
            write!(self.out, "{:x}", block.vaddr)?;
            for x in &insns[..n] {
                write!(self.out, " {x}")?;
            }
            writeln!(self.out)?;
        }
        write!(self.out, "user")?;
        for x in &user[..n] {
            write!(self.out, " {x}")?;
        }
        writeln!(self.out)?;
        writeln!(self.out, "end {window}")?;
        self.out.flush()
    }
}

/// Called each time a vCPU starts executing a block.
unsafe extern "C" fn on_block(vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: `udata` is the leaked `&'static Block` that `on_translate` registered.
    let block = unsafe { &*(udata as *const Block) };
    if let Some(count) = block.execs.get(vcpu as usize) {
        // Only this vCPU's thread writes this counter: no read-modify-write race.
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

/// Called when a vCPU executes a mark: `udata` is the mark's displacement.
unsafe extern "C" fn on_mark(_vcpu: c_uint, udata: *mut c_void) {
    let code = udata as usize as u32;
    let window = code & 0xfff;
    if let Some(mut r) = registry() {
        match (code >> 12) & 0xf {
            MARK_START => r.start(window),
            MARK_STOP => r.stop(window),
            op => say(&format!("unknown mark operation {op}")),
        }
    }
}

/// The mark's displacement if the instruction is a mark.
fn mark_of(bytes: &[u8]) -> Option<u32> {
    match bytes {
        [0x0f, 0x1f, 0x84, 0x00, d @ ..] if d.len() == 4 => {
            let code = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
            (code & 0xffff_0000 == MARK_MAGIC).then_some(code)
        }
        _ => None,
    }
}

/// Called when QEMU translates a block: counts it, and watches its marks.
unsafe extern "C" fn on_translate(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    // SAFETY: `tb` is valid for the duration of this callback.
    let n = unsafe { qemu_plugin_tb_n_insns(tb) };
    // SAFETY: as above.
    let vaddr = unsafe { qemu_plugin_tb_vaddr(tb) };
    let Some(block) = registry().map(|mut r| r.block(vaddr, n as u64)) else {
        return;
    };
    // SAFETY: `tb` is the block being translated; `block` lives as long as the plugin.
    unsafe {
        qemu_plugin_register_vcpu_tb_exec_cb(
            tb,
            Some(on_block),
            qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
            block as *const Block as *mut c_void,
        )
    };
    for i in 0..n {
        // SAFETY: `i` is below the block's instruction count.
        let insn = unsafe { qemu_plugin_tb_get_insn(tb, i) };
        // SAFETY: `insn` is valid for the duration of this callback.
        let size = unsafe { qemu_plugin_insn_size(insn) };
        if size != 8 {
            continue;
        }
        // SAFETY: as above; the data holds the instruction's `size` bytes.
        let data = unsafe { qemu_plugin_insn_data(insn) } as *const u8;
        // SAFETY: `data` points to `size` readable bytes for the duration of this callback.
        let bytes = unsafe { std::slice::from_raw_parts(data, size) };
        if let Some(code) = mark_of(bytes) {
            // SAFETY: `insn` belongs to the block being translated; the user data is a
            // number, never dereferenced.
            unsafe {
                qemu_plugin_register_vcpu_insn_exec_cb(
                    insn,
                    Some(on_mark),
                    qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                    code as usize as *mut c_void,
                )
            };
        }
    }
}

fn install(info: &qemu_info_t, args: &[&str]) -> Result<(), String> {
    if !info.system_emulation {
        return Err("only system emulation is supported".into());
    }
    // SAFETY: in system emulation QEMU fills the `system` member of the union.
    let vcpus = unsafe { info.__bindgen_anon_1.system.max_vcpus };
    let vcpus = usize::try_from(vcpus).map_err(|_| "no vCPU count".to_string())?;
    if vcpus > MAX_VCPUS {
        return Err(format!("{vcpus} vCPUs: at most {MAX_VCPUS}"));
    }
    let mut path = None;
    for arg in args {
        match arg.split_once('=') {
            Some(("outfile", p)) => path = Some(p),
            _ => return Err(format!("unknown argument {arg}: outfile=PATH")),
        }
    }
    let path = path.ok_or("outfile=PATH missing")?;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))?;
    let registry = Registry {
        blocks: Vec::new(),
        index: HashMap::new(),
        base: Vec::new(),
        window: None,
        vcpus,
        out: BufWriter::new(file),
    };
    REGISTRY
        .set(Mutex::new(registry))
        .map_err(|_| "installed twice".to_string())
}

/// QEMU's entry point: parses `outfile=PATH` and registers the translation callback.
///
/// # Safety
///
/// Called by QEMU once, with `info` valid and `argv` holding `argc` C strings.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: qemu_plugin_id_t,
    info: *const qemu_info_t,
    argc: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    let mut args = Vec::new();
    for i in 0..usize::try_from(argc).unwrap_or(0) {
        // SAFETY: QEMU passes `argc` valid C strings in `argv`.
        let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
        args.push(arg.to_str().unwrap_or(""));
    }
    // SAFETY: QEMU passes a valid `info` for the duration of the call.
    let info = unsafe { &*info };
    if let Err(e) = install(info, &args) {
        say(&e);
        return -1;
    }
    // SAFETY: `id` is this plugin's, `on_translate` has the callback's signature.
    unsafe { qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_translate)) };
    0
}
