"""The tiny model and data shared by the accelerate multi-process script and its test."""
import torch

STEPS = 3  # epochs over 8 samples: 2 batches of 4 per epoch (2 per process)


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)
