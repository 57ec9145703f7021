"""The devices the trainer records (metrics.json `devices`), from the GPUs TensorFlow lists (faked here)."""

from trainer.distribute import training_devices


def test_a_process_records_its_gpus_else_the_cpu():
    assert training_devices(["/physical_device:GPU:0", "/physical_device:GPU:1"]) == ["GPU:0", "GPU:1"]
    assert training_devices([]) == ["CPU:0"]
