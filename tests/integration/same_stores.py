"""Does a refactor change a store? The job of an older checkout and of this one, on one small run, compared.

    python -m tests.integration.same_stores OLD_CHECKOUT OUT

A run of six checkpoints (one a duplicate) is made under ``OUT`` (`tests.integration.test_forward_lens.byte_run`);
both checkouts' jobs compute every registered lens on it (`tests.integration.every_lens.every_lens_argv`: this
checkout's registry; the embeddings too) into ``OUT/old`` and ``OUT/new``, each from its own root on the same Python;
then every table is compared byte for byte (`compare_stores`) and ``meta.json`` less the refined LLC's timings.
The older checkout's job is ``python -m precompute`` when it has a top-level ``precompute/`` (before the package
became ``headwatch``), else ``python -m headwatch.precompute``. Exits 1 on a difference, naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.every_lens import compare_stores, every_lens_argv
from tests.integration.test_forward_lens import byte_run


def job(checkout: Path) -> str:
    """The module that runs a checkout's precompute job."""
    return "precompute" if (checkout / "precompute" / "__main__.py").is_file() else "headwatch.precompute"


def scrubbed(store: Path) -> dict:
    """A store's meta.json less what differs between two runs of the same job (the refined LLC's seconds)."""
    meta = json.loads((store / "meta.json").read_text())
    (meta.get("llc") or {}).pop("seconds", None)
    for record in ((meta.get("llc") or {}).get("data") or {}).values():  # and each distribution's
        record.pop("seconds", None)
    return meta


def main(argv: list[str]) -> int:
    old_checkout, out = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    new_checkout = Path(__file__).resolve().parents[2]
    out.mkdir(parents=True, exist_ok=True)
    run = byte_run(out, [0, 1, 2, 4, 8, 16], duplicate={8: 4}, hidden=32, layers=2, heads=2)
    argv_job = ["--no-progress", "--device", "cpu", "--source", str(run), *every_lens_argv()]
    env = {**os.environ, "HEADWATCH_EMBEDDINGS": "1", "OMP_NUM_THREADS": "1"}
    for name, checkout in (("old", old_checkout), ("new", new_checkout)):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", job(checkout), *argv_job, "--out", str(out / name)],
            cwd=checkout,
            env={**env, "PYTHONPATH": str(checkout)},
            capture_output=True,
            text=True,
        )
        print(f"{name}: {checkout} exit {done.returncode} in {time.monotonic() - started:.0f} s")
        if done.returncode:
            print(done.stderr[-2000:])
            return 1
    files = sorted(p.name for p in (out / "old").iterdir())
    if files != sorted(p.name for p in (out / "new").iterdir()):
        print(f"other files: {files} against {sorted(p.name for p in (out / 'new').iterdir())}")
        return 1
    tables = compare_stores(out / "old", out / "new", exact=True)  # raises naming the first table that differs
    old_meta, new_meta = scrubbed(out / "old"), scrubbed(out / "new")
    differ = sorted(k for k in old_meta.keys() | new_meta.keys() if old_meta.get(k) != new_meta.get(k))
    print(f"{len(tables)} tables byte-identical: {', '.join(tables)}")
    print(f"meta.json less the refined LLC's seconds: {'equal' if not differ else 'differs in ' + ', '.join(differ)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
