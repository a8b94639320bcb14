"""Shared pieces of the TorchTitan tests: skip (with the reason) when torchtitan is absent."""
import shutil

import pytest

torchtitan = pytest.importorskip(
    "torchtitan", reason="torchtitan 0.3.0 not installed (make titan-setup)"
)


@pytest.fixture(scope="session")
def titan_session_root(tmp_path_factory):
    """One folder for the whole session: the seed checkpoints and CPU reference runs that
    several tests (and test files) share live here (trainer_runs.shared_runs). Removed at the
    end of the session: its checkpoints come to ~1.2 GB, and a failing launch has already
    printed its log's tail in the assertion."""
    root = tmp_path_factory.mktemp("titan-session")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """Each TorchTitan launch's wall time (tests/torchtitan/trainer_runs.launch)."""
    import sys

    runs = sys.modules.get("trainer_runs")
    times = getattr(runs, "LAUNCH_TIMES", None)
    if not times:
        return
    terminalreporter.write_sep("-", "TorchTitan launches (wall s, CPU s of its processes)")
    for name, nproc, n, secs, cpu in times:
        terminalreporter.write_line(f"{secs:7.1f} s {cpu:7.1f} cpu-s  {nproc} proc  {n} run(s)  {name}")
    terminalreporter.write_line(f"{sum(t[3] for t in times):7.1f} s {sum(t[4] for t in times):7.1f} cpu-s  in all")
