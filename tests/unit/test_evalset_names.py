"""`precompute.evalset`'s byte ids and tokenizer loader are public (the refined LLC's distributions,
`precompute.llc_data`, build their sequences with them): no module imports a private name of evalset's."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from headwatch.precompute import evalset

ROOT = Path(__file__).resolve().parents[2]


def test_byte_ids_are_the_bytes_values() -> None:
    data = bytes(range(256)) + "é".encode()
    np.testing.assert_array_equal(evalset.byte_ids(data), np.array([*range(256), 0xC3, 0xA9], dtype=np.int64))
    assert evalset.byte_ids(data).dtype == np.int64
    assert callable(evalset.load_tokenizer)


def test_no_module_imports_a_private_name_of_evalset() -> None:
    """Every ``from headwatch.precompute.evalset import _name`` under headwatch/ (a private name shared is a public
    one undeclared)."""
    found = []
    for path in sorted((ROOT / "headwatch").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == evalset.__name__:
                found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert found == [], found
