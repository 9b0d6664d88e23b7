#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Shows where inside one function of a driver's module the cost benchmark's instructions
went: the function's disassembly with, at the start of each code block the plugin counted,
the instructions that block executed per unit of work (mean over the runs).

For work on the datapath: `cost-report.py --symbols` names the functions that cost most;
this shows which of their lines do. Reads the logs of `scripts/bench.sh --cost` (or
`--cost --from LOGDIR`); the module must be the one those guests loaded.

Usage: cost-annotate.py --logs DIR --ko KO --driver rust|c --mode MODE --test TEST
                        --role client|server --function SUBSTRING [--rustfilt PATH]
"""

import argparse
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
    if len(matches) > 1:
        for _, f in matches:
            print(f"  {demangle.get(f[2], f[2])}", file=sys.stderr)
        sys.exit("cost-annotate: several functions match: be more specific")
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
    for line in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s*(.*)", line)
        if not m:
            continue
        off = int(m.group(1), 16)
        n = per_block.get(off)
        mark = f"{n / windows:8.1f}" if n else " " * 8
        print(f"{mark}  {off - fn_off:5x}  {m.group(2)}")


if __name__ == "__main__":
    main()
