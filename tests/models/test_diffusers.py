"""A diffusers FluxPipeline from tiny random configs on "tpu" against the
CPU: the tiny CLIP and T5 text encoders run on token ids built here (no
tokenizer files: prompt_embeds are passed in), then 2 denoising steps of the
Flux transformer and the VAE decode. The bound comes from the CPU's own
sensitivity (Flux's RoPE runs in float32, so there is no float64 reference):
the change in the CPU image when the transformer's weights get one float32
ulp of relative noise - the size of difference any reordering of float32
sums makes - times 8, plus 16 ulps. About 3 minutes here: run by
`make models` (TPUC_MODELS_FULL=1), not in `make test`."""
from __future__ import annotations

import copy
import os

import pytest
import torch

if os.environ.get("TPUC_MODELS_FULL") != "1":
    pytest.skip("about 3 minutes: run by `make models` (TPUC_MODELS_FULL=1)", allow_module_level=True)
diffusers = pytest.importorskip("diffusers")
tf = pytest.importorskip("transformers")


def _pipe():
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])
    vae = AutoencoderKL(sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,),
                        layers_per_block=1, latent_channels=1, norm_num_groups=1, use_quant_conv=False,
                        use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035,
                        down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",))
    clip = tf.CLIPTextModel(tf.CLIPTextConfig(vocab_size=99, hidden_size=32, intermediate_size=37,
                                              num_hidden_layers=2, num_attention_heads=4,
                                              projection_dim=32, max_position_embeddings=16))
    t5 = tf.T5EncoderModel(tf.T5Config(vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4))
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=clip,
                        tokenizer=None, text_encoder_2=t5, tokenizer_2=None, transformer=transformer)
    return pipe.set_progress_bar_config(disable=True) or pipe


def _image(pipe, device: str) -> torch.Tensor:
    ids = torch.randint(1, 99, (1, 8), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        pooled = pipe.text_encoder(ids).pooler_output
        embeds = pipe.text_encoder_2(ids).last_hidden_state
        latents = torch.randn(1, 64, 4,  # (16/2)^2 packed 2x2 patches, 4 channels
                               generator=torch.Generator().manual_seed(2))
        out = pipe(prompt_embeds=embeds, pooled_prompt_embeds=pooled, height=16, width=16,
                   num_inference_steps=2, guidance_scale=3.5, latents=latents.to(device),
                   output_type="pt", max_sequence_length=8)
    return out.images.cpu().double()


def test_flux_pipeline_matches_cpu() -> None:
    cpu = _pipe()
    ref = _image(cpu, "cpu")
    noisy = copy.deepcopy(cpu)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in noisy.transformer.parameters():
            p.mul_(1 + torch.finfo(torch.float32).eps * torch.randn(p.shape, generator=g))
    sens = float((_image(noisy, "cpu") - ref).abs().max())
    dev = _pipe().to("tpu")
    got = _image(dev, "tpu")
    assert got.shape == ref.shape
    err = float((got - ref).abs().max())
    assert err <= 8 * sens + 16 * torch.finfo(torch.float32).eps, (err, sens)
