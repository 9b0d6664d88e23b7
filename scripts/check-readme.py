#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Checks that what README.md tells a user to run exists: every `scripts/NAME` it names is a
file of the repository, every option given to a script in its code (inline code and code
blocks) appears in that script, every `IPOIB_RS_*` variable it names is read by a script in
scripts/ or a test in tests/, and every other repository path it names (docs/, bench/,
tests/, config/, kernel/, LICENSES/) exists. Prints each one that does not, as
README.md:LINE: what and why; the exit status is 1 if there is any.

Usage: check-readme.py [README]
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = os.path.abspath(__file__)

SCRIPT = re.compile(r"(?<![\w/.-])((?:scripts|tests|\.ci)/[\w./-]*[\w])")
VARIABLE = re.compile(r"(?<![A-Za-z0-9_])IPOIB_RS_[A-Z0-9_]+")
PATH = re.compile(r"(?<![\w/.~-])((?:docs|bench|config|kernel|LICENSES)/[\w./-]*[\w])")
OPTION = re.compile(r"^\[?(--[a-z][a-z0-9-]*)")
# Where a command ends within a line of code.
COMMAND_END = re.compile(r"&&|\|\||;|\||#|\)")


def code_of(text):
    """(line number, code) for every line of a fenced block and every inline code span."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            out.append((n, line))
        else:
            out += [(n, m.group(1)) for m in re.finditer(r"`([^`]+)`", line)]
    return out


def sources():
    """The text of every file under scripts/ and tests/ but this one."""
    text = []
    for top in ("scripts", "tests"):
        for root, dirs, names in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d not in ("target", "__pycache__", "corpus", "artifacts")]
            for name in names:
                path = os.path.join(root, name)
                if os.path.abspath(path) == SELF:
                    continue
                try:
                    with open(path, encoding="utf-8", errors="replace") as f:
                        text.append(f.read())
                except OSError:
                    pass
    return "\n".join(text)


def tracked_prefix(path):
    """Whether PATH is a file or folder of the repository, or the start of one's name."""
    full = os.path.join(REPO, path)
    if os.path.exists(full):
        return True
    folder, start = os.path.split(full)
    return os.path.isdir(folder) and any(n.startswith(start) for n in os.listdir(folder))


def main():
    readme = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "README.md")
    name = os.path.relpath(readme, REPO)
    with open(readme) as f:
        text = f.read()
    problems = []
    everything = sources()

    for n, line in enumerate(text.splitlines(), 1):
        for m in SCRIPT.finditer(line):
            if not os.path.isfile(os.path.join(REPO, m.group(1))) and not tracked_prefix(m.group(1)):
                problems.append(f"{name}:{n}: {m.group(1)}: no such file")
        for m in PATH.finditer(line):
            if not tracked_prefix(m.group(1)):
                problems.append(f"{name}:{n}: {m.group(1)}: no such file or folder")
        for m in VARIABLE.finditer(line):
            if not re.search(r"(?<![A-Za-z0-9_])" + m.group(0) + r"(?![A-Z0-9_])", everything):
                problems.append(f"{name}:{n}: {m.group(0)}: read by no script in scripts/ or tests/")

    for n, code in code_of(text):
        for m in SCRIPT.finditer(code):
            script = m.group(1)
            path = os.path.join(REPO, script)
            if not os.path.isfile(path):
                continue
            rest = COMMAND_END.split(code[m.end():], maxsplit=1)[0]
            with open(path, encoding="utf-8", errors="replace") as f:
                body = f.read()
            for word in rest.split():
                opt = OPTION.match(word)
                if opt and opt.group(1) not in body:
                    problems.append(f"{name}:{n}: {script} {opt.group(1)}: the script has no such option")

    for p in dict.fromkeys(problems):
        print(p)
    if problems:
        print(f"check-readme: {len(set(problems))} thing(s) {name} names do not exist in the repository")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
