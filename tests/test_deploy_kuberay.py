"""deploy/kuberay/rayjob.yaml is a RayJob the KubeRay operator accepts and a sweep gatesweep runs:
validated against the real RayJob CRD of KubeRay v1.7.0 (deploy/kuberay/ray.io_rayjobs.yaml, the
release's file unchanged: its sha256 is checked here, and against the reference copy in
../shared/data when that is present) strictly (an unknown field anywhere the schema spells out its
fields is an error, as `kubectl apply --validate=strict` makes it), its entrypoint parsed by
gatesweep's own argument parser, every credential taken from the Secret by key (no value in the
manifest), and every Secret and ConfigMap key documented."""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml

from orchestrator.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
KUBERAY = ROOT / "deploy" / "kuberay"
CRD = KUBERAY / "ray.io_rayjobs.yaml"
CRD_SHA256 = "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5"
"""ray-project/kuberay v1.7.0, ray-operator/config/crd/bases/ray.io_rayjobs.yaml (Apache-2.0)."""
REFERENCE = ROOT.parent / "shared" / "data" / "kuberay-v1.7.0" / "ray.io_rayjobs.yaml"


def test_the_crd_is_kuberay_v1_7_0s_own_file_unchanged():
    data = CRD.read_bytes()
    assert hashlib.sha256(data).hexdigest() == CRD_SHA256
    if REFERENCE.is_file():  # the reference copy the project was given, where it is at hand
        assert REFERENCE.read_bytes() == data
    crd = yaml.safe_load(data)
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["group"] == "ray.io" and crd["metadata"]["name"] == "rayjobs.ray.io"
    assert not (KUBERAY / "rayjob-crd-schema.yaml").exists(), "the hand-written excerpt is gone"


@cache
def crd_schema() -> dict:
    crd = yaml.safe_load(CRD.read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert v1["served"] and v1["storage"]
    return strict(v1["schema"]["openAPIV3Schema"])


def strict(node):
    """Every object schema that lists its properties (and is not marked as cut) refuses others."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def manifest() -> dict:
    return yaml.safe_load((KUBERAY / "rayjob.yaml").read_text())


def validate(doc: dict) -> None:
    jsonschema.Draft202012Validator(crd_schema(), format_checker=jsonschema.FormatChecker()).validate(doc)
    for field in _int32_fields(doc):
        assert -(2**31) <= field < 2**31


def _int32_fields(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from _int32_fields(v)
    elif isinstance(node, list):
        for v in node:
            yield from _int32_fields(v)
    elif isinstance(node, int) and not isinstance(node, bool):
        yield node


def test_the_rayjob_validates_against_the_crd_schema():
    doc = manifest()
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayJob"
    validate(doc)
    spec = doc["spec"]["rayClusterSpec"]
    (gpu,) = spec["workerGroupSpecs"]
    # what older KubeRay releases also required: set, so any v1 operator takes it
    assert {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"} <= set(gpu)
    assert "rayStartParams" in spec["headGroupSpec"] and gpu["minReplicas"] <= gpu["replicas"] <= gpu["maxReplicas"]
    assert int(gpu["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert doc["spec"]["submissionMode"] in ("K8sJobMode", "HTTPMode", "InteractiveMode")
    assert yaml.safe_load(doc["spec"]["runtimeEnvYAML"])["env_vars"]["RAY_USAGE_STATS_ENABLED"] == "0"


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d["spec"].__setitem__("entrypiont", d["spec"].pop("entrypoint")),  # a typo
        lambda d: d["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].pop("groupName"),
        lambda d: d["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].__setitem__("replicas", "2"),
        lambda d: d["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"].__setitem__("num-cpus", 0),
        lambda d: d["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"][
            "secretKeyRef"
        ].pop("key"),
        lambda d: d["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"][
            "limits"
        ].__setitem__("memory", "lots"),
        lambda d: d["spec"].__setitem__("shutdownAfterJobFinishes", "yes"),
    ],
    ids=["typo", "no-group-name", "replicas-string", "start-param-int", "secret-ref-no-key", "bad-quantity", "bool-string"],
)
def test_the_schema_refuses_broken_manifests(damage):
    doc = copy.deepcopy(manifest())
    damage(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def entrypoint_commands() -> list[list[str]]:
    """The entrypoint's shell commands (split on &&), each as argv."""
    return [shlex.split(part) for part in manifest()["spec"]["entrypoint"].split("&&")]


def test_the_entrypoint_is_gatesweep_commands_whose_flags_exist():
    commands = entrypoint_commands()
    gatesweep = [c for c in commands if c[0] == "gatesweep"]
    assert [c[:2] for c in gatesweep] == [["gatesweep", "data"], ["gatesweep", "run"]]
    assert all(c[0] in ("gatesweep", "cd") for c in commands)
    parser = build_parser()
    parsed = [parser.parse_args(c[1:]) for c in gatesweep]  # SystemExit(2) on a flag that does not exist
    prepare, run = parsed
    assert prepare.action == "prepare" and prepare.source == run.file
    assert (ROOT / run.file).is_file()  # a shipped sweep (the image's working folder is the repository)
    assert run.address == "auto" and run.tracking_uri == "$MLFLOW_TRACKING_URI" and run.runs_dir.startswith("s3://")
    from orchestrator.cli.sweepfile import load_and_expand

    load_and_expand(str(ROOT / run.file))  # the sweep itself validates


def _containers(doc: dict):
    spec = doc["spec"]["rayClusterSpec"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        yield from group["template"]["spec"]["containers"]


SECRETISH = re.compile(r"SECRET|PASSWORD|TOKEN|ACCESS_KEY|CREDENTIAL", re.I)


def test_credentials_come_from_the_secret_and_every_key_is_documented():
    doc = manifest()
    text = (KUBERAY / "rayjob.yaml").read_text()
    docs = (ROOT / "docs" / "cluster.md").read_text()
    section = docs[docs.index("## Kubernetes (KubeRay)") :]
    secret_keys, config_refs = set(), set()
    for c in _containers(doc):
        names = [e["name"] for e in c["env"]]
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(names)
        for e in c["env"]:
            if SECRETISH.search(e["name"]):
                assert "value" not in e, e["name"]  # never a value in the manifest
                ref = e["valueFrom"]["secretKeyRef"]
                secret_keys.add((ref["name"], ref["key"]))
        for src in c.get("envFrom", []):
            config_refs.add(src["configMapRef"]["name"])
            assert "secretRef" not in src  # a Secret is read key by key, so each key is named here
    assert secret_keys and config_refs == {"gatesweep-config"}
    for name, key in secret_keys:
        assert name in section and key in section, (name, key)
    config = [
        line.split("=", 1) for line in (KUBERAY / "gatesweep-config.env").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert {"MLFLOW_TRACKING_URI", "GATESWEEP_CACHE", "AWS_ENDPOINT_URL"} <= {k for k, _ in config}
    for key, value in config:
        assert key in section, key
        assert not SECRETISH.search(key) and "@" not in value  # no credentials in the ConfigMap, nor in a URI
    assert "gatesweep-config" in section and "gatesweep-credentials" in section
    assert not re.search(r"AKIA[0-9A-Z]{16}", text)
