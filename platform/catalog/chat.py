"""The prompt exactly as a model sees it, rendered without transformers (the web process imports no
torch or transformers: see the import contracts in pyproject.toml).

transformers 5 (``PreTrainedTokenizerBase.apply_chat_template`` and ``utils/chat_template_utils.py``)
renders a chat template with jinja2's ``ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True)``, the ``loopcontrols`` extension and a ``{% generation %}`` tag, a ``tojson`` filter
that keeps non-ASCII and HTML characters as they are, the globals ``raise_exception`` and
``strftime_now``, and the variables ``messages``, ``tools``/``documents`` (None here),
``add_generation_prompt`` and the tokenizer's named special tokens (``bos_token``, ``eos_token``, ...).
The template is ``chat_template.jinja`` in the model directory if present, else ``chat_template`` in
tokenizer_config.json (a string, or a list of named templates of which "default" is used).

The trainer (``dapo.data.problems.render_prompt``) calls ``apply_chat_template(messages, tokenize=False,
add_generation_prompt=True)``, and without a template joins the user messages with blank lines; token
ids come from the tokenizer with special tokens added only when there is no template
(``dapo.data.problems.encode_prompts``). Token counts here use the ``tokenizers`` library on tokenizer.json,
the same Rust tokenizer transformers wraps.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class TemplateError(ValueError):
    """A chat template that cannot be read or rendered; the message says why."""


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template and special tokens, as transformers would load them."""

    template: str | None
    """The jinja source, or None when the model has no chat template."""
    source: str
    """Where the template came from: "chat_template.jinja", "tokenizer_config.json" or ""."""
    special_tokens: dict[str, str] = field(default_factory=dict)

    def render(self, messages: list[dict]) -> str:
        """The prompt text of ``messages`` with the generation prompt, as the trainer renders it."""
        if self.template is None:
            return "\n\n".join(m["content"] for m in messages if m["role"] == "user")
        try:
            compiled = _compile(self.template)
            variables = {"tools": None, "documents": None, "add_generation_prompt": True}
            return compiled.render(messages=messages, **variables, **self.special_tokens)
        except jinja2.TemplateError as e:  # includes raise_exception(...) and sandbox violations
            raise TemplateError(f"the chat template failed: {e}") from None


def load_chat_template(model_dir: Path) -> ChatTemplate:
    """The chat template of a local model directory (cached until one of its files changes)."""
    files = ("chat_template.jinja", "tokenizer_config.json", "special_tokens_map.json")
    stamps = tuple(_mtime(model_dir / f) for f in files)
    return _load(str(model_dir), stamps)


@functools.lru_cache(maxsize=32)
def _load(model_dir: str, _stamps: tuple[int, ...]) -> ChatTemplate:
    root = Path(model_dir)
    config = _read_json(root / "tokenizer_config.json")
    tokens = {k: _token(config[k]) for k in SPECIAL_TOKENS if config.get(k) is not None}
    if "added_tokens_decoder" not in config:  # transformers reads the legacy map only then, and lets it win
        legacy = _read_json(root / "special_tokens_map.json")
        tokens.update({k: _token(legacy[k]) for k in SPECIAL_TOKENS if legacy.get(k) is not None})
    jinja_file = root / "chat_template.jinja"
    if jinja_file.is_file():
        return ChatTemplate(jinja_file.read_text(encoding="utf-8"), "chat_template.jinja", tokens)
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}]: transformers uses "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
        if template is None:
            names = ", ".join(map(str, named))
            raise TemplateError(f"several chat templates ({names}) and none is named 'default'")
    if template is not None and not isinstance(template, str):
        raise TemplateError("tokenizer_config.json: 'chat_template' is neither a string nor a list")
    return ChatTemplate(template, "tokenizer_config.json" if template else "", tokens)


def _token(value: Any) -> str:
    """A special token as written in tokenizer_config.json: a string or an AddedToken dict."""
    return str(value.get("content", "")) if isinstance(value, dict) else str(value)


# ---- jinja, configured like transformers -----------------------------------------------------------


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` marks assistant tokens for training masks; rendering
    a prompt only needs its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.lru_cache(maxsize=32)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"the chat template does not parse: {e}") from None


# ---- token counts ------------------------------------------------------------------------------------


class TokenCounter:
    """Counts the tokens of rendered prompts with the model's tokenizer.json, as the trainer encodes them."""

    def __init__(self, model_dir: Path, templated: bool) -> None:
        self._tokenizer = _tokenizer(str(model_dir / "tokenizer.json"), _mtime(model_dir / "tokenizer.json"))
        self._special = not templated  # a template writes its special tokens itself

    @property
    def available(self) -> bool:
        return self._tokenizer is not None

    def count(self, texts: list[str]) -> list[int]:
        if self._tokenizer is None:
            return []
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=self._special)
        return [len(e.ids) for e in encodings]


@functools.lru_cache(maxsize=8)
def _tokenizer(path: str, _mtime_ns: int) -> Any:
    if not Path(path).is_file():
        return None
    from tokenizers import Tokenizer  # Rust, no torch: only the pages that count tokens load it

    try:
        return Tokenizer.from_file(path)
    except Exception:  # a tokenizer.json this version cannot read: no token counts, not an error page
        return None


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
