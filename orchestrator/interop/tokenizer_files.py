"""Tokenizer files across the boundary.

Export: `tokenizer.json` + `tokenizer_config.json` + `special_tokens_map.json`, which
`transformers.AutoTokenizer` loads with no custom code. gatesweep puts BOS before every sequence
itself (the sink forms on it), so the exported tokenizer gets a post-processor that adds the same
BOS: `AutoTokenizer(text)` then gives exactly the ids the model was trained on. The `byte`
tokenizer has no HF file; it is written as one: a byte-level BPE with no merges whose id of each
byte is the byte's value, and `<bos>` = 256, the same ids as gatesweep's.

Import: gatesweep adds BOS itself, so a post-processor that adds special tokens (a template) is
dropped from the copy gatesweep reads. The first token is the tokenizer's BOS as
`orchestrator.data.tokenizers` picks it (the first of `<bos>`, `<s>`, `<|endoftext|>`, ...): Qwen
tokenizers have no BOS token, so an imported Qwen model's sequences start with `<|endoftext|>`,
the token Qwen's pretraining puts between documents.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator import storage
from orchestrator.core.errors import UserError
from orchestrator.data import DataUnavailable
from orchestrator.data.tokenizers import build_tokenizer, cache_dir
from orchestrator.spec.files import read_text

from .errors import InteropError

TOKENIZER_FILE = "tokenizer.json"
MAX_TOKENIZER_BYTES = 512 << 20
"""The largest tokenizer.json read (those of 150k-token vocabularies are ~10 MB)."""
ADDS_TOKENS = ("TemplateProcessing", "BertProcessing", "RobertaProcessing")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (what the ByteLevel pre-tokenizer emits)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_hf_tokenizer():
    """gatesweep's `byte` tokenizer as an HF `tokenizers.Tokenizer`: byte b -> id b, `<bos>` -> 256."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    chars = _bytes_to_unicode()
    hf = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<bos>"])
    return hf


def write_for_hf(tok, folder: Path, max_len: int) -> dict[str, int | None]:
    """Write the tokenizer files of gatesweep `Tokenizer` `tok` into `folder`; its token ids."""
    from tokenizers import Tokenizer, processors

    hf = byte_hf_tokenizer() if tok.hf is None else Tokenizer.from_str(tok.hf.to_str())
    vocab = hf.get_vocab(with_added_tokens=True)
    id_to_token = {i: t for t, i in vocab.items()}
    bos = id_to_token.get(tok.bos_id)
    if bos is None or hf.get_vocab_size(with_added_tokens=True) != tok.vocab_size:
        raise InteropError(
            f"tokenizer {tok.name}: its HF file does not reproduce gatesweep's ids (BOS {tok.bos_id}, {tok.vocab_size} tokens)"
        )
    eos = id_to_token.get(tok.eos_id) if tok.eos_id is not None else None
    template = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.bos_id)])
    existing = hf.post_processor
    hf.post_processor = template if existing is None else processors.Sequence([existing, template])
    folder.mkdir(parents=True, exist_ok=True)
    hf.save(str(folder / TOKENIZER_FILE))
    special = {"bos_token": bos, "eos_token": eos or bos}
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", **special, "model_max_length": max_len, "clean_up_tokenization_spaces": False},
            indent=2,
        )
    )
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    return {"bos": tok.bos_id, "eos": tok.eos_id if tok.eos_id is not None else tok.bos_id, "pad": None}


def without_added_specials(text: str, where: str) -> str:
    """A tokenizer.json's text with any post-processor that adds special tokens removed."""
    try:
        data = json.loads(text)
    except ValueError:
        raise InteropError(f"{where}: not a tokenizer.json (not JSON)") from None
    if not isinstance(data, dict) or "model" not in data:
        raise InteropError(f"{where}: not a tokenizer.json (no 'model')")
    pp = data.get("post_processor")
    if isinstance(pp, dict):
        if pp.get("type") in ADDS_TOKENS:
            data["post_processor"] = None
        elif pp.get("type") == "Sequence":
            kept = [p for p in pp.get("processors", []) if not (isinstance(p, dict) and p.get("type") in ADDS_TOKENS)]
            data["post_processor"] = {**pp, "processors": kept} if kept else None
    return json.dumps(data, ensure_ascii=False)


def copy_for_gatesweep(source: Path, dest: Path | None = None):
    """Copy tokenizer.json `source` to `dest` for gatesweep's use (no added specials) and load it
    as a gatesweep `Tokenizer`; InteropError if it cannot be loaded or has no BOS candidate.
    Without `dest` the copy goes to the cache, named by its content: a stable name, so corpora
    tokenized with it are cached across runs (`orchestrator.data.prepare` keys them by name)."""
    import hashlib

    try:
        text = read_text(source, what="tokenizer.json", max_bytes=MAX_TOKENIZER_BYTES)  # a regular file of bounded size
    except UserError as err:
        raise InteropError(str(err)) from None
    text = without_added_specials(text, str(source))
    if dest is None:
        dest = cache_dir("tokenizers") / f"hf-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    storage.write_text(dest, text)  # two processes converting the same tokenizer never see half a file
    try:
        return build_tokenizer(str(dest), lambda: [])
    except DataUnavailable as err:
        raise InteropError(str(err).replace(str(dest), str(source))) from None
