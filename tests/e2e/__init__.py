"""End-to-end tests (the `e2e` tier, `make test`): whole pipeline runs and multi-process training, each costly run shared by the tests that read it."""
