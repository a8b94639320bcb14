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

    python -m tpuc.integrations.torchtitan.assets OUT_DIR
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
    if len(argv) != 1:
        raise SystemExit("usage: python -m tpuc.integrations.torchtitan.assets OUT_DIR")
    for k, v in ensure_assets(argv[0]).items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
