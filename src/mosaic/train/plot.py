"""An HTML plot of a run's metrics.jsonl (loss, lr, throughput, router balance); plotly."""

from __future__ import annotations

from pathlib import Path

from mosaic.errors import require_extra
from mosaic.train.metrics import read_metrics

PLOT_USE = "run.plot (plotly)"


def require_plot_extra(plot: bool) -> None:
    """Before any training: a job with ``run.plot`` needs plotly (the report extra), said
    now rather than after the run has spent its compute (a trial's whole ladder trained,
    then every rung was reported failed)."""
    if plot:
        require_extra("plotly", "report", PLOT_USE)


def write_metrics_plot(metrics_path: str | Path, out_path: str | Path) -> Path:
    """Four stacked panels over steps; a self-contained HTML file (plotly.js inlined)."""
    require_extra("plotly", "report", PLOT_USE)
    from plotly.subplots import make_subplots

    records = read_metrics(metrics_path)
    steps = [r["step"] for r in records]
    figure = make_subplots(rows=4, cols=1, shared_xaxes=True, subplot_titles=(
        "training loss (nats/token)", "learning rate", "tokens/s",
        "router load max/mean per MoE layer"))
    figure.add_scatter(x=steps, y=[r["loss"] for r in records], name="loss", row=1, col=1)
    figure.add_scatter(x=steps, y=[r["smoothed_loss"] for r in records], name="smoothed",
                       row=1, col=1)
    figure.add_scatter(x=steps, y=[r["lr"] for r in records], name="lr", row=2, col=1)
    figure.add_scatter(x=steps, y=[r["tokens_per_s"] for r in records], name="tokens/s",
                       row=3, col=1)
    layers = len(records[0].get("router", {}).get("load_max_over_mean", [])) if records else 0
    for layer in range(layers):
        figure.add_scatter(x=steps, y=[r["router"]["load_max_over_mean"][layer]
                                       for r in records], name=f"MoE layer {layer + 1}",
                           row=4, col=1)
    figure.update_layout(height=1100, title=str(metrics_path))
    out_path = Path(out_path)
    figure.write_html(out_path, include_plotlyjs=True)
    return out_path
