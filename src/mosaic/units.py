"""Unit constants shared by every layer (SI inside the library; these convert for people)."""

GIB = 2**30  # bytes in a GiB: memory is printed in GiB everywhere (device HBM, predictions)
SECONDS_PER_DAY = 86_400.0  # training windows are given in days, the model works in seconds
SECONDS_PER_HOUR = 3_600.0  # GPU-hours, MTBFs and prices per GPU-hour
HOURS_PER_DAY = SECONDS_PER_DAY / SECONDS_PER_HOUR  # a window in days as GPU-hours
MIB = 2**20  # bytes in a MiB: small misses and free disk are printed in MiB
# bytes per element of the two dtypes every layer stores and moves (IEEE 754 binary32;
# bfloat16 keeps its top 16 bits)
BF16_BYTES = 2
FP32_BYTES = 4


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, keeping their zeros so that a column of
    numbers reads alike (3.00, 3.90, 3.91; not 3, 3.9, 3.91); whole numbers past the digits
    are written out (1000, not 1.00e+03)."""
    text = f"{value:#.{digits}g}".rstrip(".")
    return f"{value:.0f}" if "e" in text else text


def counted(value: float, unit: str) -> str:
    """'1 day', '2 days', '1.5 days': ``value`` (shortest form) and ``unit``, plural unless
    the value is one (a trial read '4 nodes x 1 days')."""
    return f"{value:g} {unit}{'' if value == 1 else 's'}"
