"""`mosaic report` and `mosaic train` given another command's output name that command (a
trial gave `report` a training run's result.json and the --json of train, ladder run,
ladder fit and bench: each was "not a mosaic result"; `train run.json` listed 25 unknown
fields)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from mosaic.errors import MosaicInputError
from mosaic.report.html import detect_kind
from mosaic.train.config import train_config_from_mapping
from mosaic.train.trainer import TrainResult

# the documents as the commands write them (keys; values do not matter to the detection)
RESULT_JSON = {field.name: 1 for field in fields(TrainResult)}  # result.json = train --json
RUN_JSON = dict.fromkeys(("geometry", "n_total", "n_active", "n_embedding", "sparsity",
                          "total_steps", "tokens_per_step", "accumulation", "world_size",
                          "device", "autocast", "schedule", "peak_lr_source", "flops",
                          "data_tokens", "data_epochs", "config"), 1)
LADDER_RUN = {"runs_csv": "tiny/runs.csv", "runs": [], "unbalanced_rungs": [],
              "other_grid_rungs": []}
LADDER_FIT = dict.fromkeys(("law_file", "form", "data", "coefficients", "metrics",
                            "unbalanced_rungs_left_out", "at_bound", "smoothing_lag"), 1)
BENCH = {"out": "b", "families": [], "notes": []}


@pytest.mark.parametrize("document, command", [
    (RESULT_JSON, "train --json"), (RUN_JSON, "train --out"),
    (LADDER_RUN, "ladder run --json"), (LADDER_FIT, "ladder fit --json"),
    (BENCH, "bench --json"),
])
def test_report_names_the_command_that_wrote_the_file(document, command):
    with pytest.raises(MosaicInputError) as caught:
        detect_kind(document)
    message = str(caught.value)
    assert message.startswith(f"the file that `mosaic {command}` writes, which has no HTML "
                              "report; `mosaic report` draws the JSON of `mosaic plan|")
    assert "not a mosaic result" not in message
    assert ("run.plot: true" in message) == command.startswith("train")


def test_report_of_an_unknown_document_is_still_not_a_mosaic_result():
    with pytest.raises(MosaicInputError, match=r"^not a mosaic result: `mosaic report` draws"):
        detect_kind({"hello": 1})


@pytest.mark.parametrize("document, command", [(RESULT_JSON, "train --json"),
                                               (RUN_JSON, "train --out")])
def test_train_given_its_own_output_names_it(document, command):
    with pytest.raises(MosaicInputError, match=rf"^r1/x\.json: the file that `mosaic "
                                               rf"{command}` writes, not a `mosaic train` job"):
        train_config_from_mapping(document, "r1/x.json")


def test_a_stated_kind_does_not_hide_what_the_file_is():
    pytest.importorskip("plotly")
    from mosaic.report.html import render_report

    with pytest.raises(MosaicInputError, match=r"^the file that `mosaic train --json` writes"):
        render_report(RESULT_JSON, kind="perf")
