"""Progress lines (`core.progress`): their format, the rate limit, where the steps emit them, and what the local
runner shows of them, on a terminal (a screen replayed from what the runner wrote) and without one."""

import io
import json
import os
import re
import sys
import time

import pytest

from components.lib.study.progress import StudyProgress
from components.lib.study.spec import DEFAULT_STUDY
from components.lib.study.trials import Trial
from components.train_model import _pump
from core import progress
from pipelines.local_run import StepLog


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Screen:
    """What a terminal shows of what was written to it: `\\r`, `\\n` (a pseudo-terminal's `\\r\\n` too), erase to
    the end of the line (`ESC[K`); other escape sequences are dropped."""

    def __init__(self):
        self.lines = [""]
        self.row = self.col = 0

    def feed(self, text: str) -> None:
        for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|.", text, re.DOTALL):
            if token == "\r":
                self.col = 0
            elif token == "\n":
                self.row, self.col = self.row + 1, 0
                self.lines += [""] * (self.row + 1 - len(self.lines))
            elif token == "\x1b[K":
                self.lines[self.row] = self.lines[self.row][: self.col]
            elif not token.startswith("\x1b"):
                line = self.lines[self.row].ljust(self.col)
                self.lines[self.row] = line[: self.col] + token + line[self.col + 1 :]
                self.col += 1

    def text(self) -> list[str]:
        """The lines up to the cursor's, the empty ones at the end left out."""
        lines = self.lines[: self.row + 1]
        while lines and not lines[-1]:
            lines.pop()
        return lines


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def kfp_lines(*lines: str) -> str:
    """kfp.local's output: a task starting, the step's lines, the task finishing."""
    return "".join(line + "\n" for line in lines)


STARTED = "11:00:00.000 - INFO - Executing task \x1b[96m'train-model'\x1b[0m"
FINISHED = "11:00:09.000 - INFO - Task \x1b[96m'train-model'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m"


def epoch_line(epoch: int, accuracy: float) -> str:
    return progress.line(
        "train", "epoch", f"epoch {epoch}/3: loss 0.5000, accuracy {accuracy:.4f}", done=epoch, total=3
    )


def test_a_progress_line_reads_back_and_other_lines_do_not():
    text = progress.line("train", "epoch", "epoch 1/3", done=1, total=3, unit="epochs")
    assert text.startswith("TFPIPE_PROGRESS {")
    assert progress.parse("  " + text + "\n") == {
        "stage": "train",
        "event": "epoch",
        "message": "epoch 1/3",
        "done": 1,
        "total": 3,
        "unit": "epochs",
    }
    for other in ("epoch 1/3", "TFPIPE_PROGRESS {not json", 'TFPIPE_PROGRESS {"stage": "train"}', "TFPIPE_PROGRESS 3"):
        assert progress.parse(other) is None


def test_emit_writes_one_flushed_line(capsys):
    progress.emit("evaluate", "candidate", "evaluating the candidate")
    assert progress.parse(capsys.readouterr().out)["message"] == "evaluating the candidate"


@pytest.mark.parametrize("seconds, text", [(4.4, "4s"), (59.6, "1m00s"), (185, "3m05s"), (3720, "1h02m")])
def test_durations(seconds, text):
    assert progress.duration(seconds) == text


def test_a_counter_writes_at_most_one_line_per_interval_and_a_last_one():
    clock, lines = Clock(), []
    counter = progress.Counter(
        "batch", "instances", lambda c: f"{c['done']} instances, {c['errors']} errors", 1000, 2.0, lines.append, clock
    )
    for t, done in ((0.5, 100), (1.9, 300), (2.1, 400), (3.0, 500), (4.0, 600)):
        clock.now = 100 + t
        counter.update(0, done=done, errors=1)
    clock.now = 104.5
    counter.update(1, done=50, errors=2)  # a second part (another input file): summed with the first
    counter.finish(0, done=1000 - 50, errors=1)
    events = [progress.parse(line) for line in lines]
    assert [(e["event"], e["done"]) for e in events] == [("instances", 400), ("instances", 650), ("done", 1000)]
    assert events[0]["message"] == "400 instances, 1 errors, 190 instances/s, ~3s left"
    assert events[0]["rate"] == 190.5 and events[0]["eta_seconds"] == 3.1 and events[0]["total"] == 1000
    assert events[1]["errors"] == 3
    assert events[2]["message"] == "1000 instances, 3 errors, 222 instances/s" and "eta_seconds" not in events[2]


