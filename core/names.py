"""The rules of the names, identifiers and locations a user or a run parameter sets, each by where it goes (the
"Validation" section of docs/guides/configuration.md). Every rule returns the value or raises InvalidName, whose message is one line:
`PARAM: RULE (got VALUE)`, or for the Google Cloud rules `PARAM: VALUE RULE` (`'us central1' is not a Google Cloud
region like ...`). The config (pipelines/config/) checks them on load, the steps again at start (a compiled
pipeline's parameters can be changed in the KFP UI), the local server in its routes; no TensorFlow, no pydantic
here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

MODEL_NAME_MAX = 128
# One path segment of a model repository, a URL path segment of TF Serving's /v1/models/NAME (whose routes stop a
# name at '/' and ':'): ASCII letters, digits, '.', '_' and '-', never '.' or '..' nor a hidden folder
MODEL_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MODEL_NAME_MAX - 1}}}", re.ASCII)
# Kubernetes DNS-1123 label (namespaces, most object names) and subdomain (service accounts, claims)
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX = 63, 253
# KServe's InferenceService name (pkg/apis/serving/v1beta1/inference_service_validation.go, IsvcNameFmt). KServe
# names the predictor's Knative Service NAME-predictor (pkg/constants/constants.go, PredictorServiceName), whose
# revisions are NAME-predictor-00001, and the deploy step routes the `latest` tag, whose host label is
# latest-NAME-predictor (Knative's DefaultTagTemplate "{{.Tag}}-{{.Name}}"): a DNS label, so NAME stays within
# 63 - len("latest-") - len("-predictor") = 46
INFERENCE_SERVICE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
INFERENCE_SERVICE_MAX = DNS_LABEL_MAX - len("latest-") - len("-predictor")
# Vertex AI: display names (models, endpoints, schedules, jobs) hold up to 128 UTF-8 characters; Experiments (a
# metadata context id) [a-z0-9][a-z0-9-]{0,127}; Model Registry version aliases; Google Cloud labels
DISPLAY_NAME_MAX = 128
VERTEX_EXPERIMENT = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")
VERSION_ALIAS = re.compile(r"^[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]$")  # anchored: messages show the pattern
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
MAX_LABELS = 64  # per Vertex AI resource
# Google Cloud: regions, project ids (optionally domain-scoped, DOMAIN:ID), service account e-mails, VPC networks
# (named by project number), Cloud KMS keys and TensorBoard instances (their location and project as groups)
REGION = re.compile(r"^[a-z]+(-[a-z]+)+[0-9]+$")
PROJECT = re.compile(r"^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
SERVICE_ACCOUNT = re.compile(r"^[^@\s]+@[^@\s]+\.gserviceaccount\.com$")
NETWORK = re.compile(r"^projects/[0-9]+/global/networks/[^/\s]+$")
KMS_KEY = re.compile(r"^projects/[^/\s]+/locations/(?P<location>[^/\s]+)/keyRings/[^/\s]+/cryptoKeys/[^/\s]+$")
TENSORBOARD = re.compile(r"^projects/(?P<project>[^/\s]+)/locations/(?P<location>[^/\s]+)/tensorboards/[0-9]+$")
# Vertex AI persistent resources (an ID, or the full name with its location) and Compute Engine network attachments
# (a name, or the full name with its region)
PERSISTENT_RESOURCE_ID = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
PERSISTENT_RESOURCE = re.compile(r"projects/[^/\s]+/locations/(?P<location>[^/\s]+)/persistentResources/[^/\s]+")
NETWORK_ATTACHMENT = re.compile(
    r"(projects/[^/\s]+/regions/(?P<region>[^/\s]+)/networkAttachments/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
)
# BigQuery as Vertex AI batch prediction names it (BigQuerySource.input_uri, BigQueryDestination.output_uri, up to
# 2000 characters): a table bq://PROJECT.DATASET.TABLE to read; a project bq://PROJECT or a dataset
# bq://PROJECT.DATASET to write a new dataset or tables into
_BQ_PROJECT = r"(?P<project>([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9])"
BIGQUERY_TABLE = re.compile(rf"bq://{_BQ_PROJECT}\.(?P<dataset>\w{{1,1024}})\.(?P<table>[^.:\s/]{{1,1024}})", re.ASCII)
BIGQUERY_DESTINATION = re.compile(rf"bq://{_BQ_PROJECT}(\.(?P<dataset>\w{{1,1024}}))?", re.ASCII)
BIGQUERY_URI_MAX = 2000
URI = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_GCS = re.compile(r"gs://[a-z0-9][a-z0-9._-]*(/.*)?", re.DOTALL)  # a bucket name, lowercase
_SHOWN = 80  # characters of a refused value a message shows


class InvalidName(ValueError):
    """A name, identifier or location breaks the rule of a place it goes (`param: rule (got value)`). A rule whose
    message names the value first gives that message as `detail`."""

    def __init__(self, param: str, rule: str, value: object, detail: str = ""):
        self.param, self.rule, self.value, self._detail = param, rule, value, detail
        super().__init__(f"{param}: {self.detail}")

    @property
    def detail(self) -> str:
        """The message without the parameter: `rule (got value)`, or the rule's own."""
        if self._detail:
            return self._detail
        shown = repr(self.value)
        return f"{self.rule} (got {shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + '...'})"


