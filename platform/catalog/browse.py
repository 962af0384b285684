"""The dataset page's query: split, search, filters, sort and page from the URL, turned into rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any
from urllib.parse import urlencode

from core.params import INT32_MAX, int_or_none
from django.core.paginator import Page, Paginator
from django.db.models import F, Q, QuerySet
from django.http import QueryDict

from catalog import solve
from catalog.models import BaseModel, Dataset, DatasetRow
from catalog.paths import portable, resolve

PAGE_SIZE = 50
SORTS = {
    "index": "index",
    "-index": "-index",
    "chars": "prompt_chars",
    "-chars": "-prompt_chars",
    "rate": "rate",
    "-rate": "-rate",
}
SNIPPET = 180


@dataclass(frozen=True)
class Query:
    """What the URL asks for; every field has a safe default, so a hand-edited URL never fails."""

    split: str = "train"
    q: str = ""
    source: str = ""
    answer: str = ""
    solved: str = ""
    sort: str = "index"
    page: int = 1
    row: int | None = None
    model: int | None = None
    reward: str = ""

    @classmethod
    def from_get(cls, params: QueryDict, dataset: Dataset) -> Query:
        split = params.get("split", "train")
        return cls(
            split=split if split in dataset.splits else "train",
            q=_text(params.get("q"), 200),
            source=_text(params.get("source"), 200),
            answer=_text(params.get("answer"), 500),
            solved=params.get("solved", "") if params.get("solved") in solve.SOLVED_FILTERS else "",
            sort=params.get("sort", "index") if params.get("sort") in SORTS else "index",
            page=int_or_none(params.get("page"), high=INT32_MAX) or 1,
            row=int_or_none(params.get("row"), low=0, high=INT32_MAX),
            model=int_or_none(params.get("model"), high=INT32_MAX),
            reward=_text(params.get("reward"), 200),
        )

    def url(self, **changes: Any) -> str:
        """The query string of this query with ``changes`` (defaults left out, so URLs stay short)."""
        values = asdict(replace(self, **changes))
        defaults = asdict(Query())
        return "?" + urlencode({k: v for k, v in values.items() if v is not None and v != defaults[k]})

    @property
    def filtered(self) -> bool:
        return bool(self.q or self.source or self.answer or self.solved)


def sort_links(query: Query) -> dict[str, str]:
    """Column header links: ascending first, then descending; a new sort starts at page 1."""
    links = {}
    for key in ("index", "chars", "rate"):
        target = f"-{key}" if query.sort == key else key
        links[key] = query.url(sort=target, page=1, row=None)
    return links


def split_tabs(dataset: Dataset, query: Query) -> list[dict[str, Any]]:
    """One tab a split; switching split keeps the sort and the template model, not the filters."""
    return [
        {
            "split": split,
            "label": "validation" if split == "val" else split,
            "rows": rows,
            "active": split == query.split,
            "url": Query(split=split, sort=query.sort, model=query.model).url(),
        }
        for split, rows in dataset.splits.items()
    ]


def rows_for(dataset: Dataset, query: Query) -> QuerySet[DatasetRow]:
    """The split's rows that match the search and the column filters, in index or length order."""
    rows = DatasetRow.objects.filter(dataset=dataset, split=query.split)
    if query.q:
        rows = rows.filter(Q(prompt_text__icontains=query.q) | Q(ground_truth__icontains=query.q))
    if query.source:
        rows = rows.filter(data_source=query.source)
    if query.answer:
        rows = rows.filter(ground_truth=query.answer)
    order = SORTS[query.sort] if query.sort not in ("rate", "-rate") else "index"
    return rows.order_by(order, F("index").asc()) if "chars" in order else rows.order_by(order)


def page_of(dataset: Dataset, query: Query, runs: list[Any]) -> tuple[Page, list[DatasetRow]]:
    """The asked page and its rows. Filtering or sorting by solve rate pages the matching problem
    indices, ordered with the runs' per-problem rates (solve.rate_map), then reads only that page's rows."""
    rows = rows_for(dataset, query)
    if not (query.solved or query.sort in ("rate", "-rate")):
        page = Paginator(rows, PAGE_SIZE).get_page(query.page)
        return page, list(page.object_list)
    rates = solve.rate_map(runs, query.split)
    indices = solve.by_rate(
        list(rows.values_list("index", flat=True)), rates, solved=query.solved, sort=query.sort
    )
    index_page = Paginator(indices, PAGE_SIZE).get_page(query.page)
    found = {r.index: r for r in rows.filter(index__in=list(index_page.object_list))}
    return index_page, [found[i] for i in index_page.object_list if i in found]


def table(rows: list[DatasetRow], query: Query, run_ids: list[int]) -> list[dict[str, Any]]:
    """One page of rows for the template: a snippet around the search match, and the solve rate."""
    rates = solve.rates_for(run_ids, query.split, [r.index for r in rows])
    return [
        {
            "row": r,
            "snippet": snippet(r.prompt_text, query.q),
            "rate": rates.get(r.index),
            "url": query.url(row=r.index),
        }
        for r in rows
    ]


def snippet(text: str, q: str, width: int = SNIPPET) -> tuple[str, str, str]:
    """(before, match, after) around the first case-insensitive match of ``q``, or the text's start.
    The template escapes each part: model and dataset text is never HTML."""
    flat = " ".join(text.split())
    at = flat.lower().find(q.lower()) if q else -1
    if at < 0:
        return (flat[:width] + ("…" if len(flat) > width else ""), "", "")
    start = max(0, at - width // 3)
    before = ("…" if start else "") + flat[start:at]
    end = at + len(q)
    rest = max(0, width - (end - start))
    return before, flat[at:end], flat[end : end + rest] + ("…" if end + rest < len(flat) else "")


def models_for_templates() -> list[BaseModel]:
    """The catalog's base models, the demo model first (its template is the one the demo runs use)."""
    return sorted(BaseModel.objects.all(), key=lambda m: (not _is_demo(m), m.name))


def _is_demo(model: BaseModel) -> bool:
    return "\x00" not in model.path and portable(resolve(model.path)).startswith("assets/demo/")


def neighbours(dataset: Dataset, split: str, index: int) -> tuple[int | None, int | None]:
    """The previous and next problem indices in the split (in index order)."""
    rows = DatasetRow.objects.filter(dataset=dataset, split=split)
    before = rows.filter(index__lt=index).order_by("-index").values_list("index", flat=True).first()
    after = rows.filter(index__gt=index).order_by("index").values_list("index", flat=True).first()
    return before, after


def _text(raw: str | None, limit: int) -> str:
    return (raw or "").replace("\x00", "").strip()[:limit]
