"""TorchTitan llama3 -> Hugging Face names (tpuc.post_training.weights): the directory that
save_hf_dir writes loads in transformers and gives the TorchTitan model's logits (CPU, float32:
both compute the same function, so they agree to a few float32 roundings of the logits)."""
from __future__ import annotations

import tempfile

import pytest
import torch

pytest.importorskip("torchtitan", reason="TorchTitan is absent: make titan-setup")


@pytest.mark.parametrize("tied", [False, True])
def test_save_hf_dir_loads_in_transformers_with_the_same_logits(tied):
    from transformers import AutoModelForCausalLM

    from tpuc.integrations.torchtitan import swaps
    from tpuc.post_training.weights import iter_full_state, llama3_config, save_hf_dir

    cfg = llama3_config(vocab_size=96, dim=128, n_layers=2, n_heads=2, n_kv_heads=1,
                        hidden_dim=256, tie_embeddings=tied)
    torch.manual_seed(0)
    m = cfg.build()
    m.init_weights(buffer_device=torch.device("cpu"))
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    swaps.swap_attention_modules(m)
    d = tempfile.mkdtemp(prefix="tpuc-hf-names-")
    save_hf_dir(d, cfg, iter_full_state(m))
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    assert hf.config.tie_word_embeddings == tied
    x = torch.randint(0, 96, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = m(x).double()
        b = hf(x).logits.double()
        # float64 reference: the same TorchTitan model in float64
        ref = m.double()(x)
    err_titan = (a - ref).abs().max().item()
    err_hf = (b - ref).abs().max().item()
    # each side's float32 error against float64; the converted model may not be much worse
    assert err_hf <= 8 * err_titan + 1e-6 * ref.abs().max().item(), (err_hf, err_titan)
