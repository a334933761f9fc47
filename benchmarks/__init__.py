"""Scripts that measure and print (results in docs/benchmarks.md), and the fixtures they share with the tests:
synthetic stores (`synthetic_store`) and the fake Hub (`fakehub`). Run one as ``python -m benchmarks.NAME``."""
