"""The training pipeline, defined once for every target.

data prep → champion check (labels, input, data drift) → hyperparameter study → training → evaluation gate → (blessed) model upload → (deploy) endpoint deploy,
and TFLite quantization. Tuning, training, upload and deploy are platform services and go through the seam in
`pipelines.targets`: GCPC ops on Vertex, this project's components on kubeflow and local.
"""

from kfp import dsl

from components.lib.study.spec import DEFAULT_STUDY, StudySpec
from pipelines import targets
from pipelines.config import PIPELINE_NAMES, TARGETS, PipelineParameters, Platform, TrainerSettings, described_by
from pipelines.dag import pipeline
from pipelines.targets.inputs import (
    ChampionCheckInputs,
    DeployInputs,
    EvaluateInputs,
    PrepareInputs,
    QuantizeInputs,
    RegisterInputs,
    Repository,
    ServingTls,
    TrainInputs,
    TuneInputs,
)

PIPELINE_NAME = PIPELINE_NAMES["training"]
_D = PipelineParameters()  # defaults of the typed pipeline inputs


def build_pipeline(
    target: str,
    platform: Platform | None = None,
    study: StudySpec = DEFAULT_STUDY,
    trainer: TrainerSettings | None = None,
):
    """Return the `@dsl.pipeline` function of the training DAG for `target` (vertex | kubeflow | local); its
    trials and training run `trainer.model`'s builder, which must be found on this Python path, with the study's
    parameters and `trainer.hyperparameters` among those it declares."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of: {', '.join(TARGETS)}")
    platform = platform or Platform()
    trainer = (trainer or TrainerSettings()).check_hyperparameters(study)
    ops = targets.make_ops(target, platform, PIPELINE_NAME, trainer.setup(study.metric_id))

    @pipeline(
        name=PIPELINE_NAME,
        description="Prepare data, train (multi-worker), gate, register, deploy and quantize the model.",
    )
    @described_by(PipelineParameters)
    def training_pipeline(
        data_source: str = _D.data_source,
        workers: int = _D.workers,
        epochs: int = _D.epochs,
        batch_size: int = _D.batch_size,
        learning_rate: float = _D.learning_rate,
        val_fraction: float = _D.val_fraction,
        test_fraction: float = _D.test_fraction,
        image_size: int = _D.image_size,
        label_column: str = _D.label_column,
        max_corrupt_fraction: float = _D.max_corrupt_fraction,
        split_salt: str = _D.split_salt,
        max_restarts: int = _D.max_restarts,
        accuracy_threshold: float = _D.accuracy_threshold,
        champion_tolerance: float = _D.champion_tolerance,
        drift_max_class_distance: float = _D.drift_max_class_distance,
        drift_max_js_divergence: float = _D.drift_max_js_divergence,
        drift_action: str = _D.drift_action,
        model_repository: str = _D.model_repository,
        model_name: str = _D.model_name,
        source_commit: str = _D.source_commit,
        tune: bool = _D.tune,
        tuning_trial_epochs: int = _D.tuning_trial_epochs,
        tflite_mode: str = _D.tflite_mode,
        tflite_max_accuracy_drop: float = _D.tflite_max_accuracy_drop,
        tflite_compare_all_modes: bool = _D.tflite_compare_all_modes,
        tflite_int8_io: bool = _D.tflite_int8_io,
        tflite_allow_flex: bool = _D.tflite_allow_flex,
        tflite_qat: bool = _D.tflite_qat,
        tflite_qat_epochs: int = _D.tflite_qat_epochs,
        tflite_qat_learning_rate: float = _D.tflite_qat_learning_rate,
        deploy: bool = _D.deploy,
        traffic_percentage: int = _D.traffic_percentage,
        serving_url: str = _D.serving_url,
        rest_port: int = _D.rest_port,
        grpc_port: int = _D.grpc_port,
        serving_ssl_config_file: str = _D.serving_ssl_config_file,
        serving_version_policy: str = _D.serving_version_policy,
        serving_ca_file: str = _D.serving_ca_file,
        serving_client_cert_file: str = _D.serving_client_cert_file,
    ):
        """The training DAG (inputs: `PipelineParameters`)."""
        prep = ops.prepare_data(
            PrepareInputs(
                data_source=data_source,
                num_workers=workers,
                val_fraction=val_fraction,
                test_fraction=test_fraction,
                image_size=image_size,
                label_column=label_column,
                max_corrupt_fraction=max_corrupt_fraction,
                split_salt=split_salt,
            )
        ).set_display_name("Prepare data")
        dataset = prep.outputs["dataset"]
        repository = Repository(model_repository=model_repository, model_name=model_name)
        champion = ops.find_champion(repository)
        fits = ops.check_champion(
            ChampionCheckInputs(
                dataset=dataset,
                champion=champion,
                drift_max_class_distance=drift_max_class_distance,
                drift_max_js_divergence=drift_max_js_divergence,
                drift_action=drift_action,
            )
        )
        hyperparameters = ops.tune(
            TuneInputs(
                dataset=dataset,
                study=study,
                enabled=tune,
                trial_epochs=tuning_trial_epochs,
                batch_size=batch_size,
                learning_rate=learning_rate,
                workers=workers,
                after=fits,
            )
        )
        trained = ops.train(
            TrainInputs(
                dataset=dataset,
                workers=workers,
                epochs=epochs,
                hyperparameters=hyperparameters,
                max_restarts=max_restarts,
            )
        )
        gate = ops.evaluate(
            EvaluateInputs(
                trained=trained,
                dataset=dataset,
                accuracy_threshold=accuracy_threshold,
                champion_tolerance=champion_tolerance,
                champion=champion,
            )
        )
        with dsl.If(gate.blessed == True, name="model-blessed"):  # noqa: E712 (KFP condition)
            registered = ops.register(
                RegisterInputs(
                    trained=trained,
                    dataset=dataset,
                    evaluation=gate.evaluation,
                    repository=repository,
                    source_commit=source_commit,
                )
            )
            ops.deploy(
                DeployInputs(
                    enabled=deploy,
                    registered=registered,
                    dataset=dataset,
                    smoke_checks=gate.smoke_checks,
                    traffic_percentage=traffic_percentage,
                    repository=repository,
                    serving_url=serving_url,
                    rest_port=rest_port,
                    grpc_port=grpc_port,
                    version_policy=serving_version_policy,
                    tls=ServingTls(serving_ssl_config_file, serving_ca_file, serving_client_cert_file),
                )
            )
            ops.quantize_model(
                QuantizeInputs(
                    model=trained.model,
                    dataset=dataset,
                    mode=tflite_mode,
                    max_accuracy_drop=tflite_max_accuracy_drop,
                    compare_all_modes=tflite_compare_all_modes,
                    int8_io=tflite_int8_io,
                    allow_flex=tflite_allow_flex,
                    qat=tflite_qat,
                    qat_epochs=tflite_qat_epochs,
                    qat_learning_rate=tflite_qat_learning_rate,
                )
            ).set_display_name("TFLite quantization")

    return training_pipeline
