"""Your own networks: a module here holding a builder is named in the config as `trainer.model:
models.<module>:<function>`; this package ships in every image (docs/guides/model.md)."""
