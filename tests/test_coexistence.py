"""tpuc beside another accelerator (issue 31, python/tpuc_entry): `import torch` does not
register "tpu" where CUDA (or XPU, MPS) is available unless the user asks for it, because a
registered PrivateUse1 backend becomes PyTorch's accelerator; `import tpuc` registers and
warns. The other accelerator is simulated in a fresh process (this machine has none)."""
from __future__ import annotations

import os
import subprocess
import sys

import tpuc_entry


def _decide(env: dict[str, str], attached: bool = False, others: list[str] | None = None):
    return tpuc_entry.decide(env, lambda: attached, lambda: list(others or []))


def test_policy() -> None:
    assert _decide({})[0]  # a CPU-only machine: as before
    assert _decide({}, attached=True, others=["CUDA"])[0]  # a TPU VM
    ok, why = _decide({}, others=["CUDA"])
    assert not ok and "CUDA available" in why and "import tpuc" in why
    assert _decide({"TPUC_ENABLE": "1"}, others=["CUDA"])[0]
    assert _decide({"TPUC_PLATFORM": "cuda"}, others=["CUDA"]) == (True, "TPUC_PLATFORM=cuda")
    assert not _decide({"TPUC_ENABLE": "0"})[0]
    assert not _decide({}, others=["XPU", "MPS"])[0]


# A process where torch reports CUDA available: the autoload entry point runs as `import
# torch` would run it (autoload itself is off, so that it runs only when called here).
_FAKE_CUDA = r"""
import sys, warnings
import torch
torch.version.cuda = "12.8"
torch.cuda.is_available = lambda: True
import tpuc_entry
tpuc_entry.torch_autoload()
print("after autoload:", torch._C._get_privateuse1_backend_name(), "tpuc" in sys.modules,
      tpuc_entry.vllm_platform(), tpuc_entry.sglang_platform())
if "--import" in sys.argv:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        import tpuc
    print("after import:", torch._C._get_privateuse1_backend_name(),
          any("torch.accelerator" in str(x.message) for x in w))
"""


def _run(*args: str, **env: str) -> str:
    e = {k: v for k, v in os.environ.items() if k not in ("TPUC_ENABLE", "TPUC_PLATFORM")}
    e.update(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    r = subprocess.run([sys.executable, "-c", _FAKE_CUDA, *args], env=e, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_cuda_machine_keeps_cuda_as_the_accelerator() -> None:
    out = _run("--import")
    assert "after autoload: privateuseone False None None" in out, out
    assert "after import: tpu True" in out, out  # asked for: registered, and said so


def test_asking_for_tpu_registers_it() -> None:
    out = _run(TPUC_ENABLE="1")
    assert "after autoload: tpu True" in out, out
