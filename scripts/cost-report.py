#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns the cost benchmark's counts into instructions per unit of work.

scripts/bench.sh --cost runs two_hosts_ib_cost.sh in two guests with the ipoib-cost QEMU
plugin (bench/cost-plugin) loaded: the plugin writes, per counting window, the guest
instructions executed per kernel code block and vCPU (LOGDIR/host*.cost); the guest
program writes what each window measured and where the driver's module was
(LOGDIR/host*.results: COST, COSTSEC, COSTKERNEL lines). This script places every block:
in the driver's module (the .ko's executable sections at the addresses the guest gave),
in the kernel image's Rust code (the kernel crate, whose abstractions the Rust driver calls
out of line, and the rust_helper_* C wrappers: in these guests only the driver runs them),
in rxe (the objects of drivers/infiniband/sw/rxe, built into the kernel), in the rest of
the kernel, or in user space; the driver's own cost is its module and that Rust code; divides by the window's unit of work; and prints, per driver,
mode, test and host, the median over the runs with its spread and the Rust/C ratios. It
writes the figures to a JSON file; with --symbols, also the functions that cost most; with
--blocks, the code blocks that cost most in the module's costliest functions, each with its
instructions (disassembled from the .ko; relocations name the functions it calls), to see
which lines of a function to change.

Usage: cost-report.py --logs DIR --build KBUILD --rust-ko KO --c-ko KO --json OUT
                      [--markdown FILE] [--commit C] [--flavour F] [--symbols FILE]
                      [--blocks FILE] [--rustfilt PATH]
"""

import argparse
import bisect
import glob
import json
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict

ROLES = {"host0": "server", "host1": "client"}
# The unit each test's counts are divided by, and the COST line's field holding it.
UNITS = {"udp": ("packet", 0), "tcp_stream": ("KiB", 1), "tcp_rr": ("transaction", 2)}
PARTS = ("module", "crate", "driver", "rxe", "kernel", "user", "all")


def rust_in_kernel(name):
    """Whether a kernel image symbol is Rust code or one of its C helpers."""
    return name.startswith(("_R", "rust_helper_", "__rust_"))


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def executable_sections(ko):
    """{section name: (index, size)} of the .ko's executable sections."""
    out = {}
    for line in run("readelf", "-SW", ko).splitlines():
        m = re.match(r"\s*\[\s*(\d+)\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)\s+\S+\s+(\S+)", line)
        if m and "X" in m.group(4):
            out[m.group(2)] = (int(m.group(1)), int(m.group(3), 16))
    return out


def ko_functions(ko):
    """{section index: sorted [(offset, size, name)]} of the .ko's functions."""
    out = defaultdict(list)
    for line in run("readelf", "-sW", ko).splitlines():
        f = line.split()
        if len(f) == 8 and f[3] == "FUNC" and f[6].isdigit():
            out[int(f[6])].append((int(f[1], 16), int(f[2]), f[7]))
    for v in out.values():
        v.sort()
    return out


def kernel_symbols(build):
    """Sorted (address, size, name) of the kernel's text symbols, and rxe's [start, end)."""
    syms = []
    for line in run("nm", "-S", "--defined-only", os.path.join(build, "vmlinux")).splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tTwW":
            syms.append((int(f[0], 16), int(f[1], 16), f[3]))
        elif len(f) == 3 and f[1] in "tT":
            syms.append((int(f[0], 16), 0, f[2]))
    syms.sort()
    rxe_names = set()
    for obj in glob.glob(os.path.join(build, "drivers/infiniband/sw/rxe/*.o")):
        for line in run("nm", "--defined-only", obj).splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "tT":
                rxe_names.add(f[2])
    # Names every object has (the sanitizers' constructors, "asan.module_ctor" in each
    # object of a KASAN kernel, linked together elsewhere) are not rxe's.
    seen = {}
    for _, _, name in syms:
        seen[name] = seen.get(name, 0) + 1
    rxe_names = {name for name in rxe_names if seen.get(name, 0) <= 3}
    # The objects are linked one after the other: rxe is the longest run of its symbols
    # (a name it shares with a static function elsewhere cannot move it).
    best, start = (0, 0), None
    for i, (_, _, name) in enumerate(syms + [(0, 0, "")]):
        if name in rxe_names:
            start = i if start is None else start
        elif start is not None:
            if i - start > best[1] - best[0]:
                best = (start, i)
            start = None
    if best[1] == best[0]:
        sys.exit("cost-report: no rxe symbols found in vmlinux")
    first, last = syms[best[0]], syms[best[1] - 1]
    return syms, (first[0], last[0] + max(last[1], 1))


def results_lines(path):
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# "):
                line = line[2:]
            yield line.split()


