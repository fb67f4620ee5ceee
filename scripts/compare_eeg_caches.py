"""Compare two prepared EEG caches window by window (e.g. the demo's data from two generator versions).

Usage: python scripts/compare_eeg_caches.py OLD_CACHE NEW_CACHE [--tolerance 1e-3]

For every recording in both caches: same labels? epoch shift between them? and per stage how many
windows are bit-identical, differ by at most ``--tolerance`` (z-scored units: float32 round-off
carried through the band-pass filter), or differ more (changed content). Exit status 1 if labels or
recordings differ.
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np

from multiview_app.data.eeg.cache import load_manifest, load_windows
from multiview_app.data.eeg.stages import STAGES


def compare(old_dir: str, new_dir: str, tolerance: float) -> tuple[dict[str, Counter], list[str]]:
    """Per class (``identical`` / ``roundoff`` / ``changed``) a Counter of windows per stage, and the
    problems found (recordings or labels that differ)."""
    old = {r["recording"]: r for r in load_manifest(old_dir)["recordings"]}
    new = {r["recording"]: r for r in load_manifest(new_dir)["recordings"]}
    problems = [f"recordings only in one cache: {sorted(set(old) ^ set(new))}"] if set(old) != set(new) else []
    counts = {kind: Counter() for kind in ("identical", "roundoff", "changed")}
    for name in sorted(set(old) & set(new)):
        if old[name]["labels"] != new[name]["labels"]:
            problems.append(f"{name}: labels differ")
            continue
        shift = {b - a for a, b in zip(old[name]["epochs"], new[name]["epochs"])}
        if shift != {0}:
            problems.append(f"{name}: epoch indices shifted by {sorted(shift)} (onsets differ, windows compared)")
        a, b = load_windows(old_dir, old[name]), load_windows(new_dir, new[name])  # (w, c, T)
        largest = np.abs(a.astype(np.float64) - b).reshape(len(a), -1).max(axis=1)
        for label, diff in zip(old[name]["labels"], largest):
            kind = "identical" if diff == 0 else "roundoff" if diff <= tolerance else "changed"
            counts[kind][STAGES[label]] += 1
    return counts, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--tolerance", type=float, default=1e-3)
    args = parser.parse_args(argv)
    counts, problems = compare(args.old, args.new, args.tolerance)
    total = sum(sum(c.values()) for c in counts.values())
    print(f"| windows ({total}) | " + " | ".join(STAGES) + " | all |")
    print("|---" * (len(STAGES) + 2) + "|")
    for kind, counter in counts.items():
        print(f"| {kind} | " + " | ".join(str(counter[s]) for s in STAGES) + f" | {sum(counter.values())} |")
    for problem in problems:
        print(problem)
    return 1 if any("labels differ" in p or "only in one" in p for p in problems) else 0


if __name__ == "__main__":
    sys.exit(main())
