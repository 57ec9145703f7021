"""Progress lines (`core.progress`): their format, the rate limit, where the steps emit them, and what the local
runner shows of them, on a terminal (a screen replayed from what the runner wrote) and without one."""

import io
import re
import time

import pytest

from components.lib.study.progress import StudyProgress
from components.lib.study.spec import DEFAULT_STUDY
from components.lib.study.trials import Trial
from components.train_model import _pump
from core import progress
from pipelines.local_run import StepLog
from tests.helpers.terminal import Screen, Terminal


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


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
        "trial 1/4: val_accuracy 0.9300; running: trial 2 starting; 1/4 finished; best val_accuracy 0.9300 (trial 1)"
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
