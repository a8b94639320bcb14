"""Offline assets for TorchTitan's debug recipes, generated small and deterministic.

The torchtitan 0.3.0 wheel ships no ``tests/assets`` (its recipes point at
``./tests/assets/tokenizer`` and the ``c4_test`` JSON set), and nothing may be
downloaded at run time. This module writes, from text it generates itself
(seeded, so every machine gets the same files):

- ``tokenizer/tokenizer.json`` + ``tokenizer_config.json``: a ByteLevel BPE
  trained with the ``tokenizers`` library, vocabulary <= 2000 (the debug models
  have 2048 embedding rows), with ``<|begin_of_text|>`` / ``<|end_of_text|>``;
- ``c4_test/data.json``: JSON lines ``{"text": ...}`` that
  ``datasets.load_dataset(<dir>, split="train")`` reads as TorchTitan's c4_test.

    python -m tpuc.integrations.torchtitan.assets [--flux] OUT_DIR

``--flux`` adds FLUX's assets (:func:`ensure_flux_assets`: tiny T5/CLIP encoders, an
autoencoder file, a synthetic image set).
"""
from __future__ import annotations

import json
import os
import random
import sys

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"

_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more time about can what up other into could them some than then its only my two may first "
    "new any these do like our over such after most made also did many before must through back "
    "years where much your way well down should because each just those people how too little "
    "state good very make world still own see men work long get here between both life being under "
    "never day same another know while last might us great old year off come since against go came "
    "right used take three device tensor program compile model layer attention expert token "
    "gradient loss train step memory matrix vector batch sequence kernel buffer graph shape value"
).split()


def generate_text(n_docs: int = 600, seed: int = 1234) -> list[str]:
    """Documents of a few English-like sentences each (seeded, reproducible)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.randint(4, 14)):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 18))]
            words[0] = words[0].capitalize()
            sentences.append(" ".join(words) + rng.choice([".", ".", ".", "?", "!"]))
        docs.append(" ".join(sentences))
    return docs


def write_tokenizer(out_dir: str, docs: list[str], vocab_size: int = 2000) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": False,
           "model_max_length": 1 << 20, "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def write_dataset(out_dir: str, docs: list[str]) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "data.json"), "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")


def ensure_assets(root: str) -> dict[str, str]:
    """Writes the assets under ``root`` unless they are there; returns their paths."""
    paths = {"tokenizer": os.path.join(root, "tokenizer"), "c4_test": os.path.join(root, "c4_test")}
    if not os.path.exists(os.path.join(paths["tokenizer"], "tokenizer.json")) or not os.path.exists(
        os.path.join(paths["c4_test"], "data.json")
    ):
        docs = generate_text()
        write_tokenizer(paths["tokenizer"], docs)
        write_dataset(paths["c4_test"], docs)
    return paths


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    flux = "--flux" in argv  # also FLUX's encoders, autoencoder and images
    argv = [a for a in argv if a != "--flux"]
    if len(argv) != 1:
        raise SystemExit("usage: python -m tpuc.integrations.torchtitan.assets [--flux] OUT_DIR")
    for k, v in (ensure_flux_assets if flux else ensure_assets)(argv[0]).items():
        print(f"{k}: {v}")



# ---- FLUX (``--module flux --config flux_debugmodel``) -------------------------------------
# flux-debug's transformer takes T5 states of width 4096 (context_in_dim) and a CLIP pooled
# vector of width 768 (vec_in_dim); the encoders below have those widths and nothing else of
# the real ones (one layer, tiny heads), random weights from a fixed seed. The autoencoder file
# holds flux-debug's own AutoEncoder (TorchTitan's class) with seeded random weights. Images:
# a WebDataset tar in cc12m's layout (``NNNNN.jpg`` + ``NNNNN.txt``) that TorchTitan's
# "cc12m-test" loader reads with ``--dataloader.dataset_path``.

FLUX_VOCAB = 2048  # >= the tokenizer's 2000 ids; the test tokenizer pads with id 0


def write_flux_encoders(root: str, seed: int = 0) -> dict[str, str]:
    """Tiny T5 and CLIP text encoders via ``save_pretrained`` (``from_pretrained`` loads them).

    TorchTitan's FluxEmbedder treats a version whose name contains "clip" as CLIP (its
    pooler output) and any other as T5 (its last hidden state), so the directories are named
    ``clip_encoder`` and ``t5_encoder``."""
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    paths = {"t5_encoder": os.path.join(root, "t5_encoder"), "clip_encoder": os.path.join(root, "clip_encoder")}
    torch.manual_seed(seed)
    t5 = T5EncoderModel(T5Config(vocab_size=FLUX_VOCAB, d_model=4096, d_kv=8, d_ff=32, num_layers=1,
                                 num_heads=2, dropout_rate=0.0, pad_token_id=0, eos_token_id=1))
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=FLUX_VOCAB, hidden_size=768, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2, projection_dim=768,
                                        max_position_embeddings=77, bos_token_id=0, eos_token_id=1,
                                        pad_token_id=0))
    for name, m in (("t5_encoder", t5), ("clip_encoder", clip)):
        m.eval().save_pretrained(paths[name])
    return paths


def write_flux_autoencoder(path: str, seed: int = 0) -> str:
    """flux-debug's AutoEncoder with seeded random weights as one safetensors file."""
    import torch
    from safetensors.torch import save_file
    from torchtitan.models.flux import model_registry

    torch.manual_seed(seed)
    with torch.device("cpu"):
        ae = model_registry("flux-debug").model.autoencoder.build()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file({k: v.contiguous() for k, v in ae.state_dict().items()}, path)
    return path


