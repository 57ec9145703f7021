"""`python -m bench.serving`: the command line (the method is the package's docstring), the run, its report and its
result file."""

import argparse
import signal
import sys
import tempfile
from pathlib import Path

import bench.serving
from bench.results import Recorder, result_path
from bench.serving.configurations import SERVERS
from bench.serving.measure import measure
from bench.serving.record import record
from bench.serving.report import print_report


def run(args, workdir: Path) -> dict:
    """Measure every configuration in `workdir`; the result record."""
    return record(args, measure(args, workdir))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.serving", description=(bench.serving.__doc__ or "").splitlines()[0]
    )
    p.add_argument("--duration", type=float, default=3.0, help="measured seconds per configuration and round")
    p.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds before each measurement")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds over all configurations (QPS: median)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    p.add_argument("--client-processes", type=int, default=4, help="load-generator processes (≤ clients)")
    p.add_argument(
        "--http-client",
        choices=["http.client", "requests"],
        default="http.client",
        help="REST client of the load generator; requests.Session costs ~1 ms of client CPU per request "
        "(about 4× http.client's, more than the servers' own), which on a small machine takes the CPU "
        "the servers would use and pulls every REST QPS towards the same value",
    )
    p.add_argument(
        "--large-request",
        type=int,
        default=32,
        help="instances a request in the request-size comparison (ours, REST and gRPC, the most clients; 1: none)",
    )
    p.add_argument("--max-batch-size", type=int, default=32)
    p.add_argument(
        "--batch-timeout-ms",
        type=float,
        default=0.0,
        help="0 (TF Serving's CPU starting point): a batch takes what is queued when the thread is free",
    )
    p.add_argument("--num-batch-threads", type=int, default=1)
    p.add_argument(
        "--kserve-request-logs",
        action="store_true",
        help="keep KServe's per-request access/latency logs (its default; off here as on ours)",
    )
    p.add_argument("--only", nargs="+", choices=list(SERVERS), help="servers to run")
    p.add_argument("--model-calls", type=int, default=3000, help="timed one-example model calls per thread setting")
    p.add_argument("--bytes-batch", type=int, default=32)
    p.add_argument("--bytes-size", type=int, default=28)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workdir", type=Path, help="keep the data, model and server logs here (reused when present)")
    p.add_argument(
        "--quick", action="store_true", help="1 round of 0.2 + 0.5 s, 1 and 4 clients, 1 epoch: checks that it works"
    )
    p.add_argument("--output", type=Path, help="JSON results [bench/results/serving.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.warmup, args.clients = 1, 0.5, 0.2, [1, 4]
        args.client_processes, args.epochs, args.model_calls = 2, 1, 300
    recorder = Recorder("serving", args, quick=args.quick)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so that every server process is stopped
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        result = run(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
            result = run(args, Path(tmp))
    print_report(result)
    recorder.save(result, result_path("serving", args.quick, args.output))


if __name__ == "__main__":
    main()
