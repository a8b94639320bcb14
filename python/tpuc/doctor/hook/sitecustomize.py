"""Loaded at start-up by every Python process that ``tpuc doctor`` starts (its
directory comes first on ``PYTHONPATH``): starts the probe
(tpuc/doctor/probe.py), then runs the ``sitecustomize`` this one shadows, if
there is one."""
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_out = os.environ.get("TPUC_DOCTOR_OUT")
if _out:
    try:
        from tpuc.doctor import probe as _probe

        _probe.install(_out)
    except Exception as _e:  # the program runs anyway
        print(f"tpuc doctor: instrumentation failed: {type(_e).__name__}: {_e}", file=sys.stderr)

_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec and _spec.origin and os.path.abspath(_spec.origin) != os.path.abspath(__file__):
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)  # type: ignore[union-attr]
