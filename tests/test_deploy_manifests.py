"""The Kubernetes deployment (deploy/kubernetes, docs/cluster.md): every manifest passes its strict schema
and the cross-references between documents (tests/k8s_manifests.py), it mirrors docker-compose.yml where
the two must agree, and a broken copy fails with a message naming the file, the document and the path.
No cluster, no network: a few hundred milliseconds."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import k8s_manifests
from tests.test_foundation import COMPOSE, check_command, command_lines

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"


def documents(root: Path = MANIFESTS) -> list[k8s_manifests.Doc]:
    docs, problems = k8s_manifests.load(root)
    assert not problems, problems
    return docs


def one(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d.body for d in documents() if d.kind == kind and d.name == name]
    return doc


def main_container(kind: str, name: str) -> dict[str, Any]:
    return one(kind, name)["spec"]["template"]["spec"]["containers"][0]


def test_every_manifest_passes_its_schema_and_the_cross_references() -> None:
    assert k8s_manifests.problems(MANIFESTS) == []


def test_the_deployment_has_every_part_of_the_stack() -> None:
    kinds = {(d.kind, d.name) for d in documents()}
    assert {
        ("Namespace", "dapo"),
        ("Secret", "dapo-secrets"),
        ("PersistentVolumeClaim", "dapo-var"),
        ("StatefulSet", "postgres"),
        ("Service", "postgres"),
        ("StatefulSet", "redis"),
        ("Service", "redis"),
        ("Deployment", "web"),
        ("Service", "web"),
        ("Deployment", "worker"),
        ("Deployment", "worker-short"),
        ("RayCluster", "dapo-ray"),
    } <= kinds
    assert {kind for kind, _ in kinds} <= {kind for _, kind in k8s_manifests.SCHEMAS}


def test_every_document_lives_in_the_namespace_kustomize_applies() -> None:
    (kustomization,) = [d.body for d in documents() if d.kind == "Kustomization"]
    for doc in documents():
        if doc.kind not in ("Kustomization", "Namespace"):
            assert doc.body["metadata"]["namespace"] == kustomization["namespace"], doc.where(MANIFESTS)


def test_the_var_dir_is_one_read_write_many_volume_mounted_by_every_platform_pod() -> None:
    """Checkpoints written on a GPU Ray worker are read by the web and the driver: one shared volume."""
    assert one("PersistentVolumeClaim", "dapo-var")["spec"]["accessModes"] == ["ReadWriteMany"]
    var_dir = one("ConfigMap", "dapo-django")["data"]["DAPO_VAR_DIR"]
    platform_pods = [
        p
        for p in k8s_manifests.pods(documents())
        if p.spec["containers"][0]["image"].startswith("dapo-platform:")
    ]
    assert len(platform_pods) == 5  # web, worker, worker-short, Ray head, GPU workers
    for pod in platform_pods:
        claim = {
            v["name"]
            for v in pod.spec["volumes"]
            if v.get("persistentVolumeClaim", {}).get("claimName") == "dapo-var"
        }
        mounts = {m["mountPath"] for m in pod.spec["containers"][0]["volumeMounts"] if m["name"] in claim}
        assert mounts == {var_dir}, pod.doc.where(MANIFESTS, *pod.path)


def test_the_web_runs_what_compose_runs_and_its_probes_pass_allowed_hosts() -> None:
    web = main_container("Deployment", "web")
    assert command_lines(web) == command_lines(COMPOSE["services"]["web"])
    allowed = one("ConfigMap", "dapo-django")["data"]["DJANGO_ALLOWED_HOSTS"].split(",")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = web[probe]["httpGet"]
        assert get["path"] == "/accounts/login/"
        # kubelet sends the pod's IP as Host, which Django refuses with a 400 unless the probe names a host
        (host,) = [h["value"] for h in get["httpHeaders"] if h["name"] == "Host"]
        assert host in allowed
    assert one("Deployment", "web")["spec"]["strategy"]["type"] == "Recreate"  # one migrating pod at a time


@pytest.mark.parametrize(("name", "queue"), [("worker", "training"), ("worker-short", "short")])
def test_each_celery_worker_joins_ray_without_cpus_then_runs_its_queue(name: str, queue: str) -> None:
    container = main_container("Deployment", name)
    ray_start, celery = command_lines(container)
    assert ray_start[:2] == ["ray", "start"]
    assert ray_start[ray_start.index("--num-cpus") + 1] == "0"
    assert celery[:5] == ["exec", "celery", "-A", "worker.app", "worker"]
    assert celery[celery.index("-Q") + 1] == queue
    check_command(celery)
    assert "nvidia.com/gpu" not in container["resources"]["limits"]  # a run's driver holds no GPU


def test_the_training_worker_takes_its_concurrency_from_the_environment() -> None:
    container = main_container("Deployment", "worker")
    _, celery = command_lines(container)
    assert celery[celery.index("--concurrency") + 1] == "${DAPO_TRAINING_CONCURRENCY:-2}"
    assert {"configMapRef": {"name": "dapo-django"}} in container["envFrom"]


def test_the_web_scheduler_fills_exactly_the_training_workers_slots() -> None:
    """The web's scheduler sends at most DAPO_SCHEDULER_SLOTS runs at once: every slot of every worker
    pod, no more (a run sent past them would wait unseen in Celery's queue)."""
    settings = one("ConfigMap", "dapo-django")["data"]
    replicas = one("Deployment", "worker")["spec"]["replicas"]
    assert int(settings["DAPO_SCHEDULER_SLOTS"]) == replicas * int(settings["DAPO_TRAINING_CONCURRENCY"])
    for name in ("web", "worker"):
        assert {"configMapRef": {"name": "dapo-django"}} in main_container("Deployment", name)["envFrom"]


def test_the_ray_cluster_is_a_cpu_head_on_6380_with_token_auth_and_a_gpu_worker_group() -> None:
    spec = one("RayCluster", "dapo-ray")["spec"]
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["port"] == "6380"
    assert head["rayStartParams"]["include-dashboard"] == "false"
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert head["template"]["spec"]["containers"][0]["image"] == "dapo-platform:latest"
    (gpu,) = spec["workerGroupSpecs"]
    assert gpu["minReplicas"] <= gpu["replicas"] <= gpu["maxReplicas"]
    worker = gpu["template"]["spec"]["containers"][0]
    assert worker["image"] == "dapo-platform:gpu"
    assert int(worker["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    (shm,) = [v for v in gpu["template"]["spec"]["volumes"] if v["name"] == "shm"]
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "shm", "mountPath": "/dev/shm"} in worker["volumeMounts"]
    for group in (head, gpu):
        env = {v["name"]: v for v in group["template"]["spec"]["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "dapo-secrets",
            "key": "ray-auth-token",
        }
    assert one("ConfigMap", "dapo-ray")["data"]["RAY_AUTH_MODE"] == "token"


def test_the_secret_template_holds_the_keys_compose_asks_for_and_no_value() -> None:
    """compose's .env holds DJANGO_SECRET_KEY, POSTGRES_PASSWORD and RAY_AUTH_TOKEN; so does the Secret."""
    secret = one("Secret", "dapo-secrets")
    assert secret["stringData"] == {"django-secret-key": "", "postgres-password": "", "ray-auth-token": ""}
    for pod in k8s_manifests.pods(documents()):
        for _, container in k8s_manifests.containers(pod):
            for var in container.get("env", []):
                assert not (var.get("valueFrom") or {}).get("secretKeyRef", {}).get("optional"), var


def test_every_image_of_ours_is_one_the_dockerfile_builds() -> None:
    images = {c["image"] for p in k8s_manifests.pods(documents()) for _, c in k8s_manifests.containers(p)}
    assert {i for i in images if i.startswith("dapo-platform")} == {
        "dapo-platform:latest",
        "dapo-platform:gpu",
    }
    assert images - {"dapo-platform:latest", "dapo-platform:gpu"} == {
        COMPOSE["services"]["postgres"]["image"],
        COMPOSE["services"]["redis"]["image"],
    }


# ---- a broken copy fails, naming the file, the document and the path --------------------------------------


def broken_copy(tmp_path: Path, file: str, index: int, change: Callable[[dict[str, Any]], None]) -> Path:
    """deploy/kubernetes copied, with document `index` of `file` changed in place."""
    root = tmp_path / "kubernetes"
    shutil.copytree(MANIFESTS, root)
    path = root / file
    bodies = list(yaml.safe_load_all(path.read_text()))
    change(bodies[index])
    path.write_text(yaml.safe_dump_all(bodies, sort_keys=False))
    return root


def web_container(body: dict[str, Any]) -> dict[str, Any]:
    return body["spec"]["template"]["spec"]["containers"][0]


def rename_key(mapping: dict[str, Any], old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


def set_head_port(body: dict[str, Any]) -> None:
    body["spec"]["headGroupSpec"]["rayStartParams"]["port"] = "6379"
    body["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = 6379


BROKEN = {
    "typo'd field": (
        "web.yaml",
        1,
        lambda b: rename_key(web_container(b), "imagePullPolicy", "imagePullPolcy"),
        "web.yaml: document 1 (Deployment web): spec.template.spec.containers[0]",
        "'imagePullPolcy' was unexpected",
    ),
    "misplaced field": (
        "web.yaml",
        1,
        lambda b: b["spec"].update(containers=b["spec"]["template"]["spec"]["containers"]),
        "web.yaml: document 1 (Deployment web): spec",
        "'containers' was unexpected",
    ),
    "wrong type": (
        "redis.yaml",
        1,
        lambda b: b["spec"].update(replicas="1"),
        "redis.yaml: document 1 (StatefulSet redis): spec.replicas",
        "'1' is not of type 'integer'",
    ),
    "rayStartParams value not a string": (
        "raycluster.yaml",
        0,
        lambda b: b["spec"]["headGroupSpec"]["rayStartParams"].update(port=6380),
        "raycluster.yaml: document 0 (RayCluster dapo-ray): spec.headGroupSpec.rayStartParams.port",
        "6380 is not of type 'string'",
    ),
    "ConfigMap value not a string": (
        "config.yaml",
        0,
        lambda b: b["data"].update(DJANGO_DEBUG=False),
        "config.yaml: document 0 (ConfigMap dapo-django): data.DJANGO_DEBUG",
        "False is not of type 'string'",
    ),
    "container without resources": (
        "workers.yaml",
        0,
        lambda b: web_container(b).pop("resources"),
        "workers.yaml: document 0 (Deployment worker): spec.template.spec.containers[0]",
        "'resources' is a required property",
    ),
    "dangling selector": (
        "postgres.yaml",
        0,
        lambda b: b["spec"]["selector"].update({"app.kubernetes.io/name": "postgress"}),
        "postgres.yaml: document 0 (Service postgres): spec.selector",
        "matches no pod template's labels",
    ),
    "missing secret key": (
        "web.yaml",
        1,
        lambda b: web_container(b)["env"][0]["valueFrom"]["secretKeyRef"].update(key="django-secret"),
        "web.yaml: document 1 (Deployment web): spec.template.spec.containers[0].env[0].valueFrom",
        "has no key 'django-secret'",
    ),
    "mount of a volume the pod lacks": (
        "web.yaml",
        1,
        lambda b: web_container(b)["volumeMounts"][0].update(name="var"),
        "web.yaml: document 1 (Deployment web): spec.template.spec.containers[0].volumeMounts[0].name",
        "no volume 'var' in this pod",
    ),
    "probe on an undeclared port": (
        "web.yaml",
        1,
        lambda b: web_container(b)["livenessProbe"]["httpGet"].update(port="web"),
        "web.yaml: document 1 (Deployment web): spec.template.spec.containers[0].livenessProbe.httpGet.port",
        "port 'web' is not declared",
    ),
    "env reference defined later": (
        "web.yaml",
        1,
        lambda b: web_container(b)["env"].reverse(),
        "web.yaml: document 1 (Deployment web): spec.template.spec.containers[0].env[0].value",
        "$(POSTGRES_PASSWORD) is not defined before DATABASE_URL",
    ),
    "Ray head on Redis's port": (
        "raycluster.yaml",
        0,
        set_head_port,
        "raycluster.yaml: document 0 (RayCluster dapo-ray): spec.headGroupSpec.rayStartParams.port",
        "must listen on 6380",
    ),
    "workers pointed at another port": (
        "config.yaml",
        1,
        lambda b: b["data"].update(RAY_ADDRESS="dapo-ray-head-svc:6379"),
        "workers.yaml: document 0 (Deployment worker): spec.template.spec.initContainers[0].env",
        "RAY_ADDRESS is 'dapo-ray-head-svc:6379'",
    ),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_a_broken_manifest_fails_naming_file_document_and_path(tmp_path: Path, case: str) -> None:
    file, index, change, where, what = BROKEN[case]
    found = k8s_manifests.problems(broken_copy(tmp_path, file, index, change))
    assert any(line.startswith(where) and what in line for line in found), "\n".join(found)


def test_a_filled_secret_template_or_one_listed_for_kustomize_fails(tmp_path: Path) -> None:
    root = broken_copy(
        tmp_path,
        "secret/dapo-secrets.yaml",
        0,
        lambda b: b["stringData"].update({"ray-auth-token": "x" * 40}),
    )
    kustomization = root / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text() + "  - secret/dapo-secrets.yaml\n")
    found = k8s_manifests.problems(root)
    assert any(
        line.startswith(
            "secret/dapo-secrets.yaml: document 0 (Secret dapo-secrets): stringData.ray-auth-token"
        )
        for line in found
    ), found
    assert any("must not list secret/dapo-secrets.yaml" in line for line in found), found


def test_an_unknown_kind_an_unlisted_manifest_and_bad_yaml_fail(tmp_path: Path) -> None:
    root = tmp_path / "kubernetes"
    shutil.copytree(MANIFESTS, root)
    (root / "ingress.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\n"
    )
    found = k8s_manifests.problems(root)
    assert any(line.startswith("ingress.yaml: document 0 (Ingress web): (top): no schema") for line in found)
    (root / "ingress.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n")
    found = k8s_manifests.problems(root)
    assert any("ingress.yaml is not listed, so `kubectl apply -k` skips it" in line for line in found), found
    (root / "ingress.yaml").write_text("kind: [unclosed\n")
    assert any(line.startswith("ingress.yaml: not valid YAML") for line in k8s_manifests.problems(root))
