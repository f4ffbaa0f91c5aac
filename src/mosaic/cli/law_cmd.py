"""`mosaic law`: predict loss, fit a law to run data, and find the model-FLOPs optimum."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from mosaic.arch import Geometry, count_parameters, ladder_geometry
from mosaic.arch.counts import sparsity as arch_sparsity
from mosaic.cli.common import (
    JsonFlag,
    error_console,
    guarded,
    print_json,
    print_key_value_table,
    print_table,
    to_jsonable,
)
from mosaic.config.model_file import load_model_file
from mosaic.errors import MosaicInputError, shown
from mosaic.io_atomic import atomic_path, check_output_file
from mosaic.law.extrapolation import (
    ExtrapolationFlag,
    data_support,
    extrapolation_document,
    extrapolation_flags,
)
from mosaic.law.fit import (
    DEFAULT_HUBER_DELTA,
    DEFAULT_POLISHED,
    DEFAULT_STARTS,
    FitResult,
    FitSettings,
)
from mosaic.law.forms import FORMS, get_form
from mosaic.law.law import ScalingLaw, load_law_file, require_identified
from mosaic.law.optimum import (
    DEFAULT_SPARSITY_RANGE,
    EQ17_MIN_C_MODEL_FLOPS,
    compute_optimum,
    sparsity_profile,
)
from mosaic.law.rundata import RunData
from mosaic.law.validation import check_fittable
from mosaic.limits import LIMITS, check_range
from mosaic.threads import limit_blas_threads

law_app = typer.Typer(
    name="law",
    help="Loss law (paper Sec. 4, 6.1): predict, fit run data, model-FLOPs optimum.",
    no_args_is_help=True,
)

LawOption = Annotated[
    Path | None,
    typer.Option("--law", help="Law JSON file (from `mosaic law fit --out`); default Table 2."),
]
PROFILE_KEYS = ("sparsity", "n_total", "n_active", "tokens", "loss")
# --profile solves one optimum per row (about 1 ms each): a thousand rows take about a
# second; 100,000 took two minutes to print a table no one reads (a fuzz trial).
MAX_PROFILE_POINTS = 1000


def register(app: typer.Typer) -> None:
    """Attach the `law` sub-command group to the top-level app."""
    app.add_typer(law_app, name="law")


def _law_label(law: ScalingLaw) -> str:
    return f"{law.form.name}, {law.provenance.get('source', 'fitted')}"


def _count(value: float) -> str:
    """Human count: 3.272e11 -> '327.2 B'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {suffix}"
    return f"{value:.4g}"


@dataclass(frozen=True)
class LawInputs:
    """The law's raw inputs. Each input path (counts today) builds one of these."""

    n_total: float
    tokens: float
    sparsity: float | None
    split_factor: float | None

    def __post_init__(self) -> None:
        """Physical ranges before the law is evaluated (mosaic.limits)."""
        check_range("--n-total", self.n_total, "n_params")
        check_range("--tokens", self.tokens, "tokens")
        if self.sparsity is not None:
            check_range("--sparsity", self.sparsity, "sparsity")
        if self.split_factor is not None:
            check_range("--split-factor", self.split_factor, "split_factor")


def _physical_loss(loss: float, law: ScalingLaw) -> float:
    """The predicted loss, or a one-line error when the law gives no physical value."""
    if not (math.isfinite(loss) and 0.0 < loss < LIMITS['loss'].high):
        raise MosaicInputError(
            f"the {law.form.name} law predicts a loss of {loss:g} nats/token here, outside "
            f"any physical range (0, {LIMITS['loss'].high:g}); the inputs or the law file's "
            f"coefficients are far outside its data support")
    return loss


def _extrapolation_rows(law: ScalingLaw, flags: list[ExtrapolationFlag]
                        ) -> list[tuple[str, str]]:
    """Table rows: every input outside the law's fitted range, with the ratio."""
    if data_support(law) is None:
        return [("extrapolation", "unknown: the law file records no fitted data range")]
    if not flags:
        return [("extrapolation", "none: every input is inside the fitted range")]
    return [("EXTRAPOLATING", flag.message) for flag in flags]


def _inputs_from_geometry(geometry: Geometry, tokens: float | None) -> LawInputs:
    """N_tot, S and G of a geometry (non-embedding counts, Table 9 convention)."""
    if tokens is None:
        raise MosaicInputError("missing --tokens; a geometry needs a token count too")
    counts = count_parameters(geometry)
    split = LIMITS["split_factor"]
    if geometry.moe is not None and not split.low <= geometry.split_factor <= split.high:
        # the model's own G, not a flag the user never gave (a fuzz trial blamed
        # --split-factor for a model file's ffn: 1)
        raise MosaicInputError(
            f"the model's split factor G = ffn / moe.expert_ffn = {geometry.ffn} / "
            f"{geometry.moe.expert_ffn} = {geometry.split_factor:g}; the law takes G in "
            f"{split.describe()}"
            + (" (a dense FFN at least as wide as one expert)" if geometry.split_factor < 1
               else ""))
    return LawInputs(float(counts.n_total), tokens, float(counts.sparsity),
                     geometry.split_factor)


