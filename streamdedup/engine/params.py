"""What an index may be opened and written with: its detection parameters (the stored
ones, which explicit options must match, or new ones tuned from the options:
`resolve_params`, `open_params`) and the changelog an index is mirrored to, which
every writer must name (`check_changelog`)."""

from __future__ import annotations

from typing import Any

from streamdedup.config import (
    IndexParams,
    ItemKind,
    ShingleSpec,
    Verify,
    check_bands_rows,
    check_threshold,
)
from streamdedup.engine.family_params import family_params, jaccard_item
from streamdedup.errors import ConfigError, ParameterMismatchError
from streamdedup.sketch.lsh import banding, check_num_perm, tune
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey

MAX_SEED = (1 << 64) - 1


def resolve_params(
    stored: IndexParams | None,
    *,
    threshold: float | None = None,
    num_perm: int | None = None,
    shingle: str | ShingleSpec | None = None,
    bands: int | None = None,
    rows: int | None = None,
    verify: Verify | None = None,
    seed: int | None = None,
    false_positive_weight: float = 0.02,
    false_negative_weight: float = 0.98,
    metric: str | None = None,
    item: str | None = None,
    bits: int | None = None,
    max_distance: float | None = None,
    dim: int | None = None,
    bucket_width: float | None = None,
) -> IndexParams:
    """Parameters for an index: the stored ones, which explicit options must match,
    or new ones from the options and defaults."""
    spec = ShingleSpec.parse(shingle) if isinstance(shingle, str) else shingle
    check_bands_rows(bands, rows)
    if stored is not None:
        asked = {
            "threshold": threshold,
            "num_perm": num_perm,
            "shingle": spec,
            "bands": bands,
            "rows": rows,
            "verify": verify,
            "seed": seed,
            "metric": metric,
            "item": item,
            "bits": bits,
            "max_distance": max_distance,
            "dim": dim,
            "bucket_width": bucket_width,
        }
        for name, value in asked.items():
            have = getattr(stored, name)
            if value is not None and value != have:
                raise ParameterMismatchError(
                    f"this index was built with `{name}` {have}; this run asks for "
                    f"`{name}` {value}. Use the stored value (or leave `{name}` out), "
                    "or build a new index in another directory.",
                    params=(name,),
                )
        return stored
    if (metric or "jaccard") != "jaccard":
        return family_params(
            metric or "jaccard",
            item=item,
            bits=bits,
            dim=dim,
            max_distance=max_distance,
            bucket_width=bucket_width,
            threshold=threshold,
            num_perm=num_perm,
            bands=bands,
            rows=rows,
            verify=verify,
            seed=_checked_seed(seed),
            shingle=spec,
        )
    kind = jaccard_item(
        item, bits=bits, max_distance=max_distance, dim=dim, bucket_width=bucket_width
    )
    return _new_jaccard(
        kind,
        threshold,
        num_perm,
        spec,
        bands,
        rows,
        verify,
        _checked_seed(seed),
        false_positive_weight,
        false_negative_weight,
    )


def _new_jaccard(
    item: ItemKind,
    threshold: float | None,
    num_perm: int | None,
    spec: ShingleSpec | None,
    bands: int | None,
    rows: int | None,
    verify: Verify | None,
    seed: int,
    false_positive_weight: float,
    false_negative_weight: float,
) -> IndexParams:
    """A new Jaccard index's parameters: the options, tuned b x r, defaults."""
    defaults = IndexParams()
    t = defaults.threshold if threshold is None else threshold
    k = defaults.num_perm if num_perm is None else num_perm
    check_threshold(t)
    check_num_perm(k)  # before anything is sized by it
    if bands is not None and rows is not None:
        band = banding(t, k, bands, rows)
    else:
        band = tune(t, k, false_positive_weight, false_negative_weight)
    return IndexParams(
        threshold=t,
        num_perm=k,
        shingle=spec or defaults.shingle,
        bands=band.bands,
        rows=band.rows,
        verify=verify or defaults.verify,
        seed=seed,
        item=item,
    )


def _checked_seed(seed: int | None) -> int:
    s = IndexParams.seed if seed is None else seed
    if not 0 <= s <= MAX_SEED:  # hashed as a 64-bit key, stored as an unsigned 64-bit value
        raise ConfigError(
            f"`seed` must be between 0 and {MAX_SEED} (2**64 - 1), got {s}", params=("seed",)
        )
    return s


def open_params(index: Index, **options: Any) -> IndexParams:
    """The parameters of an index: its stored ones, which explicit `options` (those of
    `resolve_params`) must match; for a new index, resolved from the options and
    stored now."""
    stored_rec = index.read(lambda t: t.meta(MetaKey.PARAMS))
    stored = None if stored_rec is None else IndexParams.from_record(stored_rec)
    params = resolve_params(stored, **options)
    if stored is None:
        index.write(lambda t: t.set_meta(MetaKey.PARAMS, params.to_record()))
    return params


def check_changelog(index: Index, bound: dict[str, str] | None, changelog: str | None) -> None:
    """Refuse to write an index mirrored to a changelog (`bound`, recorded by the
    worker: its topic, group and input topic) without writing to that changelog."""
    if bound is None or bound.get("topic") == changelog:
        return
    where = (
        f"the index at {index.path} is mirrored to the changelog topic {bound['topic']!r} "
        f"by the worker of group {bound.get('group_id')!r} on topic "
        f"{bound.get('input_topic')!r}"
    )
    if changelog is None:
        raise ConfigError(
            f"{where}; documents added here would be missing from that changelog, and a "
            "restore from it would silently lose them. Send them through the worker's "
            f"input topic (`streamdedup produce FILE --topic {bound.get('input_topic')}`), "
            "or check them against a separate index. (A worker on this index: start it "
            f"with `changelog` {bound['topic']}.)",
            params={"changelog": "--changelog-topic"},
        )
    raise ConfigError(
        f"{where}; this run names the changelog {changelog!r}, which lacks the documents "
        f"indexed so far. Use `changelog` {bound['topic']}, or start a new index "
        "for a new changelog.",
        params={"changelog": "--changelog-topic"},
    )
