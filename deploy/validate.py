#!/usr/bin/env python3
"""Checks deploy/ and the Dockerfile without a Docker engine or a cluster.

- Kubernetes manifests: schema-validated (strict: unknown fields fail) with the
  `kubernetes-validate` package, offline, against its bundled Kubernetes schemas; then
  cross-checked (labels, selectors, probes, mounts, HPA target, grace period).
- docker-compose.yml: parsed and cross-checked (services, mounted files exist, OTLP
  endpoint and Prometheus target point at the right service and port). Not checked: the
  compose-spec schema itself (no offline validator here) and whether the images pull.
- Dockerfile: non-root user, port, health check, host.

Usage: python3 deploy/validate.py  (exit 0 = all good; prints every problem otherwise)
"""
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.path.join(ROOT, "deploy", "k8s")
COMPOSE = os.path.join(ROOT, "deploy", "compose")
problems = []


def check(ok, message):
    if not ok:
        problems.append(message)


def load(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def kubernetes():
    try:
        import kubernetes_validate
    except ImportError:
        problems.append("kubernetes-validate is not installed (pip install kubernetes-validate)")
        return
    before = len(problems)
    version = kubernetes_validate.latest_version()
    kustomization = load(os.path.join(K8S, "kustomization.yaml"))[0]
    resources = {}
    for name in kustomization["resources"]:
        for doc in load(os.path.join(K8S, name)):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except Exception as e:  # the package raises several error types
                problems.append(f"{name}: {e}")
            resources[doc["kind"]] = doc
    for kind in ["Deployment", "Service", "ConfigMap", "Secret",
                 "HorizontalPodAutoscaler", "PodDisruptionBudget"]:
        check(kind in resources, f"k8s: no {kind}")
    if len(problems) > before:
        return
    dep = resources["Deployment"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    matches = lambda selector: all(labels.get(k) == v for k, v in selector.items())
    check(matches(dep["spec"]["selector"]["matchLabels"]), "deployment selector vs pod labels")
    check(matches(resources["Service"]["spec"]["selector"]), "service selector vs pod labels")
    check(matches(resources["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]),
          "pdb selector vs pod labels")
    target = resources["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    check(target["kind"] == "Deployment" and target["name"] == dep["metadata"]["name"],
          "hpa target is not the deployment")
    spec = pod["spec"]
    check(spec.get("securityContext", {}).get("runAsNonRoot") is True, "pod not runAsNonRoot")
    check(spec.get("terminationGracePeriodSeconds", 30) > 35,
          "terminationGracePeriodSeconds must exceed the 30 s shutdown grace + 5 s flush")
    [container] = spec["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    check(ports.get("http") == 4000, "container port http != 4000")
    for probe in ["livenessProbe", "readinessProbe"]:
        get = container.get(probe, {}).get("httpGet", {})
        check(get.get("path") == "/health" and get.get("port") in ("http", 4000),
              f"{probe} must GET /health on the http port")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    check(env.get("MASSGEN_SERVER_HOST") == "0.0.0.0", "MASSGEN_SERVER_HOST must be 0.0.0.0")
    config_path = env.get("MASSGEN_SERVER_DEFAULT_CONFIG", "")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    cm = resources["ConfigMap"]
    mounted = [n for n, v in volumes.items()
               if v.get("configMap", {}).get("name") == cm["metadata"]["name"]]
    check(len(mounted) == 1, "the panel ConfigMap is not mounted")
    if mounted:
        key = os.path.relpath(config_path, mounts[mounted[0]])
        check(key in cm["data"], f"{config_path} is not a key of the ConfigMap")
        panel = yaml.safe_load(cm["data"].get(key, "")) or {}
        check(isinstance(panel.get("agents"), list) and panel["agents"], "panel has no agents")
    refs = [r["secretRef"]["name"] for r in container.get("envFrom", []) if "secretRef" in r]
    check(resources["Secret"]["metadata"]["name"] in refs, "the Secret is not in envFrom")
    check("MASSGEN_SERVER_API_KEYS" in resources["Secret"].get("stringData", {}),
          "the Secret has no MASSGEN_SERVER_API_KEYS")


def compose():
    before = len(problems)
    [doc] = load(os.path.join(COMPOSE, "docker-compose.yml"))
    services = doc.get("services", {})
    for name in ["massgen", "otel-collector", "prometheus", "mock-upstream"]:
        check(name in services, f"compose: no service {name}")
    for name, service in services.items():
        check("image" in service or "build" in service, f"compose: {name} has no image")
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                check(os.path.exists(os.path.join(COMPOSE, source)),
                      f"compose: {name} mounts missing {source}")
        for dep in service.get("depends_on", []):
            check(dep in services, f"compose: {name} depends on unknown {dep}")
    if len(problems) > before:
        return
    env = services["massgen"]["environment"]
    collector = yaml.safe_load(open(os.path.join(COMPOSE, "otel-collector.yaml")))
    http = collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    port = http.rsplit(":", 1)[1]
    check(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") == f"http://otel-collector:{port}",
          "compose: OTLP endpoint does not reach the collector's HTTP receiver")
    check("otlp" in collector["service"]["pipelines"]["traces"]["receivers"],
          "collector: traces pipeline without the otlp receiver")
    prom = yaml.safe_load(open(os.path.join(COMPOSE, "prometheus.yml")))
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]]
    check("massgen:4000" in targets, "prometheus does not scrape massgen:4000")
    panel = yaml.safe_load(open(os.path.join(COMPOSE, "panel.yaml")))
    for agent in panel["agents"]:
        check(agent["backend"].get("base_url", "").startswith("http://mock-upstream:9000"),
              f"panel agent {agent['id']} does not use the mock-upstream service")


def dockerfile():
    text = open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8").read()
    check(len(re.findall(r"^FROM ", text, re.M)) >= 2, "Dockerfile is not multi-stage")
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    check(user and not user[-1].startswith(("0", "root")), "Dockerfile runs as root")
    check(re.search(r"^EXPOSE\s+4000", text, re.M), "Dockerfile does not expose 4000")
    check("MASSGEN_SERVER_HOST=0.0.0.0" in text, "Dockerfile does not listen on 0.0.0.0")
    check(re.search(r"^HEALTHCHECK .*\n?.*massgen\", \"healthcheck", text, re.M),
          "Dockerfile health check does not run `massgen healthcheck`")


kubernetes()
compose()
dockerfile()
for p in problems:
    print("FAIL", p)
print(f"deploy checks: {len(problems)} problem(s)" if problems else "deploy checks: ok")
sys.exit(1 if problems else 0)
