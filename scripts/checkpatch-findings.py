#!/usr/bin/env python3
"""Sort checkpatch.pl's findings on a patch series against scripts/checkpatch.allow.

Usage: checkpatch-findings.py ALLOW PATCH:REPORT...

Each REPORT is the output of `checkpatch.pl --strict --show-types` on PATCH. A finding is
keyed by its type and where it is: its file, or, for a finding about the whole patch (no
FILE: line), the patch's subject. Prints one line per error, per finding the allow list does
not name, and per allow-list line that matched nothing, each starting with '#'; the last
line is 'ERRORS FINDINGS ALLOWED UNEXPECTED STALE'.
"""

import email
import email.policy
import re
import sys

FINDING = re.compile(r"^(ERROR|WARNING|CHECK):([A-Z0-9_]+): (.*)")
FILE = re.compile(r"^#\d+: FILE: ([^:]+):")


def subject(patch):
    """The patch's subject, without its '[PATCH n/m]' prefix."""
    with open(patch, encoding="utf-8", errors="replace") as f:
        msg = email.message_from_file(f, policy=email.policy.default)
    return re.sub(r"^\[PATCH[^]]*\]\s*", "", str(msg["Subject"] or "")).strip()


def findings(patch, report):
    """(level, type, where, message) for each finding of `report` on `patch`."""
    lines = open(report, encoding="utf-8", errors="replace").read().splitlines()
    for i, line in enumerate(lines):
        m = FINDING.match(line)
        if not m:
            continue
        level, kind, message = m.groups()
        f = FILE.match(lines[i + 1]) if i + 1 < len(lines) else None
        yield level, kind, f.group(1) if f else subject(patch), message


def main():
    allow = {}
    for line in open(sys.argv[1], encoding="utf-8"):
        if line.startswith("#") or not line.strip():
            continue
        kind, where, reason = line.rstrip("\n").split("\t")
        if not reason.strip():
            sys.exit(f"{sys.argv[1]}: no reason given for {kind} {where}")
        allow[(kind, where)] = 0
    errors = total = allowed = unexpected = 0
    for arg in sys.argv[2:]:
        patch, report = arg.split(":", 1)
        for level, kind, where, message in findings(patch, report):
            total += 1
            if level == "ERROR":
                errors += 1
                print(f"# error: {kind} in {where}: {message}")
            elif (kind, where) in allow:
                allow[(kind, where)] += 1
                allowed += 1
            else:
                unexpected += 1
                print(f"# not allowed: {level} {kind} in {where}: {message}")
    stale = [key for key, n in allow.items() if n == 0]
    for kind, where in stale:
        print(f"# allowed but not found (remove the line): {kind} in {where}")
    print(errors, total, allowed, unexpected, len(stale))


if __name__ == "__main__":
    main()
