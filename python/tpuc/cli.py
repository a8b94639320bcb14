"""The ``tpuc`` command line: ``tpuc info [--json]``, ``tpuc doctor -- python train.py``,
``tpuc cache info|warm|export|import|clear`` (cache_cli.py)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import asdict
from importlib import metadata


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _info(as_json: bool) -> int:
    from . import _host_heap, _native, _plugin, _xla_flags

    try:
        choice = _plugin.find_plugin()
        desc = _native.describe(choice.path)
    except (_plugin.PluginNotFoundError, _native.CoreError, RuntimeError) as e:
        print(f"tpuc: error: {e}", file=sys.stderr)
        return 2
    report = asdict(desc)
    report["plugin_source"] = choice.source
    report["host_heap"] = _host_heap.decide(_plugin.is_cpu_plugin(choice))[1]
    report["xla_options"] = _xla_flags.state() if _xla_flags.state() != "not decided" else (
        _xla_flags.decide(_plugin.is_cpu_plugin(choice), os.environ.get("XLA_FLAGS"),
                          _xla_flags.cpu_flags(), os.environ.get("TPUC_XLA_DEFAULTS"))[1])
    try:  # what `import torch` does with tpuc on this machine (python/tpuc_entry)
        import tpuc_entry

        wanted, why = tpuc_entry.decide()
        report["autoload"] = ("registers 'tpu' (%s)" if wanted else
                              "leaves 'tpu' unregistered (%s)") % why
    except Exception as e:  # noqa: BLE001
        report["autoload"] = f"unknown ({type(e).__name__}: {e})"
    from .distributed._topology import choose_transport

    transport, transport_why = choose_transport(desc.platform)
    report["distributed_transport"] = {"transport": transport, "why": transport_why}
    report["versions"] = {
        "tpuc": _version("tpuc"),
        "torch": _version("torch"),
        "xla-cpu-pjrt": _version("xla-cpu-pjrt"),
        "libtpu": _version("libtpu"),
        "python": platform.python_version(),
    }
    from . import _torch_compat

    report["torch_shims"] = _torch_compat.active()
    report["environment"] = {
        k: v for k, v in sorted(os.environ.items()) if k.startswith("TPUC_")
    }
    if as_json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"tpuc {report['versions']['tpuc']}")
    print(f"plugin:            {desc.plugin}  ({choice.source})")
    print(f"platform:          {desc.platform} ({desc.platform_version})")
    print(f"PJRT API version:  {desc.pjrt_api_version}")
    print(f"XLA version:       {desc.xla_version if desc.xla_version is not None else 'n/a'}")
    if desc.stablehlo_current:
        print(f"StableHLO:         {desc.stablehlo_minimum} .. {desc.stablehlo_current}")
    print(f"host heap:         {report['host_heap']}")
    print(f"XLA options:       {report['xla_options']}")
    per_op = desc.op_xla_options or "none"
    print(f"per-op programs:   {per_op} ("
          + ("TPUC_OP_XLA_OPTIONS" if desc.op_xla_options_from_env else
             f"the default on a {desc.platform} plugin; TPUC_OP_XLA_OPTIONS replaces it") + ")")
    setting = os.environ.get("TPUC_COMPILE_AHEAD", "")
    print(f"compile-ahead:     {'on' if desc.compile_ahead else 'off'} ("
          + (f"TPUC_COMPILE_AHEAD={setting}" if setting and setting != "auto" else
             "the default: off on the XLA CPU plugin, on for GPU and TPU plugins")
          + f"), {desc.compile_threads} compile thread(s)"
          + (f" at nice {desc.compile_nice}" if desc.compile_nice else ""))
    print(f"import torch:      {report['autoload']}")
    print(f"tpu_dist:          {transport} transport ({transport_why})")
    print(f"devices:           {len(desc.devices)}")
    for d in desc.devices:
        print(f"  tpu:{d.index}  id {d.id}  {d.kind}  {d.description}")
    versions = ", ".join(
        f"{k} {v}" for k, v in report["versions"].items() if v and k != "tpuc"
    )
    print(f"versions:          {versions}")
    print(f"torch shims:       {'; '.join(report['torch_shims']) or 'none'}"
          f"  (supported torch {_torch_compat.SUPPORTED[0]} to {_torch_compat.SUPPORTED[1]})")
    for k, v in report["environment"].items():
        print(f"env:               {k}={v}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["doctor"]:  # its own parser: everything after "--" is the program
        from . import doctor

        return doctor.main(args_in[1:])
    if args_in[:1] == ["cache"]:  # its own parser too (warm takes a program after "--")
        from . import cache_cli

        return cache_cli.main(args_in[1:])
    parser = argparse.ArgumentParser(prog="tpuc", description="PyTorch on TPUs with a C core")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="show the device, plugin and versions in use")
    info.add_argument("--json", action="store_true", help="print as JSON")
    sub.add_parser("doctor", help="run a program instrumented and report what to change "
                   "(tpuc doctor -- python train.py ...)")
    sub.add_parser("cache", help="the disk cache of compiled programs: info, warm -- CMD, "
                   "export FILE, import FILE, clear")
    args = parser.parse_args(argv)
    if args.command == "info":
        return _info(args.json)
    return 2


if __name__ == "__main__":
    sys.exit(main())
