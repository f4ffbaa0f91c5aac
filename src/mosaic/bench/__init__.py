"""Microbenchmarks of the user's own devices and network (``mosaic bench``; paper Sec. 5.3).

Measures the kernels and collectives the performance model prices (dense and grouped
GEMMs, attention, element-wise kernels, host launch cost, NCCL/gloo collectives) and
writes tidy tables (Parquet + CSV) with a metadata file, in the column vocabulary of
``mosaic.perf.kernels`` and ``mosaic.perf.collectives``, so that jobs can read them as
measured tables and ``mosaic calibrate --microbench`` can fit the model's constants.

Needs torch (``pip install -e '.[bench]'``); imported lazily by the modules that time.
"""
