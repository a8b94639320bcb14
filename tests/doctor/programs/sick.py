"""A small training-like program with switchable problems, for the doctor's
tests (tests/doctor/test_doctor.py). Each problem's line carries a marker
comment the tests look for in the doctor's report.

--fallback   torch.unique in the step (no device lowering: CPU fallback)
--varying    a new sequence length every step (recompiles)
--hw-bad     head_dim 64, a hidden size of 200, float32 (TPU advice)
--compile    the step under torch.compile(backend="tpu")
--graph-break  a data-dependent Python branch inside the compiled step
"""
import argparse

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
for flag in ("--fallback", "--varying", "--hw-bad", "--compile", "--graph-break"):
    ap.add_argument(flag, action="store_true")
ap.add_argument("--steps", type=int, default=4)
args = ap.parse_args()

torch.manual_seed(0)
dev = "tpu"
if args.hw_bad:
    d_model, n_heads, dtype = 200, 4, torch.float32  # head_dim 50; dims not multiples of 128
else:
    d_model, n_heads, dtype = 256, 2, torch.bfloat16  # head_dim 128
head_dim = d_model // n_heads


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, n_heads, head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # ATTENTION-HERE
        return x + self.out(a.transpose(1, 2).reshape(b, s, d_model))


model = Block().to(dev, dtype)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step(x: torch.Tensor) -> torch.Tensor:
    y = model(x)
    if args.graph_break:
        if y.sum() > 0:  # GRAPH-BREAK-HERE
            y = y * 2
    return y.float().square().mean()


run = torch.compile(step, backend="tpu") if args.compile else step
for i in range(args.steps):
    seq = 16 + 8 * i if args.varying else 32  # VARYING-HERE
    x = torch.randn(2, seq, d_model, device=dev, dtype=dtype)
    if args.fallback:
        x = x + torch.unique(x.detach().round()).sum() * 0  # FALLBACK-HERE
    loss = run(x)
    loss.backward()
    opt.step()
    opt.zero_grad()
print("loss", float(loss))
