"""Latency of the studio's prediction round trip (studio issue target: well under 100 ms).

Starts the studio on a free localhost port, posts the default form to ``/api/perf`` with a
few micro-batch sizes, and prints the median of the server's prediction time, its total
time with the charts, and the client's HTTP round trip.
Usage: `python benchmarks/bench_studio.py [--repeat 20]` (needs `pip install -e .[studio]`).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
import urllib.request


def _start() -> tuple[str, object]:
    import uvicorn

    from mosaic.studio.app import create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port,
                                           log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("error: the studio did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def _post(url: str, form: dict[str, str]) -> dict:
    request = urllib.request.Request(url + "/api/perf", data=json.dumps({"form": form}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    from mosaic.studio.jobs import DEFAULT_FORM

    url, server = _start()
    _post(url, dict(DEFAULT_FORM))  # warm: the first call imports the report code
    predict, total, round_trip = [], [], []
    for index in range(args.repeat):
        form = {**DEFAULT_FORM, "batch.micro_seqs": ("1", "2", "4", "8")[index % 4]}
        start = time.perf_counter()
        body = _post(url, form)
        round_trip.append((time.perf_counter() - start) * 1e3)
        predict.append(body["predict_ms"])
        total.append(body["total_ms"])
    server.should_exit = True
    print(f"studio /api/perf, default form, {args.repeat} calls (median, min..max ms)")
    for name, values in (("prediction (server)", predict), ("with charts (server)", total),
                         ("HTTP round trip", round_trip)):
        print(f"  {name:22s} {statistics.median(values):7.1f}   "
              f"{min(values):.1f}..{max(values):.1f}")
    print(f"  target: round trip < 100 ms -> {statistics.median(round_trip) / 100:.2f}x of it")


if __name__ == "__main__":
    main()
