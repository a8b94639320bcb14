"""The key-value store of multi-process PJRT clients, end to end on 2 ranks:
the process group's c10d Store behind the C core's PJRT key-value callbacks
(csrc/core/pjrt/kv_bridge.c), which this test calls the way a plugin does
(XLA's CUDA plugin exchanges its topology through them at client creation).
Then the XLA CPU plugin created as process r of 2 with that store: it makes a
one-process client and never touches the store (docs/distributed.md), so
tpu_dist keeps the host transport — which ``tpuc info`` says, with why.

What this cannot test here: a plugin that really builds a multi-process
client (the CUDA plugin, libtpu) writing its own keys; no such plugin runs on
this machine."""
from __future__ import annotations

import ctypes
import json

import pytest

import dist_harness as harness

_MAKER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
NOT_FOUND, DEADLINE_EXCEEDED, UNAVAILABLE, INVALID_ARGUMENT = 5, 4, 14, 3


class _GetArgs(ctypes.Structure):  # pj_kv_get_args (pjrt_abi.h)
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("key", ctypes.c_char_p), ("key_size", ctypes.c_size_t),
                ("timeout_in_ms", ctypes.c_int), ("callback_error", ctypes.c_void_p),
                ("user_arg", ctypes.c_void_p), ("value", ctypes.c_void_p),
                ("value_size", ctypes.c_size_t), ("value_deleter", ctypes.c_void_p)]


class _TryGetArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("key", ctypes.c_char_p), ("key_size", ctypes.c_size_t),
                ("callback_error", ctypes.c_void_p), ("user_arg", ctypes.c_void_p),
                ("value", ctypes.c_void_p), ("value_size", ctypes.c_size_t),
                ("value_deleter", ctypes.c_void_p)]


class _PutArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("key", ctypes.c_char_p), ("key_size", ctypes.c_size_t),
                ("value", ctypes.c_char_p), ("value_size", ctypes.c_size_t),
                ("callback_error", ctypes.c_void_p), ("user_arg", ctypes.c_void_p)]


class FakePlugin:
    """Calls the core's key-value callbacks as a PJRT plugin does; errors come
    back as (code, message)."""

    def __init__(self, callbacks: object):
        from tpuc import _native

        self.core = _native.lib()
        for name, args in (("get", _GetArgs), ("try_get", _TryGetArgs), ("put", _PutArgs)):
            fn = getattr(self.core, f"tpuc_kv_bridge_{name}")
            fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.POINTER(args)]
        self.cb = callbacks
        self.user = ctypes.addressof(callbacks.struct)  # type: ignore[attr-defined]
        self.errors: dict[int, tuple[int, str]] = {}
        self._maker = _MAKER(self._make_error)
        self._cell = ctypes.c_void_p(ctypes.cast(self._maker, ctypes.c_void_p).value)

    def _make_error(self, code: int, msg: bytes, n: int) -> int:
        handle = len(self.errors) + 1
        self.errors[handle] = (code, ctypes.string_at(msg, n).decode())
        return handle

    def put(self, key: str, value: bytes) -> tuple[int, str] | None:
        a = _PutArgs(0, None, key.encode(), len(key), value, len(value),
                     ctypes.addressof(self._cell), self.user)
        e = self.core.tpuc_kv_bridge_put(ctypes.byref(a))
        return self.errors.pop(e) if e else None

    def get(self, key: str, timeout_ms: int | None) -> bytes | tuple[int, str]:
        if timeout_ms is None:
            a: ctypes.Structure = _TryGetArgs(0, None, key.encode(), len(key),
                                              ctypes.addressof(self._cell), self.user)
            e = self.core.tpuc_kv_bridge_try_get(ctypes.byref(a))
        else:
            a = _GetArgs(0, None, key.encode(), len(key), timeout_ms,
                         ctypes.addressof(self._cell), self.user)
            e = self.core.tpuc_kv_bridge_get(ctypes.byref(a))
        if e:
            return self.errors.pop(e)
        value = ctypes.string_at(a.value, a.value_size)
        _DELETER(a.value_deleter)(a.value)  # the plugin copies, then releases
        return value


