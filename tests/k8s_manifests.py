"""A validator for the Kubernetes manifests under deploy/kubernetes: strict JSON Schemas of our own, one per
kind, and the cross-references between documents that no schema can see.

No cluster and no network: the official OpenAPI schemas cannot be downloaded here, so these are written
from the Kubernetes API reference (core/v1, apps/v1) and KubeRay's RayCluster CRD (ray.io/v1), for the
fields our manifests use, with their real types and required fields. Every object level says
``additionalProperties: false``, so a typo'd or misplaced field fails here, before a cluster drops it (the API
server prunes a custom resource's unknown fields silently, a built-in kind's with at most a warning).
A field we start to use must be added to its schema first, from the reference.

``problems(root)`` returns one line per problem, each naming the file, the document (its index in the file,
kind and name) and the path inside it; an empty list means the manifests pass.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the locks
import yaml

RAY_HEAD_PORT = 6380
"""The Ray head's GCS port everywhere in this project (6379 is Redis's)."""
SECRET_TEMPLATE = Path("secret/dapo-secrets.yaml")
"""The Secret's template: keys only, filled and applied by hand, never listed in kustomization.yaml."""

# ---- building blocks ------------------------------------------------------------------------------------

Schema = dict[str, Any]
STRING: Schema = {"type": "string"}
NONEMPTY: Schema = {"type": "string", "minLength": 1}
BOOL: Schema = {"type": "boolean"}
INT32: Schema = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
PORT_NUMBER: Schema = {"type": "integer", "minimum": 1, "maximum": 65535}
STRINGS: Schema = {"type": "array", "items": STRING}
STRING_MAP: Schema = {"type": "object", "additionalProperties": STRING}
DNS_LABEL: Schema = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
DNS_SUBDOMAIN: Schema = {
    "type": "string",
    "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "maxLength": 253,
}
PORT_NAME: Schema = {
    "type": "string",
    "pattern": r"^(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "maxLength": 15,
}
"""An IANA_SVC_NAME: what a container port's name, and a probe's or Service's named port, must be."""
INT_OR_PORT_NAME: Schema = {"oneOf": [PORT_NUMBER, PORT_NAME]}
QUANTITY: Schema = {
    "oneOf": [
        {"type": "integer", "minimum": 0},
        {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"},
    ]
}
"""A resource.Quantity: ``500m``, ``"2"``, ``64Gi`` or a plain integer."""
LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"  # an optional DNS prefix/
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
LABELS: Schema = {
    "type": "object",
    "propertyNames": {"pattern": LABEL_KEY},
    "additionalProperties": {"type": "string", "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"},
}
ENV_NAME: Schema = {"type": "string", "pattern": r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"}


def obj(required: list[str] | tuple[str, ...] = (), **properties: Schema) -> Schema:
    """An object with exactly these properties (``additionalProperties: false``), some of them required."""
    missing = set(required) - set(properties)
    assert not missing, f"required but not described: {missing}"
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(required),
        "properties": properties,
    }


def array(items: Schema, min_items: int = 0) -> Schema:
    return {"type": "array", "items": items, "minItems": min_items}


def one_of_fields(*fields: str) -> Schema:
    """Exactly one of these fields is set (a probe's handler, a volume's source, an env var's value)."""
    return {"oneOf": [{"required": [field]} for field in fields]}


# ---- core/v1 and apps/v1 pieces -------------------------------------------------------------------------

OBJECT_META = obj(["name"], name=DNS_SUBDOMAIN, namespace=DNS_LABEL, labels=LABELS, annotations=STRING_MAP)
TEMPLATE_META = obj(labels=LABELS, annotations=STRING_MAP)
CLAIM_META = obj(["name"], name=DNS_LABEL, labels=LABELS, annotations=STRING_MAP)

ENV_VAR = {
    **obj(
        ["name"],
        name=ENV_NAME,
        value=STRING,
        valueFrom={
            **obj(
                secretKeyRef=obj(["name", "key"], name=DNS_SUBDOMAIN, key=NONEMPTY, optional=BOOL),
                configMapKeyRef=obj(["name", "key"], name=DNS_SUBDOMAIN, key=NONEMPTY, optional=BOOL),
                fieldRef=obj(["fieldPath"], fieldPath=NONEMPTY, apiVersion=STRING),
            ),
            **one_of_fields("secretKeyRef", "configMapKeyRef", "fieldRef"),
        },
    ),
    **one_of_fields("value", "valueFrom"),
}
ENV_FROM = {
    **obj(
        prefix=STRING,
        configMapRef=obj(["name"], name=DNS_SUBDOMAIN, optional=BOOL),
        secretRef=obj(["name"], name=DNS_SUBDOMAIN, optional=BOOL),
    ),
    **one_of_fields("configMapRef", "secretRef"),
}
CONTAINER_PORT = obj(
    ["containerPort"],
    name=PORT_NAME,
    containerPort=PORT_NUMBER,
    protocol={"enum": ["TCP", "UDP", "SCTP"]},
)
PROBE = {
    **obj(
        exec=obj(["command"], command=array(STRING, 1)),
        httpGet=obj(
            ["port"],
            path=STRING,
            port=INT_OR_PORT_NAME,
            host=STRING,
            scheme={"enum": ["HTTP", "HTTPS"]},
            httpHeaders=array(obj(["name", "value"], name=NONEMPTY, value=STRING)),
        ),
        tcpSocket=obj(["port"], port=INT_OR_PORT_NAME, host=STRING),
        initialDelaySeconds=INT32,
        periodSeconds={"type": "integer", "minimum": 1},
        timeoutSeconds={"type": "integer", "minimum": 1},
        successThreshold={"type": "integer", "minimum": 1},
        failureThreshold={"type": "integer", "minimum": 1},
        terminationGracePeriodSeconds=INT32,
    ),
    **one_of_fields("exec", "httpGet", "tcpSocket"),
}
RESOURCE_LIST = {
    "type": "object",
    "propertyNames": {
        "pattern": r"^(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+|[a-z0-9.-]+/[a-z0-9.-]+)$"
    },
    "additionalProperties": QUANTITY,
    "required": ["cpu", "memory"],
}
"""Our own rule on top of the API's: every container requests and limits CPU and memory."""
RESOURCES = obj(["requests", "limits"], requests=RESOURCE_LIST, limits=RESOURCE_LIST)
VOLUME_MOUNT = obj(
    ["name", "mountPath"],
    name=DNS_LABEL,
    mountPath={"type": "string", "pattern": "^/"},
    readOnly=BOOL,
    subPath=STRING,
)
CONTAINER = obj(
    ["name", "image", "resources"],
    name=DNS_LABEL,
    image=NONEMPTY,
    imagePullPolicy={"enum": ["Always", "IfNotPresent", "Never"]},
    command=array(STRING, 1),
    args=STRINGS,
    workingDir=STRING,
    env=array(ENV_VAR),
    envFrom=array(ENV_FROM),
    ports=array(CONTAINER_PORT),
    resources=RESOURCES,
    volumeMounts=array(VOLUME_MOUNT),
    livenessProbe=PROBE,
    readinessProbe=PROBE,
    startupProbe=PROBE,
    securityContext=obj(
        allowPrivilegeEscalation=BOOL,
        readOnlyRootFilesystem=BOOL,
        runAsNonRoot=BOOL,
        runAsUser=INT32,
        runAsGroup=INT32,
        capabilities=obj(add=STRINGS, drop=STRINGS),
    ),
)
VOLUME = {
    **obj(
        ["name"],
        name=DNS_LABEL,
        emptyDir=obj(medium={"enum": ["", "Memory"]}, sizeLimit=QUANTITY),
        persistentVolumeClaim=obj(["claimName"], claimName=DNS_SUBDOMAIN, readOnly=BOOL),
        configMap=obj(["name"], name=DNS_SUBDOMAIN, optional=BOOL, defaultMode=INT32),
        secret=obj(["secretName"], secretName=DNS_SUBDOMAIN, optional=BOOL, defaultMode=INT32),
    ),
    **one_of_fields("emptyDir", "persistentVolumeClaim", "configMap", "secret"),
}
POD_SPEC = obj(
    ["containers"],
    containers=array(CONTAINER, 1),
    initContainers=array(CONTAINER),
    volumes=array(VOLUME),
    securityContext=obj(
        runAsUser=INT32,
        runAsGroup=INT32,
        runAsNonRoot=BOOL,
        fsGroup=INT32,
        fsGroupChangePolicy={"enum": ["OnRootMismatch", "Always"]},
    ),
    serviceAccountName=DNS_SUBDOMAIN,
    restartPolicy={"enum": ["Always", "OnFailure", "Never"]},
    terminationGracePeriodSeconds=INT32,
    nodeSelector=STRING_MAP,
    tolerations=array(
        obj(
            key=STRING,
            operator={"enum": ["Exists", "Equal"]},
            value=STRING,
            effect={"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            tolerationSeconds={"type": "integer"},
        )
    ),
)
POD_TEMPLATE = obj(["spec"], metadata=TEMPLATE_META, spec=POD_SPEC)
SELECTOR = obj(["matchLabels"], matchLabels={**LABELS, "minProperties": 1})
PVC_SPEC = obj(
    ["accessModes", "resources"],
    accessModes=array({"enum": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]}, 1),
    resources=obj(["requests"], requests=obj(["storage"], storage=QUANTITY)),
    storageClassName=STRING,
    volumeMode={"enum": ["Filesystem", "Block"]},
)


def resource(api_version: str, kind: str, **fields: Schema) -> Schema:
    """A top-level object: its apiVersion and kind fixed, metadata with a name, then its own fields."""
    required = ["apiVersion", "kind", "metadata", *(name for name in ("spec",) if name in fields)]
    return obj(
        required, apiVersion={"const": api_version}, kind={"const": kind}, metadata=OBJECT_META, **fields
    )


RAY_START_PARAMS = {
    "type": "object",
    "propertyNames": {"pattern": r"^[a-z][a-z0-9-]*$"},
    "additionalProperties": STRING,
}
"""KubeRay's ``map[string]string``: ``port: 6380`` unquoted is an integer, and the operator refuses it."""

SCHEMAS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): resource("v1", "Namespace"),
    ("v1", "Secret"): resource("v1", "Secret", type=STRING, stringData=STRING_MAP, data=STRING_MAP),
    ("v1", "ConfigMap"): resource("v1", "ConfigMap", data={**STRING_MAP, "propertyNames": ENV_NAME}),
    ("v1", "PersistentVolumeClaim"): resource("v1", "PersistentVolumeClaim", spec=PVC_SPEC),
    ("v1", "Service"): resource(
        "v1",
        "Service",
        spec=obj(
            ["ports"],
            type={"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
            clusterIP=STRING,
            selector={**LABELS, "minProperties": 1},
            ports=array(
                obj(
                    ["port"],
                    name=PORT_NAME,
                    port=PORT_NUMBER,
                    targetPort=INT_OR_PORT_NAME,
                    protocol={"enum": ["TCP", "UDP", "SCTP"]},
                    appProtocol=STRING,
                ),
                1,
            ),
        ),
    ),
    ("apps/v1", "Deployment"): resource(
        "apps/v1",
        "Deployment",
        spec=obj(
            ["selector", "template"],
            replicas=INT32,
            revisionHistoryLimit=INT32,
            selector=SELECTOR,
            template=POD_TEMPLATE,
            strategy=obj(
                ["type"],
                type={"enum": ["Recreate", "RollingUpdate"]},
                rollingUpdate=obj(maxSurge=QUANTITY, maxUnavailable=QUANTITY),
            ),
        ),
    ),
    ("apps/v1", "StatefulSet"): resource(
        "apps/v1",
        "StatefulSet",
        spec=obj(
            ["selector", "template", "serviceName"],
            serviceName=DNS_LABEL,
            replicas=INT32,
            selector=SELECTOR,
            template=POD_TEMPLATE,
            volumeClaimTemplates=array(obj(["metadata", "spec"], metadata=CLAIM_META, spec=PVC_SPEC)),
        ),
    ),
    ("ray.io/v1", "RayCluster"): resource(
        "ray.io/v1",
        "RayCluster",
        spec=obj(
            ["headGroupSpec"],
            rayVersion=STRING,
            enableInTreeAutoscaling=BOOL,
            headGroupSpec=obj(
                ["template"],
                rayStartParams=RAY_START_PARAMS,
                serviceType={"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                template=POD_TEMPLATE,
            ),
            workerGroupSpecs=array(
                obj(
                    ["groupName", "template"],
                    groupName=DNS_LABEL,
                    replicas=INT32,
                    minReplicas=INT32,
                    maxReplicas=INT32,
                    rayStartParams=RAY_START_PARAMS,
                    template=POD_TEMPLATE,
                )
            ),
        ),
    ),
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): obj(
        ["apiVersion", "kind", "resources"],
        apiVersion={"const": "kustomize.config.k8s.io/v1beta1"},
        kind={"const": "Kustomization"},
        namespace=DNS_LABEL,
        resources=array({"type": "string", "pattern": r"^[a-z0-9][-a-z0-9_/]*\.yaml$"}, 1),
    ),
}
"""One schema per (apiVersion, kind) our manifests use."""
WORKLOADS = ("Deployment", "StatefulSet")
HEAD_CONTAINER = ("spec", "headGroupSpec", "template", "spec", "containers", 0)


