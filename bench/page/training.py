"""The renderers of the training side's benchmarks: make_run, image_size, input_pipeline, tuning, tflite."""

from __future__ import annotations

from bench.page.format import (
    Blocks,
    Result,
    listing,
    met,
    number,
    plain,
    seconds,
    significant,
    step_table,
    table,
    times,
    yes,
)


def make_run(result: Result) -> Blocks:
    runs = result["runs"]
    steps = step_table(
        "step",
        [(f"`{run['variant']}`", run["steps"]) for run in runs],
        [
            ["start-up, orchestration, report", *(seconds(run["outside_steps_seconds"], 2) for run in runs)],
            ["**wall**", *(f"**{seconds(run['wall_seconds'], 2)}**" for run in runs)],
            ["test accuracy", *(number(run["test_accuracy"], 4) for run in runs)],
            ["blessed", *(yes(run["blessed"]) for run in runs)],
        ],
    )
    default = next(run for run in runs if run["variant"] == "default")
    bytecode = result["tensorflow_bytecode"]
    return [
        steps,
        f"Goal: the `default` run in at most {plain(result['goal_seconds'])} s: {met(result['goal_met'])} "
        f"({seconds(default['wall_seconds'], 2)}).",
        f"`import tensorflow`: {seconds(bytecode['import_seconds'], 2)} in this environment (bytecode compiled: "
        f"{yes(bytecode['compiled'])}), {seconds(bytecode['import_seconds_without_bytecode'], 2)} in a fresh process "
        "without bytecode.",
    ]


def image_size(result: Result) -> Blocks:
    data, runs, goal = result["data"], result["runs"], result["goal"]
    best = next(run for run in runs if run["run"] == goal["best_explicit"])
    rows = [
        [
            f"{'default' if run['image_size_option'] == 0 else 'explicit'}: {run['image_size']['pixels']} px",
            f"{number(run['train_bytes'])} B",
            times(result["train_bytes_vs_default"][run["run"]]),
            f"{listing(number(s['test_accuracy'], 3) for s in run['seeds'])}; **{number(run['test_accuracy_mean'], 3)}**",
            f"{listing(seconds(s['train_model_seconds']) for s in run['seeds'])}; "
            f"**{seconds(run['train_model_seconds_median'])}**",
            times(result["train_seconds_vs_default"][run["run"]]),
        ]
        for run in runs
    ]
    header = [
        "model input",
        "training split",
        "vs the default's",
        "test accuracy (seeds; mean)",
        "train-model (seeds; median)",
        "vs the default's",
    ]
    return [
        f"{number(data['images'])} images ({listing(data['classes'])}; {number(data['per_class'])} each), shorter "
        f"sides {listing(number(s) for s in data['shorter_sides'])} px: {number(data['images_larger_than_cap'])} "
        f"larger than the {number(data['cap_px'])} px cap, {number(data['images_smaller_than_cap'])} smaller; "
        f"{number(result['epochs'])} epochs; {number(runs[0]['test_examples'])} test examples, the same for every size.",
        table(header, rows),
        f"Goal: the default's mean test accuracy within one test example ({number(goal['one_test_example'], 4)}) of "
        f"the best explicit size's ({best['image_size']['pixels']} px: {number(best['test_accuracy_mean'], 3)}): "
        f"{met(goal['default_within_one_test_example_of_best_explicit'])}; the best explicit size's mean minus the "
        f"default's: {number(goal['accuracy_gap_points'], 2)} points.",
    ]