def kv_worker(rank: int, world: int) -> dict[str, object]:
    import torch.distributed as dist

    from tpuc import _native, _plugin
    from tpuc.distributed import _topology

    store = dist.distributed_c10d._get_default_store()
    out: dict[str, object] = {}
    kv = _topology.StoreKeyValue(store)
    cb = kv.callbacks()
    plugin = FakePlugin(cb)
    mine = bytes([rank, 0, 255]) + b"topology of %d" % rank
    out["put"] = plugin.put(f"gpu:local_topology/{rank}", mine)
    # every rank reads every rank's value, waiting for the other's put
    out["values"] = [plugin.get(f"gpu:local_topology/{r}", 60000) for r in range(world)]
    out["try_values"] = [plugin.get(f"gpu:local_topology/{r}", None) for r in range(world)]
    out["raw"] = bytes(store.get(f"tpuc/pjrt/gpu:local_topology/{rank}"))
    out["missing_try"] = plugin.get("never/written", None)
    out["missing_get"] = plugin.get("never/written", 50)
    out["calls"] = cb.calls

    # a store that fails: its error reaches the plugin with its message
    def broken_get(key: bytes, timeout_ms: int) -> bytes | None:
        raise ValueError("the store refused " + key.decode())

    def broken_put(key: bytes, value: bytes) -> None:
        raise ConnectionError("connection to the store closed")

    bad = FakePlugin(_native.KeyValueCallbacks(broken_get, broken_put))
    out["broken_put"] = bad.put("k", b"v")
    out["broken_get"] = bad.get("k", 100)
    dist.barrier()

    # the real plugin, told it is process `rank` of `world`
    kv2 = _topology.StoreKeyValue(store)
    cb2 = kv2.callbacks()
    desc = _native.describe_multiprocess(_plugin.find_plugin().path, rank, world, cb2,
                                         cpu_device_count=2)
    out["desc"] = desc.__dict__
    out["plugin_calls"] = cb2.calls
    out["plugin_keys"] = list(kv2.keys_put)
    dist.barrier()
    return out


@pytest.fixture(scope="module")
def kv_results() -> list[dict[str, object]]:
    return harness.run(kv_worker, 2, timeout=150)  # one 2-rank run serves both tests


def test_store_backs_the_pjrt_key_value_callbacks_across_two_processes(kv_results) -> None:
    world = 2
    results = kv_results
    expected = [bytes([r, 0, 255]) + b"topology of %d" % r for r in range(world)]
    for rank, out in enumerate(results):
        assert out["put"] is None
        assert out["values"] == expected, out["values"]
        assert out["try_values"] == expected
        assert out["raw"] == expected[rank]  # stored under tpuc/pjrt/, byte for byte
        code, msg = out["missing_try"]
        assert code == NOT_FOUND and "never/written" in msg
        code, msg = out["missing_get"]
        assert code == DEADLINE_EXCEEDED and "50 ms" in msg
        assert out["calls"] == 1 + 2 * world + 2
        code, msg = out["broken_put"]
        assert code == UNAVAILABLE and "connection to the store closed" in msg and "put 'k'" in msg
        code, msg = out["broken_get"]
        assert code == INVALID_ARGUMENT and "the store refused k" in msg


def test_cpu_plugin_told_of_two_processes_stays_one_process(kv_results) -> None:
    """The fact docs/distributed.md states about the XLA CPU plugin, checked on
    the installed one: with node 0/1 of 2 and a shared store it makes a client
    of its own devices only and calls the store not once."""
    for out in kv_results:
        d = out["desc"]
        assert d["num_processes"] == 2 and d["kv_store"]
        assert d["create_options"] == ["cpu_device_count"]
        assert d["device_count"] == 2
        assert d["global_device_count"] == d["device_count"]  # no other process's devices
        assert d["process_index"] == 0  # not `rank`: the plugin never heard of the job
        assert out["plugin_calls"] == 0 and out["plugin_keys"] == []


def test_tpuc_info_says_which_transport_and_why(capsys, monkeypatch) -> None:
    from tpuc import cli

    monkeypatch.delenv("TPUC_DIST_DEVICE", raising=False)
    assert cli.main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    t = info["distributed_transport"]
    assert t["transport"] == "host"
    if info["platform"] == "cpu":
        assert "cannot run a collective across processes" in t["why"]
    monkeypatch.setenv("TPUC_DIST_DEVICE", "0")
    assert cli.main(["info"]) == 0
    assert "tpu_dist:          host transport (TPUC_DIST_DEVICE=0)" in capsys.readouterr().out


def test_choose_transport() -> None:
    from tpuc.distributed._topology import choose_transport

    assert choose_transport("cpu", {})[0] == "host"
    assert choose_transport("cuda", {"TPUC_DIST_DEVICE": "0"}) == ("host", "TPUC_DIST_DEVICE=0")
    name, why = choose_transport("tpu", {"TPUC_DIST_DEVICE": "1"})
    assert name == "host" and "not built yet" in why and "tpu client" in why


def test_dist_device_1_warns_once_with_the_reason(monkeypatch, tmp_path) -> None:
    """A user who asks for the device transport where it cannot be had is told
    why, once, when the first group is made; the group still works (host)."""
    import warnings
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import tpuc  # noqa: F401  (the device "tpu")
    from tpuc.distributed import _transport

    monkeypatch.setenv("TPUC_DIST_DEVICE", "1")
    monkeypatch.setattr(_transport, "_warned_device", False)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    with pytest.warns(UserWarning, match="TPUC_DIST_DEVICE=1, but collectives use the host "
                                         "transport: the "):
        t = _transport.select_transport(store, 0, 1, timedelta(seconds=30))
    assert t.name == "host-gloo"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _transport.select_transport(dist.FileStore(str(tmp_path / "s2"), 1), 0, 1,
                                    timedelta(seconds=30))
    assert torch.tpu.is_available()