# ---- loading --------------------------------------------------------------------------------------------


@dataclass
class Doc:
    """One YAML document of one file, and how a message names it."""

    path: Path
    index: int
    body: Any

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", "?")) if isinstance(self.body, dict) else "?"

    @property
    def name(self) -> str:
        meta = self.body.get("metadata") if isinstance(self.body, dict) else None
        return str(meta.get("name", "?")) if isinstance(meta, dict) else "?"

    def where(self, root: Path, *path: str | int) -> str:
        inside = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or "(top)"
        return f"{self.path.relative_to(root)}: document {self.index} ({self.kind} {self.name}): {inside}"


def load(root: Path) -> tuple[list[Doc], list[str]]:
    """Every document of every .yaml file under root, and the files that do not parse."""
    docs, problems = [], []
    for path in sorted(root.rglob("*.yaml")):
        try:
            bodies = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError as error:
            problems.append(f"{path.relative_to(root)}: not valid YAML: {error}")
            continue
        docs += [Doc(path, index, body) for index, body in enumerate(bodies) if body is not None]
    return docs, problems


def validate_schema(doc: Doc, root: Path) -> list[str]:
    body = doc.body
    if not isinstance(body, dict):
        return [f"{doc.where(root)}: a document must be a mapping, not {type(body).__name__}"]
    schema = SCHEMAS.get((str(body.get("apiVersion")), doc.kind))
    if schema is None:
        known = ", ".join(f"{kind} ({api})" for api, kind in SCHEMAS)
        return [
            f"{doc.where(root)}: no schema for apiVersion {body.get('apiVersion')!r} kind {doc.kind!r} "
            f"(known: {known}); add one to tests/k8s_manifests.py from the API reference"
        ]
    validator = jsonschema.Draft202012Validator(schema)
    found = []
    for error in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path))):
        # For a oneOf, the branch errors say which field is wrong; the oneOf message alone does not.
        detail = max(error.context or [error], key=lambda e: len(e.absolute_path))
        found.append(f"{doc.where(root, *detail.absolute_path)}: {detail.message}")
    return found