def test_without_a_total_the_share_done_gives_the_time_left():
    """Batch prediction knows its input's bytes, not its instances: the bytes read give the time left."""
    clock, lines = Clock(), []
    counter = progress.Counter(
        "batch",
        "instances",
        lambda c: f"{c['done']} instances",
        None,
        2.0,
        lines.append,
        clock,
        lambda c: c["bytes"] / 800,
    )
    clock.now = 102.0
    counter.update(0, done=50, bytes=200)
    counter.finish(0, done=200, bytes=800)
    first, last = (progress.parse(line) for line in lines)
    assert (first["fraction"], first["eta_seconds"], "total" in first) == (0.25, 6.0, False)
    assert first["message"] == "50 instances, 25 instances/s, ~6s left"
    assert last["fraction"] == 1.0 and "eta_seconds" not in last


def test_data_prep_reports_records_read_written_and_quarantined(tmp_path, capsys):
    from components.prepare_data import prepare

    prepare("builtin:iris", str(tmp_path / "data"), num_workers=1)
    events = [e for e in map(progress.parse, capsys.readouterr().out.splitlines()) if e]
    assert events[-1]["stage"] == "prepare" and events[-1]["event"] == "done"
    assert (events[-1]["done"], events[-1]["total"], events[-1]["written"], events[-1]["quarantined"]) == (
        150,
        150,
        150,
        0,
    )
    assert events[-1]["message"].startswith("150/150 records read, 150 written, 0 quarantined, ")


def test_batch_prediction_reports_instances_errors_and_files(tmp_path, capsys):
    import tensorflow as tf

    from components.run_batch_prediction import batch_predict

    class Tabular(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="features")])
        def serve(self, features):
            return {"total": tf.reduce_sum(features, axis=1)}

    model = Tabular()
    tf.saved_model.save(
        model, str(tmp_path / "model"), signatures={"serving_default": model.serve.get_concrete_function()}
    )
    (tmp_path / "a.jsonl").write_text("[1, 2, 3]\n" * 5 + "not json\n")
    (tmp_path / "b.jsonl").write_text("[1, 2, 3]\n" * 3)
    batch_predict(str(tmp_path / "model"), f"{tmp_path}/*.jsonl", "jsonl", str(tmp_path / "out"), "tab", batch_size=2)
    events = [e for e in map(progress.parse, capsys.readouterr().out.splitlines()) if e]
    assert events[-1]["stage"] == "batch" and events[-1]["event"] == "done"
    assert (events[-1]["done"], events[-1]["errors"], events[-1]["files"]) == (9, 1, 2)
    assert (events[-1]["bytes"], events[-1]["fraction"]) == (len("[1, 2, 3]\n") * 8 + len("not json\n"), 1.0)
    assert re.fullmatch(
        r"9 instances, 1 errors, 2/2 files, 100% of the input read, \d+ instances/s", events[-1]["message"]
    )


def test_the_launcher_relays_the_chiefs_progress_lines_unprefixed():
    sink, log = io.StringIO(), io.StringIO()
    line = epoch_line(1, 0.9)
    _pump(io.StringIO(f"Epoch 1/3\n{line}\n"), "chief", sink, log)
    assert sink.getvalue() == f"[chief] Epoch 1/3\n{line}\n"
    assert log.getvalue() == f"Epoch 1/3\n{line}\n"


def test_the_study_reports_trials_their_epochs_and_the_best(tmp_path):
    spec = DEFAULT_STUDY.model_copy(update={"max_trial_count": 4})
    lines: list[str] = []
    study = StudyProgress(spec, str(tmp_path), lines.append, interval=0.05)
    one, two = Trial("1", {"learning_rate": 0.01}), Trial("2", {"learning_rate": 0.001})
    study.started(one)
    study.started(two)
    (tmp_path / "1").mkdir()
    log = tmp_path / "1" / "trial.log"
    log.write_text("Epoch 1/2\n" + progress.line("train", "epoch", "", done=1, total=2, val_accuracy=0.9) + "\nEpo")
    with study:  # the watcher reads the trials' logs while they run
        deadline = time.time() + 10
        while not any('"event": "trials"' in line for line in lines) and time.time() < deadline:
            time.sleep(0.05)
    watched = progress.parse(next(line for line in lines if '"event": "trials"' in line))
    assert watched["message"] == "running: trial 1 epoch 1/2 val_accuracy 0.9000, trial 2 starting; 0/4 finished"
    assert watched["running"]["1"] == {"event": "epoch", "done": 1, "total": 2, "val_accuracy": 0.9}
    one.status, one.metric, one.seconds = "SUCCEEDED", 0.93, 4.2
    study.finished_trial(one, one)
    finished = progress.parse(lines[-1])
    assert finished["message"] == (
        "trial 1/4: accuracy 0.9300; running: trial 2 starting; 1/4 finished; best accuracy 0.9300 (trial 1)"
    )
    assert (finished["event"], finished["trial"], finished["metric"], finished["best"], finished["best_trial"]) == (
        "trial_finished",
        "1",
        0.93,
        0.93,
        "1",
    )
    assert progress.parse(lines[0])["message"] == (
        "trial 1/4 started (learning_rate=0.01); running: trial 1 starting; 0/4 finished"
    )


