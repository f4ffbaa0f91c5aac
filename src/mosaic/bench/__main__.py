"""``python -m mosaic.bench ...``: the ``mosaic bench`` commands, for torchrun
(``torchrun --nproc-per-node 8 -m mosaic.bench collectives --out DIR``)."""

from __future__ import annotations

import sys


def main() -> None:
    from mosaic.cli.bench_cmd import bench_app
    from mosaic.cli.warning_lines import install_immediate

    install_immediate()  # one `warning:` line each, as `mosaic bench` prints them

    sys.exit(bench_app(prog_name="python -m mosaic.bench"))


if __name__ == "__main__":
    main()
