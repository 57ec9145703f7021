"""The trainer's last callback: its outputs written, then the process ended at once (trainer.callbacks)."""

import pytest

from trainer.callbacks import FinishAndExit


def test_training_ends_with_the_outputs_written_then_the_process_ended_with_status_0(capsys):
    events: list = []

    def finish():
        print("[trainer] saved model")
        events.append("finish")

    FinishAndExit(finish, exit_process=lambda code: events.append(("exit", code))).on_train_end(logs={})
    assert events == ["finish", ("exit", 0)]
    assert capsys.readouterr().out == "[trainer] saved model\n"


def test_an_error_while_writing_the_outputs_propagates_and_the_process_is_not_ended():
    exits: list = []

    def finish():
        raise OSError("gs://bucket/model: permission denied")

    with pytest.raises(OSError, match="permission denied"):
        FinishAndExit(finish, exit_process=exits.append).on_train_end(logs={})
    assert exits == []


def test_a_process_that_runs_on_gets_the_outputs_and_fit_returns():
    events: list = []
    FinishAndExit(lambda: events.append("finish"), exit_process=None).on_train_end(logs={})
    assert events == ["finish"]