def test_the_trainer_reports_each_epoch_with_its_figures_and_the_time_left(capsys):
    from trainer.environment import use_legacy_keras

    use_legacy_keras()
    import numpy as np
    import tf_keras as keras

    from trainer.callbacks import ProgressLog

    model = keras.Sequential([keras.layers.Dense(3, activation="softmax", input_shape=(4,))])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x, y = np.random.default_rng(0).normal(size=(64, 4)), np.arange(64) % 3
    callback = ProgressLog(global_batch=16, interval=0.0)  # a step line after every step
    model.fit(x, y, batch_size=16, epochs=2, validation_data=(x, y), verbose=0, callbacks=[callback])
    events = [e for e in map(progress.parse, capsys.readouterr().out.splitlines()) if e]
    assert [(e["event"], e.get("epoch", e.get("done"))) for e in events] == [
        ("start", 1),
        *[("step", 1)] * 4,
        ("epoch", 1),
        *[("step", 2)] * 4,
        ("epoch", 2),
    ]
    assert events[0]["message"] == "starting epoch 1/2: 4 steps of 16 examples"
    assert re.fullmatch(r"epoch 1/2, step 3/4: loss \d\.\d{4}, accuracy \d\.\d{4}, ~\d+s left", events[3]["message"])
    assert re.fullmatch(
        r"epoch 1/2: loss \d\.\d{4}, accuracy \d\.\d{4}, val_accuracy \d\.\d{4}, \d+ examples/s, ~\d+s left",
        events[5]["message"],
    )
    assert events[-1]["message"].endswith("examples/s")  # the last epoch: no time left
    assert {"loss", "accuracy", "val_loss", "val_accuracy", "examples_per_second"} <= events[-1].keys()


def test_on_a_terminal_the_progress_is_one_line_under_the_running_step(tmp_path):
    console, clock = Terminal(), Clock()
    log = StepLog(tmp_path, console, columns=lambda: 40, clock=clock)
    screen = Screen()
    log.write(kfp_lines(STARTED, "Epoch 1/3", epoch_line(1, 0.8)))
    screen.feed(console.getvalue())
    assert screen.text() == ["▶ train-model ...", "  ↳ epoch 1/3: loss 0.5000, accuracy 0…"]  # 39 of 40 columns
    clock.now += 1
    log.write(kfp_lines(epoch_line(2, 0.9)))
    screen = Screen()
    screen.feed(console.getvalue())
    assert screen.text() == ["▶ train-model ...", "  ↳ epoch 2/3: loss 0.5000, accuracy 0…"]
    clock.now += 8
    log.write(kfp_lines(epoch_line(3, 0.95), FINISHED))
    screen = Screen()
    screen.feed(console.getvalue())
    assert screen.text() == ["▶ train-model ...", "✔ train-model succeeded in 9.0s"]
    step = log.steps["train-model"]
    assert [(e["seconds"], e["done"]) for e in step.progress] == [(0.0, 1), (1.0, 2), (9.0, 3)]
    assert (tmp_path / "train-model.log").read_text().count("TFPIPE_PROGRESS") == 3


def test_without_a_terminal_a_plain_line_at_most_every_few_seconds_and_the_last_one(tmp_path):
    console, clock = io.StringIO(), Clock()
    log = StepLog(tmp_path, console, clock=clock)
    log.write(kfp_lines(STARTED))
    for seconds, epoch in ((0.5, 1), (2.0, 2), (6.0, 3)):
        clock.now = 100 + seconds
        log.write(kfp_lines(epoch_line(epoch, 0.9)))
    clock.now = 107
    log.write(kfp_lines(progress.line("train", "restart", "chief lost: restarting the workers (1/2)")))
    clock.now = 109
    log.write(kfp_lines(FINISHED))
    assert console.getvalue().splitlines() == [
        "▶ train-model ...",
        "  ↳ epoch 1/3: loss 0.5000, accuracy 0.9000",
        "  ↳ epoch 3/3: loss 0.5000, accuracy 0.9000",
        "  ↳ chief lost: restarting the workers (1/2)",
        "✔ train-model succeeded in 9.0s",
    ]
    assert len(log.steps["train-model"].progress) == 4


