"""What a model folder holds, read without torch or transformers: its config, tokenizer, chat template and
weights (safetensors headers only), and the problems that would stop a run from loading it.

``inspect_model`` never raises for a bad folder: it returns the details it could read and a list of
``problems``, each a sentence naming the file. Registration from the browser or the API refuses a folder
with problems (``check_model``); ``manage.py register_model`` and the exporter record them and go on.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from catalog.chat import TemplateError, load_chat_template

MAX_HEADER_BYTES = 100 * 1024 * 1024
"""A safetensors header larger than this is not one (the first 8 bytes of another file)."""
TOKENIZER_VOCABULARIES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
"""Files that carry a tokenizer's vocabulary (fast tokenizer, sentencepiece, BPE, WordPiece)."""
SHAPE_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
)


class ModelCheckError(ValueError):
    """A folder that cannot be registered as a base model; the message lists every problem."""


def check_model(model_dir: Path) -> dict[str, Any]:
    """The folder's details if a run could load it; else ModelCheckError naming each problem."""
    details = inspect_model(model_dir)
    if details["problems"]:
        raise ModelCheckError("; ".join(details["problems"]))
    return details


def inspect_model(model_dir: Path) -> dict[str, Any]:
    """{"model_type", "architectures", shapes (layers, hidden size, ...), "config_dtype", "weight_dtypes",
    "parameters", "weight_files", "weight_bytes", "tokenizer_files", "tokenizer_vocab", "chat_template",
    "problems", "warnings"} of a model folder (JSON-ready)."""
    problems: list[str] = []
    warnings: list[str] = []
    config = _config(model_dir, problems)
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else {}
    shapes = {key: config.get(key, text.get(key)) for key in SHAPE_KEYS}
    details: dict[str, Any] = {
        "model_type": str(config.get("model_type") or ""),
        "architectures": [str(a) for a in config.get("architectures") or [] if isinstance(a, str)],
        **{k: v for k, v in shapes.items() if isinstance(v, int | bool)},
        "config_dtype": str(config.get("dtype") or config.get("torch_dtype") or ""),
    }
    if config and not details["model_type"] and not details["architectures"]:
        problems.append("config.json names no model_type and no architectures: transformers cannot build it")
    details |= _weights(model_dir, problems)
    details |= _tokenizer(model_dir, problems)
    details["chat_template"] = _template_source(model_dir, warnings)
    vocab, tokens = details.get("vocab_size"), details.get("tokenizer_vocab")
    if isinstance(vocab, int) and isinstance(tokens, int) and tokens > vocab:
        problems.append(
            f"the tokenizer has {tokens:,} tokens but config.json's vocab_size is {vocab:,}: "
            "token ids past the embedding would fail"
        )
    details["problems"], details["warnings"] = problems, warnings
    return details


def _config(model_dir: Path, problems: list[str]) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.is_file():
        problems.append("no config.json: not a HuggingFace model folder")
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        problems.append(f"config.json does not parse ({str(e)[:120]})")
        return {}
    if not isinstance(config, dict):
        problems.append("config.json is not a JSON object")
        return {}
    return config


def _weights(model_dir: Path, problems: list[str]) -> dict[str, Any]:
    """Parameters and dtypes from the safetensors headers; a shard named in the index must exist."""
    files = sorted(model_dir.glob("*.safetensors"))
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values())
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            problems.append("model.safetensors.index.json does not parse")
            shards = set()
        missing = sorted(str(s) for s in shards if not (model_dir / str(s)).is_file())
        if missing:
            problems.append(f"model.safetensors.index.json names missing shards: {', '.join(missing[:5])}")
    if not files:
        legacy = sorted(p.name for p in model_dir.glob("pytorch_model*.bin"))
        if legacy:
            problems.append(
                f"the weights are pickled torch files ({legacy[0]}): save them as safetensors "
                "(save_pretrained(..., safe_serialization=True)); they are read here without torch"
            )
        else:
            problems.append("no weights: expected *.safetensors files")
        return {"parameters": 0, "weight_files": [], "weight_bytes": 0, "weight_dtypes": {}}
    total, dtypes, listed = 0, Counter[str](), []
    for file in files:
        size = file.stat().st_size
        listed.append({"name": file.name, "bytes": size})
        try:
            header = _header(file, size)
        except ValueError as e:
            problems.append(f"{file.name}: {e}")
            continue
        for key, tensor in header.items():
            if key == "__metadata__" or not isinstance(tensor, dict):
                continue
            n = 1
            for dim in tensor.get("shape", []):
                n *= int(dim)
            total += n
            dtypes[str(tensor.get("dtype", "?"))] += n
    if total == 0 and not any(p.endswith(".safetensors") or ".safetensors:" in p for p in problems):
        problems.append("the safetensors files hold no parameters")
    return {
        "parameters": total,
        "weight_files": listed,
        "weight_bytes": sum(f["bytes"] for f in listed),
        "weight_dtypes": dict(dtypes.most_common()),
    }


def _header(file: Path, size: int) -> dict[str, Any]:
    """A safetensors file's header, checked against the file's size (a truncated download fails here)."""
    with file.open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError("too short to be a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise ValueError("not a safetensors file (its header length is past the end of the file)")
        try:
            header = json.loads(f.read(length))
        except (UnicodeDecodeError, ValueError):
            raise ValueError("the safetensors header does not parse") from None
    if not isinstance(header, dict):
        raise ValueError("the safetensors header is not a JSON object")
    ends = [
        t["data_offsets"][1]
        for k, t in header.items()
        if k != "__metadata__"
        and isinstance(t, dict)
        and isinstance(t.get("data_offsets"), list)
        and len(t["data_offsets"]) == 2
    ]
    if ends and 8 + length + max(ends) > size:
        raise ValueError(
            f"truncated: the tensors need {8 + length + max(ends):,} bytes, the file has {size:,}"
        )
    return header


def _tokenizer(model_dir: Path, problems: list[str]) -> dict[str, Any]:
    present = [
        name for name in (*TOKENIZER_VOCABULARIES, "tokenizer_config.json") if (model_dir / name).is_file()
    ]
    out: dict[str, Any] = {"tokenizer_files": present}
    if not any(name in present for name in TOKENIZER_VOCABULARIES):
        problems.append(
            "no tokenizer: expected tokenizer.json "
            "(or tokenizer.model / vocab.json with tokenizer_config.json)"
        )
        return out
    path = model_dir / "tokenizer.json"
    if path.is_file():
        from tokenizers import Tokenizer  # Rust, no torch: only registration and inspection load it

        try:
            out["tokenizer_vocab"] = Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
        except Exception as e:  # the library's own error type varies by version
            problems.append(f"tokenizer.json cannot be read ({str(e)[:120]})")
    return out


def _template_source(model_dir: Path, warnings: list[str]) -> str:
    """Where the chat template comes from ("chat_template.jinja", "tokenizer_config.json") or ""."""
    try:
        template = load_chat_template(model_dir)
    except TemplateError as e:
        warnings.append(f"chat template: {e}")
        return ""
    if template.template is None:
        warnings.append("no chat template: prompts are the user messages joined by blank lines")
    return template.source
