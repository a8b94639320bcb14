"""A diffusers FluxPipeline from tiny random configs on "tpu" against the
CPU: the tiny CLIP and T5 text encoders run on token ids built here (no
tokenizer files: prompt_embeds are passed in), then 2 denoising steps of the
Flux transformer and the VAE decode, every module in eval mode (as
``from_pretrained`` leaves them; built from configs they start in training
mode, and the encoders' dropout would make each image a random draw).
Bound: each side's error against the same pipeline in float64 on the CPU -
"tpu" within 4x the CPU float32 run's own error plus 16 float32 ulps of the
image's scale - and no CPU fallback. Part of `make test`: ~220 small
programs compile on a cold cache (about 20 s of a quiet 2-core machine)."""
from __future__ import annotations

import copy

import pytest
import torch

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
    for m in (transformer, vae, clip, t5):
        m.eval()  # built from configs they start in training mode (dropout on)
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
    assert not any(m.training for m in (cpu.text_encoder, cpu.text_encoder_2, cpu.transformer, cpu.vae))
    ref32 = _image(cpu, "cpu")
    assert torch.equal(_image(cpu, "cpu"), ref32)  # deterministic: no random op left in the pipeline
    ref64 = _image(copy.deepcopy(cpu).to(torch.float64), "cpu")
    dev = _pipe().to("tpu")
    before = dict(torch.tpu.stats()["fallbacks"])
    got = _image(dev, "tpu")
    assert dict(torch.tpu.stats()["fallbacks"]) == before, "an op of the pipeline ran on the CPU"
    assert got.shape == ref64.shape == (1, 3, 16, 16)
    assert float(ref64.std()) > 1e-3  # a real image, not a constant
    cpu_err = float((ref32 - ref64).abs().max())
    err = float((got - ref64).abs().max())
    bound = 4 * cpu_err + 16 * torch.finfo(torch.float32).eps * float(ref64.abs().max())
    assert err <= bound, (err, cpu_err, bound)
