"""``./dev fuzz [SECONDS] [TARGET...]``: run the atheris targets, each for SECONDS (default 60).

Seeds come from pylog's writer (fuzz/atheris_targets.py ``seeds``); the
growing corpus and any crash reproducer stay under build/fuzz/<target>/ so a
later run continues where the last one stopped. Exit status 1 when a target
found something: the reproducer's path is printed; replay it with
``python fuzz/atheris_targets.py TARGET build/fuzz/TARGET/crash-...``.
"""
from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main(argv: list) -> int:
    seconds = int(argv[0]) if argv and argv[0].isdigit() else 60
    names = [a for a in argv if not a.isdigit()] or ["batch", "recovery", "snapshot"]
    sys.path.insert(0, HERE)
    import atheris_targets as t

    failed = []
    for name in names:
        if name not in t.TARGETS:
            print(f"unknown target {name!r}; targets: {', '.join(t.TARGETS)}", file=sys.stderr)
            return 2
        work = os.path.join(ROOT, "build", "fuzz", name)
        corpus = os.path.join(work, "corpus")
        os.makedirs(corpus, exist_ok=True)
        for i, seed in enumerate(t.seeds(name)):
            with open(os.path.join(corpus, f"seed-{i:03d}"), "wb") as f:
                f.write(seed)
        cmd = [sys.executable, os.path.join(HERE, "atheris_targets.py"), name, f"-max_total_time={seconds}",
               "-timeout=20", "-rss_limit_mb=2048", "-max_len=65536", f"-artifact_prefix={work}/", corpus]
        print(f"[fuzz] {name}: {seconds} s, corpus {corpus}", flush=True)
        rc = subprocess.call(cmd, cwd=ROOT)
        if rc != 0:
            failed.append(name)
            found = sorted(f for f in os.listdir(work) if f.split("-")[0] in ("crash", "timeout", "oom", "leak"))
            print(f"[fuzz] {name}: FOUND SOMETHING (exit {rc}); reproducers: {[os.path.join(work, f) for f in found]}")
        else:
            print(f"[fuzz] {name}: nothing found in {seconds} s ({len(os.listdir(corpus))} corpus inputs)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
