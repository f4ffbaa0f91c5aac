"""Generate bad and unusual inputs for every `mosaic` subcommand and check the contract.

The contract (src/mosaic/cli/contract.py): exit 0 with finite, physically ranged JSON, or
exit 2 with one line on stderr; no traceback, no hang. Cases run in-process (main() with a
patched argv) for speed; ``--subprocess N`` also runs N of them through the installed
command. Failures are written as a JSON corpus that tests/robustness can replay.

Usage:
    python benchmarks/fuzz_cli.py --cases 10000 --seed 0 [--failures out.json]
    python benchmarks/fuzz_cli.py --cases 200 --subprocess 20
"""

from __future__ import annotations

import argparse
import base64
import collections
import copy
import json
import math
import random
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from mosaic.cli.contract import check, run_in_process, run_subprocess

REPO = Path(__file__).resolve().parents[1]
TIME_BOUND_S = 30.0
Case = dict[str, Any]  # {"argv": [...], "files": {name: bytes}, "json": bool, "kind": str}

# --------------------------------------------------------------------------- values

HUGE_INT = "1" + "0" * 400
NASTY_SCALARS: list[Any] = [0, -1, -7, 1, 2, 3, 2**31, 2**63, 2**64 + 1, 10**12, 1e308,
                            -1e308, 1e-320, 0.5, -0.5, float("nan"), float("inf"),
                            float("-inf"), "abc", "", " ", "1e3", "0x10", "None", None, True,
                            False, [], {}, [1, 2], {"a": 1}, "\u00e9\u4e2d", "x" * 5000]
NASTY_FLAG_NUMBERS = ["0", "-1", "-0", "1", "2", "3", "7", "1e308", "-1e308", "1e-320", "nan",
                      "inf", "-inf", "NaN", "0.5", "1.5", "1e12", "1000000000000", HUGE_INT,
                      "2147483648", "9223372036854775808", "abc", "", " ", "1,2", "1:2", "0x1f",
                      "\u00e9", "1_000"]
NASTY_SET_VALUES = ["!!python/object/apply:os.system ['true']", "!!python/name:os.system",
                    "!!binary aGVsbG8=", "[", "{a: 1", "- a", ":", "'", HUGE_INT, "1e308",
                    ".nan", ".inf", "-.inf", "-1", "0", "null", "~", "true", "[1, 2]",
                    "{x: 1}", "2**63", "9223372036854775808", "1e-320", "&a [*a]", "*b",
                    "!!set {a}", "!!timestamp 2001-12-14", "2001-12-14", "bf16", "fp4",
                    # pipeline layouts: malformed, huge unrolls, wrong counts
                    "Et|L", "'(t|)*99999999L'", "'E((t|)*3'", "'Et*-1|L'", "'Ett|mL'",
                    "'E|(t*2|)*4L'"]


