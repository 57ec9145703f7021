"""pipelines.step_memory: each local step's peak memory, in the step log's line, the summary and the report."""

import io
import subprocess
import sys

from pipelines import report
from pipelines.local_run import Step, StepLog
from pipelines.step_memory import StepMemory

MB = 1_000_000


def allocate(megabytes: int, seconds: float) -> subprocess.Popen:
    """A child process holding `megabytes` of touched memory for `seconds`."""
    code = f"import time; x = bytearray({megabytes} * 1000 * 1000); time.sleep({seconds})"
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_step_child_peak_is_measured_and_an_earlier_process_is_not_counted():
    earlier = allocate(300, 30)  # a server an earlier step left running
    try:
        with StepMemory(interval=0.05) as memory:
            memory.begin()
            allocate(200, 1.0).wait()
            peak = memory.end()
            memory.begin()
            allocate(0, 0.5).wait()
            small = memory.end()
    finally:
        earlier.kill()
        earlier.wait()
    assert 200 * MB <= peak < 400 * MB  # the 200 MB child, not the 300 MB one beside it
    assert small is not None and small < 200 * MB


def test_a_forked_child_is_not_counted_before_it_execs():
    """A fork reports its parent's figures until it execs (vfork shares them): counting it doubles the step."""
    # the fork lives 0.3 s, well within SETTLE_SECONDS even while the machine is busy
    code = "import os, time; x = bytearray(300 * 1000 * 1000); os.fork(); time.sleep(0.3)"
    with StepMemory(interval=0.05) as memory:
        memory.begin()
        subprocess.run([sys.executable, "-c", code], check=True)
        peak = memory.end()
    assert peak is not None and 300 * MB <= peak < 450 * MB


def test_step_log_line_summary_and_report_show_the_peak(tmp_path):
    console = io.StringIO()

    class Fixed:
        def begin(self):
            self.began = True

        def end(self):
            return 412_300_000

    log = StepLog(tmp_path, console, memory=Fixed())
    log.write("Executing task 'prepare-data'\n")
    log.write("Task 'prepare-data' finished with status SUCCESS\n")
    step = log.steps["prepare-data"]
    assert step.peak_memory_bytes == 412_300_000
    assert (
        console.getvalue().splitlines()[-1] == f"✔ prepare-data succeeded in {step.seconds:.1f}s, peak memory 412.3 MB"
    )
    summary = report.collect(None, [step, Step("train-model")], "tfpipe-training", {}, 1.0)
    assert [s["peak_memory_bytes"] for s in summary["steps"]] == [412_300_000, None]
    report.write(summary, tmp_path)
    assert "<th>peak memory</th>" in (tmp_path / "report.html").read_text()
    assert "412.3 MB" in (tmp_path / "report.html").read_text()
