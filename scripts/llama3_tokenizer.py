"""Write a local Hugging Face tokenizer directory with sim/vllm-3b's exact Llama-3 vocabulary.

``python scripts/llama3_tokenizer.py OUT_DIR`` (the project's ``.venv``: it has
``quicktok-v1``, which ships the vocabulary, and ``tokenizers``) writes ``tokenizer.json``
and ``tokenizer_config.json`` so that peer benchmark clients (guidellm
``--tokenizer kind=hf_auto,model=OUT_DIR``, aiperf ``--tokenizer OUT_DIR``) count and
generate prompts with the vocabulary sim-serve counts them with (``agentlab.llm.tokens``,
tokenizer ``llama3``), offline: the hub is unreachable here.

The BPE merges are recovered from the ranks as Hugging Face's tiktoken converter does
(every split of a token into two lower-ranked tokens, ordered by rank); the pre-tokenizer
is Llama-3's split regex then byte-level. No BOS is added on encode, so a text's count is
``agentlab.llm.tokens.count_text_tokens(text, tokenizer="llama3")``; ``--check`` verifies
that on a few texts. The vocabulary is Meta's (Meta Llama 3 Community License), as in
``quicktok-v1``; the directory stays local (``.venv-peers/``, git-ignored).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LLAMA3_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHECK_TEXTS = [
    "Hello world, how are you?",
    "The quick brown fox jumps over the lazy dog. 1234567 tokens!\n\n  indented\tline",
    "café résumé naïve — Zürich 日本語 ' 's 'll",
]


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-ins for the 256 bytes (byte-level BPE vocabularies)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def build(out: Path) -> Path:
    """Write the directory (idempotent) and return it."""
    import quicktok
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    out.mkdir(parents=True, exist_ok=True)
    if (out / "tokenizer.json").exists():
        return out
    enc = quicktok.get_encoding("llama3")
    specials = sorted(enc.special_tokens_set)
    special_ids = {s: enc.encode_single_token(s) for s in specials}
    n_ranks = min(special_ids.values())
    b2u = _byte_to_unicode()
    ranks = {enc.decode_single_token_bytes(i): i for i in range(n_ranks)}
    vocab = {"".join(b2u[b] for b in tok): r for tok, r in ranks.items()}
    merges: list[tuple[bytes, bytes, int]] = []
    for tok, rank in ranks.items():
        local = [
            (tok[:i], tok[i:], rank)
            for i in range(1, len(tok))
            if tok[:i] in ranks and tok[i:] in ranks
        ]
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    text_merges = [("".join(b2u[b] for b in a), "".join(b2u[b] for b in c)) for a, c, _ in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=text_merges, ignore_merges=True))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    from tokenizers import AddedToken

    tk.add_special_tokens(
        [
            AddedToken(s, special=True, normalized=False)
            for s in sorted(specials, key=special_ids.get)
        ]
    )
    tk.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "add_bos_token": False,
        "model_max_length": 131072,
        "clean_up_tokenization_spaces": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return out


def check(out: Path) -> None:
    """Counts of the written tokenizer equal ``agentlab.llm.tokens``' (exit 1 if not)."""
    from tokenizers import Tokenizer

    from agentlab.llm.tokens import count_text_tokens

    tk = Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in CHECK_TEXTS:
        ours = count_text_tokens(text, tokenizer="llama3")
        theirs = len(tk.encode(text, add_special_tokens=False).ids)
        if ours != theirs:
            sys.exit(f"llama3_tokenizer: {text!r}: {theirs} tokens here, {ours} in agentlab")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python scripts/llama3_tokenizer.py OUT_DIR [--check]")
    path = build(Path(sys.argv[1]))
    if "--check" in sys.argv[2:]:
        check(path)
    print(path)
