"""The pre-flight checks of a Vertex run (pipelines/preflight.py): the bucket on the GCS emulator, the registry and
IAM requests at the HTTP boundary (every request asserted), each problem one line naming the role or resource."""

from __future__ import annotations

import pytest

from pipelines.preflight import (
    MANIFEST_TYPES,
    Findings,
    check_bucket,
    check_service_account,
    manifest_url,
    pin_images,
    preflight,
    resolve_images,
    template_images,
)
from tests.doubles.google_http import ACCOUNT, PROJECT_POLICY, SA, GoogleHttp, digest_of, iam_routes, manifest_routes


@pytest.mark.parametrize(
    "image, url",
    [
        (
            "europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/trainer:abc1234",
            "https://europe-west4-docker.pkg.dev/v2/acme-ml-prod/tfpipe/trainer/manifests/abc1234",
        ),
        (
            "us-docker.pkg.dev/p/r/serving@sha256:0f1e",
            "https://us-docker.pkg.dev/v2/p/r/serving/manifests/sha256:0f1e",
        ),
        ("gcr.io/p/components", "https://gcr.io/v2/p/components/manifests/latest"),
        ("localhost:5000/tfpipe/trainer:1", "https://localhost:5000/v2/tfpipe/trainer/manifests/1"),
    ],
)
def test_manifest_urls(image, url):
    assert manifest_url(image) == url


def test_images_missing_or_unreadable_are_named():
    present = "europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/components:abc"
    missing = "europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/trainer:abc"
    private = "us-docker.pkg.dev/other/repo/serving:1"
    http = GoogleHttp(
        {**manifest_routes([present]), **manifest_routes([missing], 404), **manifest_routes([private], 403)}
    )
    found = resolve_images([present, missing, private], http)
    assert found.problems == [
        f"image {missing} is not in its registry: build and push it (docs/guides/ci-cd.md)",
        f"image {private}: you may not read it (HTTP 403): grant roles/artifactregistry.reader on its repository "
        "to yourself and to the runs' service account; or pin it by hand: gcloud artifacts docker images describe "
        f"{private} --format='value(image_summary.fully_qualified_digest)'",
    ]
    assert found.pinned == {present: f"europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/components@{digest_of(present)}"}
    assert [(m, u) for m, u, _ in http.requests] == [("HEAD", manifest_url(i)) for i in (present, missing, private)]


def test_tagged_images_are_pinned_by_the_digest_of_one_manifest_request_each():
    tagged = "europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/trainer:latest"
    untagged = "localhost:5000/tfpipe/components"  # :latest implied; the port is not a tag
    pinned = f"us-docker.pkg.dev/p/r/serving@{digest_of('x')}"
    http = GoogleHttp(manifest_routes([tagged, untagged, pinned]))
    found = resolve_images([tagged, untagged, pinned], http)
    assert found.problems == []
    assert found.pinned == {
        tagged: f"europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/trainer@{digest_of(tagged)}",
        untagged: f"localhost:5000/tfpipe/components@{digest_of(untagged)}",
    }
    assert http.requests == [
        ("HEAD", "https://europe-west4-docker.pkg.dev/v2/acme-ml-prod/tfpipe/trainer/manifests/latest", None),
        ("HEAD", "https://localhost:5000/v2/tfpipe/components/manifests/latest", None),
        ("HEAD", f"https://us-docker.pkg.dev/v2/p/r/serving/manifests/{digest_of('x')}", None),
    ]
    # an image index's digest (a multi-platform image), as `docker pull` resolves it, is what the registry answers
    assert http.sent_headers == [{"Accept": MANIFEST_TYPES}] * 3
    assert MANIFEST_TYPES.startswith("application/vnd.oci.image.index.v1+json, ")


