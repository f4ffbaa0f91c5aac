"""Values typed as text (an option, a form field): comma-separated lists and counts with
SI suffixes, each refused in one line that names where it was typed. The CLI's options and
the studio's form read them through the same functions."""

from __future__ import annotations

from collections.abc import Sequence

from mosaic.errors import MosaicInputError, shown


def _csv(option: str, text: str) -> list[str]:
    """The comma-separated parts of ``text``; '20,30,,40' (a value left out between commas)
    refused, a trailing comma harmless."""
    parts = [part.strip() for part in text.split(",")]
    if any(not part for part in parts[:-1]) and any(parts):
        raise MosaicInputError(f"{option} {shown(text)} has an empty value between commas; "
                               "list each value once, separated by commas")
    return [part for part in parts if part]


MAX_NAMES_SHOWN = 5  # of the unknown names a message lists


def parse_names(option: str, text: str, allowed: Sequence[str] | None = None
                ) -> tuple[str, ...]:
    """'bf16,fp8' -> ('bf16', 'fp8'), each once and in order; one line names the option
    when the list is empty, has a gap, or (``allowed`` given) names something else."""
    names = tuple(dict.fromkeys(_csv(option, text)))
    if not names:
        raise MosaicInputError(f"{option} is empty; give at least one name")
    unknown = [name for name in names if allowed is not None and name not in allowed]
    if unknown:
        # each name as the user typed it, shown by its start and length when long, and the
        # first few of many (a 5,000-character name was echoed whole; a trial)
        named = ", ".join(shown(name) for name in unknown[:MAX_NAMES_SHOWN])
        named += (f" and {len(unknown) - MAX_NAMES_SHOWN:,} more"
                  if len(unknown) > MAX_NAMES_SHOWN else "")
        raise MosaicInputError(f"{option} {shown(text)}: unknown {named}; allowed: "
                               f"{', '.join(allowed or ())}")
    return names


def _parse_numbers(option: str, text: str, kind: type, what: str) -> tuple:
    parts = _csv(option, text)
    try:
        values = tuple(kind(part) for part in parts)
    except ValueError:
        raise MosaicInputError(f"{option} must be comma-separated {what}, got {shown(text)}"
                               ) from None
    if not values:
        raise MosaicInputError(f"{option} is empty; give at least one value")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:  # a sweep point or grid axis value twice would be searched twice
        raise MosaicInputError(f"{option} {shown(text)}: {', '.join(f'{v:g}' for v in repeated)} "
                               "given more than once; list each value once")
    return values


COUNT_SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_count(option: str, text: str) -> float:
    """'235B' -> 2.35e11 ('1.5T', '800M', '3e10' too); a one-line error names the option."""
    body = text.strip()
    scale = COUNT_SUFFIXES.get(body[-1:].lower(), 1.0) if body else 1.0
    if scale != 1.0:
        body = body[:-1]
    try:
        value = float(body) * scale
    except ValueError:
        raise MosaicInputError(f"{option} must be a count such as 235B, 1.5T or "
                               f"3e10, got {shown(text)}") from None
    return value


def parse_ints(option: str, text: str) -> tuple[int, ...]:
    """'8,10,12' -> (8, 10, 12); a one-line error names the option."""
    return _parse_numbers(option, text, int, "integers")


def parse_floats(option: str, text: str) -> tuple[float, ...]:
    """'10,20.5' -> (10.0, 20.5); a one-line error names the option."""
    return _parse_numbers(option, text, float, "numbers")
