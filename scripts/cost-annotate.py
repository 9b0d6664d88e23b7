#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Shows where inside one function of a driver's module the cost benchmark's instructions
went: the function's disassembly with, at the start of each code block the plugin counted,
the instructions that block executed per unit of work (mean over the runs).

For work on the datapath: `cost-report.py --symbols` names the functions that cost most;
this shows which of their lines do. Reads the logs of `scripts/bench.sh --cost` (or
`--cost --from LOGDIR`); the module must be the one those guests loaded.

With --lines (for a module built with line tables: `IPOIB_RS_LINE_TABLES=1 bench.sh
--cost`, whose unstripped module is the build tree's), it says instead which source lines
the function's instructions came from, after inlining: per driver line, per line of the
kernel crate and per innermost line. A block's count is spread evenly over the
instructions up to its first jump, call or return, where the plugin's blocks end.

Usage: cost-annotate.py --logs DIR --ko KO --driver rust|c --mode MODE --test TEST
                        --role client|server --function SUBSTRING [--rustfilt PATH]
                        [--lines [--top N]]
"""

import argparse
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
cost_report = __import__("cost-report")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--ko", required=True)
    ap.add_argument("--driver", required=True, choices=("rust", "c"))
    ap.add_argument("--mode", required=True)
    ap.add_argument("--test", required=True, choices=tuple(cost_report.UNITS))
    ap.add_argument("--role", required=True, choices=("client", "server"))
    ap.add_argument("--function", required=True)
    ap.add_argument("--rustfilt", default="rustfilt")
    ap.add_argument("--lines", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()

    host = next(h for h, r in cost_report.ROLES.items() if r == a.role)
    sections = cost_report.executable_sections(a.ko)
    functions = cost_report.ko_functions(a.ko)
    demangle = {}
    names = [f[2] for fns in functions.values() for f in fns]
    try:
        out = subprocess.run([a.rustfilt], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.splitlines()
        demangle = dict(zip(names, out))
    except (OSError, subprocess.CalledProcessError):
        pass
    matches = [(idx, f) for idx, fns in functions.items() for f in fns
               if a.function in demangle.get(f[2], f[2])]
    if not matches:
        sys.exit(f"cost-annotate: no function matching {a.function!r} in {a.ko}")
    exact = [m for m in matches if demangle.get(m[1][2], m[1][2]) == a.function]
    if len(matches) > 1 and len(exact) == 1:
        matches = exact
    if len(matches) > 1:
        for _, f in matches:
            print(f"  {demangle.get(f[2], f[2])}", file=sys.stderr)
        sys.exit("cost-annotate: several functions match: be more specific (or name one whole)")
    (sec_idx, (fn_off, fn_size, fn_name)), = matches
    sec_name = next(n for n, (i, _) in sections.items() if i == sec_idx)

    counts = cost_report.windows_of(os.path.join(a.logs, host + ".cost"))
    meta, bases = {}, defaultdict(dict)
    for f in cost_report.results_lines(os.path.join(a.logs, host + ".results")):
        if len(f) == 5 and f[0] == "COSTSEC":
            bases[int(f[1])][f[3]] = int(f[4], 16)
        elif len(f) == 12 and f[0] == "COST":
            meta[int(f[1])] = f[2:]
    per_block, windows = defaultdict(float), 0
    for w, m in meta.items():
        drv, mode, test, _run, _role, packets, kib, trans = m[:8]
        if (drv, mode, test) != (a.driver, a.mode, a.test) or w not in counts:
            continue
        base = bases[w].get(sec_name)
        unit = float((packets, kib, trans)[cost_report.UNITS[test][1]])
        if base is None or unit <= 0:
            continue
        windows += 1
        for addr, insns in counts[w][0].items():
            off = addr - base
            if fn_off <= off < fn_off + fn_size:
                per_block[off] += sum(insns) / unit
    if not windows:
        sys.exit("cost-annotate: no counted window of that driver, mode and test")

    total = sum(per_block.values()) / windows
    print(f"{demangle.get(fn_name, fn_name)}: {total:.0f} instructions per "
          f"{cost_report.UNITS[a.test][0]} ({a.driver} {a.mode} {a.test} {a.role}, "
          f"mean of {windows} runs); per block at its first instruction")
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", sec_name,
                          f"--start-address={fn_off:#x}",
                          f"--stop-address={fn_off + fn_size:#x}", a.ko],
                         capture_output=True, text=True, check=True).stdout
    insns = []
    for line in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s*(.*)", line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2)))
    if a.lines:
        print_lines(a, insns, per_block, windows)
        return
    for off, text in insns:
        n = per_block.get(off)
        mark = f"{n / windows:8.1f}" if n else " " * 8
        print(f"{mark}  {off - fn_off:5x}  {text}")


def short(path):
    """A source path from the tree or the Rust library on: `ipoib_rs/x.rs`, `kernel/x.rs`."""
    for mark in ("/drivers/infiniband/ulp/", "/rust/", "/library/"):
        i = path.rfind(mark)
        if i >= 0:
            return path[i + len(mark):]
    return path


def print_lines(a, insns, per_block, windows):
    """Spreads each counted block over its instructions and sums them per source line."""
    per_insn = {}
    ends = re.compile(r"(j[a-z]+|call|ret|jmp)\b")
    for i, (off, _) in enumerate(insns):
        n = per_block.get(off)
        if not n:
            continue
        body = []
        for off2, text in insns[i:]:
            if body and off2 in per_block:
                break
            body.append(off2)
            if ends.match(text):
                break
        for off2 in body:
            per_insn[off2] = per_insn.get(off2, 0.0) + n / windows / len(body)
    addrs = sorted(per_insn)
    out = subprocess.run(["llvm-addr2line", "-e", a.ko, "-f", "-i", "-C", "--output-style=JSON"],
                         input="\n".join(hex(x) for x in addrs) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    # One JSON object per address, its frames innermost first.
    frames = [[(f["FunctionName"], f"{short(f['FileName'])}:{f['Line']}") for f in json.loads(line)["Symbol"]]
              for line in out if line.strip()]
    if len(frames) != len(addrs):
        sys.exit(f"cost-annotate: {len(addrs)} addresses, {len(frames)} answers from llvm-addr2line")
    tables = {"driver line": defaultdict(float), "kernel crate line": defaultdict(float),
              "innermost line": defaultdict(float)}
    for addr, chain in zip(addrs, frames):
        n = per_insn[addr]
        tables["innermost line"][f"{chain[0][1]} ({chain[0][0][:50]})"] += n
        drv = next((f for f in chain if f[1].startswith("ipoib_rs/")), None)
        krn = next((f for f in chain if f[1].startswith("kernel/")), None)
        tables["driver line"][drv[1] if drv else "(none)"] += n
        tables["kernel crate line"][f"{krn[1]} ({krn[0][:50]})" if krn else "(none)"] += n
    for title, table in tables.items():
        print(f"\nper {title}:")
        for key, n in sorted(table.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"  {n:7.1f}  {key}")


if __name__ == "__main__":
    main()
