"""TorchTitan 0.3.0's FLUX recipe (``--module flux --config flux_debugmodel``) through its stock
FluxTrainer on "tpu" at one process, against the same recipe on the CPU.

Launched as a user would (``torchrun -m tpuc.integrations.torchtitan.train``), nothing of
torchtitan edited, offline: tiny T5 and CLIP encoders, the flux-debug autoencoder with seeded
weights and a synthetic cc12m-layout image set come from
``tpuc.integrations.torchtitan.assets.ensure_flux_assets``. The transformer is flux-debug as
TorchTitan defines it (258M parameters); only the run's sizes are small (32 px images, 8 T5
tokens, batch 2, 3 steps), and validation is off (it samples 48 images).

Same scheme and bound as test_trainer.py: one seed checkpoint written by TorchTitan on the CPU,
a float64 CPU run as the reference, "tpu"'s loss within 4x the CPU float32 run's error plus 64
float32 roundings; steady state (after step 2) without compiles or new CPU fallbacks. FLUX draws
its noise and timesteps on the device in every step, so the "tpu" run takes those draws from the
CPU's generator (``--tpuc.cpu_rng=1``, tpuc.integrations.torchtitan.flux) and both sides train on
the same noise. About 4 launches of a 258M-parameter model: ``make test-titan-long`` only; the
CPU-stream mode and the autoencoder load shim are checked in ``make test``. The long target also
runs flux-debug cut to 1 + 1 blocks compiled (``--compile.enable --compile.backend tpu``) and in
fused mode (``TPUC_EAGER=fused``) at one process, and the cut model at FSDP=2 (float32, bf16).
"""
from __future__ import annotations

import os

import pytest
import torch

from test_trainer import EPS32, check_against_reference, check_mode_steady_state, check_steady_state
from trainer_runs import DTENSOR, NO_SAVE, RECIPES, Runner

from tpuc.integrations.torchtitan import flux
from tpuc.integrations.torchtitan.assets import ensure_flux_assets

LONG = os.environ.get("TPUC_TITAN_LONG") == "1"


def _draws(device: str) -> list[torch.Tensor]:
    """What FLUX's trainer draws after it reseeds: an init function (the autoencoder's
    convolutions), in-place draws, noise like the latents, timesteps under torch.device;
    then a plain CPU draw, to check the CPU stream advanced identically."""
    torch.manual_seed(7)
    lat = torch.zeros(2, 16, 4, 4, device=device)
    noise = torch.randn_like(lat)
    with torch.device(device):
        t = torch.rand((2,))
    w = torch.empty(3, 5, device=device).uniform_(-0.5, 0.5)
    g = torch.empty(4, device=device).normal_(0.0, 2.0)
    k = torch.nn.init.kaiming_uniform_(torch.empty(6, 3, device=device))  # a module's init
    return [x.cpu() for x in (noise, t, w, g, k)] + [torch.randn(3)]


def test_cpu_random_stream_gives_the_cpu_draws_on_tpu():
    ref = _draws("cpu")
    mode = flux.CpuRandomStream()
    with mode:
        got = _draws("tpu")
        assert torch.randn_like(torch.zeros(2, device="tpu")).device.type == "tpu"
    for r, g in zip(ref, got):
        assert torch.equal(r, g)
    # outside the mode "tpu" draws from its own generator (not the CPU's values)
    torch.manual_seed(7)
    assert not torch.equal(torch.randn(2, 16, 4, 4, device="tpu").cpu(), ref[0])


def _draws_in(device: str, dtype: torch.dtype) -> list[torch.Tensor]:
    """FLUX's step draws (noise like the latents, timesteps under torch.device) and an in-place
    draw in ``dtype``, of sizes where the CPU's float64 stream differs from its float32 one."""
    torch.manual_seed(3)
    noise = torch.randn_like(torch.zeros(2, 16, 4, 4, device=device, dtype=dtype))
    with torch.device(device):
        t = torch.rand((300,), dtype=dtype)
    g = torch.empty(300, device=device, dtype=dtype).normal_()
    return [x.cpu() for x in (noise, t, g)]


