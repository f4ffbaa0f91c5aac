"""``python -m mosaic.bench ...``: the ``mosaic bench`` commands, for torchrun
(``torchrun --nproc-per-node 8 -m mosaic.bench collectives --out DIR``)."""

from __future__ import annotations

import sys


def main() -> None:
    from mosaic.cli.bench_cmd import bench_app

    sys.exit(bench_app(prog_name="python -m mosaic.bench"))


if __name__ == "__main__":
    main()
