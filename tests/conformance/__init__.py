"""PyTorch's own OpInfo database run on the device "tpu", each result against the CPU.

`python -m tests.conformance` (or `make conformance`) sweeps every OpInfo entry over the
dtypes in catalog.DTYPES in worker subprocesses and writes docs/op_coverage.{md,json}.
Modules: catalog (which entries and dtypes), tree (moving nested samples between devices),
policy (tolerance overrides and nondeterministic ops, each with its reason), check (one
(op, dtype) checked and classified), worker / pool (isolated subprocesses, timeouts,
progress), report (the coverage table), known_failures (every mismatch and error, with
its reason).
"""