def windows_of(path):
    """{window: (vcpus, {address: [insns per vCPU]}, [user insns per vCPU])}"""
    out, cur = {}, None
    with open(path) as f:
        for line in f:
            f_ = line.split()
            if not f_:
                continue
            if f_[0] == "window":
                cur, blocks, user = int(f_[1]), {}, []
            elif f_[0] == "end" and cur is not None:
                out[cur] = (blocks, user)
                cur = None
            elif cur is None:
                continue
            elif f_[0] == "user":
                user = [int(x) for x in f_[1:]]
            else:
                blocks[int(f_[0], 16)] = [int(x) for x in f_[1:]]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--rust-ko", required=True)
    ap.add_argument("--c-ko", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--flavour", default="")
    ap.add_argument("--markdown")
    ap.add_argument("--symbols")
    ap.add_argument("--blocks")
    ap.add_argument("--rustfilt")
    a = ap.parse_args()

    syms, rxe = kernel_symbols(a.build)
    sym_addrs = [s[0] for s in syms]
    stext = next(s[0] for s in syms if s[2] == "_stext")
    kos = {d: (executable_sections(k), ko_functions(k)) for d, k in (("rust", a.rust_ko), ("c", a.c_ko))}

    # per[(driver, mode, test, role)] = [{part: insns per unit}] over the runs
    per = defaultdict(list)
    top = defaultdict(lambda: defaultdict(float))
    # hot[(driver, mode, test, role)][(section index, offset)] = instructions per unit (sum)
    hot = defaultdict(lambda: defaultdict(float))
    failures, vcpu_lines = [], []
    # A window whose work failed on either host counts on neither: the other's counts are of
    # no work, or of part of it.
    failed = {
        int(f[1])
        for host in ROLES
        for f in results_lines(os.path.join(a.logs, host + ".results"))
        if len(f) >= 8 and f[0] == "COST" and f[7] == "failed"
    }
    for host, role in ROLES.items():
        res = os.path.join(a.logs, host + ".results")
        cost = os.path.join(a.logs, host + ".cost")
        if not os.path.exists(cost):
            sys.exit(f"cost-report: {cost} missing: was the plugin loaded?")
        counts = windows_of(cost)
        meta, secs, offset = {}, defaultdict(dict), 0
        for f in results_lines(res):
            if len(f) >= 3 and f[0] == "COSTKERNEL" and f[1] == "_stext":
                offset = int(f[2], 16) - stext
            elif len(f) == 5 and f[0] == "COSTSEC":
                secs[int(f[1])][f[3]] = int(f[4], 16)
            elif len(f) >= 8 and f[0] == "COST":
                if f[7] == "failed":
                    failures.append(f"{role}: {' '.join(f[1:])}")
                elif len(f) == 12:
                    meta[int(f[1])] = f[2:]
        if offset:
            print(f"{role}: kernel text moved by {offset:#x} (KASLR): addresses corrected")
        for w, m in sorted(meta.items()):
            drv, mode, test, run_, _role, packets, kib, trans, tx, rx = m
            if w in failed:
                failures.append(f"{role}: window {w} ({drv} {mode} {test} run {run_}): failed on the other host")
                continue
            if w not in counts:
                failures.append(f"{role}: window {w} ({drv} {mode} {test} run {run_}) not counted by the plugin")
                continue
            blocks, user = counts[w]
            unit = float((packets, kib, trans)[UNITS[test][1]])
            if unit <= 0:
                failures.append(f"{role}: window {w} ({drv} {mode} {test} run {run_}): no {UNITS[test][0]}s")
                continue
            sections, functions = kos[drv]
            ranges = []
            for name, base in secs[w].items():
                if name in sections:
                    idx, size = sections[name]
                    ranges.append((base, base + size, idx))
            if not ranges:
                failures.append(f"{role}: window {w}: no section of the module given")
                continue
            parts = dict.fromkeys(PARTS, 0)
            vcpus = [0] * len(user)
            for addr, insns in blocks.items():
                n = sum(insns)
                for i, x in enumerate(insns):
                    vcpus[i] += x
                hit = next((r for r in ranges if r[0] <= addr < r[1]), None)
                if hit:
                    parts["module"] += n
                    if a.symbols:
                        fns = functions.get(hit[2], [])
                        off = addr - hit[0]
                        i = bisect.bisect_right(fns, (off, float("inf"), "")) - 1
                        name = fns[i][2] if i >= 0 else "?"
                        top[(drv, mode, test, role, "module")][name] += n / unit
                    if a.blocks:
                        hot[(drv, mode, test, role)][(hit[2], addr - hit[0])] += n / unit
                    continue
                kaddr = addr - offset
                i = bisect.bisect_right(sym_addrs, kaddr) - 1
                name = syms[i][2] if i >= 0 else "?"
                if rxe[0] <= kaddr < rxe[1]:
                    where = "rxe"
                elif rust_in_kernel(name):
                    where = "crate"
                else:
                    where = "kernel"
                parts[where] += n
                if a.symbols:
                    top[(drv, mode, test, role, where)][name] += n / unit
            parts["user"] = sum(user)
            for i, x in enumerate(user):
                vcpus[i] += x
            parts["driver"] = parts["module"] + parts["crate"]
            parts["all"] = parts["driver"] + parts["rxe"] + parts["kernel"] + parts["user"]
            per[(drv, mode, test, role)].append({p: parts[p] / unit for p in PARTS})
            vcpu_lines.append(f"{role} window {w} {drv} {mode} {test} run {run_}: "
                              + " ".join(f"vCPU{i} {x}" for i, x in enumerate(vcpus))
                              + f" instructions; {int(unit)} {UNITS[test][0]}s; ib0 tx {tx} rx {rx}")

    figures = {}
    print(f"{'driver':6} {'mode':9} {'test':10} {'host':6} {'unit':11}"
          + "".join(f" {p:>14}" for p in PARTS) + "  runs  spread(driver)")
    keys = sorted(per, key=lambda k: (k[1], list(UNITS).index(k[2]), k[3], k[0]))
    med = {}
    for k in keys:
        drv, mode, test, role = k
        vals = per[k]
        row = {}
        for p in PARTS:
            xs = [v[p] for v in vals]
            row[p] = statistics.median(xs)
            med[k + (p,)] = row[p]
            if p != "user":
                figures[f"cost_{drv}_{mode}_{test}_{role}_{p}"] = round(row[p], 1)
        spread = 0
        for p in ("module", "driver"):
            ms = [v[p] for v in vals]
            spread = (max(ms) - min(ms)) / row[p] * 100 if row[p] else 0
            figures[f"spread_{drv}_{mode}_{test}_{role}_{p}_percent"] = round(spread, 2)
        print(f"{drv:6} {mode:9} {test:10} {role:6} {UNITS[test][0]:11}"
              + "".join(f" {row[p]:14.0f}" for p in PARTS) + f"  {len(vals):4}  {spread:5.1f}%")
    print()
    print("Rust / C (medians; below 1: ours executes fewer instructions):")
    for mode in ("datagram", "datagram4096", "connected"):
        for test in UNITS:
            for role in ("client", "server"):
                r = []
                for p in ("module", "driver", "rxe", "kernel", "all"):
                    c, rs = med.get(("c", mode, test, role, p)), med.get(("rust", mode, test, role, p))
                    if c and rs:
                        figures[f"cost_rust_to_c_{mode}_{test}_{role}_{p}"] = round(rs / c, 3)
                        r.append(f"{p} {rs / c:.2f}")
                if r:
                    print(f"  {mode:9} {test:10} {role:6} " + ", ".join(r))
    print()
    print("Per window (instructions per vCPU):")
    for line in vcpu_lines:
        print("  " + line)
    if failures:
        print()
        print(f"{len(failures)} measurements failed:")
        for f in failures:
            print("  " + f)
    doc = {
        "commit": a.commit,
        "kernel_flavour": a.flavour,
        "date": subprocess.run(["date", "-u", "+%FT%TZ"], capture_output=True, text=True).stdout.strip(),
        "units": {t: u for t, (u, _) in UNITS.items()},
        "runs": max((len(v) for v in per.values()), default=0),
        "failures": len(failures),
    }
    doc.update(figures)
    with open(a.json, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"wrote {a.json}")

    if a.markdown:
        md = [f"Guest instructions per unit of work, median of {doc['runs']} runs "
              f"(`scripts/bench.sh --cost`, commit {a.commit}, {a.flavour} kernel, {doc['date']}); "
              "Rust/C below 1: ours executes fewer. Written by `scripts/cost-report.py` from "
              "`bench/results/cost.json`.",
              "",
              "The driver's part is its module and the kernel image's Rust code it runs (the kernel "
              "crate's out-of-line functions and `rust_helper_*`); the module alone is given too.",
              "",
              "| mode | test | host | unit | driver C | driver Rust | driver Rust/C | module Rust/C | all C | all Rust | all Rust/C |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        for mode in ("datagram", "datagram4096", "connected"):
            for test in UNITS:
                for role in ("client", "server"):
                    v = {(d, p): med.get((d, mode, test, role, p))
                         for d in ("c", "rust") for p in ("module", "driver", "all")}
                    if None in v.values():
                        continue
                    md.append(f"| {mode} | {test} | {role} | {UNITS[test][0]} | "
                              f"{v['c', 'driver']:.0f} | {v['rust', 'driver']:.0f} | "
                              f"{v['rust', 'driver'] / v['c', 'driver']:.2f} | "
                              f"{v['rust', 'module'] / v['c', 'module']:.2f} | "
                              f"{v['c', 'all']:.0f} | {v['rust', 'all']:.0f} | "
                              f"{v['rust', 'all'] / v['c', 'all']:.2f} |")
        with open(a.markdown, "w") as f:
            f.write("\n".join(md) + "\n")
        print(f"wrote {a.markdown}")

    if a.symbols:
        lines = []
        for k in sorted(top, key=lambda k: (k[1], list(UNITS).index(k[2]), k[3], k[0], k[4])):
            drv, mode, test, role, where = k
            n = len(per[(drv, mode, test, role)]) or 1
            items = sorted(top[k].items(), key=lambda kv: -kv[1])
            helpers = sum(v for s, v in items if s.startswith("rust_helper_")) / n
            lines.append(f"{drv} {mode} {test} {role} {where}: instructions per {UNITS[test][0]}, mean of {n} runs"
                         + (f"; rust_helper_* {helpers:.0f}" if where == "crate" else ""))
            for s, v in items[:25 if where in ("module", "crate") else 15]:
                lines.append(f"  {v / n:10.0f}  {s}")
        text = "\n".join(lines) + "\n"
        if a.rustfilt and os.access(a.rustfilt, os.X_OK):
            text = subprocess.run([a.rustfilt], input=text, capture_output=True, text=True).stdout
        with open(a.symbols, "w") as f:
            f.write(text)
        print(f"wrote {a.symbols}")
    if a.blocks:
        write_blocks(a, kos, per, hot)
    return 1 if failures else 0


def disassembly(ko):
    """{section index: sorted [(offset, text)]} of the .ko's instructions, relocations
    (the functions called) appended to the instruction they patch."""
    index = {name: idx for name, (idx, _) in executable_sections(ko).items()}
    out, sec = defaultdict(list), None
    for line in run("llvm-objdump", "-dr", "--no-show-raw-insn", ko).splitlines():
        m = re.match(r"Disassembly of section (\S+):", line)
        if m:
            sec = index.get(m.group(1))
            continue
        m = re.match(r"\s+([0-9a-f]+):\s+(R_\S+)\s+(\S+)", line)
        if m and sec is not None and out[sec]:
            off, text = out[sec][-1]
            out[sec][-1] = (off, f"{text}  <{m.group(3)}>")
            continue
        m = re.match(r"\s+([0-9a-f]+):\s+(.*)", line)
        if m and sec is not None:
            out[sec].append((int(m.group(1), 16), " ".join(m.group(2).split())))
    return out


def write_blocks(a, kos, per, hot):
    """The hottest blocks of the module's five costliest functions per driver, mode, test
    and host, each with its first instructions."""
    kos_path = {"rust": a.rust_ko, "c": a.c_ko}
    dis = {d: disassembly(k) for d, k in kos_path.items()}
    lines = []
    for k in sorted(hot, key=lambda k: (k[1], list(UNITS).index(k[2]), k[3], k[0])):
        drv, mode, test, role = k
        n = len(per[k]) or 1
        functions = kos[drv][1]
        by_fn = defaultdict(list)
        for (idx, off), v in hot[k].items():
            fns = functions.get(idx, [])
            i = bisect.bisect_right(fns, (off, float("inf"), "")) - 1
            if i >= 0:
                by_fn[(idx, fns[i][0], fns[i][2])].append((off, v / n))
        ranked = sorted(by_fn.items(), key=lambda kv: -sum(v for _, v in kv[1]))
        lines.append(f"{drv} {mode} {test} {role}: the module's costliest functions, instructions "
                     f"per {UNITS[test][0]} by block (offset in the function), mean of {n} runs")
        for (idx, start, name), blocks in ranked[:5]:
            lines.append(f"  {sum(v for _, v in blocks):8.0f}  {name}")
            insns = dis[drv].get(idx, [])
            offs = [o for o, _ in insns]
            for off, v in sorted(blocks):
                if v < 1:
                    continue
                j = bisect.bisect_left(offs, off)
                code = [t for _, t in insns[j:j + 12]]
                # The block's instructions, up to its first branch or call.
                shown = []
                for t in code:
                    shown.append(t)
                    if t.split()[0].startswith(("j", "call", "ret")):
                        break
                lines.append(f"    {v:8.1f}  +{off - start:#06x}  " + " ; ".join(shown))
    text = "\n".join(lines) + "\n"
    if a.rustfilt and os.access(a.rustfilt, os.X_OK):
        text = subprocess.run([a.rustfilt], input=text, capture_output=True, text=True).stdout
    with open(a.blocks, "w") as f:
        f.write(text)
    print(f"wrote {a.blocks}")


if __name__ == "__main__":
    sys.exit(main())