def input_pipeline(result: Result) -> Blocks:
    codelab, ours, ratios, goals = result["baseline"], result["ours"], result["ratios"], result["goals"]

    def ratio(key: str) -> str:
        if key not in goals:
            return times(ratios[key])
        goal = goals[key]
        return f"**{times(ratios[key])}** (goal ≥ {plain(goal['min_ratio'])}×: {met(goal['met'])})"

    def rates(side: Result) -> list[str]:
        return [
            number(side["cold_examples_per_s"]),
            number(side["steady_examples_per_s"]),
            number(side["steady_mb_per_s"]),
            number(side["from_raw_examples_per_s"]),
        ]

    def dtype(side: Result) -> str:
        return f"{number(side['examples_per_epoch'])} examples of {number(side['bytes_per_example'])} B ({side['batch_dtype']})"

    header = ["pipeline", "cold (epoch 1) ex/s", "steady (later epochs) ex/s", "steady MB/s", "from raw JPEGs ex/s"]
    rows = [
        ["codelab `image_dataset_from_directory`", *rates(codelab)],
        ["ours, `trainer.data.make_dataset`", *rates(ours)],
        ["**ours / codelab**", *(ratio(key) for key in ("cold", "steady", "steady_bytes", "from_raw"))],
    ]
    prep = table(
        ["ours' data prep", "seconds (median; trials)", "from raw JPEGs ex/s", "vs codelab"],
        [
            [
                f"all CPUs ({number(ours['prepare_processes'])} processes)",
                f"{seconds(ours['prepare_seconds'], 3)}; {listing(number(s, 3) for s in ours['prepare_seconds_trials'])}",
                number(ours["from_raw_examples_per_s"]),
                times(ratios["from_raw"]),
            ],
            [
                "one process",
                f"{seconds(ours['prepare_seconds_one_process'], 3)}; "
                f"{listing(number(s, 3) for s in ours['prepare_seconds_one_process_trials'])}",
                number(ours["from_raw_examples_per_s_one_process_prep"]),
                times(ratios["from_raw_one_process_prep"]),
            ],
        ],
    )
    return [
        f"{number(result['images'])} JPEGs of {number(result['source_size'])} px, model input "
        f"{number(result['image_size'])} px, batch {number(result['batch_size'])}, {number(result['epochs'])} epochs, "
        f"medians of {number(result['repeats'])} trials. An epoch: the codelab's {dtype(codelab)}, ours "
        f"{dtype(ours)}.",
        table(header, rows),
        prep,
    ]


def tuning(result: Result) -> Blocks:
    trials = result["trials"]
    names = {"default": "study (Vizier GP bandit)", "random": "random search"}

    def needed(count: int) -> str:
        return number(count) if count <= trials else f"not reached in {number(trials)}"

    rows = [
        [
            name,
            listing(needed(result["trials_needed"][f"{algorithm}-{seed}"]) for seed in range(result["seeds"])),
            f"**{number(result['median_trials_needed'][algorithm])}**",
        ]
        for algorithm, name in names.items()
    ]
    return [
        table(["search", "trials needed, per seed", "median"], rows),
        f"Ratio of the medians: **{number(result['ratio'], 3)}** (goal ≤ {plain(result['goal']['max_ratio'])}: "
        f"{met(result['goal']['met'])}). Target: the best-known validation accuracy, "
        f"{number(result['best_known'], 4)}, minus one point: {number(result['target'], 4)}; one of the "
        f"{number(result['validation_examples'])} validation examples is {plain(result['one_validation_example_points'])} "
        f"points. {number(result['trials_run'])} trials of {number(result['epochs'])} epochs, "
        f"{number(result['parallel'])} at a time, in {seconds(result['seconds'])}.",
    ]


def tflite(result: Result) -> Blocks:
    latency, modes, goal = result["latency"], result["modes"], result["goal"]
    int8 = next(mode for mode in modes if mode["mode"] == "int8")
    rows = [
        [
            mode["mode"],
            number(mode["size_bytes"]),
            times(mode["size_ratio"]),
            times(mode["weight_bytes_ratio"]),
            number(mode["overhead_bytes"]),
            number(mode["accuracy_drop_points"], 2),
            f"{significant(mode['latency_ms_mean'])}; {significant(mode['latency_ms_p95'])}",
            times(mode["latency_vs_float32_tflite"]),
            times(mode["latency_vs_saved_model"]),
        ]
        for mode in modes
    ]
    header = [
        "mode",
        "bytes",
        "vs float32",
        "weights vs float32",
        "overhead bytes",
        "accuracy drop (points)",
        "ms a call (mean; p95)",
        "latency vs float32",
        "latency vs SavedModel",
    ]
    size = result["model_input_size"]
    return [
        f"The {result['dataset']} model: input {size}×{size} px, {number(result['model_parameters'])} parameters, "
        f"{number(result['epochs'])} epochs; accuracy on {number(result['test_examples'])} test examples, "
        f"{number(latency['calls_per_mode'])} timed calls a mode on {number(latency['threads'])} thread after "
        f"{number(latency['warmup_calls'])} warm-up calls. The SavedModel's call from Python: "
        f"{significant(result['saved_model_latency_ms'])} ms (p95 {significant(result['saved_model_latency_ms_p95'])}).",
        table(header, rows),
        f"Goal for int8: at most {plain(goal['int8_size_ratio_max'])}× float32's bytes: {met(goal['size_met'])} "
        f"({times(int8['size_ratio'])}); an accuracy drop of at most {plain(goal['int8_drop_max_points'])} points: "
        f"{met(goal['drop_met'])} ({number(int8['accuracy_drop_points'], 2)}).",
    ]
