#!/usr/bin/env python3
"""Write the cover letter of the exported series (scripts/export-patches.sh).

Usage: cover-letter.py SERIES_DIR KERNEL_TREE
       cover-letter.py --figures   (the driver's figures against C, for its patch)

SERIES_DIR holds the series' patches; KERNEL_TREE is the tree they give (the counts of
lines and `unsafe` blocks are taken from it). The figures come from bench/results/cost.json
and bench/results/vs-c.json. Prints the subject on the first line, then the body.
"""

import glob
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results")
DRIVER = "drivers/infiniband/ulp/ipoib_rs"
MODES = (("datagram", "datagram 2048"), ("datagram4096", "datagram 4096"),
         ("connected", "connected"))
TESTS = (("udp", "UDP", "packet"), ("tcp_stream", "TCP_STREAM", "KiB"),
         ("tcp_rr", "TCP_RR", "transaction"))
# Which tree takes which patches, by subject prefix, in the order they apply.
TREES = (("rust: ", "the Rust tree (rust-for-linux), with acks from netdev and linux-rdma"),
         ("RDMA/ipoib_rs: ", "the RDMA tree (linux-rdma), after the Rust patches"),
         ("selftests: ", "the RDMA tree with the driver (its tests)"),
         ("RDMA/rxe: ", "the RDMA tree (rxe); independent of the Rust patches"))


def load(name):
    with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
        return json.load(f)


def subjects(series):
    """The series' patch subjects, in order."""
    out = []
    for path in sorted(glob.glob(os.path.join(series, "0*.patch"))):
        if os.path.basename(path).startswith("0000-"):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        m = re.search(r"^Subject: \[PATCH[^\]]*\] (.*(?:\n [^\n]*)*)", text, re.M)
        out.append(" ".join(m.group(1).split()) if m else os.path.basename(path))
    return out


def rust_files(tree, sub):
    return sorted(glob.glob(os.path.join(tree, sub, "**", "*.rs"), recursive=True))


def count(files, pattern):
    n = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            n += len(re.findall(pattern, f.read()))
    return n


def lines(files):
    n = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            n += sum(1 for _ in f)
    return n


def cost_rows(cost):
    """Module instructions Rust/C, a row per mode, client / server per test."""
    rows = [f"  {'':16}" + "".join(f"{name:14}" for _, name, _ in TESTS).rstrip()]
    for mode, mode_name in MODES:
        cells = []
        for test, _, _ in TESTS:
            pair = []
            for role in ("client", "server"):
                r = cost.get(f"cost_rust_to_c_{mode}_{test}_{role}_module")
                pair.append("-" if r is None else f"{r:.2f}")
            cells.append(f"{' / '.join(pair):14}")
        rows.append(f"  {mode_name:16}" + "".join(cells).rstrip())
    return rows


def throughput_rows(vs_c):
    """Throughput (latency for TCP_RR) Rust/C, a row per mode."""
    tests = (("tcp_stream", "TCP_STREAM"), ("tcp_maerts", "TCP_MAERTS"),
             ("udp_stream", "UDP_STREAM"), ("tcp_rr", "TCP_RR lat."))
    rows = [f"  {'':11}" + "".join(f"{name:12}" for _, name in tests).rstrip()]
    for mode in ("datagram", "connected"):
        cells = []
        for test, _ in tests:
            d = vs_c.get(f"rust_to_c_{mode}_{test}")
            cells.append(f"{'-' if not d else format(d['ratio'], '.2f'):12}")
        rows.append(f"  {mode:11}" + "".join(cells).rstrip())
    return rows


def wrap(text, width=72):
    out, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        out.append(line)
    return out


def figures():
    """The driver's figures against C, for its patch's message."""
    cost, vs_c = load("cost.json"), load("vs-c.json")
    out = wrap("Guest instructions per unit of work (packet, KiB, transaction) in the "
               "module, Rust/C, client / server, at IB MTU 2048 and 4096 in datagram mode and "
               f"MTU 65520 in connected mode; medians of {cost.get('runs')} runs counted by a "
               "QEMU TCG plugin (bench/results/cost.json):")
    out += cost_rows(cost)
    out += [""] + wrap(f"Throughput Rust/C (TCP_RR: latency), netperf medians over "
                       f"{vs_c.get('runs')} paired runs (bench/results/vs-c.json):")
    out += throughput_rows(vs_c)
    return out


