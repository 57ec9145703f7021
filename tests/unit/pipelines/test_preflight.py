"""The pre-flight checks of a Vertex run (pipelines/preflight.py): the bucket on the GCS emulator, the registry and
IAM requests at the HTTP boundary (every request asserted), each problem one line naming the role or resource."""

from __future__ import annotations

import json

import pytest

from pipelines.config import load_config
from pipelines.preflight import (
    MANIFEST_TYPES,
    Findings,
    check_bucket,
    check_key,
    check_service_account,
    key_agents,
    manifest_url,
    pin_images,
    preflight,
    required_services,
    resolve_images,
    template_images,
)
from tests.doubles.google_http import (
    ACCOUNT,
    AGENTS,
    BUCKET,
    KEY,
    KMS,
    PROJECT_POLICY,
    RESOURCE_MANAGER,
    RING,
    SA,
    SERVICE_USAGE,
    STORAGE,
    GoogleHttp,
    access_routes,
    bindings,
    digest_of,
    iam_routes,
    manifest_routes,
    project_routes,
)

KEY_POLICY = f"{KMS}/{KEY}:getIamPolicy?options.requestedPolicyVersion=3"
RING_POLICY = f"{KMS}/{RING}:getIamPolicy?options.requestedPolicyVersion=3"
BASE = [
    "platform.project=acme-ml-prod",
    "platform.location=europe-west4",
    f"platform.pipeline_root=gs://{BUCKET}/root",
    f"platform.service_account={SA}",
]


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
    http = GoogleHttp({**project_routes(), **manifest_routes(images)})
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


def platform(*sets: str):
    return load_config(sets=[*BASE, *sets], environ={}).platform


def services_url(*services: str) -> str:
    names = "&".join(f"names=projects%2Facme-ml-prod%2Fservices%2F{s}.googleapis.com" for s in services)
    return f"{SERVICE_USAGE}/projects/acme-ml-prod/services:batchGet?{names}"


def test_the_apis_checked_are_those_the_run_calls():
    """Dataflow's and Compute Engine's only when data prep may run on Dataflow, Cloud KMS's with a key of the
    project, Service Networking's with a network."""
    base = ["aiplatform", "artifactregistry", "cloudresourcemanager", "iam", "storage"]
    apis = lambda *names: sorted(f"{n}.googleapis.com" for n in [*base, *names])  # noqa: E731
    assert required_services(platform("platform.data_prep.runner=direct")) == apis()
    assert required_services(platform()) == apis("compute", "dataflow")
    assert required_services(
        platform("platform.data_prep.runner=direct", f"platform.encryption_spec_key_name={KEY}")
    ) == apis("cloudkms")
    other_project = KEY.replace("projects/acme-ml-prod/", "projects/acme-keys/")
    assert (
        required_services(
            platform("platform.data_prep.runner=direct", f"platform.encryption_spec_key_name={other_project}")
        )
        == apis()
    )
    assert required_services(
        platform("platform.data_prep.runner=direct", "platform.network=projects/123/global/networks/vpc")
    ) == apis("compute", "servicenetworking")


