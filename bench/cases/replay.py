"""The compiled training step replayed: host time per step and step time of
torch.compile(backend="tpu") with graph replay against the same step
recorded op by op every step (the joined program, and the standalone
per-graph programs that replay launches), fused eager and PyTorch CPU eager;
and peak device memory per mode with and without activation checkpointing."""
from __future__ import annotations

import gc
import os
import time

import torch

from .common import compiled_available, eager_mode, example_step, fused_available, tpu_available

COMMAND = "make bench BENCH_CASES=replay"


def _configs(quick: bool) -> dict:
    from llama import LlamaConfig

    five = LlamaConfig(vocab_size=256, dim=256, n_layers=6, n_heads=8, hidden_dim=688,
                       max_seq_len=128)
    if quick:  # seconds: compiling the 5M step's programs in every mode takes minutes
        return {"tiny": _tiny()}
    sizes = {
        "5M": five,
        "50M": LlamaConfig(vocab_size=256, dim=640, n_layers=10, n_heads=10, hidden_dim=1712,
                           max_seq_len=128),
    }
    # REPLAY_BENCH_SIZES=5M: a subset, where the machine cannot run every size
    only = [v for v in os.environ.get("REPLAY_BENCH_SIZES", "").split(",") if v]
    return {k: v for k, v in sizes.items() if not only or k in only}


def _tiny():
    """The quick mode's model (and its copy counts': two fresh compiles per mode)."""
    from llama import LlamaConfig

    return LlamaConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, hidden_dim=176,
                       max_seq_len=32)


class _Checkpointed(torch.nn.Module):
    """A block run under torch.utils.checkpoint. A module holding the block,
    not a closure stored on it: `blk.forward = closure(blk.forward)` is a
    reference cycle, which keeps a finished contender's parameters and
    optimizer state alive until Python's cycle collector runs, and they were
    counted in the next contender's peak (the AC peaks read higher than
    without AC)."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x, freqs):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, x, freqs, use_reentrant=False)


def _checkpointed(model: torch.nn.Module) -> torch.nn.Module:
    """Activation checkpointing of every block (torch.utils.checkpoint)."""
    for i, blk in enumerate(model.layers):
        model.layers[i] = _Checkpointed(blk)
    return model


class _Contender:
    """One contender's model, optimizer and step, built once, stepped in turns."""

    def __init__(self, cfg, name: str, batch: int, seq: int, ac: bool = False):
        from tpuc import dynamo

        self.name = name
        self.device = "cpu" if name.startswith("cpu") else "tpu"
        self.compiled = name.startswith("tpu compiled")
        self.replay = name.split(",")[-1].strip() if self.compiled else None
        self.mode = "fused" if name.startswith("tpu fused") else "strict"
        # "tpu fused" replays its repeated chunks (the default); ", record" records every one
        self.fused_replay = name != "tpu fused, record"
        self.model, self.opt, _, _, step = example_step(cfg, self.device, batch, seq,
                                                        capturable=self.compiled,
                                                        wrap=_checkpointed if ac else None)
        self.step = torch.compile(step, backend="tpu") if self.compiled else step
        self._dynamo = dynamo
        self.host, self.total = [], []

    def run(self, record: bool) -> None:
        from tpuc import _C

        prev = self._dynamo.graph_replay()
        if self.replay:
            self._dynamo.set_graph_replay(self.replay)
        if self.device == "tpu":
            torch.tpu.set_fused_replay(self.fused_replay)
        try:
            ctx = eager_mode(self.mode) if self.device == "tpu" else None
            if ctx:
                ctx.__enter__()
            try:
                t0 = time.perf_counter()
                loss = self.step()
                if self.device == "tpu":
                    _C._flush(-1)  # what is deferred (join mode) is launched: host work done
                t1 = time.perf_counter()
                loss.item()
                t2 = time.perf_counter()
            finally:
                if ctx:
                    ctx.__exit__(None, None, None)
        finally:
            self._dynamo.set_graph_replay(prev)
            if self.device == "tpu":
                torch.tpu.set_fused_replay(True)
        if record:
            self.host.append(t1 - t0)
            self.total.append(t2 - t0)


