"""The torch/transformers rollout engine: our own KV-cached decode loop (not `model.generate`).

Runs on CPU (the embedded default and the tests) and on CUDA. One `generate` call, per chunk of prompts:
  1. prefill the P distinct prompts once, left-padded (attention mask + position ids), into a DynamicCache
     whose layers write into preallocated buffers (`kv_cache.py`: no per-step concatenation);
  2. repeat every cache row n times (the G samples of a prompt share the prefill: n x less prefill work);
  3. decode one token per step for all live rows, sampling in one vectorised call (`logits.sample_tokens`);
  4. feed rows that sampled EOS with pad, and drop them from the batch and the cache (compaction) once a
     quarter of the batch has finished, so late steps only pay for the rows still generating; stop when
     no row is left or max_new_tokens is reached.
Steps 1-3 run through the transformers model, or, for the Llama-family models it supports (`fast_decode.py`,
on by default on CPU), through our own forward over the same parameters: fused matmuls, and the prompt's
keys and values kept once per prompt and read by its n rows together instead of being repeated n times.
Randomness comes from one torch.Generator per call (seeded by `SamplingParams.seed`, else the engine's own),
so the same seed, weights and prompts give the same samples on one device.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

import torch
from torch import nn

from dapo.learner.families import exact_attention
from dapo.rollout import fast_decode
from dapo.rollout.base import Completion, RolloutEngine, SamplingParams, Weights, check_prompts, named_tensors
from dapo.rollout.fast_decode import Workspace
from dapo.rollout.kv_cache import new_cache
from dapo.rollout.logits import sample_tokens

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
log = logging.getLogger(__name__)


def left_pad(
    prompts: Sequence[Sequence[int]], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad prompts into a batch.

    Returns:
        ids (P, L) int64, attention mask (P, L) int64 (1 = real token), position ids (P, L) int64 that
        count real tokens only (0 on padding), with L the longest prompt.
    """
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)  # (P, L)
    return ids, mask, positions


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Switch a (possibly shared, training) model to eval for the block, then restore its mode."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@contextmanager
def attention(model: nn.Module, implementation: str | None) -> Iterator[None]:
    """Run the block with another attention implementation of `model` (e.g. "eager"), then restore it."""
    current = getattr(getattr(model, "config", None), "_attn_implementation", None)
    set_implementation = getattr(model, "set_attn_implementation", None)
    if implementation is None or implementation == current or set_implementation is None:
        yield
        return
    set_implementation(implementation)
    try:
        yield
    finally:
        set_implementation(current)


