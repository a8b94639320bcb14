"""The paths a user takes with Hugging Face on "tpu", each against the CPU
(tiny Llama from tests/models/families.py, saved with save_pretrained)."""
from __future__ import annotations

import copy

import pytest
import torch

from models import families as F

tf = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, torch.nn.Module]:
    F.quiet()
    torch.manual_seed(0)
    model = F.FAMILIES["llama"].build().eval()
    d = str(tmp_path_factory.mktemp("llama"))
    model.save_pretrained(d)
    return d, model


IDS = F._ids(b=2, s=6)


def _greedy(model: torch.nn.Module, device: str, **kw: object) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(input_ids=IDS.to(device), max_new_tokens=5, do_sample=False, **kw).cpu()


@pytest.mark.parametrize("device_map", ["tpu", "auto", {"": "tpu"}])
def test_from_pretrained_device_map(saved, device_map) -> None:
    d, cpu = saved
    m = tf.AutoModelForCausalLM.from_pretrained(d, device_map=device_map)
    assert {p.device.type for p in m.parameters()} == {"tpu"}
    assert torch.equal(_greedy(m, "tpu"), _greedy(cpu, "cpu"))


def _reset_accelerate() -> None:
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def test_accelerate_finds_tpu() -> None:
    import accelerate
    from accelerate.utils import get_max_memory

    assert accelerate.PartialState().device.type == "tpu"
    assert accelerate.Accelerator().device.type == "tpu"
    _reset_accelerate()
    assert accelerate.Accelerator(cpu=True).device.type == "cpu"
    _reset_accelerate()
    mm = get_max_memory()
    assert 0 in mm and mm[0] > 0
    assert get_max_memory({0: "1GB", "cpu": "2GB"}) == {0: 10**9, "cpu": 2 * 10**9}


def test_safetensors_load_file_on_tpu(saved) -> None:
    from safetensors.torch import load_file

    d, cpu = saved
    sd = load_file(f"{d}/model.safetensors", device="tpu")
    assert {t.device.type for t in sd.values()} == {"tpu"}
    m = copy.deepcopy(cpu).to("tpu")
    m.load_state_dict(sd, strict=False)
    for k, v in cpu.state_dict().items():
        if k in sd:
            assert torch.equal(m.state_dict()[k].cpu(), v), k


def test_beam_search_matches_cpu(saved) -> None:
    _, cpu = saved
    dev = copy.deepcopy(cpu).to("tpu")
    kw = dict(num_beams=3, early_stopping=True)
    assert torch.equal(_greedy(dev, "tpu", **kw), _greedy(cpu, "cpu", **kw))


def test_sampling_is_seeded_and_within_top_k(saved) -> None:
    # The tpu generator is not the CPU's, so the draws differ from the CPU's;
    # what must hold: a seed reproduces them, and top-k keeps them in the k
    # most likely tokens of the CPU's own distribution.
    _, cpu = saved
    dev = copy.deepcopy(cpu).to("tpu")
    kw = dict(max_new_tokens=4, do_sample=True, top_k=5, top_p=0.9)
    outs = []
    for _ in range(2):
        torch.manual_seed(123)
        with torch.no_grad():
            outs.append(dev.generate(input_ids=IDS.to("tpu"), **kw).cpu())
    assert torch.equal(outs[0], outs[1])
    seq = outs[0]
    with torch.no_grad():
        logits = cpu(seq).logits
    for t in range(IDS.shape[1], seq.shape[1]):
        top = logits[:, t - 1].topk(5).indices
        assert all(seq[b, t] in top[b] for b in range(seq.shape[0]))


def test_static_cache_compiles_once(saved) -> None:
    _, cpu = saved
    dev = copy.deepcopy(cpu).to("tpu")
    kw = dict(cache_implementation="static")
    s0 = torch.tpu.stats()
    first = _greedy(dev, "tpu", **kw)
    assert torch.equal(first, _greedy(cpu, "cpu"))
    s1 = torch.tpu.stats()
    # the decode step is one graph, traced once: not once per token (4 decode steps)
    assert s1["dynamo_compiles"] - s0["dynamo_compiles"] == 1, s1["graph_replay_reasons"]
    again = _greedy(dev, "tpu", **kw)  # same shapes: every program is cached
    assert torch.equal(again, first)
    s2 = torch.tpu.stats()
    assert s2["compiles"] == s1["compiles"] and s2["dynamo_compiles"] == s1["dynamo_compiles"]
    # each of the 4 decode steps (5 new tokens; the first comes from the eager prefill)
    # replays the recorded graph: no re-recording per token
    assert s2["graph_replays"] - s1["graph_replays"] == 4
    assert s2["graph_records"] == s1["graph_records"] and s2["graph_rerecords"] == s1["graph_rerecords"]


