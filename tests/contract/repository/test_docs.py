"""README.md and docs/**/*.md stay true to the code: every command, config snippet, path and link they show is checked
(tests/helpers/doc_checks.py) against the CLI, the config loader, the Makefile, the repository and the pages' headings; the
names tfpipe.yaml, cloudbuild.yaml and the docs share (registries, regions, images, the schedule) agree."""

import pytest

from tests.helpers import doc_checks
from tests.helpers.doc_checks import ROOT, Claim

CHECKS = {
    "commands": doc_checks.commands,
    "config": doc_checks.config,
    "paths": doc_checks.paths,
    "links": doc_checks.links,
    "shell": doc_checks.shell,
}


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("doc", doc_checks.DOCS)
def test_doc(doc, check):
    problems = CHECKS[check](doc_checks.load_doc(doc))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", doc_checks.DOCS)
def test_gcloud_commands(doc):
    """Each `gcloud` command of a bash block is a command of the installed gcloud CLI, with its flags."""
    if doc_checks.gcloud_tree() is None:
        pytest.skip("gcloud is not installed: its commands are checked where it is")
    problems = doc_checks.gcloud(doc_checks.load_doc(doc))
    assert not problems, "\n".join(problems)


def test_vertex_setup_enables_and_grants_what_the_pre_flight_checks_check():
    """docs/guides/vertex.md's set-up, from an empty project, leaves nothing for `submit`'s pre-flight checks to
    find: every API, the runs' account's roles, the key's grants to the service agents, the bucket's default key."""
    problems = doc_checks.setup_problems()
    assert not problems, "\n".join(problems)


def test_tfpipe_yaml_loads_with_each_profile():
    problems = doc_checks.check_config_file(ROOT / "tfpipe.yaml")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kind", ["kfp", "docker"], ids=["template-repository", "docker-repository"])
def test_registry_names_agree(kind):
    names, regions = doc_checks.registry_claims(kind)
    problems = doc_checks.disagreements(f"{kind} repository names", names)
    problems += doc_checks.disagreements(f"{kind} repository regions", regions)
    assert not problems, "\n".join(problems)


def test_image_names_agree():
    problems = doc_checks.image_problems()
    assert not problems, "\n".join(problems)


def test_schedule_cron_agrees():
    problems = doc_checks.schedule_problems()
    assert not problems, "\n".join(problems)


def test_substitution_tables_agree():
    problems = doc_checks.substitution_table_problems()
    assert not problems, "\n".join(problems)


WRONG = """\
# A page

## Its section

```bash
python -m pipelines frobnicate --fast
python -m pipelines run --epoch 3
python -m pipelines compile --target vertx --output a.yaml
python -m pipelines compile --target vertex --output a.yaml \\
    --set platform.trainer_imag=x
python -m pipelines run --set parameters.epochs=zero
python -m pipelines schedule frob --target vertex
python -m pipelines submit --target vertex --config tfpipe.yaml --profile staging --param epoch=3
python -m pipelines compile --target vertex
python -m trainer.task --data-dir d --epoch 3
make nothere
```

```yaml
platform: {locaton: europe-west4}
```

```python
from serving.client import ServingClient, Nothing

client = ServingClient("http://127.0.0.1:8501", "127.0.0.1:8500", "m")
client.forecast([1])
```

See `containers/nothere.Dockerfile`, `build/vertex.yaml`, `platform.kubeflow.trainig`, `run --epoch 3`,
[the CLI](docs/nothere.md), [a section](#no-such-section), [the config](docs/reference/configuration.md#no-such-heading).

```bash
gcloud servics enable dataflow.googleapis.com
gcloud storage buckets update gs://b --default-kms-key k
for role in roles/dataflow.worker; do
```
"""