# ---- cross-references -----------------------------------------------------------------------------------


@dataclass
class Pod:
    """A pod template inside a document, with where it sits."""

    doc: Doc
    path: tuple[str | int, ...]
    spec: dict[str, Any]
    labels: dict[str, str]
    claims: set[str]
    """Volume names a StatefulSet's volumeClaimTemplates add to each pod."""


def pods(docs: list[Doc]) -> Iterator[Pod]:
    for doc in docs:
        body = doc.body
        spec = body.get("spec") or {}
        if doc.kind in WORKLOADS:
            claims = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
            template = spec["template"]
            yield Pod(
                doc,
                ("spec", "template", "spec"),
                template["spec"],
                template.get("metadata", {}).get("labels", {}),
                claims,
            )
        elif doc.kind == "RayCluster":
            head = spec["headGroupSpec"]["template"]
            path: tuple[str | int, ...] = ("spec", "headGroupSpec", "template", "spec")
            yield Pod(doc, path, head["spec"], head.get("metadata", {}).get("labels", {}), set())
            for i, group in enumerate(spec.get("workerGroupSpecs", [])):
                path = ("spec", "workerGroupSpecs", i, "template", "spec")
                labels = group["template"].get("metadata", {}).get("labels", {})
                yield Pod(doc, path, group["template"]["spec"], labels, set())