def test_quiet_shows_nothing_and_verbose_the_raw_lines(tmp_path):
    quiet, verbose = io.StringIO(), io.StringIO()
    lines = kfp_lines(STARTED, epoch_line(1, 0.9), FINISHED)
    StepLog(tmp_path, quiet, quiet=True).write(lines)
    log = StepLog(tmp_path, verbose, verbose=True)
    log.write(lines)
    assert quiet.getvalue() == "" and verbose.getvalue() == lines
    assert len(log.steps["train-model"].progress) == 1


@pytest.mark.parametrize("command", ["run", "rehearse"])
def test_verbose_and_quiet_together_are_refused(command):
    from click.testing import CliRunner

    from pipelines.cli import cli

    result = CliRunner().invoke(cli, [command, "-v", "-q"])
    assert result.exit_code == 1 and "-v/--verbose and -q/--quiet: choose one" in result.output


@pytest.mark.e2e
def test_a_run_shows_the_trial_and_the_epoch_live_on_a_terminal_and_plain_lines_without(tmp_path):
    """`run` under a pseudo-terminal (a small study, 3 epochs): while the study runs, the line under it names the
    trial and its epoch; while the training runs, the epoch and its accuracy; each ends in today's final line. Then a
    batch prediction with stdout a pipe shows plain progress lines. The step logs carry the progress lines."""
    import pty

    env = {**os.environ, "COLUMNS": "160", "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [
        *("--no-deploy", "--epochs", "3", "--out", str(tmp_path / "run"), "--model-repository", str(tmp_path / "repo")),
        *("--set", "study.max_trial_count=2", "--set", "study.parallel_trial_count=1"),
    ]
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI on the terminal (never back into pytest)
        try:
            os.execve(sys.executable, [sys.executable, "-m", "pipelines", "run", *args], env)
        finally:
            os._exit(127)
    screen, screens = Screen(), []
    while True:  # the screen after each read: what a person saw at that moment
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen.feed(chunk.decode(errors="replace"))
        screens.append(screen.text())
    _, status = os.waitpid(pid, 0)
    final = screen.text()
    assert os.waitstatus_to_exitcode(status) == 0, "\n".join(final)

    def seen(step: str, pattern: str) -> list[str]:
        """The progress lines shown under `step` while it ran."""
        return [
            lines[-1]
            for lines in screens
            if len(lines) > 1 and lines[-2] == f"▶ {step} ..." and re.fullmatch(pattern, lines[-1])
        ]

    assert seen("tune-hyperparameters", r"  ↳ .*trial \d/2.*"), "\n".join(final)
    assert seen("tune-hyperparameters", r"  ↳ .*running: trial \d epoch \d/2.*"), "\n".join(final)
    assert seen("train-model", r"  ↳ epoch [123]/3: loss \d\.\d{4}, accuracy \d\.\d{4}, val_accuracy \d\.\d{4}, .*")
    train = final.index("▶ train-model ...")
    assert re.fullmatch(r"✔ train-model succeeded in \d+\.\ds, peak memory \d+\.\d [MG]B", final[train + 1])
    assert not [line for line in final if "↳" in line]  # every progress line was replaced by its step's final line
    logs = tmp_path / "run" / "logs"
    events = [e for e in map(progress.parse, (logs / "train-model.log").read_text().splitlines()) if e]
    assert [e["done"] for e in events if e["event"] == "epoch"] == [1, 2, 3]
    assert "trial_finished" in (logs / "tune-hyperparameters.log").read_text()
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    tune = next(s for s in summary["steps"] if s["name"] == "tune-hyperparameters")
    assert [e["trial"] for e in tune["progress"] if e["event"] == "trial_finished"] == ["1", "2"]

    import subprocess

    import numpy as np

    instances = tmp_path / "instances.jsonl"
    instances.write_text("".join(json.dumps(np.full((8, 8, 1), i % 16, np.float32).tolist()) + "\n" for i in range(50)))
    piped = subprocess.run(
        [sys.executable, "-m", "pipelines", "run", "--pipeline", "batch_prediction", "--instances", str(instances)]
        + ["--out", str(tmp_path / "batch"), "--model-repository", str(tmp_path / "repo")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert piped.returncode == 0, piped.stdout + piped.stderr
    lines = piped.stdout.splitlines()
    step = lines.index("▶ run-batch-prediction ...")
    assert re.fullmatch(
        r"  ↳ 50 instances, 0 errors, 1/1 files, 100% of the input read, \d+ instances/s", lines[step + 1]
    )
    assert re.fullmatch(r"✔ run-batch-prediction succeeded in \d+\.\ds, peak memory \d+\.\d [MG]B", lines[step + 2])
    assert "\r" not in piped.stdout and "\x1b[K" not in piped.stdout