def test_a_first_dataflow_run_in_a_project_that_enables_and_grants_nothing_for_dataflow(gcs_emulator, tmp_path):
    """Data prep moves to Dataflow on a large source: its APIs and the runs' Dataflow roles are checked before the
    run, each missing one a line with the command that fixes it; every request asserted."""
    enabled = {
        f"{s}.googleapis.com" for s in ("aiplatform", "artifactregistry", "cloudresourcemanager", "iam", "storage")
    }
    policy = bindings({"roles/aiplatform.user": [f"serviceAccount:{SA}"]})
    http = GoogleHttp({**iam_routes(), **access_routes(enabled=enabled, project_policy=policy, bucket_policy={})})
    spec = {"deploymentSpec": {"executors": {}}, "root": {}}
    run = platform(f"platform.pipeline_root=gs://{BUCKET}/root")
    bind = f"gcloud projects add-iam-policy-binding acme-ml-prod --member=serviceAccount:{SA} --role="
    assert preflight(run, spec, http).problems == [
        "platform.project: the API compute.googleapis.com is not enabled in acme-ml-prod: gcloud services enable "
        "compute.googleapis.com --project acme-ml-prod",
        "platform.project: the API dataflow.googleapis.com is not enabled in acme-ml-prod: gcloud services enable "
        "dataflow.googleapis.com --project acme-ml-prod",
        f"platform.service_account: {SA} lacks roles/dataflow.worker in acme-ml-prod, which it needs as Dataflow's "
        f"workers run as it: {bind}roles/dataflow.worker",
        f"platform.service_account: {SA} lacks roles/dataflow.developer in acme-ml-prod, which it needs as "
        f"prepare-data starts Dataflow jobs as it: {bind}roles/dataflow.developer",
        f"platform.service_account: {SA} lacks roles/storage.objectAdmin on gs://{BUCKET}, which it needs as its steps "
        f"read and write the pipeline root: gcloud storage buckets add-iam-policy-binding gs://{BUCKET} "
        f"--member=serviceAccount:{SA} --role=roles/storage.objectAdmin",
    ]
    apis = ("aiplatform", "artifactregistry", "cloudresourcemanager", "compute", "dataflow", "iam", "storage")
    objects = "&".join(f"permissions=storage.objects.{v}" for v in ("create", "delete", "get", "list"))
    assert http.requests == [
        ("GET", services_url(*apis), None),
        (
            "POST",
            f"{RESOURCE_MANAGER}/projects/acme-ml-prod:testIamPermissions",
            {"permissions": ["aiplatform.pipelineJobs.create"]},
        ),
        ("GET", f"{STORAGE}/b/{BUCKET}/iam/testPermissions?{objects}", None),
        ("GET", ACCOUNT, None),
        ("POST", f"{ACCOUNT}:testIamPermissions", {"permissions": ["iam.serviceAccounts.actAs"]}),
        ("POST", f"{ACCOUNT}:getIamPolicy", {}),
        ("POST", PROJECT_POLICY, {}),
        ("GET", f"{STORAGE}/b/{BUCKET}/iam", None),
    ]


def test_on_the_direct_runner_nothing_of_dataflow_is_asked(gcs_emulator):
    policy = bindings({"roles/editor": [f"serviceAccount:{SA}"]})  # editor holds the runs' roles, the bucket's too
    enabled = {
        f"{s}.googleapis.com" for s in ("aiplatform", "artifactregistry", "cloudresourcemanager", "iam", "storage")
    }
    http = GoogleHttp({**iam_routes(), **access_routes(enabled=enabled, project_policy=policy, bucket_policy={})})
    spec = {"deploymentSpec": {"executors": {}}, "root": {}}
    assert preflight(platform("platform.data_prep.runner=direct"), spec, http).problems == []
    assert [(m, u) for m, u, _ in http.requests][:1] == [
        ("GET", services_url("aiplatform", "artifactregistry", "cloudresourcemanager", "iam", "storage"))
    ]
    assert [u for m, u, _ in http.requests][-1] == f"{STORAGE}/b/{BUCKET}/iam"  # the runs' bucket role: editor's


def test_a_caller_who_may_not_create_runs_nor_read_the_bucket(gcs_emulator):
    http = GoogleHttp(project_routes(caller={"storage.objects.create", "storage.objects.delete"}))
    spec = {"deploymentSpec": {"executors": {}}, "root": {}}
    yourself = "--member=user:$(gcloud config get-value account)"
    assert preflight(platform(), spec, http).problems == [
        "platform.project: you lack aiplatform.pipelineJobs.create in acme-ml-prod: gcloud projects "
        f"add-iam-policy-binding acme-ml-prod {yourself} --role=roles/aiplatform.user",
        f"platform.pipeline_root: you lack storage.objects.get, storage.objects.list on gs://{BUCKET}: gcloud storage "
        f"buckets add-iam-policy-binding gs://{BUCKET} {yourself} --role=roles/storage.objectAdmin",
    ]