def test_a_tagged_image_its_registry_gives_no_digest_for_is_refused_with_the_command_that_pins_it():
    image = "europe-west4-docker.pkg.dev/acme-ml-prod/tfpipe/trainer:latest"
    by_hand = f"gcloud artifacts docker images describe {image} --format='value(image_summary.fully_qualified_digest)'"
    found = resolve_images(
        [image], GoogleHttp(manifest_routes([image], 200) | {("HEAD", manifest_url(image)): (200, {})})
    )
    assert found == Findings(
        {}, [f"image {image}: its registry answered no digest to pin it by; or pin it by hand: {by_hand}"]
    )
    found = resolve_images([image], GoogleHttp(manifest_routes([image], 502)))
    assert found.problems == [f"image {image}: its registry answered HTTP 502; or pin it by hand: {by_hand}"]
    assert found.pinned == {}


def test_pinning_replaces_every_tagged_image_of_the_compiled_template_and_nothing_else(tmp_path):
    """The steps' images, the trainer image the worker pools get, the Dataflow workers' image (a value in a
    parameter's dict) and the uploaded model's serving image: each cache key that holds an image."""
    import json

    from pipelines.config import load_config
    from pipelines.delivery import delivery_for
    from pipelines.templates import load_template

    images = ["r.example/p/components:1", "r.example/p/serving:1", "r.example/p/trainer:1"]
    sets = [f"platform.{n}_image={i}" for n, i in zip(("components", "serving", "trainer"), images)]
    config = load_config(sets=sets, environ={})
    spec = load_template(delivery_for("vertex").compile("training", config, tmp_path / "t.yaml"))
    text = json.dumps(spec)
    assert '"sdk_container_image": "r.example/p/components:1"' in text
    pinned = {i: f"{i.rsplit(':', 1)[0]}@{digest_of(i)}" for i in images}
    spec_pinned = pin_images(spec, pinned)
    for image, reference in pinned.items():
        text = text.replace(f'"{image}"', f'"{reference}"')
    assert spec_pinned == json.loads(text)
    assert template_images(spec_pinned) == sorted(pinned.values())
    assert template_images(spec) == images  # the template given is left as it is


def test_a_service_account_that_can_act_as_itself_passes():
    http = GoogleHttp(iam_routes())
    assert check_service_account(SA, "acme-ml-prod", http) == []
    assert http.requests == [
        ("GET", ACCOUNT, None),
        ("POST", f"{ACCOUNT}:testIamPermissions", {"permissions": ["iam.serviceAccounts.actAs"]}),
        ("POST", f"{ACCOUNT}:getIamPolicy", {}),
        ("POST", PROJECT_POLICY, {}),
    ]


def test_the_act_as_grant_may_come_from_the_project():
    project = (200, {"bindings": [{"role": "roles/editor", "members": [f"serviceAccount:{SA}", "user:a@b.c"]}]})
    assert (
        check_service_account(SA, "acme-ml-prod", GoogleHttp(iam_routes(account_policy={}, project_policy=project)))
        == []
    )


def test_an_account_that_cannot_act_as_itself_gets_the_command_that_grants_it():
    http = GoogleHttp(
        iam_routes(
            account_policy={"bindings": [{"role": "roles/iam.serviceAccountUser", "members": ["user:me@x.com"]}]}
        )
    )
    assert check_service_account(SA, "acme-ml-prod", http) == [
        f"platform.service_account: {SA} may not act as itself, which its steps need to start the jobs and the "
        f"deployment: gcloud iam service-accounts add-iam-policy-binding {SA} --member=serviceAccount:{SA} "
        "--role=roles/iam.serviceAccountUser"
    ]


