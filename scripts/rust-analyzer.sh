#!/usr/bin/env bash
# Write rust-project.json at the repository root for rust-analyzer: the kernel's own
# `make rust-analyzer` on the prepared tree, with the driver's crates pointed at this
# repository's files, so that an editor opened here resolves the driver and the test
# modules against the kernel crate (bindings, macros and our abstractions as installed in
# the tree; after editing kernel/, run scripts/prepare-tree.sh to refresh them).
# Needs a built tree (scripts/build.sh): bindgen's output comes from the build.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ -f "$KBUILD/rust/bindings/bindings_generated.rs" ] || die "no built tree: run scripts/build.sh first"
"$REPO/scripts/prepare-tree.sh"
make -C "$KTREE" O="$KBUILD" LLVM=1 -s rust-analyzer
python3 - "$KBUILD/rust-project.json" "$REPO/rust-project.json" "$KTREE" "$REPO" <<'PY'
import json, sys
src, dst, ktree, repo = sys.argv[1:]
project = json.load(open(src))
drv = ktree + "/drivers/infiniband/ulp/ipoib_rs/"
ours = {drv: repo + "/", drv + "selftest/": repo + "/tests/kmod/"}
found = 0
for crate in project["crates"]:
    root = crate["root_module"]
    for tree_dir, repo_dir in ours.items():
        if root.startswith(tree_dir) and "/" not in root[len(tree_dir):]:
            crate["root_module"] = repo_dir + root[len(tree_dir):]
            crate["source"] = {"include_dirs": [repo_dir], "exclude_dirs": []}
            found += 1
if not found:
    sys.exit("rust-project.json: the driver's crates are missing")
json.dump(project, open(dst, "w"), indent=1)
PY
log "wrote $REPO/rust-project.json"
