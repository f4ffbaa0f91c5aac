"""``python -m mosaic.train JOB.yaml --out DIR`` — the launcher-friendly entry point.

Single process: ``python -m mosaic.train job.yaml --out runs/a``. Data parallel (FSDP2):
``torchrun --nproc_per_node 8 -m mosaic.train job.yaml --out runs/a`` (multi-node: add
``--nnodes``, ``--node_rank`` and ``--rdzv_endpoint`` as usual for torchrun).
"""

from __future__ import annotations

import argparse
import sys

from mosaic.errors import MosaicInputError
from mosaic.torchrun_env import is_rank_zero, under_torchrun


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mosaic.train", description=__doc__)
    parser.add_argument("job", help="job YAML (see docs/train.md)")
    parser.add_argument("--out", required=True, help="output folder (resumes if it holds a "
                                                     "checkpoint of the same job)")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop (with a checkpoint) after this many steps in total")
    parser.add_argument("--quiet", action="store_true", help="no per-step lines on stdout")
    args = parser.parse_args(argv)
    from mosaic.cli.warning_lines import install_immediate
    from mosaic.train.config import job_errors, load_train_config

    install_immediate()  # one `warning:` line each, as `mosaic train` prints them
    from mosaic.train.trainer import format_record, train

    try:
        config = load_train_config(args.job)
        with job_errors(args.job):  # which of several jobs failed, once it runs
            result = train(config, args.out, stop_after_steps=args.stop_after,
                           log=None if args.quiet else lambda r: print(format_record(r),
                                                                       flush=True))
    except MosaicInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # reading the job file (job_errors words the run's own)
        if exc.filename is None:  # not about a path the user gave (a full disk, a pipe)
            raise
        print(f"error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C under torchrun reaches every rank: one line from
        # rank 0 (a trial saw it once per rank), not a traceback through the collective it
        # was waiting in (the last checkpoint in --out resumes the run exactly)
        if is_rank_zero():
            # `python -m mosaic.train` alone was told of a torchrun command too (a trial)
            launcher = "torchrun ..." if under_torchrun() else "python"
            print(f"error: interrupted; rerun the same command ({launcher} -m mosaic.train "
                  f"{' '.join(sys.argv[1:] if argv is None else argv)}) to go on from the "
                  f"last checkpoint in {args.out}, or to start again where none was written "
                  "yet", file=sys.stderr)
        return 130
    if result.world_size == 1 or is_rank_zero():
        print(f"{result.state}: smoothed loss {result.smoothed_loss:.4f}, {result.tokens} tokens, "
              f"{result.tokens_per_s:.4g} tokens/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
