"""A tiny DLRM built from TorchRec's own modules, and its data, shared by the
tests in this folder (and bench/cases/dlrm.py).

Everything is deterministic: the same seed gives the same weights and batches
on every device and in every dtype, so a "tpu" run can be compared with a CPU
float32 run and a CPU float64 reference."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torchrec.models.dlrm import DLRM
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor


@dataclass(frozen=True)
class Shape:
    batch: int = 8
    dense_in: int = 6
    dim: int = 4  # every table's embedding dim (DLRM's interaction needs one dim)
    rows: tuple[int, ...] = (20, 12, 16)  # one table per sparse feature
    max_len: int = 3  # ids per sample and feature: 0..max_len (empty bags included)
    dense_layers: tuple[int, ...] = (8, 4)  # the last equals dim
    over_layers: tuple[int, ...] = (8, 1)


def keys(shape: Shape) -> list[str]:
    return [f"f{i}" for i in range(len(shape.rows))]


def build(shape: Shape, seed: int = 0, dtype: torch.dtype = torch.float32) -> DLRM:
    """DLRM with an EmbeddingBagCollection (sum pooling), built on the CPU."""
    torch.manual_seed(seed)
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=shape.dim, num_embeddings=n,
                                 feature_names=[k]) for i, (n, k) in enumerate(zip(shape.rows, keys(shape)))]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("cpu"))
    model = DLRM(embedding_bag_collection=ebc, dense_in_features=shape.dense_in,
                 dense_arch_layer_sizes=list(shape.dense_layers),
                 over_arch_layer_sizes=list(shape.over_layers))
    return model.to(dtype)


def batch(shape: Shape, step: int, dtype: torch.dtype = torch.float32
          ) -> tuple[torch.Tensor, KeyedJaggedTensor, torch.Tensor]:
    """(dense features, sparse KJT, 0/1 labels) for one step, on the CPU. The
    total id count is the same every step (only the split over bags and the
    ids change; each feature has the same id count every step), so a
    steady-state step sees the same shapes."""
    g = torch.Generator().manual_seed(1000 + step)
    dense = torch.randn(shape.batch, shape.dense_in, generator=g, dtype=torch.float64).to(dtype)
    per_key = shape.batch * shape.max_len // 2
    lengths = torch.cat([_lengths(shape.batch, per_key, shape.max_len, g) for _ in shape.rows])
    values = torch.cat([torch.randint(0, n, (per_key,), generator=g) for n in shape.rows])
    kjt = KeyedJaggedTensor(keys=keys(shape), values=values, lengths=lengths)
    labels = torch.randint(0, 2, (shape.batch,), generator=g).to(dtype)
    return dense, kjt, labels


def _lengths(n: int, total: int, cap: int, g: torch.Generator) -> torch.Tensor:
    """n bag lengths in [0, cap] summing to total (random, seeded)."""
    lengths = torch.zeros(n, dtype=torch.int64)
    left = total
    while left:
        i = int(torch.randint(0, n, (1,), generator=g))
        if lengths[i] < cap:
            lengths[i] += 1
            left -= 1
    return lengths


def kjt_to(kjt: KeyedJaggedTensor, device: torch.device | str) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(keys=kjt.keys(), values=kjt.values().to(device),
                             lengths=kjt.lengths().to(device))


def train(model: DLRM, shape: Shape, steps: int, device: str, dtype: torch.dtype, lr: float = 0.1,
          after_step=None) -> list[float]:
    """`steps` SGD steps of BCE-with-logits on `device`; returns the losses."""
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        dense, kjt, labels = batch(shape, step, dtype)
        logits = model(dense.to(device), kjt_to(kjt, device)).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach().cpu()))
        if after_step is not None:
            after_step(step)
    return losses