def test_a_caller_without_act_as_and_policies_it_may_not_read():
    notes = []
    http = GoogleHttp(iam_routes(act_as=False, account_policy=(403, {}), project_policy=(403, {})))
    assert check_service_account(SA, "acme-ml-prod", http, notes.append) == [
        f"platform.service_account: you may not run pipelines as {SA}: grant yourself roles/iam.serviceAccountUser "
        "on it",
    ]
    # unknown is not a failure (a CI account often may not read IAM policies): a note with the command
    assert notes == [
        f"pre-flight: you may read neither {SA}'s IAM policy nor the project's; make sure it may act as itself: "
        f"gcloud iam service-accounts add-iam-policy-binding {SA} --member=serviceAccount:{SA} "
        "--role=roles/iam.serviceAccountUser"
    ]
    http = GoogleHttp(iam_routes(account_policy=(403, {}), project_policy=(200, {"bindings": []})))
    assert check_service_account(SA, "acme-ml-prod", http, notes.append) == [
        f"platform.service_account: {SA} may not act as itself (as far as the IAM policies you may read show), which "
        f"its steps need to start the jobs and the deployment: gcloud iam service-accounts add-iam-policy-binding "
        f"{SA} --member=serviceAccount:{SA} --role=roles/iam.serviceAccountUser",
    ]


def test_a_missing_service_account():
    http = GoogleHttp({})
    assert check_service_account(SA, "acme-ml-prod", http) == [
        f"platform.service_account: {SA} does not exist (gcloud iam service-accounts create)"
    ]
    assert http.requests == [("GET", ACCOUNT, None)]  # nothing else asked of an account that is not there


def test_the_bucket_takes_a_write_and_keeps_nothing(gcs_emulator):
    assert check_bucket("gs://test-bucket/pipeline-root") == []
    assert list(gcs_emulator.list_blobs(prefix="pipeline-root/")) == []
    assert check_bucket("gs://no-such-bucket/root") == [
        "platform.pipeline_root: the bucket gs://no-such-bucket does not exist (gcloud storage buckets create)"
    ]


def test_the_bucket_check_names_the_runs_project(monkeypatch):
    """Credentials from `gcloud auth application-default login` may name no project: the check's Cloud Storage
    client takes the run's, where storage.Client() alone would fail to start."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.storage import Blob

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), None))
    written, deleted = [], []
    monkeypatch.setattr(Blob, "upload_from_string", lambda blob, data, **kw: written.append(blob))
    monkeypatch.setattr(Blob, "delete", lambda blob, **kw: deleted.append(blob))
    with pytest.raises(OSError, match="Project was not passed"):
        check_bucket("gs://acme-tfpipe/root")
    assert check_bucket("gs://acme-tfpipe/root", "acme-ml-prod") == []
    [blob] = written
    assert (blob.client.project, blob.bucket.name) == ("acme-ml-prod", "acme-tfpipe")
    assert blob.name.startswith("root/.tfpipe-preflight-") and deleted == [blob]


def test_preflight_checks_every_image_of_the_compiled_template(gcs_emulator, tmp_path):
    from pipelines.config import load_config
    from pipelines.delivery import delivery_for
    from pipelines.templates import load_template

    sets = [
        "platform.components_image=r.example/p/components:1",
        "platform.trainer_image=r.example/p/trainer:1",
        f"platform.serving_image=r.example/p/serving@{digest_of('serving')}",
        "platform.pipeline_root=gs://test-bucket/root",
        "platform.project=acme-ml-prod",
        f"platform.service_account={SA}",
    ]
    config = load_config(sets=sets, environ={})
    spec = load_template(delivery_for("vertex").compile("training", config, tmp_path / "t.yaml"))
    images = ["r.example/p/components:1", f"r.example/p/serving@{digest_of('serving')}", "r.example/p/trainer:1"]
    http = GoogleHttp({**iam_routes(), **manifest_routes(images)})
    found = preflight(config.platform, spec, http)
    assert found.problems == []
    assert found.pinned == {
        "r.example/p/components:1": f"r.example/p/components@{digest_of('r.example/p/components:1')}",
        "r.example/p/trainer:1": f"r.example/p/trainer@{digest_of('r.example/p/trainer:1')}",
    }
    assert [u for m, u, _ in http.requests if m == "HEAD"] == [manifest_url(i) for i in images]

    # the checks skipped: only the images by tag are asked for, to pin them (no bucket, no IAM)
    http = GoogleHttp(manifest_routes(images))
    assert preflight(config.platform, spec, http, checks=False) == found
    assert http.requests == [("HEAD", manifest_url(images[0]), None), ("HEAD", manifest_url(images[2]), None)]