def containers(pod: Pod) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    for field in ("initContainers", "containers"):
        for i, container in enumerate(pod.spec.get(field, [])):
            yield (*pod.path, field, i), container


def env_value(container: dict[str, Any], name: str, config_maps: dict[str, dict[str, str]]) -> str | None:
    """The value a container sees for an env var set literally or from a ConfigMap (env wins)."""
    for var in container.get("env", []):
        if var["name"] == name and "value" in var:
            return str(var["value"])
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            data = config_maps.get(source["configMapRef"]["name"], {})
            if name in data:
                return data[name]
    return None


def cross_references(docs: list[Doc], root: Path) -> list[str]:
    found: list[str] = []
    secrets = {
        d.name: {**(d.body.get("stringData") or {}), **(d.body.get("data") or {})}
        for d in docs
        if d.kind == "Secret"
    }
    config_maps = {d.name: d.body.get("data") or {} for d in docs if d.kind == "ConfigMap"}
    claims = {d.name for d in docs if d.kind == "PersistentVolumeClaim"}
    services = {d.name: d for d in docs if d.kind == "Service"}
    all_pods = list(pods(docs))

    for pod in all_pods:
        doc = pod.doc
        if doc.kind in WORKLOADS:
            selector = doc.body["spec"]["selector"]["matchLabels"]
            if not selector.items() <= pod.labels.items():
                found.append(
                    f"{doc.where(root, 'spec', 'selector', 'matchLabels')}: {selector} does not select the "
                    f"pod template's labels {pod.labels}; the API refuses such a {doc.kind}"
                )
            if doc.kind == "StatefulSet" and doc.body["spec"]["serviceName"] not in services:
                found.append(
                    f"{doc.where(root, 'spec', 'serviceName')}: "
                    f"no Service named {doc.body['spec']['serviceName']!r}"
                )
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        for i, volume in enumerate(pod.spec.get("volumes", [])):
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is not None and claim not in claims:
                found.append(
                    f"{doc.where(root, *pod.path, 'volumes', i, 'persistentVolumeClaim', 'claimName')}: "
                    f"no PersistentVolumeClaim named {claim!r}"
                )
        for path, container in containers(pod):
            defined: set[str] = set()
            for j, source in enumerate(container.get("envFrom", [])):
                ref = source.get("configMapRef") or source.get("secretRef")
                kind, known = ("ConfigMap", config_maps) if "configMapRef" in source else ("Secret", secrets)
                if ref["name"] not in known:
                    found.append(f"{doc.where(root, *path, 'envFrom', j)}: no {kind} named {ref['name']!r}")
                else:
                    defined |= set(known[ref["name"]])
            for j, var in enumerate(container.get("env", [])):
                for key in ("secretKeyRef", "configMapKeyRef"):
                    ref = (var.get("valueFrom") or {}).get(key)
                    if ref is None:
                        continue
                    kind, known = ("Secret", secrets) if key == "secretKeyRef" else ("ConfigMap", config_maps)
                    where = doc.where(root, *path, "env", j, "valueFrom", key)
                    if ref["name"] not in known:
                        found.append(f"{where}: no {kind} named {ref['name']!r} (have: {sorted(known)})")
                    elif ref["key"] not in known[ref["name"]]:
                        found.append(
                            f"{where}: {kind} {ref['name']!r} has no key {ref['key']!r} "
                            f"(its keys: {sorted(known[ref['name']])}); add it to the {kind} or fix the key"
                        )
                # Kubernetes expands $(NAME) only from variables defined before it; an unknown one stays
                # literally "$(NAME)" in the value, and e.g. the database password would be that text.
                for ref_name in re.findall(r"\$\(([^)]*)\)", str(var.get("value", ""))):
                    if ref_name not in defined:
                        found.append(
                            f"{doc.where(root, *path, 'env', j, 'value')}: $({ref_name}) is not defined "
                            f"before {var['name']} in this container, so Kubernetes would leave it as text"
                        )
                defined.add(var["name"])
            for j, mount in enumerate(container.get("volumeMounts", [])):
                if mount["name"] not in volumes and mount["name"] not in pod.claims:
                    found.append(
                        f"{doc.where(root, *path, 'volumeMounts', j, 'name')}: no volume {mount['name']!r} "
                        f"in this pod (volumes: {sorted(volumes) + sorted(pod.claims)})"
                    )
            ports = container.get("ports", [])
            names = {p.get("name") for p in ports} - {None}
            numbers = {p["containerPort"] for p in ports}
            for probe_field in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = container.get(probe_field) or {}
                for handler in ("httpGet", "tcpSocket"):
                    if handler in probe:
                        port = probe[handler]["port"]
                        if port not in (numbers if isinstance(port, int) else names):
                            found.append(
                                f"{doc.where(root, *path, probe_field, handler, 'port')}: "
                                f"port {port!r} is not declared in this container's ports "
                                f"(names {sorted(names)}, "
                                f"numbers {sorted(numbers)})"
                            )
    for name, service in services.items():
        selector = (service.body.get("spec") or {}).get("selector")
        if not selector:
            continue
        chosen = [pod for pod in all_pods if selector.items() <= pod.labels.items()]
        where = service.where(root, "spec", "selector")
        if not chosen:
            found.append(
                f"{where}: {selector} matches no pod template's labels; "
                f"the Service {name} would have no endpoints"
            )
            continue
        for i, port in enumerate(service.body["spec"]["ports"]):
            target = port.get("targetPort", port["port"])
            declared = {
                (p.get("name") if isinstance(target, str) else p["containerPort"])
                for pod in chosen
                for _, c in containers(pod)
                for p in c.get("ports", [])
            }
            if target not in declared:
                found.append(
                    f"{service.where(root, 'spec', 'ports', i, 'targetPort')}: "
                    f"{target!r} is no port of the pods it selects"
                )
    return found + ray_references(docs, root, all_pods, config_maps)