def _med(xs: list[float]) -> dict:
    s = sorted(xs)
    return {"median": s[len(s) // 2], "min": s[0], "max": s[-1]}


def _speed_rows(quick: bool) -> list[dict]:
    batch, seq = (4, 32) if quick else (8, 128)
    steps, warmup = (2, 2) if quick else (7, 3)
    names = ["cpu eager", "tpu strict"]
    # quick (CI: numbers, not comparisons): the defaults of each mode, not their variants
    if fused_available():
        names += ["tpu fused"] if quick else ["tpu fused, record", "tpu fused"]
    if compiled_available():
        names += (["tpu compiled, replay"] if quick
                  else ["tpu compiled, join", "tpu compiled, record", "tpu compiled, replay"])
    rows = []
    for size, cfg in _configs(quick).items():
        # 50M: CPU eager and compiled replay only. Each contender holds its model,
        # gradients and AdamW state (0.8 GB at 50M) and activations (measured: 3.6 GB peak RSS
        # for these two): more would not fit the 5 GiB a process may use on the shared machine.
        cs = [_Contender(cfg, n, batch, seq) for n in names
              if size != "50M" or n in ("cpu eager", "tpu compiled, replay")]
        for i in range(warmup + steps):  # interleaved: A B C A B C ...
            for c in cs:
                c.run(record=i >= warmup)
        base = _med(cs[0].total)["median"]
        fused = next((_med(c.total)["median"] for c in cs if c.name == "tpu fused"), None)
        for c in cs:
            m = _med(c.total)["median"]
            rows.append({"model": size, "contender": c.name,
                         "params": sum(p.numel() for p in c.model.parameters()),
                         "host_us": {k: v * 1e6 for k, v in _med(c.host).items()},
                         "step_s": _med(c.total), "vs_cpu_eager": base / m,
                         "vs_fused": fused / m if fused else None})
        del cs
        gc.collect()
    return rows


class _ProgramPeaks:
    """Peak device bytes of each program a compiled step launches: while
    active, every graph runner the tpu backend makes (forward, each backward
    part, the optimizer step) resets the peak before its launch and reads it
    after (the step's own peak is then the largest of these)."""

    def __init__(self):
        self.log: list[tuple[int, int, int]] = []  # (runner, in use before, peak)
        self.made = 0

    def __enter__(self):
        from tpuc import dynamo

        self._dynamo, self._orig = dynamo, dynamo._graph_runner

        def make(gm, example_inputs, part=False):
            inner = self._orig(gm, example_inputs, part)
            gid = self.made
            self.made += 1

            def run(args):
                before = torch.tpu.memory_allocated()
                torch.tpu.reset_peak_memory_stats()
                out = inner(args)
                self.log.append((gid, before, torch.tpu.max_memory_allocated()))
                return out

            run._boxed_call = True
            return run

        dynamo._graph_runner = make
        return self

    def __exit__(self, *exc):
        self._dynamo._graph_runner = self._orig
        return False

    def last_step(self) -> list[dict]:
        n = self.made  # one launch of each runner per step
        return [{"program": g, "in_use_before": b, "peak_bytes": p} for g, b, p in self.log[-n:]]


def _peak(cfg, name: str, ac: bool, batch: int, seq: int) -> dict:
    # Measured alone: a fresh Dynamo cache, so this contender's step is compiled for it
    # (every contender compiles the same step function; past Dynamo's recompile limit a
    # later one would silently run eagerly and report an eager peak).
    torch._dynamo.reset()
    gc.collect()  # nothing of an earlier contender may count in this one's peak
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    c = _Contender(cfg, name, batch, seq, ac=ac)
    peak = 0
    for _ in range(3):
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        c.run(record=True)
        torch.tpu.synchronize()
        peak = torch.tpu.max_memory_allocated()  # the last (steady) step's
    row = {"contender": name, "ac": ac, "peak_bytes": peak, "in_use_before": before,
           "step_s": _med(c.total)["median"]}
    if name == "tpu compiled, replay":  # where the peak is: one more step, program by program
        with _ProgramPeaks() as pp:
            torch._dynamo.reset()
            del c
            gc.collect()
            c = _Contender(cfg, name, batch, seq, ac=ac)
            for _ in range(3):
                c.run(record=False)
        row["program_peaks"] = pp.last_step()
    return row


_COPY_STEP = """
import sys
sys.path.insert(0, {examples!r})
import torch, tpuc
from llama import LlamaConfig, Llama
cfg = LlamaConfig(**{cfg!r})
torch.manual_seed(0)
m = Llama(cfg).to("tpu")
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, capturable=True)
x = torch.randint(0, cfg.vocab_size, ({batch}, {seq})).to("tpu")
y = torch.randint(0, cfg.vocab_size, ({batch}, {seq})).to("tpu")
@torch.compile(backend="tpu")
def step():
    _, loss = m(x, y); opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    return loss
for _ in range(3):
    step().item()
print("params", len(list(m.parameters())))
"""


def _copy_rows(cfg, batch: int, seq: int, modes: tuple[str, ...] = ("replay", "join")) -> list[dict]:
    """Copies of donated parameters in the optimized programs XLA compiled for
    the step (its own dump, fresh compiles), per graph-replay mode."""
    import dataclasses
    import os
    import subprocess
    import sys
    import tempfile

    from tpuc._xla_dump import dump_copies

    examples = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
    code = _COPY_STEP.format(examples=os.path.abspath(examples), cfg=dataclasses.asdict(cfg),
                             batch=batch, seq=seq)
    rows = []
    for mode in modes:
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={d}", TPUC_CACHE_DIR="off",
                       TPUC_GRAPH_REPLAY=mode)
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, timeout=900)
            if r.returncode != 0:
                rows.append({"mode": mode, "error": r.stderr[-200:]})
                continue
            progs = [p for p in dump_copies(d) if p["aliased"]]
            rows.append({"mode": mode, "params": int(r.stdout.split("params")[1].split()[0]),
                         "programs": len(progs),
                         "donated": sum(p["aliased"] for p in progs),
                         "copies": sum(p["copies"] for p in progs)})
    return rows


