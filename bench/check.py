"""CI's check of `make bench BENCH=quick`: every case produced numbers (no
timing is asserted anywhere)."""
from __future__ import annotations

import json
import os
import sys

from .run import CASES, RESULTS


def main() -> int:
    bad = []
    for name in CASES:
        path = os.path.join(RESULTS, f"{name}.json")
        if not os.path.exists(path):
            bad.append(f"{name}: no results file")
            continue
        with open(path) as f:
            r = json.load(f)
        if r.get("skipped") and not r.get("error"):  # a case that cannot run here says why
            print(f"bench check: {name} skipped: {r['skipped']}")
            continue
        rows = [row for row in r.get("rows", []) if "error" not in row]
        if r.get("error") or not rows:
            bad.append(f"{name}: {r.get('error') or 'no rows'}")
    for b in bad:
        print(f"bench check: {b}", file=sys.stderr)
    print(f"bench check: {len(CASES) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