def test_apis_unreadable_are_a_note_with_the_command(gcs_emulator):
    notes = []
    routes = project_routes()
    routes[("GET", f"{SERVICE_USAGE}/projects/acme-ml-prod/services:batchGet")] = (403, {})
    spec = {"deploymentSpec": {"executors": {}}, "root": {}}
    assert (
        preflight(platform("platform.data_prep.runner=direct"), spec, GoogleHttp(routes), notes.append).problems == []
    )
    assert notes == [
        "pre-flight: you may not read which APIs acme-ml-prod enables; make sure these are: gcloud services enable "
        "aiplatform.googleapis.com artifactregistry.googleapis.com cloudresourcemanager.googleapis.com "
        "iam.googleapis.com storage.googleapis.com --project acme-ml-prod"
    ]


def test_cmek_requested_and_granted_nowhere(gcs_emulator):
    """With a key: the bucket's default key, and each service agent that encrypts with it may use it; the project's
    number comes from Service Usage's answer."""
    http = GoogleHttp(project_routes(bucket_key="", key_policy={}))
    spec = {"deploymentSpec": {"executors": {}}, "root": {}}
    grant = (
        "gcloud kms keys add-iam-policy-binding "
        + KEY
        + " --member=serviceAccount:{} --role=roles/cloudkms.cryptoKeyEncrypterDecrypter"
    )
    vertex, storage, dataflow, compute = AGENTS
    assert preflight(platform(f"platform.encryption_spec_key_name={KEY}"), spec, http).problems == [
        f"platform.pipeline_root: gs://{BUCKET} is not encrypted with {KEY} (it has no default key): gcloud storage "
        f"buckets update gs://{BUCKET} --default-encryption-key={KEY}",
        f"platform.encryption_spec_key_name: the Vertex AI service agent {vertex} may not use the key: "
        + grant.format(vertex),
        f"platform.encryption_spec_key_name: the Cloud Storage service agent {storage} may not use the key: "
        + grant.format(storage),
        f"platform.encryption_spec_key_name: the Dataflow service agent {dataflow} may not use the key: "
        + grant.format(dataflow),
        f"platform.encryption_spec_key_name: the Compute Engine service agent {compute} may not use the key: "
        + grant.format(compute),
    ]
    assert http.requests[0] == (
        "GET",
        services_url(*"aiplatform artifactregistry cloudkms cloudresourcemanager compute dataflow iam storage".split()),
        None,
    )
    assert http.requests[-3:] == [
        ("GET", f"{STORAGE}/b/{BUCKET}?fields=encryption", None),
        ("GET", KEY_POLICY, None),
        ("GET", RING_POLICY, None),
    ]


def test_a_key_granted_on_its_key_ring_passes_and_without_dataflow_two_agents_need_it():
    ring = bindings({"roles/cloudkms.cryptoKeyEncrypterDecrypter": [f"serviceAccount:{a}" for a in AGENTS[:2]]})
    http = GoogleHttp(access_routes(key_policy={}, ring_policy=(200, ring)))
    assert key_agents("1234", dataflow=False) == [(AGENTS[0], "Vertex AI"), (AGENTS[1], "Cloud Storage")]
    assert check_key(KEY, key_agents("1234", dataflow=False), http) == []
    assert http.requests == [("GET", KEY_POLICY, None), ("GET", RING_POLICY, None)]


def test_a_key_policy_that_cannot_be_read_is_noted_and_a_missing_key_named():
    notes = []
    http = GoogleHttp(access_routes(key_policy=(403, {}), ring_policy=(403, {})))
    assert check_key(KEY, key_agents("1234", dataflow=False), http, notes.append) == []
    assert notes == [
        f"pre-flight: you may read neither {KEY}'s IAM policy nor its key ring's; make sure the service agents may "
        f"use it: gcloud kms keys add-iam-policy-binding {KEY} --member=serviceAccount:{AGENTS[0]} "
        f"--role=roles/cloudkms.cryptoKeyEncrypterDecrypter; gcloud kms keys add-iam-policy-binding {KEY} "
        f"--member=serviceAccount:{AGENTS[1]} --role=roles/cloudkms.cryptoKeyEncrypterDecrypter"
    ]
    http = GoogleHttp(access_routes(key_policy=(403, {}), ring_policy={}))
    assert check_key(KEY, key_agents("1234", dataflow=False), http) == [
        f"platform.encryption_spec_key_name: the {whose} service agent {agent} may not use the key (as far as the IAM "
        f"policies you may read show): gcloud kms keys add-iam-policy-binding {KEY} --member=serviceAccount:{agent} "
        "--role=roles/cloudkms.cryptoKeyEncrypterDecrypter"
        for agent, whose in key_agents("1234", dataflow=False)
    ]
    http = GoogleHttp(access_routes(key_policy=(404, {})))
    assert check_key(KEY, key_agents("1234", dataflow=True), http) == [
        f"platform.encryption_spec_key_name: the key {KEY} does not exist (gcloud kms keys create)"
    ]
    assert http.requests == [("GET", KEY_POLICY, None)]


