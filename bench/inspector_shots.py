"""The inspector screenshots of docs/tour.md, from a real training run of the demo model.

    .venv/bin/python bench/inspector_shots.py [--steps 8] [--out docs]

Builds a throwaway database (SQLite under a temp dir), queues a ``tiny_cpu`` run of the demo model
(assets/demo) cut to ``--steps`` steps, and trains it in this process through the worker's own task
(``worker.tasks.launch_run``: the real trainer, the platform sink writing every step). Then starts daphne,
logs in with Playwright (Debian's chromium, light theme, 1400x900) and saves:

- ``inspector.png``: the samples page at a step that has both kept and discarded groups, down to the
  first discarded group;
- ``inspector-sample.png``: a kept sample with token data, tokens coloured by log-prob and the objective
  explainer opened on one response token;
- ``inspector-group.png``: that sample's group side by side, in Raw (where the compared pair parts).

Each PNG is recompressed (zlib level 9, same pixels) to keep the repository small.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from bench.page_load import CHROMIUM, REPO, login, setup_django, start_daphne  # noqa: E402
from tests.e2e.support import CHROMIUM_ARGS  # noqa: E402

WIDTH, HEIGHT = 1400, 900
USER, PASSWORD = "alice", "alice-pass-123"


def train(steps: int) -> Any:
    """A user and one real ``tiny_cpu`` run of ``steps`` steps, trained by the worker's task here."""
    from django.contrib.auth import get_user_model
    from runs.models import Run, Status

    from dapo.runconfig.presets import get_preset
    from worker.tasks import launch_run

    user = get_user_model().objects.create_user(USER, password=PASSWORD)
    config = get_preset("tiny_cpu").with_overrides({
        "optim.total_steps": steps, "validation.every_n_steps": max(1, steps // 2),
        "checkpoint.every_n_steps": 0, "execution.torch_threads": 1, "logging.hardware_interval_s": 0,
    })  # fmt: skip
    # Saved queued without Run.launch(): no Celery message, the task runs right here.
    run = Run.objects.create(owner=user, name="demo: tiny_cpu", preset="tiny_cpu", config=config.to_dict(),
                             total_steps=steps)  # fmt: skip
    started = time.monotonic()
    outcome = launch_run(run.pk)
    run.refresh_from_db()
    if outcome != Status.SUCCEEDED:
        raise RuntimeError(f"the run ended {outcome}: {run.error}")
    print(f"run {run.pk}: {steps} steps trained in {time.monotonic() - started:.0f} s", flush=True)
    return run


def pick(run: Any) -> tuple[int, Any]:
    """A train step with both kept and discarded groups (the one whose first discarded group comes
    earliest, so the screenshot shows both badges; the latest on a tie), and a kept sample of it with
    token data, preferring one with a large advantage."""
    from runs.models import Sample

    train = Sample.objects.filter(run=run, split="train")
    best: tuple[int, int] | None = None
    for step in sorted(set(train.values_list("step", flat=True)), reverse=True):
        rows = train.filter(step=step)
        dropped = rows.filter(kept=False).order_by("group").values_list("group", flat=True).first()
        if dropped is None or not rows.filter(kept=True, tokens__isnull=False).exists():
            continue
        if best is None or dropped < best[1]:
            best = (step, dropped)
    if best is None:
        raise RuntimeError("no step has both kept and discarded groups: train a few more steps (--steps)")
    candidates = train.filter(step=best[0], kept=True, tokens__isnull=False).order_by("group", "sample_index")
    return best[0], max(candidates, key=lambda s: abs(s.advantage))


def recompress(path: Path) -> None:
    """Rewrite the PNG's image data at zlib level 9 in one IDAT chunk (the pixels are unchanged)."""
    data = path.read_bytes()
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IDAT":
            idat += body
        else:
            chunks.append((kind, body))
    packed = zlib.compress(zlib.decompress(idat), 9)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    out = [data[:8], chunk(*chunks[0]), chunk(b"IDAT", packed), *(chunk(k, b) for k, b in chunks[1:])]
    path.write_bytes(b"".join(out))
    print(f"  {path}: {path.stat().st_size / 1024:.0f} KiB", flush=True)


def top(height: int) -> Any:
    """The page's top ``height`` pixels, the viewport's width (a screenshot's clip)."""
    return {"x": 0, "y": 0, "width": WIDTH, "height": height}


def shoot(page: Any, base: str, run: Any, step: int, sample: Any, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # 1. the samples page: badges of kept and discarded groups, the curves beside the samples
    page.goto(f"{base}/runs/{run.pk}/samples/?step={step}")
    page.wait_for_selector("#results .group-head")
    page.wait_for_selector("#inspector-curves .main-svg")
    page.wait_for_load_state("networkidle")
    # down to the prompt of the first discarded group, so both kinds of badge are in the picture
    dropped = page.locator(".group:has(.gbadge[data-kept=filtered]) .group-body").first.bounding_box()
    bottom = int(dropped["y"] + dropped["height"]) + 16 if dropped else HEIGHT
    page.screenshot(path=str(out / "inspector.png"), full_page=True, clip=top(max(HEIGHT, bottom)))
    # 2. one sample: tokens coloured by log-prob, the explainer opened on a response token
    page.goto(f"{base}/runs/{run.pk}/samples/{sample.pk}/")
    page.wait_for_selector("#token-explain[data-ready='1']")
    tokens = page.locator("#tokens .tok")
    tokens.nth(min(tokens.count() - 1, len(sample.tokens) // 2)).click()
    page.wait_for_selector("#explain-body:not([hidden])")
    page.evaluate("document.getElementById('token-section').scrollIntoView({block: 'start'})")
    page.screenshot(path=str(out / "inspector-sample.png"))
    # 3. the sample's group side by side
    page.goto(f"{base}/runs/{run.pk}/samples/step/{step}/group/{sample.group}/")
    page.wait_for_load_state("networkidle")
    page.click("#render-menu button[data-mode=raw]")
    box = page.locator("#columns").bounding_box()
    height = min(HEIGHT, int(box["y"] + box["height"]) + 24) if box else HEIGHT
    page.screenshot(path=str(out / "inspector-group.png"), clip=top(height))
    for name in ("inspector.png", "inspector-sample.png", "inspector-group.png"):
        recompress(out / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="training steps of the demo run")
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="folder the PNGs go to")
    args = parser.parse_args()
    from playwright.sync_api import ViewportSize, sync_playwright

    with tempfile.TemporaryDirectory(prefix="dapo-shots-") as tmp:
        var = Path(tmp)
        env = setup_django(var, redis_db=13)
        run = train(args.steps)
        step, sample = pick(run)
        print(f"step {step}, sample {sample.pk} (group {sample.group})", flush=True)
        proc, port = start_daphne(env, var / "daphne.log")
        base = f"http://127.0.0.1:{port}"
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                size = ViewportSize(width=WIDTH, height=HEIGHT)
                page = browser.new_context(viewport=size, color_scheme="light").new_page()
                page.set_default_timeout(30_000)
                login(page, base, USER, PASSWORD)
                shoot(page, base, run, step, sample, args.out)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