def _refused(param: str, value: str, rule: str) -> InvalidName:
    """The refusal of a Google Cloud rule: `param: 'value' rule` (`'eu' is not a Google Cloud region like ...`)."""
    return InvalidName(param, rule, value, f"{value!r} {rule}")


def model_name(value: str, param: str = "model_name") -> str:
    """A model's name in a model repository (`<repository>/<name>/<version>`) and on the local server and TF
    Serving (`/v1/models/<name>`)."""
    if not MODEL_NAME.fullmatch(value):
        raise InvalidName(
            param,
            f"one path segment of 1 to {MODEL_NAME_MAX} ASCII letters, digits, '.', '_' and '-', starting with a "
            "letter or digit (no '/', no '..', no leading '.')",
            value,
        )
    return value


def inference_service(value: str, param: str = "inference_service") -> str:
    """A KServe InferenceService name, short enough for the Knative names KServe and the deploy step derive."""
    if not INFERENCE_SERVICE.fullmatch(value) or len(value) > INFERENCE_SERVICE_MAX:
        raise InvalidName(
            param,
            f"a KServe InferenceService name: 1 to {INFERENCE_SERVICE_MAX} lowercase letters, digits and '-', starting "
            f"with a letter, ending with a letter or digit (KServe's and Knative's latest-NAME-predictor must stay a "
            f"DNS label of at most {DNS_LABEL_MAX})",
            value,
        )
    return value


def dns_label(value: str, param: str) -> str:
    """A Kubernetes DNS-1123 label: a namespace, most objects' names."""
    if not DNS_LABEL.fullmatch(value) or len(value) > DNS_LABEL_MAX:
        raise InvalidName(
            param,
            f"a Kubernetes name (DNS-1123 label): 1 to {DNS_LABEL_MAX} lowercase letters, digits and '-', starting "
            "and ending with a letter or digit",
            value,
        )
    return value


def dns_subdomain(value: str, param: str) -> str:
    """A Kubernetes DNS-1123 subdomain: a service account's or a PersistentVolumeClaim's name."""
    if len(value) > DNS_SUBDOMAIN_MAX or not value or not all(DNS_LABEL.fullmatch(part) for part in value.split(".")):
        raise InvalidName(
            param,
            f"a Kubernetes name (DNS-1123 subdomain): 1 to {DNS_SUBDOMAIN_MAX} lowercase letters, digits, '-' and "
            "'.', each '.'-separated part starting and ending with a letter or digit",
            value,
        )
    return value


