#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Fails on words that record how the repository was developed rather than what it is: work
sessions, the log folders of particular runs (named by date and time), and what a particular
run showed. Such text cannot be used by a reader and goes stale with every commit.

Checked: the repository's text files (tracked, and new ones git does not ignore). In Rust
sources only comments are checked; everything else is checked whole. Each hit is printed as
FILE:LINE: the line, and why; the exit status is 1 if there is any.

Usage: check-words.py [FILE...]   (default: every file of the repository)
"""
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = os.path.relpath(os.path.abspath(__file__), REPO)

RULES = [
    (re.compile(r"\bsession[\s-]*[0-9]", re.I), "a work session"),
    (re.compile(r"(?<![0-9])20[0-9]{6}-[0-9]{6}(?![0-9])"), "the log folder of a particular run"),
    (re.compile(r"\blast\s+run\b(?!\s+(of|to)\b)", re.I), "what the last run gave"),
    (re.compile(r"\bruns?\s+[0-9]+\s+(showed|shows|changed|measured|gave|found|took|had)\b", re.I),
     "what a particular run showed"),
    (re.compile(r"\bruns\s+[0-9]+\s*(,|and)\s*[0-9]+\b", re.I), "particular runs named by number"),
]
# Not text, or written by tools: skipped.
SKIP_SUFFIXES = (".png", ".bin", ".lock", ".json", ".patch.orig")
SKIP_PREFIXES = ("LICENSES/",)


def files():
    try:
        out = subprocess.run(["git", "-C", REPO, "ls-files", "--cached", "--others",
                              "--exclude-standard", "-z"], check=True, capture_output=True).stdout
        return sorted(set(p for p in out.decode().split("\0") if p))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for root, dirs, names in os.walk(REPO):
            dirs[:] = [d for d in dirs if d not in (".git", "target", "__pycache__")]
            found += [os.path.relpath(os.path.join(root, n), REPO) for n in names]
        return sorted(found)


def rust_comment(line):
    """The comment part of a line of Rust (from `//`), or the empty string."""
    i = line.find("//")
    return line[i:] if i >= 0 else ""


def check(path):
    hits = []
    if path == SELF or path.endswith(SKIP_SUFFIXES) or path.startswith(SKIP_PREFIXES):
        return hits
    full = os.path.join(REPO, path)
    try:
        with open(full, "rb") as f:
            data = f.read()
    except OSError:
        return hits
    if b"\0" in data:
        return hits
    text = data.decode("utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), 1):
        part = rust_comment(line) if path.endswith(".rs") else line
        for rule, why in RULES:
            if rule.search(part):
                hits.append(f"{path}:{n}: {line.strip()[:120]}  [{why}]")
                break
    return hits


def main():
    paths = [os.path.relpath(os.path.abspath(p), REPO) for p in sys.argv[1:]] or files()
    hits = [h for p in paths for h in check(p)]
    for h in hits:
        print(h)
    if hits:
        print(f"check-words: {len(hits)} line(s) record how the repository was developed; "
              "say what is, or move the record to the commit message")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