def test_every_dtype_draws_the_float32_noise():
    """The CPU reference's float64 and bf16 FLUX runs (CpuRandomStream("cpu")) and "tpu"'s bf16
    run (--tpuc.cpu_rng=1) train on the float32 run's noise, cast: without the mode the CPU's
    float64 draws differ from its float32 ones (so the float64 reference trained on other
    noise)."""
    f32 = _draws_in("cpu", torch.float32)
    assert not all(torch.equal(a.float(), b) for a, b in zip(_draws_in("cpu", torch.float64), f32))
    with flux.CpuRandomStream("cpu"):
        f64 = _draws_in("cpu", torch.float64)
        b16 = _draws_in("cpu", torch.bfloat16)
        assert all(torch.equal(a, b) for a, b in zip(_draws_in("cpu", torch.float32), f32))
    with flux.CpuRandomStream("tpu"):
        dev16 = _draws_in("tpu", torch.bfloat16)
    for a, b, c, r in zip(f64, b16, dev16, f32):
        assert a.dtype == torch.float64 and b.dtype == c.dtype == torch.bfloat16
        assert torch.equal(a, r.double()) and torch.equal(b, r.bfloat16()) and torch.equal(c, b)


def test_autoencoder_load_accepts_cpu_with_an_index(tmp_path):
    pytest.importorskip("torchtitan")
    from safetensors.torch import save_file
    from torchtitan.models.flux.model import autoencoder

    save_file({"w": torch.arange(6.0)}, str(tmp_path / "x.safetensors"))
    flux.apply_load_shim()
    sd = autoencoder.load_sft(str(tmp_path / "x.safetensors"), device="cpu:0")
    assert torch.equal(sd["w"], torch.arange(6.0))


class FluxRunner(Runner):
    def __init__(self, root, steps: int = 3, batch: int = 2, layers: int | None = None):
        super().__init__(root, "flux", steps=steps, batch=batch, layers=layers)
        a = ensure_flux_assets(str(root / "assets"))
        self.common = [
            *RECIPES["flux"],
            "--hf_assets_path", a["tokenizer"],
            # FluxTestTokenizer (the recipe's test mode): our tokenizer.json for T5 and CLIP
            "--tokenizer.test_mode", "--tokenizer.t5_tokenizer_path", a["tokenizer"],
            "--tokenizer.clip_tokenizer_path", a["tokenizer"], "--tokenizer.max_t5_encoding_len", "8",
            "--encoder.t5_encoder", a["t5_encoder"], "--encoder.clip_encoder", a["clip_encoder"],
            "--encoder.autoencoder_path", a["autoencoder"],
            "--dataloader.dataset_path", a["cc12m_test"], "--dataloader.img_size", "32",
            "--training.steps", str(steps), "--training.local_batch_size", str(batch),
            "--training.mixed_precision_param", "float32", "--debug.seed", "0",
            "--validator.no-enable", "--metrics.log_freq", "1",
        ]
        if layers is not None:
            self.common.append(f"--tpuc.layers={layers}")


@pytest.mark.skipif(not LONG, reason="four launches of flux-debug (258M parameters), several "
                    "minutes: `make test-titan-long` (TPUC_TITAN_LONG=1)")
def test_flux_stock_trainer_loss_matches_cpu(tmp_path):
    runner = FluxRunner(tmp_path)
    layout = ["--parallelism.data_parallel_shard_degree", "1"]
    ref = runner.run(1, *layout, device="cpu", dtype="float64")
    cpu = runner.run(1, *layout, device="cpu")
    dev = runner.run(1, *layout, "--tpuc.cpu_rng=1")
    assert len(dev) == 3
    check_against_reference(dev, cpu, ref)
    check_steady_state(dev)


