"""Data prep on a gs:// image folder: `REMOTE_READS` images read at once against one at a time, over latency.

    python -m bench.remote_reads [--images 600] [--latency-ms 20] [--rounds 2] [--quick]

The folder (`bench.prep_scale`'s images: 96 px JPEGs of random pixels in 3 class folders) lives on a GCS emulator in
its own process that handles requests on threads and delays each by `--latency-ms`, a stand-in for the network
between a worker and Cloud Storage (chosen, not measured). Both sides run `components.prepare_data.prepare` on the
direct runner in one process into a local folder, alternating over `--rounds`, with the same emulator, data and
options; the only difference is data prep's `REMOTE_READS`: 16 (what prep uses) or 0 (one image at a time).

Figure of merit: the seconds one at a time / at 16, best round against best round; the shards written must be the
same bytes. An image under `SMALL_IMAGE_BYTES` costs one round trip (the read for its header gets the whole file),
a larger one two (its header, then its pixels); the window overlaps them.
"""

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import ROOT
from bench.results import Recorder, result_path

WINDOW = 16


def serve(port: int, latency: float) -> None:
    """The emulator on `port`, each request delayed by `latency` seconds, on threads."""
    from http import server

    from gcp_storage_emulator import server as emulator

    server.HTTPServer = server.ThreadingHTTPServer  # type: ignore[misc]  # read by the emulator when it starts
    server.HTTPServer.request_queue_size = 128
    handle = emulator.RequestHandler.handle_one_request

    def delayed(self):
        time.sleep(latency)
        return handle(self)

    emulator.RequestHandler.handle_one_request = delayed
    emulator.create_server("127.0.0.1", port, in_memory=True, default_bucket="bench").start()
    time.sleep(24 * 3600)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, workdir: Path) -> dict:
    import os

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.remote_reads", "--serve", str(port), "--latency-ms", str(args.latency_ms)],
        cwd=ROOT,
    )
    try:
        os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
        from bench.prep_scale import write_images
        from components.lib.prep import pipeline as prep_pipeline
        from components.prepare_data import prepare
        from core.storage import gcs_client

        for _ in range(100):
            try:
                bucket = gcs_client().get_bucket("bench")
                break
            except Exception:  # noqa: BLE001 (the emulator is starting)
                time.sleep(0.1)
        source = workdir / "src"
        write_images(source, args.images)
        for path in sorted(source.rglob("*.jpg")):
            bucket.blob(f"images/{path.relative_to(source)}").upload_from_filename(str(path))
        seconds: dict[int, list[float]] = {WINDOW: [], 0: []}
        for _ in range(args.rounds):
            for window in (WINDOW, 0):
                prep_pipeline.REMOTE_READS = window
                start = time.perf_counter()
                stats = prepare("gs://bench/images", str(workdir / f"out-{window}"), num_workers=1, processes=1)
                seconds[window].append(round(time.perf_counter() - start, 2))
                print(f"[bench] {window or 'one'} at a time: {seconds[window][-1]} s", flush=True)
    finally:
        server.kill()
    shards = sorted(p.name for p in (workdir / "out-0").glob("*.tfrecord"))
    same = all((workdir / "out-0" / n).read_bytes() == (workdir / f"out-{WINDOW}" / n).read_bytes() for n in shards)
    best = {window: min(values) for window, values in seconds.items()}
    return {
        "images": stats["records"],
        "latency_ms": args.latency_ms,
        "window": WINDOW,
        "seconds_window": seconds[WINDOW],
        "seconds_one_at_a_time": seconds[0],
        "speedup": round(best[0] / best[WINDOW], 2),
        "same_shards": same,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.remote_reads", description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=600)
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="60 images, one round: checks that it works")
    p.add_argument("--output", type=Path, help="JSON results [bench/results/remote_reads.json]")
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.serve, args.latency_ms / 1000)
        return
    if args.quick:
        args.images, args.rounds = 60, 1
    recorder = Recorder("remote_reads", args, quick=args.quick)
    with tempfile.TemporaryDirectory(prefix="bench-remote-reads-") as tmp:
        result = run(args, Path(tmp))
    print(f"[bench] {result['speedup']}× with {WINDOW} reads at once; same shards: {result['same_shards']}")
    recorder.save(result, result_path("remote_reads", args.quick, args.output))


if __name__ == "__main__":
    main()