def run(quick: bool) -> dict:
    if not tpu_available():
        return {"title": "Replay", "command": COMMAND, "rows": [], "memory_rows": [],
                "notes": "tpu unavailable on this install"}
    # The interleaved contenders compile the same step function with different closures:
    # each is a Dynamo recompile, and past the default limit (8) the later ones would run
    # eagerly without saying so.
    import torch._dynamo.config as dcfg

    load_before = os.getloadavg()  # the shared machine's load: how far to trust the step times
    # REPLAY_BENCH_ONLY=peaks: the memory rows alone (a minute at 5M, load-independent)
    peaks_only = os.environ.get("REPLAY_BENCH_ONLY", "") == "peaks"
    limit = dcfg.recompile_limit
    dcfg.recompile_limit = max(limit, 64)
    try:
        rows = [] if peaks_only else _speed_rows(quick)
    finally:
        dcfg.recompile_limit = limit
    batch, seq = (4, 32) if quick else (8, 128)
    names = ["tpu strict"]
    if fused_available():
        names.append("tpu fused")
    if compiled_available():
        names += ["tpu compiled, join", "tpu compiled, replay"]
    mem = []
    for size, cfg in _configs(quick).items():
        if size == "50M":  # peaks at 5M (and tiny): eight fresh 50M compiles take too long here
            continue
        for ac in (False, True):
            for n in names:
                # quick (CI): with checkpointing only strict (the baseline of 'vs strict') and
                # compiled replay (the case's subject); each peak is a fresh compile
                if quick and ac and n not in ("tpu strict", "tpu compiled, replay"):
                    continue
                try:
                    row = _peak(cfg, n, ac, batch, seq)
                except Exception as e:  # reported, not hidden
                    row = {"contender": n, "ac": ac, "error": f"{type(e).__name__}: {e}"[:200]}
                row["model"] = size
                mem.append(row)
    if peaks_only:
        copies = []
    else:
        copies = (_copy_rows(_tiny(), 4, 32, ("replay",)) if quick
                  else _copy_rows(_configs(False)["5M"], batch, seq))
    return {
        "title": "Replay: the compiled step launched without recording its ops",
        "copy_rows": copies,
        "load_avg": {"before": load_before, "after": os.getloadavg(), "cores": os.cpu_count()},
        "command": COMMAND,
        "batch": batch, "seq": seq,
        "rows": rows,
        "memory_rows": mem,
        "memory_model": ", ".join(k for k in _configs(quick) if k != "50M"),
        "copy_model": "tiny (dim 64, 2 layers, 4 x 32 tokens)" if quick else "5M",
        "quick": quick,
        "notes": "Example model, AdamW (capturable for the compiled step), float32. Host µs = "
                 "time from calling the step until its programs are launched (the step "
                 "returns, then the deferred ops are flushed); step s = until loss.item() "
                 "returns. 'join' records the forward, backward and AdamW graphs op by op "
                 "every step into ONE program; 'record' records each graph every step into "
                 "its own program; 'replay' records each graph once and then launches its "
                 "kept program on the new arguments. Contenders run interleaved, one step "
                 "each in turn; medians [min, max]. Memory: peak device bytes of the third "
                 "step; 'AC' = torch.utils.checkpoint around every block (a module wrapping each "
                 "block; the cycle collector runs before each contender, whose bytes in use "
                 "before it starts are in_use_before).",
    }
