#!/usr/bin/python3
"""Offline checks of Aqueduct's rendered Kubernetes manifests (no cluster).

  k8s_validate.py RENDERED.yaml OVERLAY COORDINATOR_HELP WORKER_HELP

RENDERED.yaml is `kubectl kustomize deploy/k8s/overlays/OVERLAY`; the help
files are the daemons' --help output. Every document is deserialized into
python3-kubernetes' models (their constructors check required fields and
enums) and serialized back: a field the models do not know (a misspelling)
is lost on the way and reported. Then the deployment's own rules are
checked: images, gRPC probes on the health port, GPU requests in the gpu
overlay only, Secrets mounted read-only, the coordinator Service's name in
the workers' --coordinator, the ReadWriteMany claim mounted at
--checkpoint_root, every flag one the daemons accept, and the coordinator
allowing every worker's advertised name. Prints one line per failure and
exits 1 if any; 0 otherwise.
"""

import json
import re
import sys

import kubernetes.client
import yaml

MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
}
HEALTH_PORT = 8081
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")
failures = []
# The gRPC probes of every container, by container name, as written: Debian's
# python3-kubernetes (22.6: Kubernetes 1.22) predates them (gRPC probes are
# beta from Kubernetes 1.24 and GA from 1.27), so they are taken out before
# the models see the document and checked here by hand.
grpc_probes = {}


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


class _Response:  # what ApiClient.deserialize reads: .data as JSON text
    def __init__(self, doc):
        self.data = json.dumps(doc)


