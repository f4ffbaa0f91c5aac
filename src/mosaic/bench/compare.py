"""Compare two bench directories (two clusters, or before and after a driver upgrade).

Rows are matched per family on the case key, each directory contributing the rows of its
newest metadata (``created_utc``). The ratio is time_B / time_A (> 1: B is slower); a
family's summary is the geometric mean ratio over the matched cases, and the cases only one
directory measured (a family run on one side, an interrupted run) are named in a warning.
"""

from __future__ import annotations

import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mosaic.bench.store import FAMILIES, ok_rows, read_family, read_metadata
from mosaic.errors import MosaicInputError, MosaicWarning


def newest_rows(directory: Path, family: str) -> pd.DataFrame:
    """OK rows of ``family`` from the newest metadata that measured it."""
    frame = ok_rows(read_family(directory, family))
    if frame.empty:
        return frame
    runs = read_metadata(directory).get("runs", {})
    present = [str(i) for i in frame["metadata_id"].astype(str).unique()]
    newest = max(present, key=lambda i: runs.get(i, {}).get("created_utc", ""))
    return frame[frame["metadata_id"].astype(str) == newest]


def _what_is(path: Path) -> str:
    """What an existing path that is no directory is: 'a file', 'a device', 'a pipe' or 'a
    socket' (its stat mode)."""
    mode = path.stat().st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a file"


def compare(dir_a: Path, dir_b: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(matched cases with time_a_s, time_b_s, ratio; per-family summary)."""
    for d in (dir_a, dir_b):
        if not d.exists():
            raise MosaicInputError(f"bench directory {d} does not exist")
        if not d.is_dir():  # (a trial: /dev/null "does not exist")
            raise MosaicInputError(f"bench directory {d} is {_what_is(d)}, not a directory")
        if all(newest_rows(d, family).empty for family in FAMILIES):  # (a trial read "no
            # case in common" for an empty folder)
            raise MosaicInputError(f"bench directory {d} holds no measured case (no bench "
                                   "table, or only failed and skipped rows)")
    matched = []
    unmatched: list[str] = []  # what the ratios leave out, said rather than dropped silently
    for family in FAMILIES:
        a, b = newest_rows(dir_a, family), newest_rows(dir_b, family)
        keys_a, keys_b = (set(f["case"]) if not f.empty else set() for f in (a, b))
        only_a, only_b = keys_a - keys_b, keys_b - keys_a
        unmatched += [f"{family}: {len(only)} only in {d}" for only, d in
                      ((only_a, dir_a), (only_b, dir_b)) if only]
        if a.empty or b.empty:
            continue
        a = a.groupby("case", as_index=False)["time_s"].median()
        b = b.groupby("case", as_index=False)["time_s"].median()
        joined = a.merge(b, on="case", suffixes=("_a", "_b"))
        if joined.empty:  # the family measured on both sides, but other cases
            continue
        joined.insert(0, "family", family)
        matched.append(joined)
    if not matched:
        raise MosaicInputError(f"{dir_a} and {dir_b} have no measured case in common ("
                               + "; ".join(unmatched) + ")")
    if unmatched:
        warnings.warn("cases measured in one directory only are left out of the ratios ("
                      + "; ".join(unmatched) + ")", MosaicWarning, stacklevel=2)
    cases = pd.concat(matched, ignore_index=True).rename(
        columns={"time_s_a": "time_a_s", "time_s_b": "time_b_s"})
    cases["ratio"] = cases["time_b_s"] / cases["time_a_s"]
    summary = cases.groupby("family").agg(
        cases=("ratio", "size"),
        geomean_ratio=("ratio", lambda r: float(np.exp(np.log(r).mean()))),
        min_ratio=("ratio", "min"), max_ratio=("ratio", "max")).reset_index()
    return cases, summary


def plot_format(path: Path) -> str:
    """The image format ``--plot PATH`` is written in: its suffix's where matplotlib's Agg
    canvas writes it (``FigureCanvasBase.get_supported_filetypes``), PNG for a name without
    a suffix (written under that very name: matplotlib would append ``.png``, and the command
    then named a file it had not written, a trial's ``--plot compare``). MosaicInputError for
    a directory (matplotlib wrote ``DIR.png`` beside it) or a suffix matplotlib cannot write
    (a trial's ``--plot t1.yaml`` was an internal error after the whole comparison)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if path.is_dir():
        raise MosaicInputError(f"--plot {path}: is a directory; give the image file to write, "
                               f"e.g. {path / 'compare.png'}")
    suffix = path.suffix.lower().lstrip(".")
    if not suffix:
        return "png"
    supported = FigureCanvasAgg.get_supported_filetypes()
    if suffix not in supported:
        raise MosaicInputError(f"--plot {path}: matplotlib writes no .{suffix} image; name a "
                               f"file ending in .png (or {', '.join(sorted(supported))})")
    return suffix


def plot(cases: pd.DataFrame, path: Path, label_a: str, label_b: str) -> None:
    """Log-log scatter of time B against time A per family, with the y = x line, written to
    exactly ``path`` in :func:`plot_format`'s format."""
    image_format = plot_format(path)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    for family, g in cases.groupby("family"):
        ax.scatter(g["time_a_s"], g["time_b_s"], s=12, label=str(family))
    lo = float(min(cases["time_a_s"].min(), cases["time_b_s"].min()))
    hi = float(max(cases["time_a_s"].max(), cases["time_b_s"].max()))
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=1)
    ax.set(xscale="log", yscale="log", xlabel=f"{label_a} time (s)",
           ylabel=f"{label_b} time (s)", title="mosaic bench compare")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120, format=image_format)
    plt.close(fig)


def as_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dict(orient="records")
