"""How every view, table, CSV and the report name a head: ``L1 H0`` (layer, then head, both 0-based).

URL parameters keep their compact form (``cmp=L2H3``, ``trace=L0H5``); what a reader sees is `head_name`.
"""


def head_name(layer: int, head: int) -> str:
    """``L1 H0`` for layer 1, head 0."""
    return f"L{int(layer)} H{int(head)}"