class HFEngine(RolloutEngine):
    """Rollouts with a transformers causal LM and our own KV-cached sampling loop.

    Args:
        model: a causal LM to SHARE (colocated with the learner); its device and dtype are used as-is.
        model_path: a local HF model directory, loaded when `model` is None.
        eos_token_ids: ids that end a sample (any of them).
        pad_token_id: id used for left padding (never attended to).
        device, dtype: where and how to load `model_path` ("float32" | "bfloat16" | "float16").
        seed: seed of the engine RNG used when a call passes no seed.
        max_batch_size: most rows (prompts x n) decoded at once; larger calls are chunked by prompt.
        compact_threshold: drop finished rows from the batch and KV cache once this fraction of the
            batch has finished (0 = at every EOS; 1 = never, finished rows are fed pad until the end).
        kv_buffer: preallocate the KV cache of full-attention layers (no per-step concatenation; the
            transformers forward: the fast path always preallocates).
        attn_implementation: attention kernel of the transformers forward; None = "eager" on CPU
            (single-token decode steps run ~2x faster than with "sdpa" there) and the model's own on
            other devices. The fast path does not use it.
        fast_decode: prefill and decode with `fast_decode.FastDecoder` instead of the transformers
            forward (same parameters, same samples up to float rounding; faster on CPU). None = on when
            the model is supported and the device is CPU; True = require it (ValueError naming the
            reason when the model is not supported); False = off. `fast_decode_reason` says why it is off.
            Measured and tested on CPU. Between calls it keeps its key/value buffers (the size of the
            largest call's generated-token cache; `sleep` and `close` free them).
    """

    name = "hf"

    def __init__(
        self,
        *,
        model: nn.Module | None = None,
        model_path: str | None = None,
        eos_token_ids: Sequence[int],
        pad_token_id: int,
        device: str | torch.device = "cpu",
        dtype: str = "float32",
        seed: int = 0,
        max_batch_size: int | None = None,
        compact_threshold: float = 0.25,
        kv_buffer: bool = True,
        attn_implementation: str | None = None,
        fast_decode: bool | None = None,
    ) -> None:
        if not eos_token_ids:
            raise ValueError("eos_token_ids must name at least one token id")
        if not 0.0 <= compact_threshold <= 1.0:
            raise ValueError(f"compact_threshold must be in [0, 1], got {compact_threshold}")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self._owns_model = model is None
        self.model = model if model is not None else _load_model(model_path, device, dtype)
        self.device = next(self.model.parameters()).device
        self.eos_token_ids = sorted(set(int(t) for t in eos_token_ids))
        self.pad_token_id = int(pad_token_id)
        self.max_batch_size = max_batch_size
        self.compact_threshold = compact_threshold
        self.kv_buffer = kv_buffer
        self.attn_implementation = attn_implementation or ("eager" if self.device.type == "cpu" else None)
        self._eos = torch.tensor(self.eos_token_ids, device=self.device)
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        forward_args = inspect.signature(self.model.forward).parameters
        # transformers >= 5.x names the cache argument `cache`; 4.x names it `past_key_values`.
        self._cache_kw = "cache" if "cache" in forward_args else "past_key_values"
        self._keep_last = {"logits_to_keep": 1} if "logits_to_keep" in forward_args else {}
        self._asleep = False
        reason = fast_decode_reason(self.model, self.device, fast_decode)
        self.fast_decode = reason is None
        self.fast_decode_reason = reason
        """Why the fast path is off for this engine (None when it is on)."""
        log.debug("hf engine: fast decode %s", "on" if reason is None else f"off: {reason}")
        self._workspace = Workspace()  # the fast path's key/value buffers, reused across calls

    # ---- the RolloutEngine interface -------------------------------------------------------------

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        """See `RolloutEngine.generate`; chunks by prompt when max_batch_size is set."""
        check_prompts(prompts)
        self.wake_up()
        generator = self._generator
        if params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(params.seed)
        per_chunk = len(prompts) if self.max_batch_size is None else max(1, self.max_batch_size // params.n)
        completions: list[Completion] = []
        with torch.inference_mode():
            # fused from the current parameters once per call: the shared model changes between calls
            weights = fast_decode.build_weights(self.model) if self.fast_decode else None
            # the transformers forward's attention kernel (switching costs ~0.3 ms: only when it may run)
            kernel = self.attn_implementation if weights is None or weights.window is not None else None
            with eval_mode(self.model), attention(self.model, kernel):
                for start in range(0, len(prompts), per_chunk):
                    chunk = prompts[start : start + per_chunk]
                    completions.extend(self._generate_chunk(chunk, params, generator, weights))
        return completions

    def update_weights(self, weights: Weights) -> None:
        """Copy new weights in, one tensor at a time; tensors that already are the shared model's own
        (same storage) are skipped, so handing the shared model its own state is a no-op.

        Raises ValueError (after copying the known ones) for unknown names, a shape that does not match,
        or parameters left without a value (a tied alias counts as given when its twin was).
        """
        self.wake_up()
        own = self.model.state_dict()
        unknown: list[str] = []
        given: set[int] = set()
        with torch.no_grad():
            for name, tensor in named_tensors(weights):
                target = own.get(name)
                if target is None:
                    unknown.append(name)
                    continue
                if target.shape != tensor.shape:
                    raise ValueError(
                        f"update_weights: {name} has shape {tuple(tensor.shape)}, the model's is "
                        f"{tuple(target.shape)}"
                    )
                if tensor.data_ptr() != target.data_ptr():
                    target.copy_(tensor)
                given.add(target.data_ptr())
        if unknown:
            raise ValueError(f"update_weights: unknown parameter names {sorted(unknown)[:5]}")
        missing = [k for k, t in own.items() if t.data_ptr() not in given]
        if missing:
            raise ValueError(f"update_weights: missing parameters {sorted(missing)[:5]}")

    def sleep(self) -> None:
        """Free the fast path's buffers; on CUDA, also move an owned model to host memory and release the
        cache (a shared model stays put)."""
        self._workspace.clear()
        if self.device.type != "cuda":
            return
        if self._owns_model and not self._asleep:
            self.model.to("cpu")
            self._asleep = True
        torch.cuda.empty_cache()

    def wake_up(self) -> None:
        """Bring an owned model back to its device after `sleep` (cheap no-op otherwise)."""
        if self._asleep:
            self.model.to(self.device)
            self._asleep = False

    def close(self) -> None:
        """Drop the engine's reference to the model (a shared model lives on with its owner)."""
        self.model = None  # type: ignore[assignment]
        self._workspace.clear()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- the decode loop -------------------------------------------------------------------------

    def _generate_chunk(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        generator: torch.Generator,
        weights: fast_decode.FastWeights | None = None,
    ) -> list[Completion]:
        """Prefill each prompt once, share it with its n rows, decode; rows ordered prompt-major.

        `weights` (from `fast_decode.build_weights`) selects the fast path; None the transformers forward.
        """
        ids, mask, positions = left_pad(prompts, self.pad_token_id, self.device)  # (P, L) each
        n = params.n
        decoder: Decoder
        if weights is not None and not weights.fits(ids.shape[1] + params.max_new_tokens - 1):
            log.debug("hf engine: chunk longer than the sliding window: transformers forward")
            weights = None
        if weights is not None:
            fast = fast_decode.FastDecoder(weights, params.max_new_tokens, self._workspace)
            logits, decoder = fast.prefill(ids, mask, positions, n), fast  # (P, V)
        else:
            cache = new_cache(self.model, ids.shape[1] + params.max_new_tokens if self.kv_buffer else None)
            logits = self._forward(ids, mask, positions, cache)  # (P, V)
            if n > 1:
                cache.batch_repeat_interleave(n)
                mask = mask.repeat_interleave(n, dim=0)  # (P*n, L)
            decoder = _CacheDecoder(self, cache, mask)
        if n > 1:
            logits = logits.repeat_interleave(n, dim=0)  # (P*n, V)
        tokens, logprobs, lengths = self._decode(logits, decoder, params, generator)
        return self._completions(tokens, logprobs, lengths)

    def _decode(
        self,
        logits: torch.Tensor,
        decoder: Decoder,
        params: SamplingParams,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode all rows; finished rows are fed pad until enough of them are dropped at once.

        Dropping rows copies every layer's cache, so it pays only once a fraction `compact_threshold`
        of the batch has finished (measured: compacting at every EOS is slower when few rows stop).
        Args:
            logits: (R, V) logits of the first generated token; decoder: the rows' forward state.
        Returns:
            tokens (R, T) int64, logprobs (R, T) float32, lengths (R,) int64 (valid prefix of each row).
        """
        num_rows, max_new = logits.shape[0], params.max_new_tokens
        tokens = torch.full((num_rows, max_new), self.pad_token_id, dtype=torch.long, device=self.device)
        logprobs = torch.zeros((num_rows, max_new), dtype=torch.float32, device=self.device)
        lengths = torch.full((num_rows,), max_new, dtype=torch.long, device=self.device)
        rows = torch.arange(num_rows, device=self.device)  # (B,) original row of each batch row
        alive = torch.ones(num_rows, dtype=torch.bool, device=self.device)  # (B,)
        for step in range(max_new):
            token, token_logp = sample_tokens(
                logits, params.temperature, params.top_k, params.top_p, generator
            )
            token = token.masked_fill_(~alive, self.pad_token_id)
            tokens[rows, step], logprobs[rows, step] = token, token_logp
            finished = alive & torch.isin(token, self._eos)  # (B,)
            lengths[rows[finished]] = step + 1
            alive &= ~finished
            num_alive = int(alive.sum())
            if num_alive == 0 or step == max_new - 1:
                break
            if num_alive < alive.numel() and num_alive <= (1.0 - self.compact_threshold) * alive.numel():
                keep = alive.nonzero().squeeze(1)  # (B',) compaction: drop finished rows everywhere
                decoder.select(keep)
                rows, token, alive = (t[keep] for t in (rows, token, alive))
            logits = decoder.step(token, alive)
        return tokens, logprobs, lengths

    def _completions(
        self, tokens: torch.Tensor, logprobs: torch.Tensor, lengths: torch.Tensor
    ) -> list[Completion]:
        """Cut each row (R, T) at its length and label it "eos" or "length" (one transfer to host)."""
        eos = set(self.eos_token_ids)
        out = []
        for row_tokens, row_logprobs, length in zip(
            tokens.tolist(), logprobs.tolist(), lengths.tolist(), strict=True
        ):
            ids = row_tokens[:length]
            out.append(Completion(ids, row_logprobs[:length], "eos" if ids[-1] in eos else "length"))
        return out

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: object
    ) -> torch.Tensor:
        """One cached forward pass; returns the (B, V) logits of the last position of each row."""
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_kw: cache},
            **self._keep_last,
        )
        return out.logits[:, -1, :]


class Decoder(Protocol):
    """The forward state of the rows being decoded (B rows, the live batch)."""

    def step(self, token: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """Feed token (B,) to every row at its next position (alive (B,): False = a finished row, fed
        pad, whose output nobody reads); returns the (B, V) next-token logits."""
        ...

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` (B',) (sorted indices into the current rows)."""
        ...


class _CacheDecoder:
    """`Decoder` through the transformers forward and its KV cache (one row of cache per sample)."""

    def __init__(self, engine: HFEngine, cache: object, mask: torch.Tensor) -> None:
        self.engine, self.cache, self.mask = engine, cache, mask  # mask (B, L + steps)
        self.next_pos = mask.sum(-1)  # (B,) the position of the next token

    def step(self, token: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """See `Decoder.step`: a finished row's new position is masked out."""
        self.mask = torch.cat([self.mask, alive.long().unsqueeze(1)], dim=1)  # (B, L + steps + 1)
        logits = self.engine._forward(token.unsqueeze(1), self.mask, self.next_pos.unsqueeze(1), self.cache)
        self.next_pos = self.next_pos + 1
        return logits

    def select(self, keep: torch.Tensor) -> None:
        """See `Decoder.select`: drops the rows from the cache too."""
        self.cache.batch_select_indices(keep)  # type: ignore[attr-defined]
        self.mask, self.next_pos = self.mask[keep], self.next_pos[keep]


def fast_decode_reason(model: nn.Module, device: torch.device, requested: bool | None) -> str | None:
    """Why the engine will not use the fast path (None: it will), for `HFEngine(fast_decode=requested)`.

    Raises:
        ValueError: `requested` is True and the model is not supported (the message says why).
    """
    if requested is False:
        return "fast_decode=False"
    reason = fast_decode.unsupported_reason(model)
    if reason is not None and requested:
        raise ValueError(f"fast_decode=True, but the fast path cannot run this model: {reason}")
    if reason is None and requested is None and device.type != "cpu":
        reason = f"auto: the fast path is on by default on CPU only (device {device})"
    return reason


def _load_model(model_path: str | None, device: str | torch.device, dtype: str) -> nn.Module:
    """Load a causal LM from a local directory (never from a hub) onto `device` in `dtype`."""
    if model_path is None:
        raise ValueError("the hf engine needs `model` (an nn.Module) or `model_path` (a local directory)")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    from transformers import AutoModelForCausalLM

    model: nn.Module = AutoModelForCausalLM.from_pretrained(
        model_path, local_files_only=True, dtype=DTYPES[dtype]
    )
    exact_attention(model)  # Gemma 2 on CUDA: sdpa would skip its attention soft cap
    model.to(device)
    return model.eval()
