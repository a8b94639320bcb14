"""A clear error for a KeyedJaggedTensor whose lengths (or offsets) do not
account for its values.

What it works around: torchrec 1.9.2 builds a KeyedJaggedTensor without
checking it; a mismatch surfaces later as a ``split_with_sizes`` size error
deep inside ``to_dict()`` (or, with offsets, as silently wrong bags). One host
read (the lengths' sum) -- call it at the input boundary, not per op."""
from __future__ import annotations

from typing import Any


def check_kjt(kjt: Any) -> None:
    """Raises ValueError unless the lengths (or offsets) match the values,
    the lengths are non-negative and there are keys x stride of them."""
    values = kjt.values()
    lengths = kjt.lengths_or_none()
    offsets = kjt.offsets_or_none()
    if lengths is None and offsets is None:
        raise ValueError("KeyedJaggedTensor: neither lengths nor offsets given")
    if lengths is None:
        lengths = offsets[1:] - offsets[:-1]
        first = int(offsets[0].item()) if offsets.numel() else 0
        if first != 0:
            raise ValueError(f"KeyedJaggedTensor: offsets start at {first}, not 0")
    nkeys = len(kjt.keys())
    if nkeys and lengths.numel() % nkeys:
        raise ValueError(f"KeyedJaggedTensor: {lengths.numel()} lengths for {nkeys} keys "
                         f"(not a whole batch per key)")
    total, low = (int(x) for x in (lengths.sum().item(), lengths.min().item() if lengths.numel() else 0))
    if low < 0:
        raise ValueError(f"KeyedJaggedTensor: a negative length ({low})")
    if total != values.numel():
        raise ValueError(f"KeyedJaggedTensor: the lengths add up to {total} but there are "
                         f"{values.numel()} values (keys {list(kjt.keys())})")
    weights = kjt.weights_or_none()
    if weights is not None and weights.numel() != values.numel():
        raise ValueError(f"KeyedJaggedTensor: {weights.numel()} weights for {values.numel()} values")


def _check_on_device(kjt: Any) -> None:
    """The check before an EmbeddingBagCollection runs on "tpu": the number of lengths
    against the keys (metadata), no negative length (one scalar read: a negative length
    that another bag's extra value balances passes the count check and, unchecked, pools
    silently wrong bags), then the per-key lengths torchrec reads from the host anyway (cached
    on the KJT) against the values' count."""
    values = kjt.values()
    if values.device.type != "tpu":
        return
    lengths = kjt.lengths_or_none()
    if lengths is not None and not kjt.variable_stride_per_key():
        nkeys = len(kjt.keys())
        if nkeys and lengths.numel() % nkeys:
            raise ValueError(f"KeyedJaggedTensor: {lengths.numel()} lengths for {nkeys} keys "
                             f"(not a whole batch per key; keys {list(kjt.keys())})")
        if lengths.numel():
            low = int(lengths.min().item())
            if low < 0:
                raise ValueError(f"KeyedJaggedTensor: a negative length ({low})")
    per_key = kjt.length_per_key()
    if sum(per_key) != values.numel():
        raise ValueError(f"KeyedJaggedTensor: the lengths add up to {sum(per_key)} but there are "
                         f"{values.numel()} values (per key {dict(zip(kjt.keys(), per_key))})")


def patch_embedding_modules(mod: Any) -> None:
    """EmbeddingBagCollection.forward checks a "tpu" KJT first (torchrec 1.9.x)."""
    cls = getattr(mod, "EmbeddingBagCollection", None)
    if cls is None or getattr(cls.forward, "_tpuc_checked", False):
        return
    inner = cls.forward

    def forward(self: Any, features: Any) -> Any:
        if hasattr(features, "length_per_key"):
            _check_on_device(features)
        return inner(self, features)

    forward._tpuc_checked = True  # type: ignore[attr-defined]
    forward.__doc__ = inner.__doc__
    forward.__wrapped__ = inner  # type: ignore[attr-defined]
    cls.forward = forward