def display_name(value: str, param: str) -> str:
    """A Vertex AI display name (model, endpoint, schedule, job) or a Kubeflow Pipelines experiment or run name."""
    if not value or len(value) > DISPLAY_NAME_MAX or _CONTROL.search(value):
        raise InvalidName(
            param, f"a display name: 1 to {DISPLAY_NAME_MAX} characters (UTF-8), no control characters", value
        )
    return value


def vertex_experiment(value: str, param: str = "vertex_experiment") -> str:
    """A Vertex AI Experiment's name (the id of its metadata context)."""
    if not VERTEX_EXPERIMENT.fullmatch(value):
        raise InvalidName(
            param,
            "a Vertex AI Experiment name: 1 to 128 lowercase letters, digits and '-', starting with a letter or digit",
            value,
        )
    return value


def region(value: str, param: str = "location") -> str:
    """A Google Cloud region: where the Vertex AI runs, jobs, models and endpoints live."""
    if not REGION.match(value):
        raise _refused(param, value, "is not a Google Cloud region like us-central1 or europe-west4")
    return value


def project_id(value: str, param: str = "project") -> str:
    """A Google Cloud project id."""
    if not PROJECT.match(value):
        raise _refused(param, value, "is not a project id (6-30 lowercase letters, digits and hyphens)")
    return value


def service_account(value: str, param: str = "service_account") -> str:
    """A Google Cloud service account's e-mail."""
    if not SERVICE_ACCOUNT.match(value):
        raise _refused(param, value, "is not a service account e-mail like NAME@PROJECT.iam.gserviceaccount.com")
    return value


def network(value: str, param: str = "network") -> str:
    """A VPC network as Vertex AI peers with it: named by the project's number."""
    if not NETWORK.match(value):
        raise _refused(param, value, "must look like projects/PROJECT_NUMBER/global/networks/NAME")
    return value


def _in_region(value: str, param: str, pattern: re.Pattern, form: str, region: str) -> str:
    match = pattern.match(value)
    if not match:
        raise _refused(param, value, f"must look like {form}")
    if match["location"] != region:
        raise _refused(param, value, f"is in {match['location']}; Vertex AI needs it in the runs' location {region}")
    return value


def kms_key(value: str, param: str, region: str) -> str:
    """A Cloud KMS key (CMEK) of the Vertex AI runs in `region`: Vertex takes only a key of that region."""
    return _in_region(value, param, KMS_KEY, "projects/P/locations/L/keyRings/R/cryptoKeys/K", region)


def tensorboard(value: str, param: str, region: str) -> str:
    """A Vertex AI TensorBoard instance a training job in `region` writes to: one of that region."""
    return _in_region(value, param, TENSORBOARD, "projects/P/locations/L/tensorboards/ID", region)


def version_alias(value: str, param: str = "model_version_aliases") -> str:
    """A Vertex AI Model Registry version alias."""
    if not VERSION_ALIAS.fullmatch(value):
        raise _refused(param, value, f"must match {VERSION_ALIAS.pattern}")
    return value


def labels(value: Mapping[str, str], param: str = "labels") -> Mapping[str, str]:
    """Google Cloud labels of one resource: keys and values by Google Cloud's rules, no key starting with `goog`
    (reserved), at most MAX_LABELS."""
    for key, text in value.items():
        if not LABEL_KEY.fullmatch(key) or not LABEL_VALUE.fullmatch(text):
            shown = key if key.isprintable() else repr(key)  # the message stays one line
            detail = f"{shown}={text!r}: keys must match {LABEL_KEY.pattern} and values {LABEL_VALUE.pattern}"
            raise InvalidName(param, "Google Cloud labels", value, detail)
        if key.startswith("goog"):
            detail = f"{key}: label keys starting with goog are reserved by Google Cloud"
            raise InvalidName(param, "Google Cloud labels", value, detail)
    if len(value) > MAX_LABELS:
        raise InvalidName(param, "Google Cloud labels", value, f"at most {MAX_LABELS} labels, got {len(value)}")
    return value


