"""How many validated runs lie outside the calibration's envelope, and in which dimensions.

`mosaic perf` places one job against its calibration's envelope (perf.coverage); `mosaic
validate` scores a whole file, whose runs may all lie outside the profile it names (a trial
validated H100 Megatron-Core runs against `paper-p6b200`, fitted on B200 NeMo runs, and
was not told). The tally keeps a count per dimension and the ids, not the records.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mosaic.config.run_records import RunRecord
from mosaic.perf.calibration import Calibration
from mosaic.perf.prediction_coverage import plan_outside_dimensions


@dataclass
class EnvelopeTally:
    """Runs outside ``calibration``'s envelope, counted as records stream past."""

    calibration: Calibration
    runs: int = 0
    outside_ids: list[str] = field(default_factory=list)
    by_dimension: Counter[str] = field(default_factory=Counter)

    def add(self, record: RunRecord) -> None:
        """Count ``record``: inside, or outside in each dimension it leaves."""
        coverage = self.calibration.coverage
        if coverage is None:
            return
        self.runs += 1
        outside = plan_outside_dimensions(coverage, record.workload, record.plan,
                                          record.system.device.name)
        if outside:
            self.outside_ids.append(record.id)
            self.by_dimension.update(outside_dimension.dimension for outside_dimension in outside)

    def to_document(self) -> dict[str, Any] | None:
        """The tally as JSON (None when the calibration records no envelope)."""
        if self.calibration.coverage is None:
            return None
        return {"runs": self.runs, "runs_outside": len(self.outside_ids),
                "by_dimension": dict(self.by_dimension.most_common()),
                "ids": list(self.outside_ids)}

    def note(self) -> str | None:
        """One line for the terminal when any run lies outside, else None."""
        document = self.to_document()
        if document is None or not document["runs_outside"]:
            return None
        return (f"note: {outside_runs_text(document)} lie outside the envelope of calibration "
                f"{self.calibration.name!r}: their errors measure the model beyond the runs "
                "the profile was fitted to (`mosaic perf RUNS.yaml#ID` names each dimension)")


def outside_runs_text(document: dict[str, Any]) -> str:
    """'2 of 4 run(s) (runs per dimension: gpu 2, stack 1)' from :meth:`EnvelopeTally.
    to_document`, for the terminal and the HTML page alike."""
    dimensions = ", ".join(f"{name} {count}" for name, count
                           in document["by_dimension"].items())
    return (f"{document['runs_outside']} of {document['runs']} run(s)"
            + (f" (runs per dimension: {dimensions})" if dimensions else ""))
