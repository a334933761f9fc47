"""Each store file name is spelled once: where its table (or ``meta.json``) is declared; everyone else refers to it.

Every string literal of the package that is a store file name (``"heads.parquet"``, ``"meta.json"``, ...: the
files of `analysis.store.lenses.TABLES` and `analysis.store.format.META_FILE`) is counted, read with ``ast`` so
that prose mentioning a file in a docstring or a message does not count; each name must stand exactly once.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from headwatch.analysis.store.lenses import LENSES

PACKAGE = Path(__file__).resolve().parents[2] / "headwatch"


def file_name_literals(root: Path, names: set[str]) -> Counter[str]:
    """How often each of ``names`` stands as a whole string literal in the Python files below ``root``, by
    ``file:line``."""
    found: Counter[str] = Counter()
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found[f"{node.value} {path.relative_to(root.parent)}:{node.lineno}"] += 1
    return found


def test_every_store_file_name_is_spelled_once_in_the_package() -> None:
    names = set(LENSES.files)
    assert {"meta.json", "heads.parquet", "overlaps.parquet", "attention.parquet"} <= names
    found = file_name_literals(PACKAGE, names)
    per_name = Counter(where.split(" ", 1)[0] for where in found.elements())
    spelled_again = {name: sorted(w for w in found if w.startswith(name + " ")) for name, n in per_name.items() if n > 1}
    assert not spelled_again, f"store file names spelled outside their one definition: {spelled_again}"
    assert set(per_name) == names, f"a file name is defined nowhere as a literal: {names - set(per_name)}"


def test_the_check_sees_a_file_name_spelled_again(tmp_path: Path) -> None:
    pkg = tmp_path / "headwatch"
    pkg.mkdir()
    (pkg / "a.py").write_text('HEADS_FILE = "heads.parquet"\n"""Docs naming heads.parquet do not count."""\n')
    (pkg / "b.py").write_text('from pathlib import Path\n\nfile = Path("store") / "heads.parquet"\n')
    found = file_name_literals(pkg, {"heads.parquet", "meta.json"})
    assert sorted(found) == ["heads.parquet headwatch/a.py:1", "heads.parquet headwatch/b.py:3"]