def strip_empty(value):
    """The document without null or empty members (the models drop them)."""
    if isinstance(value, dict):
        out = {k: strip_empty(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [strip_empty(v) for v in value]
    return value


def take_grpc_probes(doc):
    """Moves the containers' probe.grpc members into grpc_probes."""
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        for kind in PROBES:
            probe = c.get(kind)
            if not probe or "grpc" not in probe:
                continue
            grpc = probe.pop("grpc")
            if set(grpc) - {"port", "service"} or not isinstance(grpc.get("port"), int) \
                    or not isinstance(grpc.get("service", ""), str):
                fail(f"container {c.get('name')}: {kind}.grpc {grpc} is not "
                     f"{{port: int, service: string}}")
            if set(probe) & {"exec", "httpGet", "tcpSocket"}:
                fail(f"container {c.get('name')}: {kind} has a second handler")
            grpc_probes.setdefault(c.get("name"), {})[kind] = grpc


def deserialize(api, doc):
    key = (doc.get("apiVersion"), doc.get("kind"))
    name = doc.get("metadata", {}).get("name", "?")
    take_grpc_probes(doc)
    if key not in MODELS:
        fail(f"{key[1]} {name}: no model for {key} in this check")
        return None
    try:
        obj = api.deserialize(_Response(doc), MODELS[key])
    except (ValueError, TypeError) as e:
        fail(f"{key[1]} {name}: not a valid {MODELS[key]}: {e}")
        return None
    back = strip_empty(api.sanitize_for_serialization(obj))
    if back != strip_empty(doc):
        fail(f"{key[1]} {name}: fields the API does not know (lost in a "
             f"round trip through {MODELS[key]}): {diff(strip_empty(doc), back)}")
    return obj


def diff(a, b, path=""):
    """The first path where a and b differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in b:
                return f"{path}.{k}"
            if k not in a or a[k] != b[k]:
                return diff(a.get(k), b[k], f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return diff(x, y, f"{path}[{i}]")
    return f"{path}: {a!r} vs {b!r}"


def help_flags(path):
    with open(path) as f:
        return set(re.findall(r"^\s+--([a-z_0-9]+)", f.read(), re.M))


def flags_of(container):
    """--name=value arguments as a dict; other arguments are failures."""
    out = {}
    for arg in container.args or []:
        m = re.match(r"^--([a-z_0-9]+)(?:=(.*))?$", arg)
        if not m:
            fail(f"container {container.name}: argument {arg!r} is not --flag=value")
            continue
        out[m.group(1)] = m.group(2)
    return out


def check_probes(c):
    for kind in PROBES:
        grpc = grpc_probes.get(c.name, {}).get(kind)
        if grpc is None:
            fail(f"container {c.name}: no gRPC {kind}")
            continue
        if grpc["port"] != HEALTH_PORT:
            fail(f"container {c.name}: {kind} on port {grpc['port']}, "
                 f"not the health port {HEALTH_PORT}")
        want = "" if kind == "readinessProbe" else "liveness"
        if grpc.get("service", "") != want:
            fail(f"container {c.name}: {kind} asks service "
                 f"{grpc.get('service', '')!r}, want {want!r}")
    ports = {p.container_port: p.name for p in c.ports or []}
    if ports.get(HEALTH_PORT) != "health":
        fail(f"container {c.name}: port {HEALTH_PORT} is not declared 'health'")


def check_security(pod_spec, c, what):
    psc = pod_spec.security_context
    if psc is None or not psc.run_as_non_root or not psc.run_as_user:
        fail(f"{what}: pod not runAsNonRoot with a runAsUser")
    for cont in (pod_spec.init_containers or []) + [c]:
        sc = cont.security_context
        if sc is None or not sc.read_only_root_filesystem or sc.allow_privilege_escalation:
            fail(f"{what}/{cont.name}: needs readOnlyRootFilesystem and no privilege escalation")


def check_credentials(pod_spec, c, secret, what):
    """The Secret is mounted read-only and copied to the daemon's volume."""
    volumes = {v.name: v for v in pod_spec.volumes or []}
    secret_volumes = [n for n, v in volumes.items()
                      if v.secret is not None and v.secret.secret_name == secret]
    if not secret_volumes:
        fail(f"{what}: Secret {secret} is not a volume")
        return
    mounted_ro = [m for ic in pod_spec.init_containers or []
                  for m in ic.volume_mounts or []
                  if m.name in secret_volumes and m.read_only]
    if not mounted_ro:
        fail(f"{what}: Secret {secret} is not mounted read-only by an init container")
    tls = [m for m in c.volume_mounts or [] if m.mount_path == "/etc/aqueduct/tls"]
    if not tls or not tls[0].read_only:
        fail(f"{what}: /etc/aqueduct/tls not mounted read-only in {c.name}")


def check_checkpoints(pod_spec, c, flags, claims, what):
    root = flags.get("checkpoint_root")
    mounts = {m.mount_path: m.name for m in c.volume_mounts or []}
    volumes = {v.name: v for v in pod_spec.volumes or []}
    volume = volumes.get(mounts.get(root))
    if volume is None or volume.persistent_volume_claim is None:
        fail(f"{what}: --checkpoint_root {root} is not a mounted claim")
        return
    claim = claims.get(volume.persistent_volume_claim.claim_name)
    if claim is None or "ReadWriteMany" not in (claim.spec.access_modes or []):
        fail(f"{what}: the claim at --checkpoint_root is not a ReadWriteMany "
             f"PersistentVolumeClaim of these manifests")


def container(sts, name):
    for c in sts.spec.template.spec.containers:
        if c.name == name:
            return c
    fail(f"StatefulSet {sts.metadata.name}: no container {name}")
    return None


def gpus(c):
    r = c.resources
    return ((r.requests or {}).get("nvidia.com/gpu") if r else None,
            (r.limits or {}).get("nvidia.com/gpu") if r else None)


def check_coordinator(sts, services, claims, accepted):
    c = container(sts, "coordinator")
    if c is None:
        return None
    if sts.spec.replicas != 1:
        fail(f"coordinator replicas {sts.spec.replicas}, want 1")
    flags = flags_of(c)
    for f in sorted(set(flags) - accepted):
        fail(f"coordinator: --{f} is not a flag the coordinator accepts")
    state = [t for t in sts.spec.volume_claim_templates or []
             if any(m.name == t.metadata.name and m.mount_path == flags.get("state_dir")
                    for m in c.volume_mounts or [])]
    if not state:
        fail("coordinator: --state_dir is not on a volumeClaimTemplate")
    if sts.spec.service_name not in services or \
            services[sts.spec.service_name].spec.cluster_ip != "None":
        fail("coordinator: serviceName is not a headless Service")
    pod = sts.spec.template.spec
    check_probes(c)
    check_security(pod, c, "coordinator")
    check_credentials(pod, c, "aqueduct-coordinator", "coordinator")
    check_checkpoints(pod, c, flags, claims, "coordinator")
    if any(gpus(c)):
        fail("coordinator asks for a GPU")
    return c


def expand(value, env):
    return re.sub(r"\$\(([A-Z_]+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def check_workers(sts, services, claims, accepted, overlay, coordinator):
    c = container(sts, "worker")
    if c is None:
        return
    flags = flags_of(c)
    for f in sorted(set(flags) - accepted):
        fail(f"worker: --{f} is not a flag the worker accepts")
    pod = sts.spec.template.spec
    check_probes(c)
    check_security(pod, c, "worker")
    check_credentials(pod, c, "aqueduct-worker", "worker")
    check_checkpoints(pod, c, flags, claims, "worker")
    # The coordinator's ClusterIP Service, by its DNS name and gRPC port.
    m = re.match(r"^([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)$",
                 flags.get("coordinator") or "")
    svc = services.get(m.group(1)) if m else None
    if svc is None or svc.metadata.namespace != m.group(2) or \
            int(m.group(3)) not in [p.port for p in svc.spec.ports] or \
            svc.spec.cluster_ip == "None":
        fail(f"worker: --coordinator {flags.get('coordinator')} is not the "
             f"coordinator's ClusterIP Service in this namespace")
    env = {e.name: e for e in c.env or []}
    for var in ("POD_NAME", "POD_IP"):
        if var not in env or env[var].value_from is None or \
                env[var].value_from.field_ref is None:
            fail(f"worker: {var} does not come from the downward API")
    if "$(POD_IP)" not in (flags.get("health_listen") or ""):
        fail("worker: --health_listen is not on the pod's IP")
    # Every replica's advertised name is allowed by the coordinator.
    cenv = {e.name: e.value for e in coordinator.env or []} if coordinator else {}
    allowed = expand(flags_of(coordinator).get("allowed_worker_hosts") or "", cenv).split(",") \
        if coordinator else []
    for i in range(sts.spec.replicas or 0):
        host = expand(flags.get("advertise_host") or "",
                      {"POD_NAME": f"{sts.metadata.name}-{i}"})
        if host not in allowed:
            fail(f"worker {i}: advertised host {host} is not in the "
                 f"coordinator's --allowed_worker_hosts")
    if sts.spec.service_name not in services or \
            not services[sts.spec.service_name].spec.publish_not_ready_addresses:
        fail("worker: serviceName is not a headless Service publishing not-ready pods")
    request, limit = gpus(c)
    if overlay == "gpu" and (str(request) != "1" or str(limit) != "1"):
        fail(f"gpu overlay: workers ask nvidia.com/gpu {request}/{limit}, want 1/1")
    if overlay != "gpu" and (request or limit):
        fail(f"{overlay} overlay: workers ask for a GPU")


def main():
    rendered, overlay, coordinator_help, worker_help = sys.argv[1:5]
    api = kubernetes.client.ApiClient()
    with open(rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    objs = [(d, deserialize(api, d)) for d in docs]
    by_kind = {}
    for d, o in objs:
        if o is not None:
            by_kind.setdefault(d["kind"], {})[o.metadata.name] = o
    for kind, group in by_kind.items():
        for name, o in group.items():
            if kind != "Namespace" and o.metadata.namespace != "aqueduct":
                fail(f"{kind} {name}: namespace {o.metadata.namespace}, want aqueduct")
    services = by_kind.get("Service", {})
    claims = by_kind.get("PersistentVolumeClaim", {})
    sets = by_kind.get("StatefulSet", {})
    want_image = "registry.example.com/aqueduct:0.1.0" + ("-cuda" if overlay == "gpu" else "")
    for sts in sets.values():
        pod = sts.spec.template.spec
        for c in (pod.init_containers or []) + pod.containers:
            if c.image != want_image:
                fail(f"{sts.metadata.name}/{c.name}: image {c.image}, want {want_image}")
    coordinator = None
    if "aqueduct-coordinator" in sets:
        coordinator = check_coordinator(sets["aqueduct-coordinator"], services, claims,
                                        help_flags(coordinator_help))
    else:
        fail("no StatefulSet aqueduct-coordinator")
    if "aqueduct-worker" in sets:
        check_workers(sets["aqueduct-worker"], services, claims,
                      help_flags(worker_help), overlay, coordinator)
    else:
        fail("no StatefulSet aqueduct-worker")
    kinds = sorted(f"{k}/{n}" for k, g in by_kind.items() for n in g)
    print(f"{overlay}: {len(docs)} documents ({', '.join(kinds)}); "
          f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
