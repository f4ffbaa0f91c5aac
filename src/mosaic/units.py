"""Unit constants shared by every layer (SI inside the library; these convert for people)."""

GIB = 2**30  # bytes in a GiB: memory is printed in GiB everywhere (device HBM, predictions)
SECONDS_PER_DAY = 86_400.0  # training windows are given in days, the model works in seconds