EXPECTED = [  # (check, line, what the problem says)
    ("commands", 6, "python -m pipelines: no command 'frobnicate'"),
    ("commands", 7, "python -m pipelines run: no option --epoch"),
    ("commands", 8, "--target vertx: not one of vertex, kubeflow"),
    ("commands", 9, "--set platform.trainer_imag: no such config field"),
    ("commands", 11, "parameters.epochs: Input should be a valid integer"),
    ("commands", 12, "python -m pipelines schedule: no command 'frob'"),
    ("commands", 13, "--profile staging: tfpipe.yaml has no such profile"),
    ("commands", 13, "--param epoch: no such input of the pipeline"),
    ("commands", 14, "python -m pipelines compile: --output is required"),
    ("commands", 15, "python -m trainer.task: no option --epoch"),
    ("commands", 16, "make nothere: no such target"),
    ("config", 20, "platform.locaton: Extra inputs are not permitted"),
    ("commands", 24, "from serving.client import Nothing: not in serving/client.py"),
    ("commands", 27, "client.forecast: ServingClient has no forecast"),
    ("paths", 30, "containers/nothere.Dockerfile: no such file"),
    ("paths", 30, "build/vertex.yaml: not a file cloudbuild.yaml writes"),
    ("config", 30, "platform.kubeflow.trainig: no such config field"),
    ("commands", 30, "python -m pipelines run: no option --epoch"),
    ("links", 31, "link to docs/nothere.md: no such file"),
    ("links", 31, "link to #no-such-section: no such heading in SELFTEST.md"),
    (
        "links",
        31,
        "link to docs/reference/configuration.md#no-such-heading: no such heading in docs/reference/configuration.md",
    ),
    ("shell", 36, "bash -n: syntax error: unexpected end of file"),
]


def test_checks_report_mistakes():
    """Each check fails on a page with mistakes, naming the file, the line and what is wrong."""
    doc = doc_checks.parse_doc("SELFTEST.md", WRONG)
    problems = {check: run(doc) for check, run in CHECKS.items()}
    missing = [
        (check, line, what)
        for check, line, what in EXPECTED
        if not any(p.startswith(f"SELFTEST.md:{line}: ") and what in p for p in problems[check])
    ]
    assert not missing, f"not reported: {missing}\nreported:\n" + "\n".join(p for ps in problems.values() for p in ps)


def test_the_gcloud_check_reports_mistakes():
    if doc_checks.gcloud_tree() is None:
        pytest.skip("gcloud is not installed")
    problems = doc_checks.gcloud(doc_checks.parse_doc("SELFTEST.md", WRONG))
    assert problems == [
        "SELFTEST.md:34: gcloud: no command 'servics'\n    gcloud servics enable dataflow.googleapis.com",
        "SELFTEST.md:35: gcloud storage buckets update: no flag --default-kms-key\n"
        "    gcloud storage buckets update gs://b --default-kms-key k",
    ]


def test_disagreements_name_each_claim():
    claims = [Claim("tfpipe.yaml:3", "tfpipe-templates"), Claim("cloudbuild.yaml:9", "tfpipe-pipelines")]
    problems = doc_checks.disagreements("template repository names", claims)
    assert problems[0] == "template repository names differ: tfpipe-pipelines vs tfpipe-templates"
    assert problems[1:] == ["  tfpipe-templates at tfpipe.yaml:3", "  tfpipe-pipelines at cloudbuild.yaml:9"]
    assert doc_checks.disagreements("names", claims[:1] * 2) == []


def test_shared_name_checks_report_drift(monkeypatch):
    """A name changed in one place only fails its check: cloudbuild's defaults, an image's name."""
    substitutions, steps = doc_checks.cloudbuild()
    drifted = {**substitutions, "_KFP_REPOSITORY": "tfpipe-elsewhere", "_SCHEDULE_CRON": "0 4 * * *"}
    images = {**doc_checks.image_names(), "serving_gpu_image": "serving-cuda"}
    monkeypatch.setattr(doc_checks, "cloudbuild", lambda: (drifted, steps))
    monkeypatch.setattr(doc_checks, "image_names", lambda: images)
    names, _ = doc_checks.registry_claims("kfp")
    assert "  tfpipe-elsewhere at cloudbuild.yaml:" in "\n".join(doc_checks.disagreements("names", names))
    assert any("_KFP_REPOSITORY defaults to 'tfpipe-elsewhere'" in p for p in doc_checks.substitution_table_problems())
    assert any("schedule --cron '0 4 * * *'" in p for p in doc_checks.schedule_problems())
    assert any("names the image serving-gpu, not serving-cuda" in p for p in doc_checks.image_problems())