def main():
    if sys.argv[1:] == ["--figures"]:
        print("\n".join(figures()))
        return
    series, tree = sys.argv[1], sys.argv[2]
    driver = rust_files(tree, DRIVER)
    driver = [p for p in driver if "/selftest/" not in p]
    crate = rust_files(tree, "rust/kernel/net") + rust_files(tree, "rust/kernel/rdma")
    unsafe_driver = count(driver, r"\bunsafe\b")
    unsafe_crate = count(crate, r"\bunsafe\s*\{")
    safety = count(crate, r"// SAFETY:")
    subs = subjects(series)
    # The number of the patch adding rxe_ib, as the series numbers it.
    rxe_ib = next((i + 1 for i, s in enumerate(subs) if "InfiniBand link layer" in s), 0)

    body = []
    para = lambda text: body.extend(wrap(text) + [""])  # noqa: E731
    para("This series adds a Rust implementation of IP over InfiniBand (RFC 4391, 4392 and "
         "4755) beside the C driver, as the Asix PHY driver has one: CONFIG_INFINIBAND_IPOIB_RUST "
         "chooses which implementation builds ib_ipoib. It has the C driver's features (datagram "
         "and connected mode over one shared SRQ, child interfaces, multicast, the same sysfs "
         "files, module parameters, ethtool and debugfs) and its wire protocol: the two "
         "interoperate on one fabric, which the selftests check.")
    para(f"The driver ({len(driver)} files, {lines(driver)} lines) has {unsafe_driver} "
         f"uses of `unsafe`. It stands on net and RDMA abstractions of the kernel crate "
         f"({len(crate)} files) whose {unsafe_crate} `unsafe` blocks carry {safety} SAFETY "
         "comments, and whose types holding raw pointers state their invariants.")
    para("Why carry it: it is the C driver's behaviour with ownership checked by the compiler "
         "(send and receive buffers move by value, borrowed C objects are borrowed types, "
         "objects of different devices cannot be mixed), and the abstractions under it are "
         "Rust net_device, sk_buff, NAPI and RDMA verbs interfaces that mainline does not have "
         "yet, reusable by other drivers.")
    para("How it was tested: kselftests under QEMU (tools/testing/selftests/drivers/net/ipoib) "
         f"on soft-RoCE and on an InfiniBand link layer for rxe (patch {rxe_ib}, test "
         "infrastructure only) with opensm as subnet manager: both modes, both drivers on each side, subnet "
         "manager events, child interfaces, faults and module reloads under traffic, on a "
         "lockdep kernel and on a KASAN and kmemleak kernel.")
    body.append("How it compares with C:")
    body.extend(figures())
    body.append("")
    cost = load("cost.json")
    ratios = [cost[k] for k in cost if k.startswith("cost_rust_to_c_") and k.endswith("_module")
              and isinstance(cost[k], (int, float))]
    over = sum(1 for r in ratios if r > 1.0)
    para(f"The driver's module runs more instructions than C's in {over} of these "
         f"{len(ratios)} measurements: making it as cheap as C is the work in progress. "
         "Its differences from C in behaviour are listed in the driver patch's message.")
    body.append("Trees and dependencies:")
    for prefix, where in TREES:
        idx = [i + 1 for i, s in enumerate(subs) if s.startswith(prefix)]
        if idx:
            span = f"{idx[0]}" if len(idx) == 1 else f"{idx[0]}-{idx[-1]}"
            body.append(f"  {span:6} {prefix.rstrip(': ')}: {where}")
    body.append("")
    print("RDMA/ipoib: IP over InfiniBand in Rust")
    print("\n".join(body).rstrip())


if __name__ == "__main__":
    main()