def ray_references(
    docs: list[Doc], root: Path, all_pods: list[Pod], config_maps: dict[str, dict[str, str]]
) -> list[str]:
    """The head listens on 6380, declares it, and every driver's RAY_ADDRESS is the head's Service there."""
    found = []
    clusters = [d for d in docs if d.kind == "RayCluster"]
    addresses = set()
    for cluster in clusters:
        head = cluster.body["spec"]["headGroupSpec"]
        port = (head.get("rayStartParams") or {}).get("port")
        if port != str(RAY_HEAD_PORT):
            found.append(
                f"{cluster.where(root, 'spec', 'headGroupSpec', 'rayStartParams', 'port')}: "
                f"the head must listen on {RAY_HEAD_PORT} (6379 is Redis's port), as a string; got {port!r}"
            )
        ray_container = head["template"]["spec"]["containers"][0]
        if RAY_HEAD_PORT not in {p["containerPort"] for p in ray_container.get("ports", [])}:
            found.append(
                f"{cluster.where(root, *HEAD_CONTAINER, 'ports')}: "
                f"declare containerPort {RAY_HEAD_PORT}: KubeRay builds the head's Service from these ports"
            )
        # KubeRay names the head's Service <cluster>-head-svc.
        addresses.add(f"{cluster.name}-head-svc:{RAY_HEAD_PORT}")
    for pod in all_pods:
        if pod.doc.kind == "RayCluster":
            continue  # KubeRay sets RAY_ADDRESS in its own pods
        for path, container in containers(pod):
            address = env_value(container, "RAY_ADDRESS", config_maps)
            command = " ".join(container.get("command", []) + container.get("args", []))
            if address is None and "ray " not in command:
                continue
            if address not in addresses:
                found.append(
                    f"{pod.doc.where(root, *path, 'env')}: RAY_ADDRESS is {address!r}; "
                    f"it must be the KubeRay head's Service on port {RAY_HEAD_PORT}: "
                    f"one of {sorted(addresses)}"
                )
            for argv in (shlex.split(part) for part in command.split("&&")):
                if argv[:2] == ["ray", "start"] and "--address" in argv:
                    given = argv[argv.index("--address") + 1]
                    if given not in ("$RAY_ADDRESS", address):
                        found.append(
                            f"{pod.doc.where(root, *path, 'command')}: "
                            f"ray start --address {given} differs from RAY_ADDRESS {address!r}"
                        )
    return found


