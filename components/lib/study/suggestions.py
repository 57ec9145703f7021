"""The study's suggestions from OSS Vizier's designers: GP bandit (`default`, the algorithm behind Vertex's
default), grid or random search. `make_designer` builds the spec's designer, `python_values` reads a suggestion's
values, `to_vizier` gives a finished trial back to the designer."""

import contextlib
import sys

from components.lib.study.spec import StudySpec
from components.lib.study.trials import Trial


def vizier_problem(spec: StudySpec):
    from vizier import pyvizier as vz

    problem = vz.ProblemStatement()
    root = problem.search_space.root
    scales = {"linear": vz.ScaleType.LINEAR, "log": vz.ScaleType.LOG, "reverse_log": vz.ScaleType.REVERSE_LOG}
    for p in spec.parameters:
        if p.type == "double":
            root.add_float_param(p.parameter_id, p.min, p.max, scale_type=scales[p.scale])
        elif p.type == "integer":
            root.add_int_param(p.parameter_id, p.min, p.max, scale_type=scales[p.scale])
        elif p.type == "categorical":
            root.add_categorical_param(p.parameter_id, list(p.values))
        else:
            root.add_discrete_param(p.parameter_id, list(p.values), scale_type=scales[p.scale])
    goal = vz.ObjectiveMetricGoal.MAXIMIZE if spec.goal == "maximize" else vz.ObjectiveMetricGoal.MINIMIZE
    problem.metric_information.append(vz.MetricInformation(spec.metric_id, goal=goal))
    return problem


def make_designer(spec: StudySpec, seed: int = 0):
    """Vizier designer for the spec's algorithm. The GP bandit's acquisition search is sized for small machines
    (2,000 evaluations, 2 ARD restarts, below Vizier's defaults), and its trials are padded to a multiple of 10, so
    the GP's JAX functions compile once per 10 trials instead of at every suggestion (the padding is masked out: the
    suggestions are the same).

    The designers are imported from their modules: `vizier.algorithms.designers` also imports BOCS, which needs
    cvxpy."""
    problem = vizier_problem(spec)
    if spec.algorithm == "grid":
        from vizier._src.algorithms.designers.grid import GridSearchDesigner

        return GridSearchDesigner(problem.search_space)
    if spec.algorithm == "random":
        from vizier._src.algorithms.designers.random import RandomDesigner

        return RandomDesigner(problem.search_space, seed=seed)
    with _without_tensorflow():
        import jax
        from vizier._src.algorithms.designers.gp_bandit import VizierGPBandit
        from vizier._src.algorithms.optimizers import eagle_strategy, vectorized_base
        from vizier.pyvizier.converters import padding

    factory = vectorized_base.VectorizedOptimizerFactory(
        strategy_factory=eagle_strategy.VectorizedEagleStrategyFactory(), max_evaluations=2000, suggestion_batch_size=25
    )
    return VizierGPBandit(
        problem,
        acquisition_optimizer_factory=factory,
        ard_random_restarts=2,
        rng=jax.random.PRNGKey(seed),
        padding_schedule=padding.PaddingSchedule(num_trials=padding.PaddingType.MULTIPLES_OF_10),
    )


@contextlib.contextmanager
def _without_tensorflow():
    """Imports in this block see no TensorFlow, unless this process has already imported it. TensorFlow
    Probability's JAX substrate (Vizier's GP) imports TensorFlow only to copy its docstrings, and skips that when the
    import fails: the study's process then spends no time importing TensorFlow while its trial runners import it."""
    if "tensorflow" in sys.modules:
        yield
        return
    sys.modules["tensorflow"] = None  # `import tensorflow` raises ImportError
    try:
        yield
    finally:
        del sys.modules["tensorflow"]


def python_values(values: dict, spec: StudySpec) -> dict:
    """A suggestion's values (`parameters.as_dict()`) with the spec's integer parameters as Python ints."""
    kinds = {p.parameter_id: p.type for p in spec.parameters}
    return {k: int(v) if kinds[k] == "integer" else v for k, v in values.items()}


def to_vizier(trial: Trial, spec: StudySpec, number: int):
    """A finished trial as Vizier's completed trial `number`: its metric, or infeasible with its error."""
    from vizier import pyvizier as vz

    t = vz.Trial(id=number, parameters=trial.parameters)
    if trial.status == "SUCCEEDED":
        t.complete(vz.Measurement({spec.metric_id: trial.metric}))
    else:
        t.complete(vz.Measurement(), infeasibility_reason=trial.error or "failed")
    return t