@pytest.fixture(scope="module")
def flux_l1(tmp_path_factory):
    """flux-debug cut to 1 + 1 blocks at one process: the runner, and one CPU launch's seed,
    float64 and float32 references, shared by the compiled and fused tests."""
    runner = FluxRunner(tmp_path_factory.mktemp("flux-l1"), layers=1)
    ref, cpu = runner.run_many(1, [runner.seed_plan(),
                                   runner.plan(1, *FLUX_ONE, device="cpu", dtype="float64"),
                                   runner.plan(1, *FLUX_ONE, device="cpu")])[1:]
    return runner, ref, cpu


FLUX_ONE = ["--parallelism.data_parallel_shard_degree", "1", "--checkpoint.load_only"]
# the two other "tpu" execution modes: TorchTitan's --compile.enable with Dynamo backend "tpu"
# (each double- and single-stream block one fullgraph graph), and fused eager mode
MODES = {"compiled": ({}, ["--compile.enable", "--compile.backend", "tpu"]),
         "fused": ({"TPUC_EAGER": "fused"}, [])}


@pytest.mark.skipif(not LONG, reason="flux-debug launches (seed + CPU f64/f32 shared, one tpu "
                    "launch each), minutes: `make test-titan-long` (TPUC_TITAN_LONG=1)")
@pytest.mark.parametrize("mode", list(MODES))
def test_flux_compiled_and_fused_steps_match_cpu(flux_l1, mode, monkeypatch):
    """flux-debug cut to 1 + 1 blocks (--tpuc.layers=1, as the FSDP=2 tests), one process,
    through the FluxTrainer compiled (``--compile.enable --compile.backend tpu``) or in fused
    mode (``TPUC_EAGER=fused``): the eager bound of the float64 CPU reference; no CPU fallback
    at all; nothing compiled after step 2 (compiled: no new Dynamo graph after step 1)."""
    runner, ref, cpu = flux_l1
    env, flags = MODES[mode]
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # the launch's processes inherit it
    dev = runner.run(1, *FLUX_ONE, "--tpuc.cpu_rng=1", *flags)
    assert len(dev) == 3
    check_against_reference(dev, cpu, ref)
    check_mode_steady_state(dev, mode)
    print(f"{mode} FLUX: tpu", [r["loss"] for r in dev], "f64", [r["loss"] for r in ref],
          "compiles", dev[-1]["compiles"], "dynamo graphs", dev[-1]["dynamo_graphs"])


# ---- FSDP=2 and bf16 mixed precision (make test-titan-long) ---------------------------------

# TorchTitan 0.3.0's default SPMD backend (spmd_types) fails before step 1 with more than one
# rank on torch 2.13 (docs/torchtitan.md); its DTensor backend works.
FSDP2 = ["--parallelism.data_parallel_shard_degree", "2", *DTENSOR, *NO_SAVE]
BF16 = ["--training.mixed_precision_param", "bfloat16"]
# flux-debug cut to its first double-stream and first single-stream block (--tpuc.layers=1:
# 138M of its 258M parameters): two ranks of the float64 reference and of "tpu" then fit a
# shared machine; the blocks kept are TorchTitan's own
FSDP2_LAYERS = 1

_fsdp2: dict[str, list[dict]] = {}


def fsdp2_runs(root) -> dict[str, list[dict]]:
    """FSDP=2 (2 processes) runs shared by the two tests below: one CPU launch (float64,
    float32 and bf16 mixed precision, from one seed checkpoint) and one "tpu" launch (float32
    and bf16, ``--tpuc.cpu_rng=1``)."""
    if not _fsdp2:
        runner = FluxRunner(root, layers=FSDP2_LAYERS)
        ref, cpu, cpu16 = runner.run_many(2, [
            runner.plan(2, *FSDP2, device="cpu", dtype="float64"),
            runner.plan(2, *FSDP2, device="cpu"),
            runner.plan(2, *FSDP2, *BF16, device="cpu")])
        dev, dev16 = runner.run_many(2, [runner.plan(2, *FSDP2, "--tpuc.cpu_rng=1"),
                                          runner.plan(2, *FSDP2, *BF16, "--tpuc.cpu_rng=1")])
        _fsdp2.update(ref=ref, cpu=cpu, cpu16=cpu16, dev=dev, dev16=dev16)
    return _fsdp2


