"""Shared pieces of the TorchTitan tests: skip (with the reason) when torchtitan is absent."""
import pytest

torchtitan = pytest.importorskip(
    "torchtitan", reason="torchtitan 0.3.0 not installed (make titan-setup)"
)
