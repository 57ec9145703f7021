import inspect

from kfp.dsl import pipeline_task

from pipelines.batch_prediction import build_batch_pipeline
from pipelines.training import build_pipeline


def test_the_dags_are_built_on_a_stack_without_the_callers_frames(monkeypatch):
    """KFP's setters read the whole stack (`inspect.stack()`: a scan of `sys.modules` per frame of a file no module
    owns, like a notebook cell's); the DAG is built where none of the caller's frames are."""
    seen = []
    check = pipeline_task.PipelineTask._ensure_container_spec_exists

    def recording(task):
        seen.append({frame.filename for frame in inspect.stack(context=0)[1:]})
        return check(task)

    monkeypatch.setattr(pipeline_task.PipelineTask, "_ensure_container_spec_exists", recording)
    cell = compile("built = [build_pipeline('kubeflow'), build_batch_pipeline('kubeflow')]", "<notebook cell>", "exec")
    scope = {"build_pipeline": build_pipeline, "build_batch_pipeline": build_batch_pipeline}
    exec(cell, scope)
    assert [p.name for p in scope["built"]] == ["tfpipe-training", "tfpipe-batch-prediction"]
    assert len(seen) > 30  # each step's CPU and memory on kubeflow
    assert not any("<notebook cell>" in files or __file__ in files for files in seen)
