#!/usr/bin/env python3
"""Checks deploy/ and the Dockerfile without a Docker engine or a cluster.

- Kubernetes manifests: schema-validated (strict: unknown fields fail) with the
  `kubernetes-validate` package, offline, against its bundled Kubernetes schemas; then
  cross-checked (labels, selectors, probes, mounts, HPA target, grace period).
- docker-compose.yml: parsed and cross-checked (services, mounted files exist, OTLP
  endpoint and Prometheus target point at the right service and port). Not checked: the
  compose-spec schema itself (no offline validator here) and whether the images pull.
  Records: the replicas share the PostgreSQL service (URL from db.env matches its user,
  password and database; it is healthy before they start), only the proxy publishes a
  port, and the proxy (haproxy.cfg) reaches every replica with SSE-friendly timeouts.
- Kubernetes records: the database URL comes from a Secret key (postgres://, never
  sqlite:// with several replicas); replicas, HPA and PDB agree.
- Dockerfile: non-root user, port, health check, host, the SQLite records volume owned by
  that user.

Usage: python3 deploy/validate.py [ROOT]  (ROOT: a copy of the repository's Dockerfile and
deploy/, default this repository; exit 0 = all good; prints every problem otherwise)
"""
import os
import re
import sys
from urllib.parse import urlsplit

import yaml