@pytest.mark.parametrize(
    "method, url, body, status",
    [
        ("GET", services_url(*[f"s{i}" for i in range(31)]), None, 400),  # at most 30 names
        (
            "GET",
            f"{SERVICE_USAGE}/projects/acme-ml-prod/services:batchGet?names=projects%2Fother%2Fservices%2Fx",
            None,
            400,
        ),
        ("POST", services_url("iam"), {}, 404),
        ("POST", f"{RESOURCE_MANAGER}/projects/p:testIamPermissions", {"permissions": []}, 400),
        ("POST", f"{RESOURCE_MANAGER}/projects/p:testIamPermissions", {"permissions": ["aiplatform.*"]}, 400),
        ("POST", f"{RESOURCE_MANAGER}/projects/p:testIamPermissions", {"permission": ["a.b.c"]}, 400),
        ("GET", f"{RESOURCE_MANAGER}/projects/p:getIamPolicy", None, 404),
        ("GET", f"{STORAGE}/b/{BUCKET}/iam/testPermissions", None, 400),
        ("POST", f"{KMS}/{KEY}:getIamPolicy", {}, 404),
        ("GET", f"{KMS}/{KEY}:getIamPolicy?options.requestedPolicyVersion=2", None, 400),
        ("GET", f"{KMS}/projects/p/keyRings/r:getIamPolicy", None, 404),
    ],
)
def test_the_double_refuses_what_the_services_refuse(method, url, body, status):
    http = GoogleHttp(access_routes())
    answer = http.request(method, url, data=json.dumps(body) if body is not None else None)
    assert answer.status_code == status and answer.json()["error"]["code"] == status


def test_a_missing_bucket_is_one_line_and_unreadable_policies_are_notes(gcs_emulator):
    """The bucket's own checks wait for the bucket; what the caller may not read is a note with the command."""
    notes = []
    routes = project_routes(project_policy=(403, {}))
    spec = {"deploymentSpec": {"executors": {}}, "root": {}}
    run = platform("platform.pipeline_root=gs://no-such-bucket/root", f"platform.encryption_spec_key_name={KEY}")
    assert preflight(run, spec, GoogleHttp(routes), notes.append).problems == [
        "platform.pipeline_root: the bucket gs://no-such-bucket does not exist (gcloud storage buckets create)"
    ]
    bind = f"gcloud projects add-iam-policy-binding acme-ml-prod --member=serviceAccount:{SA} --role="
    assert notes == [
        f"pre-flight: you may not read acme-ml-prod's IAM policy; make sure {SA} holds: {bind}roles/aiplatform.user; "
        f"{bind}roles/dataflow.worker; {bind}roles/dataflow.developer"
    ]
    http = GoogleHttp(routes)
    preflight(run, spec, http, notes.append)
    assert [u.split("?")[0] for m, u, _ in http.requests] == [
        f"{SERVICE_USAGE}/projects/acme-ml-prod/services:batchGet",
        f"{RESOURCE_MANAGER}/projects/acme-ml-prod:testIamPermissions",
        ACCOUNT,
        f"{ACCOUNT}:testIamPermissions",
        f"{ACCOUNT}:getIamPolicy",
        PROJECT_POLICY,
        f"{KMS}/{KEY}:getIamPolicy",
        f"{KMS}/{RING}:getIamPolicy",
    ]