def _dump(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def text_mutation(text: str, rng: random.Random) -> bytes:
    """Break a serialised document at the byte/text level."""
    data = text.encode()
    choice = rng.randrange(14)
    if choice == 0:
        return data[: rng.randrange(len(data) + 1)]
    if choice == 1:
        cut = rng.randrange(len(data) + 1)
        return data[:cut] + bytes([0xFF, 0xFE, 0x80, 0xC3]) + data[cut:]
    if choice == 2:
        return b"\xef\xbb\xbf" + data
    if choice == 3:
        depth = rng.choice([200, 2000, 20000])
        return (text + "\ndeep: " + "[" * depth + "]" * depth + "\n").encode()
    if choice == 4:
        depth = rng.choice([200, 1500, 5000])
        nested = "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "1\n"
        return (text + "\n" + nested).encode()
    if choice == 5:
        return b""
    if choice == 6:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
    if choice == 7:
        return (text + "\n? [a, b]\n: 1\n").encode()
    if choice == 8:
        return (text + "\n1: 2\n3.5: x\nnull: y\n").encode()
    if choice == 9:
        return ("!!python/object/apply:os.system ['true']\n" + text).encode()
    if choice == 10:
        return (text.replace("\n", "\n\t", 1)).encode()
    if choice == 11:
        return b"- 1\n- 2\n"
    if choice == 12:
        return b"a: &x [*x]\n" if rng.random() < 0.5 else b"42\n"
    billion = "a: &a [" + ",".join(["x"] * 9) + "]\n"
    for level in "bcdefgh":
        prev = chr(ord(level) - 1)
        billion += f"{level}: &{level} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    return (text + "\n" + billion).encode()


def _leaves(document: Any, prefix: tuple = ()) -> list[tuple]:
    if isinstance(document, dict):
        paths = [(*prefix, key) for key in document] if prefix else []
        for key, value in document.items():
            paths += _leaves(value, (*prefix, key))
        return paths or [prefix]
    if isinstance(document, list):
        paths = []
        for index, value in enumerate(document):
            paths += _leaves(value, (*prefix, index))
        return paths or [prefix]
    return [prefix]


def _set(document: Any, path: tuple, value: Any, delete: bool = False) -> None:
    target = document
    for part in path[:-1]:
        target = target[part]
    if delete and isinstance(target, dict):
        target.pop(path[-1], None)
    else:
        target[path[-1]] = value


def mutate_document(document: Any, rng: random.Random, scalars: list[Any] | None = None,
                    n_mutations: int | None = None) -> bytes:
    """A structurally or textually mutated copy of ``document`` as YAML bytes."""
    doc = copy.deepcopy(document)
    pool = scalars or NASTY_SCALARS
    for _ in range(n_mutations or rng.choice([1, 1, 1, 2, 3])):
        paths = [p for p in _leaves(doc) if p]
        if not paths:
            break
        path = rng.choice(paths)
        roll = rng.random()
        if roll < 0.75:
            # a copy: a later mutation must not edit the pool's own list or mapping (seed 64
            # made a pool entry contain itself, and the next case recursed without end)
            _set(doc, path, copy.deepcopy(rng.choice(pool)))
        elif roll < 0.85:
            _set(doc, path, None, delete=True)
        elif roll < 0.95:
            parent = path[:-1]
            target = doc
            for part in parent:
                target = target[part]
            if isinstance(target, dict):
                target[rng.choice(["unknown_field", 7, "n_layers ", "tp"])] = copy.deepcopy(
                    rng.choice(pool))
        else:
            _set(doc, path, {"nested": {"deeper": [1, {"x": [2]}]}})
    text = _dump(doc)
    text = text.replace("'" + HUGE_INT + "'", HUGE_INT)
    if rng.random() < 0.25:
        return text_mutation(text, rng)
    return text.encode()


# --------------------------------------------------------------------------- bases

def _load(path: str) -> Any:
    return yaml.safe_load((REPO / path).read_text())


BASE_JOB = _load("examples/appendix_e.yaml")
SMALL_JOB = {
    "model": {"n_layers": 8, "hidden_sz": 1024, "inter_sz": 4096, "n_q_heads": 8,
              "n_kv_heads": 8, "vocab_sz": 32000},
    "moe": {"n_experts": 8, "experts_per_token": 2, "expert_inter_sz": 1024},
    "data": {"global_batch": 64, "seq_len": 2048, "micro_batch": 1},
    "hardware": {"system": "p5.48xlarge", "nodes": 2},
    "parallelism": {"tp": 1, "pp": 2, "ep": 4},
}
# hybrid models: a Mamba-2 and a gated DeltaNet pattern (their own layer rules and mixers)
HYBRID_JOBS = [_load("examples/nemotron_3_nano_b200.yaml"),
               _load("examples/qwen3_next_80b_b200.yaml")]
BASE_RUNS = _load("examples/runs_example.yaml")
BASE_CALIBRATION = yaml.safe_load(
    (REPO / "src/mosaic/perf/data/calibration_default.yaml").read_text())
BASE_LAW = json.loads((REPO / "src/mosaic/law/data/joint_table2.json").read_text())
ARCH_DOC = {key: SMALL_JOB[key] for key in ("model", "moe")}
FAST_PLAN = ["--q", "8", "--experts", "8,16", "--top-k", "1,2", "--split-factor", "1,4",
             "--workers", "1", "--nodes", "2"]


def _law_csv(rng: random.Random, rows: int) -> list[dict[str, float]]:
    """Rows that follow the Table 2 joint law (Eq. 10) with small multiplicative noise."""
    from mosaic.law import default_law

    law = default_law()
    out = []
    for _ in range(rows):
        n_total = 10 ** rng.uniform(8.5, 11)
        sparsity = rng.uniform(0.5, 0.97)
        tokens = 10 ** rng.uniform(9.5, 11)
        g = rng.choice([1, 2, 4, 8])
        loss = float(law.predict(n_total=n_total, tokens=tokens, sparsity=sparsity,
                                 split_factor=g)) * math.exp(rng.gauss(0, 0.005))
        out.append({"n_total": n_total, "sparsity": sparsity, "tokens": tokens,
                    "split_factor": g, "loss": loss})
    return out


def _csv_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = [",".join(columns)]
    for row in rows:
        lines.append(",".join("" if row.get(c) is None else str(row.get(c)) for c in columns))
    return "\n".join(lines) + "\n"


def law_csv_bytes(rng: random.Random) -> bytes:
    columns = ["n_total", "sparsity", "tokens", "split_factor", "loss"]
    roll = rng.randrange(12)
    rows = _law_csv(rng, rng.choice([1, 2, 3, 12, 40]))
    if roll == 0:
        return b""
    if roll == 1:
        return (",".join(columns) + "\n").encode()
    if roll == 2:
        for row in rows:
            row["loss"] = 1e308
        return _csv_text(rows, columns).encode()
    if roll == 3:
        rows[rng.randrange(len(rows))][rng.choice(columns)] = rng.choice(
            ["nan", "inf", "-1", "0", "abc", "1e308", "1e-320", HUGE_INT, ""])
        return _csv_text(rows, columns).encode()
    if roll == 4:
        return _csv_text(rows, columns[1:]).encode()
    if roll == 5:
        return _csv_text(rows, columns).encode()[: rng.randrange(10, 200)] + b"\xff\xfe"
    if roll == 6:
        return b'"unterminated,quote\n1,2,3\n'
    if roll == 7:
        for row in rows:
            row["loss"] = 2.5  # constant: a degenerate fit
        return _csv_text(rows, columns).encode()
    if roll == 8:
        for row in rows:
            row["tokens"] = 1e-320
        return _csv_text(rows, columns).encode()
    if roll == 9:
        return "\n".join([",".join(columns)] + ["1,2,3,4,5,6,7"] * 3).encode()
    return _csv_text(rows, columns).encode()


def parquet_bytes(rng: random.Random) -> bytes:
    roll = rng.randrange(3)
    if roll == 0:
        return b"PAR1 not really parquet"
    if roll == 1:
        return b""
    import io

    import pandas as pd

    frame = pd.DataFrame(_law_csv(rng, 5))
    if rng.random() < 0.5:
        frame["loss"] = float("nan")
    buffer = io.BytesIO()
    try:
        frame.to_parquet(buffer)
    except ImportError:  # no parquet engine installed
        return b"PAR1"
    return buffer.getvalue()


def _flag(rng: random.Random) -> str:
    return rng.choice(NASTY_FLAG_NUMBERS)


def _maybe_calibration(rng: random.Random, files: dict[str, bytes], argv: list[str]) -> None:
    if rng.random() < 0.15:
        doc = copy.deepcopy(BASE_CALIBRATION)
        name = rng.choice(list(doc["constants"]))
        entry = doc["constants"][name]
        if "value" in entry and not isinstance(entry["value"], dict):
            entry["value"] = rng.choice([float("nan"), 1e308, -1e308, float("inf"), -5.0, 0.0,
                                         "x", None, 10**30])
            files["calib.yaml"] = _dump(doc).encode()
        else:
            files["calib.yaml"] = mutate_document(doc, rng)
        argv += ["--calibration", "{dir}/calib.yaml"]
    elif rng.random() < 0.03:
        argv += ["--calibration", rng.choice(["nonexistent", "{dir}/missing.yaml", "{dir}"])]


def _set_overrides(rng: random.Random) -> list[str]:
    fields = ["data.global_batch", "data.seq_len", "data.micro_batch", "parallelism.tp",
              "parallelism.pp", "parallelism.vpp", "parallelism.ep", "parallelism.cp",
              "parallelism.dp", "parallelism.etp", "parallelism.sharding", "parallelism.stack",
              "hardware.system", "hardware.nodes", "hardware.precision",
              "hardware.usable_memory_fraction", "search.devices", "model.n_layers",
              "model.hidden_sz", "model.precision", "moe.n_experts", "moe.experts_per_token",
              "moe.capacity_factor", "performance.checkpointing", "optimizer.kind",
              "hardware.gemm_table", "bogus.field", "data", "data.", ".x", "model.vocab_sz",
              "model.hybrid_pattern", "model.gdn.key_heads", "model.gdn.value_heads",
              "model.mamba.heads", "model.mamba.groups", "model.attention_output_gate",
              "model.activation", "model.sliding_window", "model.full_attention_every",
              "performance.stack_version", "parallelism.hsdp_shard",
              "parallelism.pipeline_layout", "performance.fused_grouped_mlp",
              "performance.fp8_dot_product_attention", "performance.attention_kernel",
              "performance.precision"]
    out = []
    for _ in range(rng.choice([1, 1, 2])):
        value = rng.choice(NASTY_SET_VALUES + NASTY_FLAG_NUMBERS)
        out += ["--set", f"{rng.choice(fields)}={value}"]
    return out


# --------------------------------------------------------------------------- per command

def job_case(rng: random.Random, command: str) -> Case:
    roll = rng.random()
    base = BASE_JOB if roll < 0.4 else SMALL_JOB if roll < 0.8 else rng.choice(HYBRID_JOBS)
    files: dict[str, bytes] = {}
    argv = [command, "{dir}/job.yaml"]
    roll = rng.random()
    if roll < 0.45:
        files["job.yaml"] = mutate_document(base, rng)
    elif roll < 0.8:
        files["job.yaml"] = _dump(base).encode()
        argv += _set_overrides(rng)
    elif roll < 0.9:
        doc = copy.deepcopy(base)
        table = rng.choice(["gemm_table", "grouped_gemm_table", "collective_table"])
        suffix = rng.choice([".csv", ".parquet", ".txt"])
        doc["hardware"][table] = "table" + suffix
        files["job.yaml"] = _dump(doc).encode()
        files["table" + suffix] = (law_csv_bytes(rng) if suffix != ".parquet"
                                   else parquet_bytes(rng))
    else:
        files["job.yaml"] = _dump(base).encode()
        argv[1] = rng.choice(["{dir}/missing.yaml", "{dir}", "{dir}/" + "x" * 300 + ".yaml",
                              "{dir}/" + "/".join(["d" * 200] * 30) + ".yaml"])
    if command == "layouts":
        if rng.random() < 0.6:
            argv += ["--devices", rng.choice(["8", "16", "64", "512", _flag(rng),
                                              str(10**12), str(2**40)])]
        else:
            argv += ["--devices", "16"]
        for option in ("--tp", "--pp", "--vpp", "--ep", "--mbs", "--cp", "--etp"):
            if rng.random() < 0.12:
                argv += [option, rng.choice(["1", "2,4", "0", "-1", "1000000", "2**63",
                                             "9223372036854775808", "a", ",", "1e3",
                                             HUGE_INT])]
        if rng.random() < 0.1:
            argv += ["--sharding", rng.choice(["zero1", "bogus", "", "fsdp,hsdp"])]
        if rng.random() < 0.1:
            argv += ["--max-tp", _flag(rng)]
        if rng.random() < 0.15:
            argv += ["--balanced-pipeline"]
        argv += ["--top", rng.choice(["3", "3", _flag(rng)])]
    if command == "compare":  # against an unmutated job (or the same file)
        files["other.yaml"] = _dump(rng.choice([BASE_JOB, SMALL_JOB, *HYBRID_JOBS])).encode()
        argv.insert(2, rng.choice(["{dir}/other.yaml", "{dir}/job.yaml"]))
        if rng.random() < 0.3:
            argv += ["--days", _flag(rng)]
    if command == "export":  # a launch config is text, not JSON: exit 0 or one error line
        argv += ["--to", rng.choice(["megatron", "nemo", "torchtitan", "maxtext", "yaml",
                                     "bogus", ""])]
        return {"argv": argv, "files": files, "json": False, "kind": command}
    if command == "explain" and rng.random() < 0.5:
        option = rng.choice(["--measured-step-time-s", "--measured-tokens-per-s"])
        argv += [option, _flag(rng)]
    _maybe_calibration(rng, files, argv)
    argv.append("--json")
    return {"argv": argv, "files": files, "json": True, "kind": command}


def arch_case(rng: random.Random) -> Case:
    files: dict[str, bytes] = {}
    if rng.random() < 0.4:
        files["arch.yaml"] = mutate_document(ARCH_DOC, rng)
        argv = ["arch", "--config", "{dir}/arch.yaml"]
    else:
        argv = ["arch"]
        if rng.random() < 0.7:
            argv += ["--q", rng.choice(["4", "8", "12", _flag(rng)])]
            if rng.random() < 0.6:
                argv += ["--experts", rng.choice(["8", "96", _flag(rng)]),
                         "--top-k", rng.choice(["1", "2", _flag(rng)])]
                argv += [rng.choice(["--split-factor", "--expert-ffn"]),
                         rng.choice(["4", _flag(rng)])]
        else:
            for option in ("--layers", "--d-model", "--heads", "--ffn", "--vocab"):
                argv += [option, rng.choice(["8", "512", "1024", "4096", _flag(rng)])]
        for option in ("--seq-len", "--shared-experts", "--dense-layers", "--moe-every",
                       "--kv-heads", "--head-dim"):
            if rng.random() < 0.1:
                argv += [option, _flag(rng)]
    if rng.random() < 0.3:
        argv.append("--per-layer")
    argv.append("--json")
    return {"argv": argv, "files": files, "json": True, "kind": "arch"}


def law_case(rng: random.Random) -> Case:
    files: dict[str, bytes] = {}
    sub = rng.choice(["predict", "predict", "fit", "fit", "fit", "optimum"])
    argv = ["law", sub]
    if sub == "predict":
        if rng.random() < 0.6:
            values = {"--n-total": "327.2e9", "--sparsity": "0.9556", "--tokens": "1.42e12",
                      "--split-factor": "4"}
            if rng.random() < 0.3:  # the active count instead of S
                del values["--sparsity"]
                values["--n-active"] = "14.5e9"
            for key in values:
                if rng.random() < 0.4:
                    values[key] = _flag(rng)
            for key, value in values.items():
                argv += [key, value]
        else:
            argv += ["--q", rng.choice(["12", _flag(rng)]), "--experts",
                     rng.choice(["96", _flag(rng)]), "--top-k", rng.choice(["2", _flag(rng)]),
                     "--split-factor", rng.choice(["4", _flag(rng)]),
                     "--tokens", rng.choice(["1.42e12", _flag(rng)])]
    elif sub == "fit":
        name = rng.choice(["runs.csv"] * 6 + ["runs.parquet", "runs.txt", "dir/"])
        if name == "runs.parquet":
            files[name] = parquet_bytes(rng)
        elif not name.endswith("/"):
            files[name] = law_csv_bytes(rng)
        argv += ["{dir}/" + name.rstrip("/"), "--starts", "64", "--refine", "2"]
        if rng.random() < 0.3:
            argv += ["--form", rng.choice(["joint", "chinchilla", "per-g", "bogus"])]
        if rng.random() < 0.25:
            argv += [rng.choice(["--out", "--parity", "--samples-out"]),
                     rng.choice(["{dir}/out.json", "{dir}/missing/dir/out.json", "{dir}",
                                 "/proc/forbidden.json"])]
        for option in ("--huber-delta", "--holdout", "--seed", "--bootstrap", "--scan",
                       "--split-factor", "--starts", "--refine"):
            if rng.random() < 0.08:
                value = _flag(rng)
                if option in ("--bootstrap", "--scan") and value.isdigit() and int(value) > 20:
                    value = "3"
                argv += [option, value]
        if "--bootstrap" in argv and rng.random() < 0.5:
            argv += ["--bootstrap-method", rng.choice(["wild", "case", "bogus"])]
    else:
        argv += ["--compute", rng.choice(["1e22", "1e22", _flag(rng)])]
        for option in ("--split-factor", "--s-min", "--s-max", "--profile"):
            if rng.random() < 0.2:
                argv += [option, _flag(rng) if option != "--profile"
                         else rng.choice(["0", "3", "-1", HUGE_INT, "abc"])]
    if sub != "fit" and rng.random() < 0.2:
        doc = copy.deepcopy(BASE_LAW)
        if rng.random() < 0.6:
            key = rng.choice(list(doc["coefficients"]))
            doc["coefficients"][key] = rng.choice(
                [float("nan"), 1e308, -1.0, 0.0, "x", None, 1e-320, 10**30])
            text = json.dumps(doc)
        else:
            text = rng.choice(["{", "[]", "", json.dumps({"format": "bogus"}),
                               json.dumps(doc)[:-5]])
        files["law.json"] = text.encode() if rng.random() < 0.9 else b"\xff\xfe" + text.encode()
        argv += ["--law", "{dir}/law.json"]
    argv.append("--json")
    return {"argv": argv, "files": files, "json": True, "kind": f"law {sub}"}


def runs_case(rng: random.Random) -> Case:
    files = {"runs.yaml": mutate_document(BASE_RUNS, rng)}
    command = rng.choice(["validate", "validate", "validate", "calibrate"])
    argv = [command, "{dir}/runs.yaml"]
    if command == "calibrate":
        argv += ["--cv", "none"]
        if rng.random() < 0.5:
            argv += ["--out", rng.choice(["{dir}/c.yaml", "{dir}/no/such/dir/c.yaml"])]
        if rng.random() < 0.3:
            argv += ["--fit", rng.choice(["auto", "all", "stack_overhead", "chi_a2a,chi_a2a",
                                          "", ",", "bogus", "stack_overhead,nope"])]
        if rng.random() < 0.3:
            argv.append("--fit-memory")
    else:
        _maybe_calibration(rng, files, argv)
    if rng.random() < 0.1:
        argv += ["--exclude", rng.choice(["nope", ",", "", "a,b"])]
    argv.append("--json")
    return {"argv": argv, "files": files, "json": True, "kind": command}


PLAN_FLAGS = {
    "--nodes": ["1", "2", "0", "-1", str(10**12), str(2**63)],
    "--days": ["0", "-1", "nan", "inf", "1e308", "1e-320", "0.001"],
    "--goodput": ["0", "1", "1.5", "nan", "-0.1"],
    "--global-batch": ["1", "0", "-1", str(10**12), HUGE_INT],
    "--seq-len": ["1", "0", "-5", str(10**9)],
    "--memory-fraction": ["0", "1.2", "nan", "1e-9"],
    "--q": ["0", "-2", "1000", HUGE_INT, "a", ","],
    "--experts": ["0", "1", str(10**9), "-4"],
    "--top-k": ["0", "100", "-1"],
    "--split-factor": ["0", "3", "1000000"],
    "--tpp": ["150:40", "a:b", "0:0", "nan:inf", "-1:5", "40", "1e308:1e308"],
    "--s-min": ["nan", "1.5", "-1", "0.9999"],
    "--gpus-per-node": ["0", "-8", "3", str(10**7)],
    "--mtbf-gpu-hours": ["0", "-1", "nan", "1e308"],
    "--checkpoint-s": ["0", "-1", "nan", "1e308"],
    "--restart-s": ["-1", "nan", "1e308"],
    "--workers": ["0", "-1", str(10**6)],
    "--gpu": ["B200", "bogus", "", "H100"],
    "--top": ["0", "-1", HUGE_INT],
    "--price-per-gpu-hour": ["-1", "nan", "0"],
    "--target-loss": ["0", "-1", "nan", "1.5"],
    "--plot": ["{dir}/missing/deep/dir", "{dir}/plots"],
    # the planner's constraints (session 43): caps, unique data, a dollar budget, layout pins
    "--max-total-params": ["1", "0", "-5B", "400B", "1.5T", "nan", "1e308", "abc", "3e10"],
    "--max-active-params": ["1", "0", "2B", "inf", "1,2", "1e-300"],
    "--s-max": ["0", "0.5", "1", "1.5", "nan", "-0.2"],
    "--unique-tokens": ["0", "1", "5T", "1e30", "nan", "-1T", "3e9"],
    "--budget-usd": ["0", "-1", "1e6", "nan", "1e308", "5"],
    "--tp": ["1", "2,4", "0", "a", "3", str(10**9)],
    "--pp": ["1", "2", "0", "-4", "1,,2"],
    "--ep": ["1", "8", "1000000", "x"],
    "--mbs": ["1", "0", "3", "1,2,4", str(2**40)],
    "--sharding": ["fsdp", "zero9", "", "fsdp,hsdp", "none,none"],
    "--checkpointing": ["full", "none", "bogus", ","],
}


def plan_case(rng: random.Random) -> Case:
    files: dict[str, bytes] = {}
    head = rng.choice([["plan"], ["plan"], ["sweep", "days"], ["sweep", "nodes"]])
    flags = dict(zip(FAST_PLAN[::2], FAST_PLAN[1::2], strict=True))
    if head[0] == "sweep":
        flags.pop("--nodes")
        flags["--values"] = "10,20" if head[1] == "days" else "1,2"
    for _ in range(rng.choice([1, 1, 2])):
        option = rng.choice(list(PLAN_FLAGS))
        if head[0] == "sweep" and option in ("--top", "--price-per-gpu-hour", "--target-loss"):
            option = "--values"
        if option == "--values":
            flags[option] = rng.choice(["0", "-1,2", "nan", "a", ",", str(10**9), "1e308"])
        elif option == {"nodes": "--nodes", "days": "--days"}.get(head[-1]):
            continue
        else:
            flags[option] = rng.choice(PLAN_FLAGS[option])
    argv = list(head)
    for key, value in flags.items():
        argv += [key, value]
    if head[0] == "plan" and rng.random() < 0.15:
        argv.append("--balanced-pipeline")
    if rng.random() < 0.1:
        doc = copy.deepcopy(BASE_LAW)
        key = rng.choice(list(doc["coefficients"]))
        doc["coefficients"][key] = rng.choice([float("nan"), 1e308, -1.0, 0.0, 1e-320])
        files["law.json"] = json.dumps(doc).encode()
        argv += ["--law", "{dir}/law.json"]
    if rng.random() < 0.06:
        files["samples.json"] = rng.choice([
            b"{}", b"[", json.dumps({"format": "mosaic-law-samples/1", "form": "joint",
                                     "params": ["a"], "log_coefficients": [[1]]}).encode(),
            b"n,a\n1,2\n"])
        argv += ["--bootstrap-samples", "{dir}/samples.json"]
    _maybe_calibration(rng, files, argv)
    argv.append("--json")
    return {"argv": argv, "files": files, "json": True, "kind": " ".join(head)}


# A finished `mosaic train` result (ladder collect reads one per run folder).
BASE_RESULT = json.loads((REPO / "examples/data/train_result_q1.json").read_text())


def collect_case(rng: random.Random) -> Case:
    """`ladder collect` over run folders whose result.json is mutated (or not JSON)."""
    files = {}
    runs = rng.choice([1, 2, 3])
    for index in range(runs):
        mutated = mutate_document(BASE_RESULT, rng)
        try:  # the mutation as JSON, as the trainer writes it (YAML text where not loadable)
            document = json.dumps(yaml.safe_load(mutated), default=str).encode()
        except (yaml.YAMLError, RecursionError, TypeError, ValueError):  # (aliases, NaN keys)
            document = mutated
        if rng.random() < 0.1:
            # (a mutation may already hold bytes that are not UTF-8)
            document = text_mutation(document.decode(errors="replace"), rng)
        files[f"runs/r{index}/result.json"] = document
    argv = ["ladder", "collect", rng.choice(["{dir}/runs", "{dir}/runs/r0", "{dir}/none"]),
            "--out", rng.choice(["{dir}/runs.csv", "{dir}/no/dir/runs.csv"]), "--json"]
    return {"argv": argv, "files": files, "json": True, "kind": "ladder collect"}


def _base_run_info() -> dict[str, Any]:
    """run.json of a finished 8-GPU run of the q4 example job, as the trainer writes the
    fields `ladder record` reads."""
    from mosaic.train.config import load_train_config

    config = load_train_config(REPO / "examples/train_q4_h200.yaml")
    return {"device": "cuda:0", "world_size": 8, "flops": {"device": "H200-SXM-141GB"},
            "config": json.loads(config.model_dump_json())}


def record_case(rng: random.Random) -> Case:
    """`ladder record` over run folders whose result.json and run.json are mutated."""
    files = {}
    result = {**BASE_RESULT, "world_size": 8, "tokens_per_s": 250000.0,
              "peak_memory_gib": 41.5}
    for index in range(rng.choice([1, 2])):
        for name, base in (("result.json", result), ("run.json", _base_run_info())):
            mutated = (mutate_document(base, rng) if rng.random() < 0.7
                       else json.dumps(base).encode())
            try:
                document = json.dumps(yaml.safe_load(mutated), default=str).encode()
            except (yaml.YAMLError, RecursionError, TypeError, ValueError):
                document = mutated
            files[f"runs/r{index}/{name}"] = document
    if rng.random() < 0.2:
        files["mine.yaml"] = rng.choice([b"runs: []\n", b"runs:\n  - id: train-r0\n",
                                         b"{", b"description: x\n"])
    argv = ["ladder", "record", rng.choice(["{dir}/runs", "{dir}/runs/r0", "{dir}/none"]),
            "--system", rng.choice(["DGX-H200", "DGX-H100", "nope"]),
            "--out", rng.choice(["{dir}/mine.yaml", "{dir}/no/dir/mine.yaml"]),
            "--id-prefix", rng.choice(["train", "a-b", "", "x#"]), "--json"]
    return {"argv": argv, "files": files, "json": True, "kind": "ladder record"}


HF_CONFIGS = sorted((REPO / "examples" / "hf").glob("*.json"))


def _as_json(mutated: bytes) -> bytes:
    """A mutated document (YAML bytes) as JSON where it still parses, else as it is (a
    broken file)."""
    try:
        return json.dumps(yaml.safe_load(mutated), default=str).encode()
    except (yaml.YAMLError, RecursionError, TypeError, ValueError):
        return mutated


def hf_config_case(rng: random.Random) -> Case:
    """`arch --config` over a mutated HuggingFace config.json of examples/hf (nested
    text_config blocks, lists of layer types, quantisation blocks)."""
    base = json.loads(rng.choice(HF_CONFIGS).read_text())
    files = {"config.json": _as_json(mutate_document(base, rng))}
    argv = ["arch", "--config", "{dir}/config.json"]
    if rng.random() < 0.3:
        argv.append("--per-layer")
    if rng.random() < 0.1:
        argv += ["--seq-len", _flag(rng)]
    argv.append("--json")
    return {"argv": argv, "files": files, "json": True, "kind": "arch hf"}


_PLAN_DOCUMENT: list[Any] = []  # the base plan document, written once by warm_up()
# the blocks compare, export and report read from a plan file (a whole-document mutation
# lands mostly in its long candidate lists)
PLAN_BLOCKS = ("optimum", "envelope", "optimum_step", "assumptions", "search_space",
               "candidates", None)


def plan_file_case(rng: random.Random) -> Case:
    """`compare`, `export` and `report` of a hand-edited `plan --json` document: one block
    mutated (or the whole file), compared against the unedited plan."""
    base = _PLAN_DOCUMENT[0]
    block = rng.choice(PLAN_BLOCKS)
    if block is None:
        data = _as_json(mutate_document(base, rng))
    else:
        document = copy.deepcopy(base)
        try:
            document[block] = yaml.safe_load(mutate_document(document[block], rng))
            data = json.dumps(document, default=str).encode()
        except (yaml.YAMLError, RecursionError, TypeError, ValueError):
            data = b"{" + json.dumps(block).encode() + b": ["  # a cut file
    files = {"plan.json": data, "base.json": json.dumps(base).encode()}
    command = rng.choice(["compare", "compare", "export", "report"])
    rank = rng.choice(["", "", "#1", "#2", "#0", "#99"])
    if command == "compare":
        sides = ["{dir}/plan.json" + rank, "{dir}/base.json"]
        argv = ["compare", *(sides if rng.random() < 0.5 else sides[::-1]), "--json"]
        return {"argv": argv, "files": files, "json": True, "kind": "compare plan"}
    if command == "export":
        argv = ["export", "{dir}/plan.json" + rank, "--to",
                rng.choice(["megatron", "nemo", "torchtitan", "maxtext", "yaml"])]
        return {"argv": argv, "files": files, "json": False, "kind": "export plan"}
    argv = ["report", "{dir}/plan.json", "--out", "{dir}/report.html"]
    return {"argv": argv, "files": files, "json": False, "kind": "report plan"}


def usage_case(rng: random.Random) -> Case:
    argv = rng.choice([["bogus"], ["arch", "--no-such-flag"], ["law"], ["law", "bogus"],
                       ["perf"], ["sweep", "weeks"], ["plan", "--nodes"], ["arch", "--q"],
                       ["layouts", "--devices", "x"], ["--json"], ["arch", "--q", "4", "extra"]])
    return {"argv": list(argv), "files": {}, "json": False, "kind": "usage"}


GENERATORS: list[tuple[float, Callable[[random.Random], Case]]] = [
    (0.16, lambda rng: job_case(rng, "perf")),
    (0.12, lambda rng: job_case(rng, "layouts")),
    (0.08, lambda rng: job_case(rng, "explain")),
    (0.05, lambda rng: job_case(rng, "compare")),
    (0.05, lambda rng: job_case(rng, "export")),
    (0.14, arch_case),
    (0.18, law_case),
    (0.12, runs_case),
    (0.16, plan_case),
    (0.04, usage_case),
    (0.03, collect_case),
    (0.03, record_case),
    (0.06, hf_config_case),
    (0.06, plan_file_case),
]


def generate(rng: random.Random) -> Case:
    roll = rng.random() * sum(weight for weight, _ in GENERATORS)
    for weight, make in GENERATORS:
        roll -= weight
        if roll <= 0:
            return make(rng)
    return GENERATORS[-1][1](rng)


# Valid commands run once, untimed, before the cases: each imports its modules (scipy.stats,
# scipy.optimize, pandas, ...) outside any case's time bound.
WARM_UP = [["perf", "examples/appendix_e.yaml", "--json"],
           ["validate", "examples/runs_example.yaml", "--json"],
           ["law", "predict", "--n-total", "327.2e9", "--sparsity", "0.9556", "--tokens",
            "1.42e12", "--split-factor", "4", "--json"],
           ["arch", "--q", "4", "--json"],
           ["plan", *FAST_PLAN, "--json"]]


def warm_up() -> None:
    """Import what the cases use before any is timed. The time bound (SIGALRM) firing inside
    a first, cold import leaves that module half-initialised in this process, and every
    later case that needs it fails (seed 6501 on a loaded machine: a 30 s cold `validate`
    stopped inside scipy.stats, then 88 cases of NameError '_ndimage_api')."""
    import importlib

    from mosaic.cli.main import COMMANDS

    for module, *_ in COMMANDS.values():
        importlib.import_module(module)
    for module in ("scipy.stats", "scipy.optimize", "pandas"):
        importlib.import_module(module)
    for argv in WARM_UP:  # (timeout 0: no time bound)
        outcome = run_in_process(argv, {}, timeout_s=0, cwd=REPO)
        if outcome.exit_code != 0:
            raise SystemExit(f"warm-up `mosaic {' '.join(argv)}` failed: "
                             f"{outcome.crash or outcome.stderr}")
        if argv[0] == "plan":  # the document plan_file_case edits
            _PLAN_DOCUMENT[:] = [json.loads(outcome.stdout)]


def encode_case(case: Case, problems: list[str]) -> dict[str, Any]:
    """A failing case in the corpus format of tests/robustness (files base64)."""
    return {"kind": case["kind"], "argv": case["argv"], "json": case["json"],
            "problems": problems,
            "files": {name: base64.b64encode(data).decode() for name, data in
                      case["files"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--subprocess", type=int, default=0,
                        help="also run this many cases through the installed command")
    parser.add_argument("--failures", type=Path, default=None,
                        help="write failing cases (corpus format) to this JSON file")
    parser.add_argument("--memory-limit-gib", type=float, default=8.0)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    limit = int(args.memory_limit_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    warm_up()
    rng = random.Random(args.seed)
    failures: list[dict[str, Any]] = []
    causes: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    exits: collections.Counter[str] = collections.Counter()
    start = time.perf_counter()
    slowest = (0.0, [])
    for index in range(args.cases):
        case = generate(rng)
        kinds[case["kind"]] += 1
        in_subprocess = index < args.subprocess
        runner = run_subprocess if in_subprocess else run_in_process
        outcome = runner(case["argv"], case["files"], timeout_s=TIME_BOUND_S, cwd=REPO)
        problems = check(outcome, case["json"], TIME_BOUND_S)
        exits[str(outcome.exit_code)] += 1
        if outcome.elapsed_s > slowest[0]:
            slowest = (outcome.elapsed_s, case["argv"])
        if problems:
            failures.append(encode_case(case, problems))
            causes[f"{case['kind']}: {problems[0][:150]}"] += 1
            if args.verbose:
                print(f"[{index}] {case['argv']}: {problems}", flush=True)
            if args.failures is not None:  # written as found, so a cut-short run keeps them
                args.failures.write_text(json.dumps(failures, indent=1) + "\n")
        if (index + 1) % 500 == 0:
            print(f"... {index + 1} cases, {len(failures)} failures, "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    elapsed_s = time.perf_counter() - start
    print(f"\n{args.cases} cases (seed {args.seed}, {args.subprocess} as subprocesses) in "
          f"{elapsed_s:.0f} s: {len(failures)} violate the contract")
    print("exit statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(exits.items())))
    print("cases per command: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    print(f"slowest case: {slowest[0]:.1f} s {slowest[1]}")
    for cause, count in causes.most_common(40):
        print(f"  {count:5d}  {cause}")
    if args.failures is not None:
        args.failures.write_text(json.dumps(failures, indent=1) + "\n")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
