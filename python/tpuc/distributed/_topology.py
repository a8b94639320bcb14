"""Multi-process PJRT clients: the process group's store as the plugin's
key-value store, and which transport ``tpu_dist`` uses (and why).

    import torch.distributed as dist
    from tpuc import _native
    from tpuc.distributed import _topology

    kv = _topology.StoreKeyValue(dist.distributed_c10d._get_default_store())
    cb = kv.callbacks()          # keep it alive as long as the runtime
    desc = _native.describe_multiprocess(plugin_path, dist.get_rank(),
                                         dist.get_world_size(), cb)

A plugin that builds a multi-process client (XLA's CUDA plugin, libtpu)
exchanges its topology through the PJRT_Client_Create key-value callbacks;
the C core implements them on a ``tpuc_kv_store`` (csrc/core/pjrt/kv_bridge.c)
and this module backs that with any c10d ``Store`` — torchrun's TCPStore, the
FileStore of ``init_method="file://..."`` — under the key prefix
``tpuc/pjrt/`` so that the plugin's keys cannot collide with c10d's own.

Importing this module does not import torch.
"""
from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Mapping

PREFIX = "tpuc/pjrt/"
HOST, DEVICE = "host", "device"


class StoreKeyValue:
    """get / put of the C core's key-value store over a c10d ``Store``.

    ``get(key, timeout_ms)`` returns the value, waiting up to ``timeout_ms``
    for it (``< 0``: not at all), or None when the key is still missing; a
    failing store raises (the core turns it into the plugin's error)."""

    def __init__(self, store: Any, prefix: str = PREFIX):
        self._store = store
        self._prefix = prefix
        self.keys_put: list[str] = []

    def _key(self, key: bytes) -> str:
        return self._prefix + key.decode("latin-1")  # bytes <-> str, one to one

    def get(self, key: bytes, timeout_ms: int) -> bytes | None:
        k = self._key(key)
        if not self._store.check([k]):
            if timeout_ms <= 0:
                return None
            try:
                self._store.wait([k], timedelta(milliseconds=timeout_ms))
            except RuntimeError:  # c10d's timeout (DistStoreError) or a broken store
                if not self._store.check([k]):  # a broken store raises here again
                    return None
        return bytes(self._store.get(k))

    def put(self, key: bytes, value: bytes) -> None:
        k = self._key(key)
        self._store.set(k, value)
        self.keys_put.append(k)

    def callbacks(self) -> Any:
        from tpuc import _native

        return _native.KeyValueCallbacks(self.get, self.put)


def choose_transport(platform: str, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(transport, why) for a process group on the loaded plugin's platform.

    ``TPUC_DIST_DEVICE=0`` forces the host transport; ``=1`` asks for the device
    transport, which the answer then explains when it cannot be had."""
    env = os.environ if env is None else env
    asked = env.get("TPUC_DIST_DEVICE", "").strip()
    if asked == "0":
        return HOST, "TPUC_DIST_DEVICE=0"
    p = platform.lower()
    if p == "cpu":
        return HOST, ("the XLA CPU plugin cannot run a collective across processes: its "
                      "client is one process (it reads only cpu_device_count and ignores the "
                      "key-value store), so collectives go through gloo")
    return HOST, (f"the device transport across processes is not built yet: the C core can "
                  f"create the {p} client as one process of a multi-process topology "
                  "(tpuc_runtime_create_multiprocess with the process group's store), but "
                  "tpu_dist does not run its collectives on such a client yet; collectives "
                  "go through gloo (correct; every byte crosses the host)")