def write_flux_images(out_dir: str, n: int = 32, size: int = 40, seed: int = 1234) -> str:
    """``n`` synthetic RGB images (smooth gradients + seeded noise, ``size`` px square, JPEG)
    with a caption each, as ``cc12m_test/shard-00000.tar``."""
    import io
    import tarfile

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    docs = generate_text(n_docs=n, seed=seed)
    os.makedirs(out_dir, exist_ok=True)
    yy, xx = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    with tarfile.open(os.path.join(out_dir, "shard-00000.tar"), "w") as tar:
        for i in range(n):
            a, b, c = rng.uniform(0, 1, 3)
            img = np.stack([a * xx + (1 - a) * yy, b * yy, c * (1 - xx)], axis=-1) * 200
            img = np.clip(img + rng.normal(0, 20, img.shape), 0, 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(img, "RGB").save(buf, format="JPEG", quality=90)
            caption = " ".join(docs[i].split()[:12]).encode()
            for ext, data in (("jpg", buf.getvalue()), ("txt", caption)):
                info = tarfile.TarInfo(f"{i:05d}.{ext}")
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))
    return out_dir


def ensure_flux_assets(root: str) -> dict[str, str]:
    """The text assets (:func:`ensure_assets`) plus FLUX's encoders, autoencoder and images
    under ``root`` unless they are there; returns every path."""
    paths = ensure_assets(root)
    paths.update({"t5_encoder": os.path.join(root, "t5_encoder"),
                  "clip_encoder": os.path.join(root, "clip_encoder"),
                  "autoencoder": os.path.join(root, "autoencoder", "ae.safetensors"),
                  "cc12m_test": os.path.join(root, "cc12m_test")})
    if not all(os.path.exists(os.path.join(paths[k], "config.json")) for k in ("t5_encoder", "clip_encoder")):
        write_flux_encoders(root)
    if not os.path.exists(paths["autoencoder"]):
        write_flux_autoencoder(paths["autoencoder"])
    if not os.path.exists(os.path.join(paths["cc12m_test"], "shard-00000.tar")):
        write_flux_images(paths["cc12m_test"])
    return paths


if __name__ == "__main__":
    main()
