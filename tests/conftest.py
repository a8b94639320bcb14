"""How ``make test-py`` spreads the test files over its pytest-xdist workers (``-n 2 --dist
loadfile``): which files must share a worker, and which start first.

Shared launches: tests/torchtitan/test_trainer.py and test_trainer_parallel.py take their
TorchTitan runs from trainer_runs' per-process caches (one CPU and one "tpu" launch for the
one-process recipes, one CPU launch of llama3 at FSDP=2). With a file per work unit the two
files often land on different workers, and each worker then launches all of them itself (the
second worker's copies took ~130 s and ~50 s on CI). Here they are one work unit.

Longest first: xdist hands out work units in order and by default orders them by their number
of tests, so files with few but long tests (TorchTitan's launches, the difftest slice) came
last and the run ended with one worker on them while the other idled. The files below, the
longest on CI (``pytest --durations``), go first; the rest keep their order and fill in.
Nothing is skipped or changed in what a test runs; without xdist this file does nothing.

Memory maps: on the XLA CPU plugin every compiled program keeps its code mapped until the
process ends (about 4 maps for a one-op program; tpuc's executable cache has no eviction), and
a worker that runs half the suite compiles tens of thousands of programs. Past the kernel's
``vm.max_map_count`` (65530 by default) XLA's compiler fails ("LLVM compilation error: Cannot
allocate memory") and the worker crashes. The run's summary gives each worker's peak; .ci/run
raises the limit (docs/testing.md).
"""
from __future__ import annotations

import pytest

# work units that must run in one worker process: file -> unit name
SAME_WORKER = {
    "tests/torchtitan/test_trainer.py": "tests/torchtitan/trainer_runs",
    "tests/torchtitan/test_trainer_parallel.py": "tests/torchtitan/trainer_runs",
}

# the longest files on CI, longest first (file paths or prefixes of them)
LONGEST_FIRST = (
    "tests/torchtitan/test_trainer.py",
    "tests/torchtitan/test_trainer_parallel.py",
    "tests/test_training_parity.py",
    "tests/test_training.py",
    "tests/distributed/test_dist_training.py",
    "tests/test_docs_commands.py",
    "tests/doctor/test_doctor.py",
    "tests/test_compile_ahead.py",
    "tests/test_conformance_subset.py",
)


def _unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return SAME_WORKER.get(path, path)


def _rank(nodeid: str) -> int:
    path = nodeid.split("::", 1)[0]
    for i, prefix in enumerate(LONGEST_FIRST):
        if path.startswith(prefix):
            return i
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: the longest files first (a stable sort: the order within a file
    and among the others is kept). Every worker sorts the same collection the same way, as
    xdist requires."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: _rank(item.nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """``--dist loadfile`` with SAME_WORKER's units, handed out in collection order."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedLaunchesLongestFirst(LoadFileScheduling):
        def __init__(self, config: pytest.Config, log=None) -> None:  # type: ignore[no-untyped-def]
            super().__init__(config, log)
            config.option.loadscopereorder = False  # keep the collection's (longest-first) order

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return SharedLaunchesLongestFirst(config, log)


@pytest.fixture
def tpu_no_fallbacks():  # type: ignore[no-untyped-def]
    """Skips without a "tpu" device (saying why); fails the test if an op it ran fell back to
    the CPU (torch.tpu.stats()["fallbacks"] grew). Used by the native-lowering test files."""
    import torch

    if not torch.tpu.is_available():
        pytest.skip(f'device "tpu" unavailable: {torch.tpu.unavailable_reason()}')
    before = dict(torch.tpu.stats()["fallbacks"])
    yield
    assert dict(torch.tpu.stats()["fallbacks"]) == before


def _map_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def _maps() -> int:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


_MAPS: dict[str, int] = {"peak": 0, "tests": 0}
_PEAKS: dict[str, int] = {}  # the controller's record: worker -> its peak


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """Every 25 tests: this process's memory maps (its peak goes to the run's summary)."""
    _MAPS["tests"] += 1
    if _MAPS["tests"] % 25 == 0:
        _MAPS["peak"] = max(_MAPS["peak"], _maps())


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["maps_peak"] = max(_MAPS["peak"], _maps())


@pytest.hookimpl(optionalhook=True)  # an xdist hook: venvs without xdist (the slices') lack it
def pytest_testnodedown(node: object, error: object) -> None:
    peak = getattr(node, "workeroutput", {}).get("maps_peak")
    if peak:
        _PEAKS[node.gateway.id] = peak  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: object) -> None:
    if not _PEAKS:
        return
    limit = _map_limit()
    worst = max(_PEAKS.values())
    line = (f"memory maps, peak per worker: {dict(sorted(_PEAKS.items()))}; the kernel allows "
            f"{limit} (vm.max_map_count)")
    if limit and worst > 0.8 * limit:
        line += (": near the limit, past which XLA's compiler fails with 'Cannot allocate "
                 "memory' (docs/testing.md)")
    terminalreporter.write_line(line)  # type: ignore[attr-defined]