def deployment_rules(docs: list[Doc], root: Path) -> list[str]:
    """The Secret's template holds keys only, and `kubectl apply -k` applies every manifest but it."""
    found = []
    for doc in docs:
        relative = doc.path.relative_to(root)
        if doc.kind == "Secret":
            if relative != SECRET_TEMPLATE:
                found.append(f"{doc.where(root)}: a Secret belongs in {SECRET_TEMPLATE} only, as a template")
            for field in ("stringData", "data"):
                for key, value in (doc.body.get(field) or {}).items():
                    if value != "":
                        found.append(
                            f"{doc.where(root, field, key)}: "
                            "the template holds keys only; fill a copy outside the repository"
                        )
        if doc.kind == "Kustomization":
            listed = set(doc.body.get("resources", []))
            manifests = {str(p.relative_to(root)) for p in root.rglob("*.yaml")} - {"kustomization.yaml"}
            if str(SECRET_TEMPLATE) in listed:
                found.append(
                    f"{doc.where(root, 'resources')}: must not list {SECRET_TEMPLATE}: "
                    "applying it would overwrite the filled Secret with empty values"
                )
            for missing in sorted(manifests - listed - {str(SECRET_TEMPLATE)}):
                found.append(
                    f"{doc.where(root, 'resources')}: {missing} is not listed, so `kubectl apply -k` skips it"
                )
            for extra in sorted(listed - manifests):
                found.append(f"{doc.where(root, 'resources')}: {extra} does not exist")
    return found


def problems(root: Path) -> list[str]:
    """Every problem of the manifests under root: schema errors first; cross-references only when the
    schemas pass (they rely on the shapes the schemas guarantee)."""
    docs, found = load(root)
    for doc in docs:
        found += validate_schema(doc, root)
    if found:
        return found
    return cross_references(docs, root) + deployment_rules(docs, root)