ROOT = (os.path.abspath(sys.argv[1]) if len(sys.argv) > 1
        else os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    secrets = {}
    for name in kustomization["resources"]:
        for doc in load(os.path.join(K8S, name)):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except Exception as e:  # the package raises several error types
                problems.append(f"{name}: {e}")
            resources.setdefault(doc["kind"], doc)
            if doc["kind"] == "Secret":
                secrets[doc["metadata"]["name"]] = doc.get("stringData", {})
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
    kubernetes_records(dep, container, secrets, resources)


def kubernetes_records(dep, container, secrets, resources):
    """Replicas share one PostgreSQL database named by a Secret key; scaling agrees."""
    replicas = dep["spec"].get("replicas", 1)
    hpa = resources["HorizontalPodAutoscaler"]["spec"]
    low, high = hpa.get("minReplicas", 1), hpa["maxReplicas"]
    check(replicas >= 2 and low >= 2, "k8s: fewer than 2 replicas (deployment or HPA minReplicas)")
    check(low <= replicas <= high, "k8s: deployment replicas outside the HPA's range")
    budget = resources["PodDisruptionBudget"]["spec"].get("minAvailable")
    check(isinstance(budget, int) and budget < low,
          "k8s: PDB minAvailable must be a number below the HPA's minReplicas (drains block)")
    [entry] = [e for e in container.get("env", []) if e["name"] == "MASSGEN_SERVER_RECORDS_DB"] \
        or [{}]
    ref = entry.get("valueFrom", {}).get("secretKeyRef", {})
    check("value" not in entry and ref,
          "k8s: MASSGEN_SERVER_RECORDS_DB must come from a Secret key (it holds a password)")
    url = secrets.get(ref.get("name"), {}).get(ref.get("key"))
    check(url is not None, f"k8s: no Secret key {ref} for MASSGEN_SERVER_RECORDS_DB")
    if url is not None:
        check(urlsplit(url).scheme in ("postgres", "postgresql"),
              "k8s: replicas need a shared postgres:// records database (a sqlite:// file "
              "is one process's)")


def haproxy_timeouts(text):
    """`timeout NAME VALUE` lines of an haproxy.cfg, in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "": 0.001}
    found = {}
    for name, number, unit in re.findall(r"^\s*timeout\s+(\S+)\s+(\d+)(ms|s|m|h|d)?\s*$",
                                          text, re.M):
        found[name] = int(number) * units[unit or ""]
    return found


def read_env_file(path):
    pairs = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            pairs[key.strip()] = value.strip()
    return pairs


def compose_records(services):
    """Replicas on the postgres service, one published port through the SSE-ready proxy."""
    massgen, proxy, db = services["massgen"], services["proxy"], services["postgres"]
    check(massgen.get("deploy", {}).get("replicas", 1) >= 2, "compose: massgen has < 2 replicas")
    check(not massgen.get("ports"), "compose: massgen replicas publish ports (use the proxy's)")
    check(proxy.get("ports") == ["4000:4000"], "compose: the proxy does not publish 4000")
    depends = massgen.get("depends_on", {})
    check(isinstance(depends, dict)
          and depends.get("postgres", {}).get("condition") == "service_healthy",
          "compose: massgen does not wait for a healthy postgres")
    check("healthcheck" in db, "compose: postgres has no healthcheck")
    check(any(str(v).endswith(":/var/lib/postgresql/data") for v in db.get("volumes", [])),
          "compose: postgres data is not on a volume")
    for name in ("massgen", "postgres"):
        check("POSTGRES_PASSWORD" not in services[name].get("environment", {})
              and "MASSGEN_SERVER_RECORDS_DB" not in services[name].get("environment", {}),
              f"compose: {name} has the database password inline (keep it in db.env)")
        check(services[name].get("env_file") == ["db.env"], f"compose: {name} does not read db.env")
    env = read_env_file(os.path.join(COMPOSE, "db.env"))
    url = urlsplit(env.get("MASSGEN_SERVER_RECORDS_DB", ""))
    check(url.scheme in ("postgres", "postgresql") and url.hostname == "postgres"
          and url.port == 5432, "db.env: the records URL does not reach the postgres service")
    check((url.username, url.password, url.path.lstrip("/"))
          == (env.get("POSTGRES_USER"), env.get("POSTGRES_PASSWORD"), env.get("POSTGRES_DB")),
          "db.env: the records URL's user, password or database differ from POSTGRES_*")
    mounted = [v.split(":")[0] for v in proxy.get("volumes", [])]
    check("./haproxy.cfg" in mounted, "compose: the proxy does not mount haproxy.cfg")
    cfg = open(os.path.join(COMPOSE, "haproxy.cfg"), encoding="utf-8").read()
    check(re.search(r"^\s*bind\s+:4000\b", cfg, re.M), "haproxy: does not listen on :4000")
    check(re.search(r"^\s*server(-template\s+\S+\s+\d+)?\s+\S*\s*massgen:4000\b", cfg, re.M),
          "haproxy: no server on massgen:4000")
    check(re.search(r"^\s*option\s+httpchk\s+GET\s+/health\b", cfg, re.M),
          "haproxy: replicas not health-checked on /health")
    check("http-buffer-request" not in cfg and "compression" not in cfg,
          "haproxy: buffering or compression would hold SSE events back")
    timeouts = haproxy_timeouts(cfg)
    for name in ("client", "server"):
        check(timeouts.get(name, 0) >= 600,
              f"haproxy: timeout {name} under 10 minutes cuts long streamed deliberations")


def compose():
    before = len(problems)
    [doc] = load(os.path.join(COMPOSE, "docker-compose.yml"))
    services = doc.get("services", {})
    for name in ["massgen", "otel-collector", "prometheus", "mock-upstream", "proxy", "postgres"]:
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
    # Every replica: Docker's DNS gives all of them for the service name.
    found = [(n, sd.get("port")) for job in prom["scrape_configs"]
             for sd in job.get("dns_sd_configs", []) for n in sd.get("names", [])]
    check(("massgen", 4000) in found, "prometheus does not discover every massgen:4000 replica")
    panel = yaml.safe_load(open(os.path.join(COMPOSE, "panel.yaml")))
    for agent in panel["agents"]:
        check(agent["backend"].get("base_url", "").startswith("http://mock-upstream:9000"),
              f"panel agent {agent['id']} does not use the mock-upstream service")
    compose_records(services)


def dockerfile():
    text = open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8").read()
    check(len(re.findall(r"^FROM ", text, re.M)) >= 2, "Dockerfile is not multi-stage")
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    check(user and not user[-1].startswith(("0", "root")), "Dockerfile runs as root")
    check(re.search(r"^EXPOSE\s+4000", text, re.M), "Dockerfile does not expose 4000")
    check("MASSGEN_SERVER_HOST=0.0.0.0" in text, "Dockerfile does not listen on 0.0.0.0")
    check(re.search(r"^HEALTHCHECK .*\n?.*massgen\", \"healthcheck", text, re.M),
          "Dockerfile health check does not run `massgen healthcheck`")
    check("MASSGEN_SERVER_RECORDS_DB=sqlite:///var/lib/massgen/records.db" in text,
          "Dockerfile: records are not in sqlite:///var/lib/massgen/records.db")
    check(re.search(r"^VOLUME\s+\[?\"?/var/lib/massgen\b", text, re.M),
          "Dockerfile: /var/lib/massgen is not a volume")
    owner = re.search(r"^COPY\s+.*--chown=(\S+)\s+\S+\s+/var/lib/massgen/?\s*$", text, re.M)
    check(owner and user and owner.group(1) == user[-1],
          "Dockerfile: /var/lib/massgen is not owned by the image's user")


kubernetes()
compose()
dockerfile()
for p in problems:
    print("FAIL", p)
print(f"deploy checks: {len(problems)} problem(s)" if problems else "deploy checks: ok")
sys.exit(1 if problems else 0)