def _inputs_from_counts(
    n_total: float | None, tokens: float | None, sparsity: float | None, split: float | None,
    n_active: float | None = None,
) -> LawInputs:
    if n_total is None or tokens is None:
        missing = [flag for flag, v in (("--n-total", n_total), ("--tokens", tokens)) if v is None]
        raise MosaicInputError(
            f"missing {' and '.join(missing)}; --n-total and --tokens are required"
        )
    if n_active is not None:  # a model card's "30B-A3B": S = 1 - N_act/N_tot (Sec. 2)
        if sparsity is not None:
            raise MosaicInputError("give --sparsity or --n-active, not both "
                                   "(S = 1 - N_act/N_tot)")
        if not (math.isfinite(n_active) and math.isfinite(n_total)
                and 0 < n_active <= n_total):
            raise MosaicInputError(f"--n-active must satisfy 0 < N_act <= N_tot = "
                                   f"{n_total:g}, got {n_active:g}")
        sparsity = float(arch_sparsity(n_active, n_total))
    return LawInputs(n_total, tokens, sparsity, split)


@law_app.command("predict")
@guarded
def predict(
    n_total: Annotated[
        float | None, typer.Option("--n-total", help="Total parameters N_tot (count).")
    ] = None,
    sparsity: Annotated[
        float | None, typer.Option("--sparsity", help="S = 1 - N_act/N_tot, 0 <= S < 1.")
    ] = None,
    n_active: Annotated[
        float | None, typer.Option("--n-active", help="Active parameters N_act instead of "
                                   "--sparsity (S = 1 - N_act/N_tot).")
    ] = None,
    tokens: Annotated[float | None, typer.Option("--tokens", help="Training tokens D.")] = None,
    split_factor: Annotated[
        float | None, typer.Option("--split-factor", help="Expert split factor G (Eq. 8).")
    ] = None,
    q: Annotated[
        int | None, typer.Option("--q", help="Ladder seed q (Sec. 7.1) instead of counts.")
    ] = None,
    experts: Annotated[int | None, typer.Option("--experts", help="With --q: experts E.")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="With --q: top-K.")] = None,
    arch: Annotated[
        Path | None, typer.Option(
            "--arch", "--model",
            help="Architecture YAML (model:, moe: blocks) or HuggingFace config.json.")
    ] = None,
    ladder: Annotated[
        Path | None, typer.Option(
            "--ladder", help="With --q: a `mosaic ladder` grid file whose rung geometry "
                             "(head_dim, kv_heads, gated_attention) to use; default the "
                             "paper's (head width 128, 8 KV heads).")
    ] = None,
    law_file: LawOption = None,
    bootstrap_samples: SamplesOfLawOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Predict the final training loss of one configuration (counts or a geometry)."""
    law = load_law_file(law_file)
    samples = _samples_of(bootstrap_samples, law)
    if ladder is not None and q is None:
        raise MosaicInputError("--ladder gives the geometry of a rung: name it with --q (and "
                               "--experts, --top-k, --split-factor)")
    if q is not None or arch is not None:
        if n_total is not None or sparsity is not None or n_active is not None:
            raise MosaicInputError("give a geometry (--q or --arch) or counts (--n-total "
                                   "with --sparsity or --n-active), not both")
        if q is not None and arch is not None:
            raise MosaicInputError("give --q or --arch, not both")
        if arch is not None:
            geometry = load_model_file(arch)
            if split_factor is not None and split_factor != geometry.split_factor:
                raise MosaicInputError(
                    f"--split-factor {split_factor:g} contradicts the architecture file's "
                    f"G = {geometry.split_factor:g}")
        else:
            if (experts is None) != (top_k is None):
                raise MosaicInputError("--experts and --top-k go together")
            if split_factor is not None:
                check_range("--split-factor", split_factor, "split_factor")
            g = 1 if split_factor is None else int(split_factor)
            if g != split_factor and split_factor is not None:
                raise MosaicInputError(f"--split-factor must be an integer with --q, "
                                       f"got {split_factor}")
            if ladder is None:
                geometry = ladder_geometry(q, experts, top_k, g)
            else:  # as `mosaic ladder run` builds the rung (mosaic.train.ladder)
                from mosaic.train.ladder import rung_geometry

                if tokens is None:
                    raise MosaicInputError("missing --tokens; a geometry needs a token count "
                                           "too")
                check_range("--tokens", tokens, "tokens")
                geometry = rung_geometry(ladder, q, experts, top_k, g, tokens)
        inputs = _inputs_from_geometry(geometry, tokens)
    else:
        ignored = [flag for flag, value in (("--experts", experts), ("--top-k", top_k))
                   if value is not None]
        if ignored:
            verb = "shape" if len(ignored) > 1 else "shapes"
            raise MosaicInputError(f"{' and '.join(ignored)} {verb} a ladder geometry: give "
                                   "them with --q (counts take --n-total and --sparsity or "
                                   "--n-active)")
        inputs = _inputs_from_counts(n_total, tokens, sparsity, split_factor, n_active)
    features = law.form.features  # what the form reads, named as options (a trial)
    if "active_fraction" in features and inputs.sparsity is None:
        raise MosaicInputError(f"the {law.form.name} law needs the sparsity: give --sparsity "
                               "S (0 <= S < 1) or --n-active")
    if "split_factor" in features and inputs.split_factor is None:
        raise MosaicInputError(f"the {law.form.name} law needs the split factor: give "
                               "--split-factor G (G > 0)")
    with np.errstate(all="ignore"):
        loss = _physical_loss(float(law.predict(**asdict(inputs))), law)
    flags = extrapolation_flags(
        law, n_total=inputs.n_total, tokens=inputs.tokens, sparsity=inputs.sparsity,
        split_factor=inputs.split_factor,
        n_active=None if inputs.sparsity is None else inputs.n_total * (1 - inputs.sparsity))
    interval = None if samples is None else _loss_interval(law, inputs, samples)
    if as_json:
        print_json({**asdict(inputs), "loss": loss, "form": law.form.name, "law": _law_label(law),
                    "extrapolation": extrapolation_document(law, flags),
                    **({} if interval is None else {"loss_interval": interval})})
        return
    rows = [("law", _law_label(law)), ("N_tot", _count(inputs.n_total))]
    if inputs.sparsity is not None:
        rows.append(("sparsity S", f"{inputs.sparsity:.4f}"))
    rows.append(("tokens D", _count(inputs.tokens)))
    if inputs.split_factor is not None:
        rows.append(("split factor G", f"{inputs.split_factor:g}"))
    rows.append(("predicted loss", f"{loss:.4f}"))
    if interval is not None:
        rows.append((f"{interval['level']:.0%} interval ({interval['samples']} samples)",
                     f"[{interval['low']:.4f}, {interval['high']:.4f}] (the law's "
                     "coefficient uncertainty only; read it beside the extrapolation)"))
    print_key_value_table("Predicted loss", rows + _extrapolation_rows(law, flags))


def _optimum_intervals(law: Any, samples: Any, compute: float, split_factor: float | None,
                       sparsity_range: tuple[float, float], as_json: bool) -> dict[str, Any]:
    """Eq. 16 solved again under every coefficient sample: the percentile interval of each
    optimal quantity at the level `mosaic plan` reports (a trial: the CLI had no interval of
    an optimum)."""
    from dataclasses import replace

    from mosaic.cli.progress import progress_reporter

    keys = ("sparsity", "n_total", "n_active", "tokens", "loss")
    table = np.full((len(samples.log_coefs), len(keys)), np.nan)  # NaN: no optimum
    with progress_reporter(as_json) as bar:  # about 0.1 s per sample on one core
        report = bar("optimum per coefficient sample")
        for row, log_coefs in enumerate(samples.log_coefs):
            coefficients = dict(zip(law.form.params, np.exp(log_coefs).tolist(), strict=True))
            with np.errstate(all="ignore"):
                try:
                    best = compute_optimum(replace(law, coefficients=coefficients), compute,
                                           split_factor, sparsity_range)
                    table[row] = [getattr(best, key) for key in keys]
                except MosaicInputError:
                    pass  # a sample that describes no law here: left out
            report(row + 1, len(table))
    interval = _sample_interval(table, "an optimum at this budget")
    low, high = interval.pop("low"), interval.pop("high")
    return {**interval, **{key: [float(low[i]), float(high[i])] for i, key in enumerate(keys)}}


def _sample_interval(values: np.ndarray, what: str) -> dict[str, Any]:
    """The percentile interval (law.bootstrap.percentile_interval, at the level `mosaic
    plan` reports) over the rows of per-sample ``values`` that are all finite with a
    positive last column (the loss); the rows left out are counted and said, not dropped
    silently (a review)."""
    from mosaic.law.bootstrap import percentile_interval
    from mosaic.plan.uncertainty import DEFAULT_LEVEL

    values = np.asarray(values, dtype=float).reshape(len(values), -1)
    usable = np.all(np.isfinite(values), axis=1) & (values[:, -1] > 0)
    if not usable.any():
        raise MosaicInputError(f"--bootstrap-samples: no sample gives {what}; the samples "
                               "describe no usable law here")
    left_out = int(len(values) - usable.sum())
    if left_out:
        _warn(f"{left_out} of {len(values)} coefficient samples give no {what} and are "
              "left out of the interval")
    low, high = percentile_interval(values[usable], DEFAULT_LEVEL)
    return {"level": DEFAULT_LEVEL, "samples": int(usable.sum()), "samples_left_out": left_out,
            "low": low, "high": high}


def _optimum_interval_rows(intervals: dict[str, Any] | None, dense: bool
                           ) -> list[tuple[str, str]]:
    """The optimum table's interval rows (none without --bootstrap-samples); no S* row for a
    dense law, whose S* row reads "- (dense law)" (a review saw "S* [0.0000, 0.0000]" under
    it)."""
    if not intervals:
        return []
    head = f"{intervals['level']:.0%} interval ({intervals['samples']} samples)"
    loss, sparsity = intervals["loss"], intervals["sparsity"]
    return [(f"{head}: L*", f"[{loss[0]:.4f}, {loss[1]:.4f}]"),
            *([] if dense else [(f"{head}: S*", f"[{sparsity[0]:.4f}, {sparsity[1]:.4f}]")]),
            *((f"{head}: {label}", f"[{_count(intervals[key][0])}, "
                                   f"{_count(intervals[key][1])}]")
              for key, label in (("n_total", "N_tot*"), ("n_active", "N_act*"),
                                 ("tokens", "D*")))]


def _samples_of(path: Path | None, law: Any) -> Any:
    """The --bootstrap-samples of ``law`` (refused when they were drawn around another
    fit, as `mosaic plan` refuses them), or None."""
    if path is None:
        return None
    from mosaic.plan.uncertainty import check_samples_describe, load_samples

    samples = load_samples(path, law.form.name)
    check_samples_describe(samples, law, f"--bootstrap-samples {path}")
    return samples


def _loss_interval(law: Any, inputs: Any, samples: Any) -> dict[str, Any]:
    """The percentile interval of the predicted loss over the coefficient samples."""
    with np.errstate(all="ignore"):
        losses = law.predict(**asdict(inputs), log_coefs=samples.log_coefs)
    interval = _sample_interval(losses, "a finite, positive loss at this point")
    return {**interval, "low": float(interval["low"][0]), "high": float(interval["high"][0])}


# The coefficient samples of a law file (`law predict` and `law optimum`).
SamplesOfLawOption = Annotated[Path | None, typer.Option(
    "--bootstrap-samples", help="Coefficient samples of the --law fit (`law fit`/`ladder fit "
    "--bootstrap N --samples-out`): adds 90% intervals.")]


# The bootstrap options of `law fit` and `ladder fit`.
BootstrapOption = Annotated[
    int, typer.Option("--bootstrap", help="Bootstrap resamples for intervals (0: none).")]
BootstrapMethodOption = Annotated[
    str, typer.Option("--bootstrap-method", help=(
        "'wild' (App. B.2) or 'case'; checked before the fit, even without --bootstrap."))]
SamplesOutOption = Annotated[
    Path | None,
    typer.Option("--samples-out", help="Write the bootstrap coefficient samples (for mosaic "
                                       "plan --bootstrap-samples); needs --bootstrap.")]


MAX_BOOTSTRAP = 100_000  # resamples; 1e5 refits of the joint form already take hours


def check_bootstrap_options(n_bootstrap: int, method: str, samples_out: Path | None) -> None:
    """The bootstrap options, before the fit (a fuzz case failed only after it; --bootstrap 1
    was refused by bootstrap_fit only after the point fit, minutes into a ladder's)."""
    from mosaic.law.bootstrap import MIN_RESAMPLES, check_bootstrap_method

    if samples_out is not None and not n_bootstrap:
        raise MosaicInputError("--samples-out needs --bootstrap N (N > 0)")
    check_bootstrap_method(method)
    check_range("--bootstrap", n_bootstrap, "top", integer=True, high=MAX_BOOTSTRAP)
    if 0 < n_bootstrap < MIN_RESAMPLES:
        raise MosaicInputError(
            f"--bootstrap: got {n_bootstrap}; allowed: 0 (no intervals) or an integer in "
            f"{MIN_RESAMPLES}..{MAX_BOOTSTRAP} (an interval needs at least {MIN_RESAMPLES} "
            "resamples)")


@law_app.command("fit")
@guarded
def fit(
    data: Annotated[Path, typer.Argument(help="Run data, .csv or .parquet (see docs/law.md).")],
    form: Annotated[str, typer.Option("--form", help=f"One of {sorted(FORMS)}.")] = "joint",
    huber_delta: Annotated[
        float, typer.Option("--huber-delta", help="Huber threshold on log-loss residuals.")
    ] = DEFAULT_HUBER_DELTA,
    n_bootstrap: BootstrapOption = 0,
    method: BootstrapMethodOption = "wild",
    seed: Annotated[int, typer.Option("--seed", help="Seed of starts and bootstrap.")] = 0,
    starts: Annotated[
        int, typer.Option("--starts", help="Initialisations screened (vectorised).")
    ] = DEFAULT_STARTS,
    refine: Annotated[
        int, typer.Option("--refine", help="Best starts refined with L-BFGS-B.")
    ] = DEFAULT_POLISHED,
    holdout: Annotated[
        float | None, typer.Option(
            "--holdout", help="Fraction held out per G stratum (0: none; default 0.1, or "
            "none when holding 10% out leaves too few runs to fit).")
    ] = None,
    split_factor: Annotated[
        float | None, typer.Option("--split-factor", help="Fit only the runs with this G.")
    ] = None,
    scan: Annotated[
        int, typer.Option("--scan", help="Fresh restarts of an identifiability scan (0: none).")
    ] = 0,
    out: Annotated[Path | None, typer.Option("--out", help="Write the fitted law JSON.")] = None,
    samples_out: SamplesOutOption = None,
    parity: Annotated[
        Path | None,
        typer.Option("--parity", help="Write observed/predicted/held-out per run as CSV."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Fit a law form to run data (Huber on log L, multi-start L-BFGS-B, held-out check)."""
    # The fitting stack (scipy.stats, pandas) loads only here, not for predict/optimum.
    import pandas as pd

    from mosaic.law.bootstrap import identifiability_scan
    from mosaic.law.datasets import dataset_hint
    from mosaic.law.rundata import check_columns, read_run_table
    from mosaic.law.validation import fit_with_holdout, holdout_to_fit

    check_bootstrap_options(n_bootstrap, method, samples_out)
    for option, path in (("--out", out), ("--samples-out", samples_out), ("--parity", parity)):
        if path is not None:
            check_output_file(path, option, inputs=[data])  # before the fit, not after it
    _check_fit_settings(huber_delta=huber_delta, seed=seed, starts=starts, refine=refine,
                        holdout=holdout, scan=scan)
    law_form = get_form(form)
    frame = read_run_table(data)  # read once: the fit's data and the router-health columns
    if not dataset_hint(frame.columns):  # (a public dataset's own columns: its convert hint)
        check_columns(list(frame.columns), law_form, str(data))
    runs = RunData.from_frame(frame, source=str(data))
    if split_factor is not None:
        runs = runs.with_split_factor(split_factor)
    check_fittable(runs, law_form)
    _warn_unbalanced_rungs(frame, split_factor)  # (after the refusals: a refused table gets
    _warn_repeated_data(frame)  # its one line; a trial's per-g fit of two G got two lines)
    _warn_duplicate_rows(frame)
    _warn_stray_losses(runs)
    _warn_sparsity_dropped(runs, law_form)
    holdout, holdout_note = holdout_to_fit(runs, law_form, holdout)
    if holdout_note:
        _warn(holdout_note)
    limit_blas_threads()  # small-matrix fits run fastest on one BLAS thread (mosaic.threads)
    settings = FitSettings(huber_delta=huber_delta, starts=starts, n_polished=refine, seed=seed)
    from mosaic.cli.progress import progress_reporter

    with progress_reporter(as_json) as bar:
        validated = fit_with_holdout(runs, law_form, settings, holdout_fraction=holdout,
                                     progress=bar("law fit (screened blocks, refined starts)"))
    payload: dict[str, Any] = {
        "form": law_form.name,
        "data": str(data),
        "coefficients": dict(validated.law.coefficients),
        "metrics": asdict(validated.metrics),
        "settings": {"huber_delta": huber_delta, "starts": starts, "refine": refine, "seed": seed},
        "data_support": dict(validated.law.provenance.get("data_support") or {}),
    }
    report_bounds(validated.law, payload)
    report_no_fit(payload["metrics"])
    if n_bootstrap:
        bootstrap_into(payload, validated.fit, method=method, n_resamples=n_bootstrap,
                       seed=seed, samples_out=samples_out, as_json=as_json)
    if scan:
        with progress_reporter(as_json) as bar:
            scanned = identifiability_scan(validated.fit, n_restarts=scan, seed=seed + 1,
                                           progress=bar("identifiability scan refits"))
        payload["identifiability"] = {
            name: {"verdict": scanned.verdicts[name], "relative_spread": float(spread)}
            for name, spread in zip(scanned.params, scanned.relative_spread, strict=True)
        }
    if parity is not None:
        with atomic_path(parity) as temp:
            pd.DataFrame(asdict(validated.parity)).to_csv(temp, index=False)
        payload["parity_file"] = str(parity)
    if out is not None:
        provenance = {key: payload[key] for key in payload if key != "coefficients"}
        provenance = to_jsonable({"source": f"fitted to {data}", **provenance})
        written = replace(validated.law, provenance=provenance)
        written.save(out)
        payload["law_file"] = str(out)
        warn_if_unplannable(written, payload)
    if as_json:
        print_json(payload)
        return
    print_fit(payload)


def _warn_unbalanced_rungs(frame: Any, split_factor: float | None) -> None:
    """A ladder's runs.csv (``frame``) names the rungs whose routers ended unbalanced
    (column starved_experts): `law fit` fits every row it is given (of ``split_factor``,
    where given), so it says which of those rows they are (`mosaic ladder fit` leaves them
    out)."""
    from mosaic.train.router_health import (
        rows_of_split_factor,
        unbalanced_names,
        unbalanced_warning,
    )

    if "starved_experts" not in frame.columns:
        return
    rows = frame.to_dict("records")
    names = unbalanced_names([row for row, kept in zip(
        rows, rows_of_split_factor(rows, split_factor), strict=True) if kept])
    if names:
        consequence = "`law fit` fits them anyway (`mosaic ladder fit` leaves them out)"
        _warn(unbalanced_warning(names, consequence))


def _warn_repeated_data(frame: Any) -> None:
    """Runs that saw tokens more than once (a unique_tokens column below tokens): every form
    here counts each token as new, so they read as fresh data (a trial: all 182 of
    Muennighoff et al.'s runs fitted without a word)."""
    from mosaic.law.datasets import epochs_over_data, repeats_data

    repeated = repeats_data(frame)
    if repeated.any():  # (non-numbers and zeros are NaN: no crash, a trial's review)
        epochs = epochs_over_data(frame)[repeated]
        _warn(f"{int(repeated.sum())} of {len(frame)} runs repeat their data (up to "
              f"{epochs.max():,.1f} epochs): the law forms count every token as new, and a "
              "repeated token is worth less (Muennighoff et al. 2023); fit the single-epoch "
              "runs (`mosaic law convert muennighoff FILE --single-epoch --out runs.csv`, or "
              "drop the rows with tokens > unique_tokens)")


def warn_if_unplannable(law: ScalingLaw, payload: dict[str, Any]) -> None:
    """Say now, beside the written file, that `plan`, `sweep` and `law optimum` will refuse
    the law (:func:`mosaic.law.law.require_identified`): a review found a fit that wrote, with
    exit 0, a law every planning command then refused."""
    try:
        require_identified(law, "`mosaic plan`, `sweep` and `law optimum` will refuse this "
                           "law", "each")
    except MosaicInputError as exc:
        payload["warning"] = str(exc)
        _warn(str(exc))


def _warn_sparsity_dropped(runs: Any, form: Any) -> None:
    """Sparse runs fitted by a form without a sparsity term: it reads n_total alone (a
    trial's MoE table fitted as chinchilla, its n_active dropped without a word)."""
    if "active_fraction" in form.features or runs.n_active is None:
        return
    sparse = int((runs.n_active < runs.n_total).sum())
    if sparse:
        _warn(f"{sparse} of {runs.n_runs} runs are sparse (n_active below n_total); form "
              f"'{form.name}' has no sparsity term and fits n_total alone (the joint and "
              "per-g forms have one)")


def _warn_duplicate_rows(frame: Any) -> None:
    """Rows that repeat another row in every column: each would count as one more
    independent run in the fit and in its bootstrap, whose intervals narrow (a trial fitted
    a table written twice, '480 / 0 runs', without a word)."""
    repeated = int(frame.duplicated().sum())
    if repeated:
        _warn(f"{repeated} of {len(frame)} rows repeat another row exactly: each counts as "
              "one more run in the fit and its bootstrap, whose intervals narrow as if the "
              "data were larger; drop the copies (a table concatenated twice?)")


# A loss this far under the table's median is no point of the same curve: cross-entropy
# losses of one ladder span a factor of 2-3 (paper Table 6: 2.3-3.6 nats; Chinchilla's runs
# 1.9-5), and a trial's 1e-6 (a typo) moved the fitted exponents by an order of magnitude
# with no word of the row.
STRAY_LOSS_FRACTION = 0.1


def _warn_stray_losses(runs: RunData) -> None:
    """Rows whose loss is under :data:`STRAY_LOSS_FRACTION` of the median loss, by row."""
    median = float(np.median(runs.loss))
    rows = np.flatnonzero(runs.loss < STRAY_LOSS_FRACTION * median)
    if rows.size:
        shown = ", ".join(f"{int(i) + 1} ({runs.loss[i]:.3g})" for i in rows[:5])
        _warn(f"row(s) {shown} have a loss under a tenth of the table's median {median:.3g}: "
              "a typo or another unit (bits, a sum over tokens)? The fit reads them as they "
              "are; fix or drop them")


def heldout_rmse_text(metrics: dict[str, Any]) -> str:
    """The held-out RMSE cell: '-' with nothing held out (--holdout 0), not 'nan'."""
    if not metrics["n_heldout"]:
        return "- (nothing held out)"
    return f"{metrics['heldout_rmse']:.5f}"


def report_bounds(law: ScalingLaw, payload: dict[str, Any]) -> None:
    """Coefficients a fit left on its bounds, and exponents on a feature no run varies:
    into ``payload["at_bound"]`` / ``payload["unidentified"]`` and one warning line each
    (`mosaic law fit` and `mosaic ladder fit`)."""
    from mosaic.law.fit import bound_note, unidentified_note

    for key, describe in (("at_bound", bound_note), ("unidentified", unidentified_note)):
        found = law.provenance.get(key) or {}
        note = describe(found)
        if note is not None:
            payload[key] = found
            _warn(note)


def _warn(note: str) -> None:
    error_console.print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)


def report_no_fit(metrics: dict[str, Any]) -> None:
    """A warning when the law explains none of the runs' loss variance (R^2 <= 0: a constant
    predicts as well; a trial fitted losses that rise with N and D and got R^2 -0.00008)."""
    if metrics["r2"] <= 0.0:
        _warn(f"R^2 {metrics['r2']:.5g}: the law explains none of the runs' loss variance (a "
              "constant predicts them as well); check the data before planning with it")


def report_unstable_estimates(payload: dict[str, Any]) -> None:
    """A warning naming the coefficients whose point estimate lies outside their own
    bootstrap percentile interval (the fit lands elsewhere on resampled runs)."""
    def inside(value: float, low: float, high: float) -> bool:
        # to a relative 1e-9: an interval of one replicated value is equal, not below (a
        # trial: 10 "outside" [10.000000000000002, 10.000000000000002])
        slack = 1e-9 * max(abs(value), abs(low), abs(high))
        return low - slack <= value <= high + slack

    outside = [f"{name} {value:.4g} outside [{low:.4g}, {high:.4g}]"
               for name, value in payload["coefficients"].items()
               for low, high in [payload["intervals"][name]["percentile"]]
               if not inside(value, low, high)]
    if outside:
        _warn("point estimate outside its bootstrap interval: " + "; ".join(outside)
              + " (the fit is unstable: more runs, or more --starts)")


def bootstrap_into(payload: dict[str, Any], fit: FitResult, *, method: str,
                   n_resamples: int, seed: int, samples_out: Path | None,
                   as_json: bool) -> None:
    """Bootstrap ``fit`` and add its intervals (and the samples file, if asked) to a fit's
    ``payload``: one path for `law fit` and `ladder fit`."""
    from mosaic.cli.progress import progress_reporter
    from mosaic.law.bootstrap import bootstrap_fit
    from mosaic.plan.uncertainty import LawSamples, save_samples

    with progress_reporter(as_json) as bar:
        result = bootstrap_fit(fit, method=method, n_resamples=n_resamples, seed=seed,
                               progress=bar("bootstrap refits"))
    payload["intervals"] = {
        name: {"percentile": list(iv.percentile),
               "bca": None if iv.bca is None else list(iv.bca)}
        for name, iv in result.intervals.items()
    }
    payload["bootstrap"] = {"method": method, "resamples": n_resamples, "level": result.level}
    report_unstable_estimates(payload)
    if samples_out is not None:
        save_samples(LawSamples.from_bootstrap(result), samples_out)
        payload["samples_file"] = str(samples_out)


def _check_fit_settings(*, huber_delta: float, seed: int, starts: int, refine: int,
                        holdout: float | None, scan: int) -> None:
    """Bounds of the fit's knobs, checked before the data is read."""
    check_range("--huber-delta", huber_delta, "huber_delta")
    check_range("--seed", seed, "top", integer=True, high=2**63 - 1)
    check_range("--starts", starts, "top", integer=True, low=1, high=10**6)
    if refine > starts:  # the default 32 above a small --starts
        raise MosaicInputError(f"--refine ({refine}) exceeds --starts ({starts}): the refined "
                               f"starts are the best of the screened ones; give --refine "
                               f"{starts} or fewer")
    check_range("--refine", refine, "top", integer=True, low=1, high=min(starts, 10_000))
    if holdout is not None:
        check_range("--holdout", holdout, "fraction", high=0.9)
    check_range("--scan", scan, "top", integer=True, high=10_000)


def print_fit(payload: dict[str, Any]) -> None:
    columns = ["coefficient", "value"]
    if "intervals" in payload:
        columns += ["percentile 95%", "BCa 95%"]
    if "identifiability" in payload:
        columns += ["spread", "verdict"]
    rows = []
    # exponents on a feature no run varies: their intervals are no measure of anything
    from mosaic.law.fit import FEATURE_SYMBOLS

    unidentified = {name: FEATURE_SYMBOLS.get(feature, feature)
                    for feature, names in payload.get("unidentified", {}).items()
                    for name in names}
    # so is the prefactor of a term whose every exponent is: the term is then a constant,
    # and only its sum with the irreducible loss is fitted (a trial saw B/D^beta's b called
    # 'replicates pile on one value' beside beta's 'not identified'; E trades with it)
    terms = get_form(payload["form"]).terms
    for term in terms:
        if term.factors and all(exponent in unidentified for _, exponent in term.factors):
            unidentified[term.prefactor] = unidentified[term.factors[0][1]]
            for constant in (t.prefactor for t in terms if not t.factors):
                unidentified.setdefault(constant, unidentified[term.prefactor])
    # BCa needs each tail to hold more than one replicate's share (bootstrap.bca_defined):
    # 20 resamples at 95% never do (a trial read 'pile on one value' there)
    from mosaic.law.bootstrap import min_bca_resamples

    bootstrap = payload.get("bootstrap") or {}
    fewest = min_bca_resamples(bootstrap.get("level", 0.95))
    too_few = bootstrap.get("resamples", fewest) < fewest
    for name, value in payload["coefficients"].items():
        row = [name, f"{value:.6g}"]
        if "intervals" in payload:
            iv = payload["intervals"][name]
            row += [f"[{iv['percentile'][0]:.4g}, {iv['percentile'][1]:.4g}]"]
            row += [f"n/a (not identified: no run varies {unidentified[name]})"
                    if name in unidentified
                    else f"n/a (too few resamples: --bootstrap {fewest} or more)"
                    if iv["bca"] is None and too_few
                    else "n/a (replicates pile on one value)" if iv["bca"] is None
                    else f"[{iv['bca'][0]:.4g}, {iv['bca'][1]:.4g}]"]
        if "identifiability" in payload:
            ident = payload["identifiability"][name]
            row += [f"{ident['relative_spread']:.3g}", ident["verdict"]]
        rows.append(row)
    print_table(f"Fitted {payload['form']} law ({payload['data']})", columns, rows)
    metrics = payload["metrics"]
    print_key_value_table(
        "Fit quality (loss units)",
        [
            ("RMSE, all runs", f"{metrics['rmse']:.5f}"),
            ("R^2, all runs", f"{metrics['r2']:.5f}"),
            ("held-out RMSE", heldout_rmse_text(metrics)),
            ("runs / held out", f"{metrics['n_runs']} / {metrics['n_heldout']}"),
            ("objective", f"{metrics['objective']:.8g}"),
        ]
        + ([("law file", payload["law_file"])] if "law_file" in payload else []),
    )


@law_app.command("convert")
@guarded
def convert(
    dataset: Annotated[str, typer.Argument(help="epoch, clark or muennighoff")],
    source: Annotated[Path, typer.Argument(help="the dataset's file as published "
                                                 "(../shared/research/data)")],
    out: Annotated[Path, typer.Option("--out", help="run table to write (.csv)")],
    keep_all: Annotated[bool, typer.Option(
        "--keep-all", help="epoch: keep the 5 largest-loss rows Epoch's analysis drops")] = False,
    router: Annotated[str | None, typer.Option(
        "--router", help="clark: only this router's runs and the dense ones (S-Base, RL-R, "
                         "Hash); default every router")] = None,
    single_epoch: Annotated[bool, typer.Option(
        "--single-epoch", help="muennighoff: only the runs that saw each token once")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Write a public scaling-law dataset as the run table `law fit` reads (docs/law.md).

    epoch: Besiroglu et al. 2024's reconstruction of Hoffmann et al. Fig. 4 (N, D = C/6N,
    loss); clark: Clark et al. 2022's routed runs (each run's last evaluation, N_tot, N_act,
    experts, k); muennighoff: Muennighoff et al. 2023's data-constrained runs (N, D, unique
    tokens, loss).
    """
    from mosaic.law import datasets

    if dataset not in datasets.DATASETS:
        raise MosaicInputError(f"dataset {shown(dataset)}: allowed: {', '.join(datasets.DATASETS)}")
    given = {"--keep-all": (keep_all, "epoch"), "--router": (router is not None, "clark"),
             "--single-epoch": (single_epoch, "muennighoff")}
    for option, (is_set, owner) in given.items():
        if is_set and dataset != owner:
            raise MosaicInputError(f"{option} applies to the {owner} dataset, not {dataset}")
    if out.suffix.lower() != ".csv":
        raise MosaicInputError(f"--out {out}: write a .csv run table")
    check_output_file(out, "--out", inputs=[source])
    if dataset == "epoch":
        table = datasets.epoch_chinchilla_table(source, keep_all=keep_all)
    elif dataset == "clark":
        table = datasets.clark_routing_table(source, router=router)
    else:
        table = datasets.muennighoff_table(source, single_epoch=single_epoch)
    if table.empty:
        raise MosaicInputError(f"{source}: no {dataset} runs left to write"
                               + (" with --single-epoch" if single_epoch else "")
                               + (f" for --router {router}" if router else ""))
    # the checks `law fit` applies to the table it reads (positive sizes, tokens and
    # losses, ...): a bad row is named here, not written on (a fuzz trial: Model Size 0
    # wrote tokens = inf)
    RunData.from_frame(table.reset_index(drop=True),
                       source=f"{source} (as the converted {dataset} table)")
    with atomic_path(out) as temp:
        table.to_csv(temp, index=False)
    payload = {"dataset": dataset, "out": str(out), "runs": len(table),
               "columns": list(table.columns)}
    if as_json:
        print_json(payload)
        return
    print_key_value_table(f"{dataset} run table", [
        ("runs", str(len(table))), ("columns", ", ".join(table.columns)), ("written", str(out))])


@law_app.command("optimum")
@guarded
def optimum(
    compute: Annotated[float, typer.Option("--compute", help="Model FLOPs C = 6 N_act D.")],
    split_factor: Annotated[
        float | None,
        typer.Option("--split-factor", help="Expert split factor G, held fixed (joint: 4, "
                                             "or the nearest G the law file was fitted on)."),
    ] = None,
    s_min: Annotated[
        float, typer.Option("--s-min", help="Lowest sparsity allowed.")
    ] = DEFAULT_SPARSITY_RANGE[0],
    s_max: Annotated[
        float, typer.Option("--s-max", help="Highest sparsity allowed (default: 0.981, the "
                                            "paper's data support).")
    ] = DEFAULT_SPARSITY_RANGE[1],
    profile_points: Annotated[
        int, typer.Option("--profile", help="Also tabulate L*(S) at this many sparsities "
                                            f"(at most {MAX_PROFILE_POINTS:,}).")
    ] = 0,
    law_file: LawOption = None,
    bootstrap_samples: SamplesOfLawOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Model-FLOPs-optimal (N_tot, S, D) of Eq. 16 and the peak learning rate of Eq. 17."""
    check_range("--compute", compute, "flops")
    if split_factor is not None:
        check_range("--split-factor", split_factor, "split_factor")
    check_range("--profile", profile_points, "top", integer=True, high=MAX_PROFILE_POINTS)
    law = load_law_file(law_file)
    require_identified(law, f"--law {law_file}", "the compute-optimal allocation")
    if law.form.is_dense:  # no sparsity to bound or profile (a trial: both were ignored)
        given = [option for option, value, default in (
            ("--s-min", s_min, DEFAULT_SPARSITY_RANGE[0]),
            ("--s-max", s_max, DEFAULT_SPARSITY_RANGE[1]),
            ("--profile", profile_points, 0)) if value != default]
        if given:
            raise MosaicInputError(f"{', '.join(given)}: the law ({law.form.name}) is dense, "
                                   "with no sparsity to bound or profile")
    if split_factor is not None and "split_factor" not in law.form.features \
            and law.split_factor is None:
        raise MosaicInputError(f"--split-factor: the law ({law.form.name}) has no G term and "
                               "was fitted at no stated G; drop --split-factor")
    samples = _samples_of(bootstrap_samples, law)
    best = compute_optimum(law, compute, split_factor, (s_min, s_max))
    payload: dict[str, Any] = {
        "c_model_flops": best.c_model_flops,
        "split_factor": best.split_factor,
        "n_total": best.n_total,
        "n_active": best.n_active,
        "sparsity": best.sparsity,
        "tokens": best.tokens,
        "loss": best.loss,
        "lr": best.learning_rate,
        # Eq. 17 below the smallest run it was fitted on (the trainer clamps there)
        "lr_extrapolated": bool(compute < EQ17_MIN_C_MODEL_FLOPS),
        "at_boundary": best.at_boundary,
        "sparsity_range": list(best.sparsity_range),
        "form": law.form.name,
    }
    flags = extrapolation_flags(law, n_total=best.n_total, n_active=best.n_active,
                                tokens=best.tokens, sparsity=best.sparsity,
                                split_factor=best.split_factor)
    payload["extrapolation"] = extrapolation_document(law, flags)
    if samples is not None:
        payload["intervals"] = _optimum_intervals(law, samples, compute, split_factor,
                                                  (s_min, s_max), as_json)
    if profile_points:
        if profile_points < 2:
            raise MosaicInputError(f"--profile needs at least 2 points, got {profile_points}")
        grid = np.linspace(best.sparsity_range[0], best.sparsity_range[1], profile_points)
        curve = sparsity_profile(law, compute, grid, best.split_factor)
        columns = np.column_stack([getattr(curve, key) for key in PROFILE_KEYS])
        payload["profile"] = [dict(zip(PROFILE_KEYS, row.tolist(), strict=True)) for row in columns]
    if as_json:
        print_json(payload)
        return
    print_key_value_table(
        f"Model-FLOPs optimum (Eq. 16) at C = {compute:.3g} FLOPs",
        [
            ("law", _law_label(law)),
            ("split factor G", "-" if best.split_factor is None else f"{best.split_factor:g}"),
            ("sparsity S*", "- (dense law)" if law.form.is_dense
             else f"{best.sparsity:.4f}" + (" (on the bound)" * best.at_boundary)),
            ("N_tot*", _count(best.n_total)),
            ("N_act*", _count(best.n_active)),
            ("tokens D*", _count(best.tokens)),
            ("loss L*", f"{best.loss:.4f}"),
            ("peak lr (Eq. 17)", f"{best.learning_rate:.3e}" + (
                f" (extrapolated: Eq. 17 was fitted down to C = {EQ17_MIN_C_MODEL_FLOPS:.3g}; "
                "mosaic train holds it at that rate below)" if payload["lr_extrapolated"]
                else "")),
            *_extrapolation_rows(law, flags),
            *_optimum_interval_rows(payload.get("intervals"), law.form.is_dense),
        ],
    )
    if profile_points:
        print_table(
            "Profile over sparsity (Fig. 4)",
            ["S", "N_tot*", "N_act*", "D*", "L*"],
            [
                [
                    f"{r['sparsity']:.4f}",
                    _count(r["n_total"]),
                    _count(r["n_active"]),
                    _count(r["tokens"]),
                    f"{r['loss']:.4f}",
                ]
                for r in payload["profile"]
            ],
        )