def _train(device: str, model: torch.nn.Module, out: str) -> list[float]:
    _reset_accelerate()
    ds = [{"input_ids": F._ids(b=1, s=8, seed=i)[0], "labels": F._ids(b=1, s=8, seed=i)[0]} for i in range(8)]
    args = tf.TrainingArguments(output_dir=out, max_steps=4, per_device_train_batch_size=2,
                                learning_rate=1e-2, logging_steps=1, report_to=[], save_strategy="no",
                                use_cpu=device == "cpu", seed=0, dataloader_num_workers=0)
    trainer = tf.Trainer(model=model, args=args, train_dataset=ds)
    if device == "tpu":
        assert args.device.type == "tpu"
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_trainer_loss_matches_cpu(saved, tmp_path) -> None:
    _, cpu = saved
    ref = _train("cpu", copy.deepcopy(cpu).double().train(), str(tmp_path / "r"))
    c = _train("cpu", copy.deepcopy(cpu).train(), str(tmp_path / "c"))
    d = _train("tpu", copy.deepcopy(cpu).train(), str(tmp_path / "d"))
    assert len(d) == len(c) == len(ref) == 4
    for lr, lc, ld in zip(ref, c, d):
        # the logged loss is rounded to 4 significant digits by the Trainer
        bound = 4 * abs(lc - lr) + 1e-3 * abs(lr)
        assert abs(ld - lr) <= bound, (ref, c, d)


def test_safetensors_loaded_weights_run_on_device(tmp_path) -> None:
    """A tensor from load_file(device="tpu") is an ordinary tpu tensor: ops on it are lowered
    (safetensors 0.8 builds device tensors as a uint8 buffer viewed as the dtype, which every
    lowering declined, so each op on such a weight ran on the CPU fallback)."""
    from safetensors.torch import load_file, save_file

    w = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    save_file({"w": w, "b": torch.arange(4, dtype=torch.int64)}, str(tmp_path / "x.safetensors"))
    sd = load_file(str(tmp_path / "x.safetensors"), device="tpu:0")
    assert sd["w"].device.type == "tpu" and sd["b"].dtype == torch.int64
    before = dict(torch.tpu.stats()["fallbacks"])
    y = (sd["w"] * 2 + 1).sum(0).cpu()
    assert dict(torch.tpu.stats()["fallbacks"]) == before
    assert torch.equal(y, (w * 2 + 1).sum(0))
    assert torch.equal(sd["b"].cpu(), torch.arange(4))


def _fp16_loop(accelerated: bool) -> list[torch.Tensor]:
    """Four float16 mixed-precision steps with loss scaling, through accelerate or written out
    as a CUDA script writes them with "tpu" for "cuda"."""
    import accelerate

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    if accelerated:
        acc = accelerate.Accelerator(mixed_precision="fp16")
        assert acc.device.type == "tpu" and acc.mixed_precision == "fp16"
        assert isinstance(acc.scaler, torch.amp.GradScaler) and acc.scaler._device == "tpu"
        model, opt = acc.prepare(model, opt)
    else:
        model = model.to("tpu")
        scaler = torch.amp.GradScaler("tpu")
    x = x.to("tpu")
    out = []
    for _ in range(4):
        opt.zero_grad()
        if accelerated:
            y = model(x)  # float16 under autocast, returned as float32 (accelerate's default)
            acc.backward(y.float().pow(2).mean())
            opt.step()
        else:
            with torch.autocast("tpu", dtype=torch.float16):
                y = model(x)
            scaler.scale(y.float().pow(2).mean()).backward()
            scaler.step(opt)
            scaler.update()
        out.append(y.detach().float().cpu())  # float16 values: a float32 forward differs
    return out + [p.detach().cpu() for p in model.parameters()]


def test_accelerate_fp16_is_autocast_and_grad_scaler_on_tpu() -> None:
    """accelerate 1.15 refused mixed_precision="fp16" (the Trainer's fp16=True) for any device
    outside its list; tpuc's shim sets it up as for CUDA: the accelerated loop equals the loop
    written with torch.autocast and torch.amp.GradScaler bit for bit, on the device."""
    _reset_accelerate()
    before = dict(torch.tpu.stats()["fallbacks"])
    try:
        got = _fp16_loop(True)
    finally:
        _reset_accelerate()
    want = _fp16_loop(False)
    assert dict(torch.tpu.stats()["fallbacks"]) == before
    for a, b in zip(got, want):
        assert torch.equal(a, b)
