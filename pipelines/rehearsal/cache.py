"""Vertex AI's execution cache in a rehearsal: kfp.local's task cache, keyed as Vertex keys a task.

kfp.local (2.17) keys a task on what Vertex does (the component as compiled, its input values and artifacts), but
on unresolved placeholders: a step that takes a run-level one such as `{{$.pipeline_job_name}}` would hit, where on
Vertex it never does. Here placeholders are resolved to this rehearsal's values before the key is computed. A hit
hands on the outputs of the run that first ran the task, so the tasks after it hit too; it is printed as
`Task 'NAME' served from cache` for the step log (`CACHED`). kfp.local misses an entry whose output artifact has no
file; metrics artifacts (metadata only) are exempt here, or a task with a `Metrics` output would never hit.
"""

from __future__ import annotations

import contextlib
import threading
import time

CACHE_HIT = "Task '{}' served from cache"
METRICS = ("system.Metrics", "system.ClassificationMetrics", "system.SlicedClassificationMetrics")


def _run_values(pipeline_resource_name: str, unique_pipeline_id: str) -> dict:
    from kfp import dsl

    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        dsl.PIPELINE_JOB_NAME_PLACEHOLDER: pipeline_resource_name,
        dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER: pipeline_resource_name,
        dsl.PIPELINE_JOB_ID_PLACEHOLDER: unique_pipeline_id,
        dsl.PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER: created,
        dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER: created,
    }


def _resolved(value, values: dict):
    if isinstance(value, str):
        for placeholder, resolved in values.items():
            value = value.replace(placeholder, resolved)
        return value
    if isinstance(value, list):
        return [_resolved(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _resolved(v, values) for k, v in value.items()}
    return value


@contextlib.contextmanager
def vertex_cache():
    """While active, kfp.local's cache (when `kfp.local.init(enable_caching=True)`) keys tasks on their resolved
    inputs and reports its hits."""
    from kfp.local import cache
    from kfp.local.orchestrator import task_executor

    execute, compute_key, get = task_executor.execute_single_task, cache.LocalCache.compute_key, cache.LocalCache.get
    deserialize = cache.LocalCache.__dict__["_deserialize_artifact"]
    current = threading.local()  # the task being executed on this thread: its run's values, whether it hit

    def execute_single_task(*args, **kwargs):
        current.values = _run_values(kwargs["pipeline_resource_name"], kwargs["unique_pipeline_id"])
        current.hit = False
        outputs, status = execute(*args, **kwargs)
        if current.hit:
            print(CACHE_HIT.format(kwargs["task_name"]), flush=True)
        return outputs, status

    def resolved_key(self, component_name, image, full_command, arguments, env_vars=None, custom_cache_key=None):
        arguments = _resolved(arguments, getattr(current, "values", {}))
        return compute_key(self, component_name, image, full_command, arguments, env_vars, custom_cache_key)

    def recorded_get(self, key):
        found = get(self, key)
        current.hit = found is not None
        return found

    def artifact(data):
        if data.get("schema_title") in METRICS:
            from kfp.dsl import executor

            return executor.create_artifact_instance(
                {
                    "name": data.get("name", ""),
                    "uri": data.get("uri", ""),
                    "metadata": data.get("metadata") or {},
                    "type": {"schemaTitle": data["schema_title"]},
                }
            )
        return deserialize.__func__(data)

    task_executor.execute_single_task = execute_single_task
    cache.LocalCache.compute_key = resolved_key
    cache.LocalCache.get = recorded_get
    cache.LocalCache._deserialize_artifact = staticmethod(artifact)
    try:
        yield
    finally:
        task_executor.execute_single_task = execute
        cache.LocalCache.compute_key = compute_key
        cache.LocalCache.get = get
        cache.LocalCache._deserialize_artifact = deserialize