@pytest.fixture(scope="module")
def flux_root(tmp_path_factory):
    return tmp_path_factory.mktemp("flux-fsdp2")


@pytest.mark.skipif(not LONG, reason="2 launches of 2 flux-debug processes (138M parameters "
                    "each, sharded), minutes: `make test-titan-long` (TPUC_TITAN_LONG=1)")
def test_flux_fsdp2_loss_matches_cpu(flux_root):
    """FSDP over 2 ranks on "tpu" (the tpu_dist process group) against the same layout on the
    CPU with gloo: the float64-derived bound of the one-process test, no compile and no new
    fallback after step 2."""
    runs = fsdp2_runs(flux_root)
    assert len(runs["dev"]) == 3
    check_against_reference(runs["dev"], runs["cpu"], runs["ref"])
    check_steady_state(runs["dev"])


@pytest.mark.skipif(not LONG, reason="shares test_flux_fsdp2_loss_matches_cpu's launches: "
                    "`make test-titan-long` (TPUC_TITAN_LONG=1)")
def test_flux_fsdp2_bf16_matches_cpu(flux_root):
    """``--training.mixed_precision_param bfloat16`` at FSDP=2: FSDP2 gathers bf16 parameters
    (float32 reduction) and FluxTrainer runs its encoders and autoencoder in bf16. Both devices
    round to bf16 at the same places but may round an intermediate differently, so "tpu" must be
    as close to the float64 run as the CPU bf16 run is, within a small multiple of the CPU's own
    bf16 error (as llama3's bf16 test): |tpu - f64| <= 4 max_steps |cpu_bf16 - f64| + 64 eps32
    |f64|."""
    runs = fsdp2_runs(flux_root)
    ref, cpu16, dev16 = runs["ref"], runs["cpu16"], runs["dev16"]
    assert [r["step"] for r in dev16] == [r["step"] for r in ref] == [r["step"] for r in cpu16]
    cpu_err = max(abs(c["loss"] - r["loss"]) for c, r in zip(cpu16, ref))
    for d, r in zip(dev16, ref):
        bound = 4 * cpu_err + 64 * EPS32 * abs(r["loss"])
        assert abs(d["loss"] - r["loss"]) <= bound, (d, r, bound)
    # bf16 must be in effect: the CPU bf16 run differs from the float32 one by more than
    # float32 roundings (else the flag was ignored and the bound above proves nothing)
    assert any(abs(a["loss"] - b["loss"]) > 64 * EPS32 * abs(b["loss"])
               for a, b in zip(cpu16, runs["cpu"]))
    check_steady_state(dev16)


def test_layers_cut_keeps_flux_first_blocks():
    """``--tpuc.layers=N`` on FLUX (no ``layers`` list): the first N double-stream and N
    single-stream blocks of TorchTitan's own config, the rest of the model unchanged."""
    import types

    pytest.importorskip("torchtitan")
    from torchtitan.models.flux import model_registry

    from tpuc.integrations.torchtitan.train import _cut_layers

    full = model_registry("flux-debug")
    cut = model_registry("flux-debug")
    _cut_layers(types.SimpleNamespace(model_spec=cut), 1)
    assert (len(cut.model.double_blocks), len(cut.model.single_blocks)) == (1, 1)
    assert (cut.model.depth, cut.model.depth_single_blocks) == (1, 1)
    with torch.device("meta"):
        whole, part = full.model.build(), cut.model.build()
    blocks = sum(p.numel() for b in (*whole.double_blocks[1:], *whole.single_blocks[1:])
                 for p in b.parameters())
    assert sum(p.numel() for p in part.parameters()) == \
        sum(p.numel() for p in whole.parameters()) - blocks
    with pytest.raises(SystemExit, match="2 double and 2 single blocks"):
        _cut_layers(types.SimpleNamespace(model_spec=model_registry("flux-debug")), 3)