def label_value(value: str, param: str) -> str:
    """One Google Cloud label value (a pipeline input written into a label)."""
    if not LABEL_VALUE.fullmatch(value):
        raise _refused(param, value, f"is not a Google Cloud label value (it must match {LABEL_VALUE.pattern})")
    return value


def uri(value: str, param: str) -> str:
    """A URI with a scheme: a pipeline root (gs://, minio://), an API endpoint or a registry (https://)."""
    if not URI.match(value):
        raise _refused(param, value, "is not a URI (scheme://...)")
    return value


def image_uri(value: str, param: str) -> str:
    """A container image's URI: not empty, no white space."""
    if not value or any(c.isspace() for c in value):
        raise _refused(param, value, "is not an image URI")
    return value


def location(value: str, param: str, *, local: bool = True, prefixes: tuple[str, ...] = ()) -> str:
    """A gs://BUCKET/PATH URI, a local path (`local`; file:// counts as one) or a value with one of `prefixes`
    (`builtin:`)."""
    accepted = " or ".join([*(["a local path"] if local else []), "a gs:// URI", *(f"{p}NAME" for p in prefixes)])
    if not value.strip() or _CONTROL.search(value):
        raise InvalidName(param, f"{accepted}, without control characters", value)
    if prefixes and value.startswith(prefixes):
        return value
    scheme, schemes = _SCHEME.match(value), ("gs", "file") if local else ("gs",)
    if scheme[1] not in schemes if scheme else not local:
        raise InvalidName(param, accepted, value)
    if value.startswith("gs://") and not _GCS.fullmatch(value):
        raise InvalidName(param, f"{accepted}; gs:// URIs as gs://BUCKET/PATH", value)
    return value


def locations(value: str, param: str) -> str:
    """Comma-separated locations (paths or globs), at least one."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise InvalidName(param, "comma-separated local paths or gs:// URIs (globs allowed), at least one", value)
    for item in items:
        location(item, param)
    return value


def bigquery_table(value: str, param: str) -> str:
    """A BigQuery table to read, bq://PROJECT.DATASET.TABLE."""
    if len(value) > BIGQUERY_URI_MAX or not BIGQUERY_TABLE.fullmatch(value):
        raise InvalidName(param, "a BigQuery table bq://PROJECT.DATASET.TABLE", value)
    return value


def output_location(value: str, param: str) -> str:
    """Where a Vertex batch prediction job writes: a gs:// prefix, or a BigQuery project bq://PROJECT or dataset
    bq://PROJECT.DATASET."""
    if value.startswith("bq://"):
        if len(value) > BIGQUERY_URI_MAX or not BIGQUERY_DESTINATION.fullmatch(value):
            raise InvalidName(
                param, "a gs:// URI, or a BigQuery project bq://PROJECT or dataset bq://PROJECT.DATASET", value
            )
        return value
    return location(value, param, local=False)


def instances(value: str, param: str) -> str:
    """Batch prediction's instances: one BigQuery table (`bigquery_table`), or `locations`."""
    return bigquery_table(value, param) if value.strip().startswith("bq://") else locations(value, param)


def url(value: str, param: str) -> str:
    """An http:// or https:// URL with a host."""
    if not re.fullmatch(r"https?://[^/\s?#]+(/\S*)?", value) or _CONTROL.search(value):
        raise InvalidName(param, "an http:// or https:// URL like http://HOST:PORT", value)
    return value


def inside(root: str, path: str, param: str) -> Path:
    """`path`, resolved (symbolic links followed), when it is `root` or lies under it: a second line of defence for
    the writes under a model repository, whatever the names did."""
    base, target = Path(root).resolve(), Path(path).resolve()
    if target != base and base not in target.parents:
        raise InvalidName(param, f"must stay inside {base}", str(target))
    return target


def job_display_name(name: str, purpose: str) -> str:
    """`<name>-<purpose>`, the name shortened to fit Vertex AI's display names (DISPLAY_NAME_MAX characters)."""
    suffix = f"-{purpose}"
    return name[: DISPLAY_NAME_MAX - len(suffix)] + suffix
