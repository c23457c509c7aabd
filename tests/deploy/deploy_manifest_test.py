"""deploy/ against itself and against the real binaries, without a container engine or
a cluster (the image half is image_checks.py):
  - each of the Dockerfile's images (the default CPU one, --target cuda) installs a
    Debian package for every shared library that ldd reports for its three built
    binaries (and no package that none needs), copies the rest, and installs the
    binaries and the demo model where its command line looks for them; the CPU image
    holds no CUDA library (its tpserve_worker loads none);
  - every Deployment runs the image's ENTRYPOINT flags, and the CPU one exactly the
    image's ENTRYPOINT and CMD; its ports (gRPC and Prometheus metrics, with the pod's
    prometheus.io annotations), probes, Service, grace period, user and resources agree
    with those flags; it is scaled by a HorizontalPodAutoscaler (and sets no replicas)
    on a per-pod metric, guarded by a PodDisruptionBudget of one replica at a time,
    rolled without taking a replica down first (CPU) or recreated (GPU: no spare GPU
    for a surge pod);
  - every autoscaler's metric (LeaderWorkerSets' too) is one that the Prometheus
    adapter's rule (prometheus-adapter.yaml) serves, without a rate, from a series that
    tpserve exports as a gauge;
  - tpserve started with exactly each Deployment's command line (only the binaries, the
    model and the ports swapped for the built ones, the repo's and free ones; the CUDA
    one's ranks are tpserve_worker_emu, on the CPU emulator of CUDA with 512 MiB
    devices) turns SERVING on grpc.health.v1, passes the image's HEALTHCHECK,
    generates, counts it on GET /metrics, stays within the memory request, and on
    SIGTERM exits 0 within terminationGracePeriodSeconds.
Every broken rule is reported with its file. Runs from the Bazel runfiles root with
Debian's python3 (PyYAML, grpcio)."""
import collections
import os
import re
import signal
import subprocess
import sys
import time

sys.path[:0] = ["tests/deploy", "tests/e2e"]
import manifests  # noqa: E402
import yaml  # noqa: E402
from harness import (CLI, SERVER, WORKER, Server, cli, free_port,  # noqa: E402
                     health_status, metric_value, scrape_metrics, stubs)
from image_checks import (DEMO, DOCKERFILE, Failures, Image, check_image,  # noqa: E402
                          check_libraries, check_no_cuda, parse_flags)

MANIFESTS = "deploy/kubernetes/*.yaml"
ADAPTER = "deploy/kubernetes/prometheus-adapter.yaml"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
# What the grace period leaves, beyond --drain-grace-ms, to deliver the last (CANCELLED)
# chunks (2 s) and stop the ranks.
POOL_STOP_S = 5

# A Deployment to run: where it is, its command line, grace period (s), memory request
# (bytes) and --device.
Reference = collections.namedtuple("Reference", "where argv grace memory device")
WORKER_EMU = "worker/rank/tpserve_worker_emu"
EMU_DEVICE_MB = "512"  # the emulated GPUs' memory, which --gpu-memory-fraction takes from


def differences(flags, image_flags, only_theirs=False):
    """"--port 50052 (image: 50051), ..." for the flags whose values differ; with
    only_theirs, only for the flags that image_flags has."""
    def shown(value):
        return {None: "absent", True: "set"}.get(value, value)
    names = image_flags if only_theirs else dict(image_flags, **flags)
    return ", ".join("--%s %s (image: %s)" % (k, shown(flags.get(k)), shown(image_flags.get(k)))
                     for k in sorted(names) if flags.get(k) != image_flags.get(k))


def check_probes(where, container, port, flags, f):
    for name in PROBES:
        probe = container.get(name) or {}
        grpc = probe.get("grpc") or {}
        f.check(grpc.get("port") == port, where, "%s is not a grpc probe on the serving port "
                "%d (a grpc probe takes a number, not a port name)" % (name, port))
        f.check(grpc.get("service", "") == "", where, "%s asks for a service other than \"\", "
                "the whole server's health" % name)
    startup = container.get("startupProbe") or {}
    budget = (startup.get("initialDelaySeconds", 0) +
              startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3))
    if f.check("start-timeout-s" in flags, where, "--start-timeout-s is not set"):
        f.check(budget >= int(flags["start-timeout-s"]), where, "startupProbe allows %d s, less "
                "than --start-timeout-s %s" % (budget, flags["start-timeout-s"]))


def check_resources(where, container, flags, f):
    resources = container.get("resources", {})
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    for key in ("cpu", "memory"):
        if f.check(key in requests and key in limits, where, "no %s request and limit" % key):
            f.check(manifests.quantity(requests[key]) <= manifests.quantity(limits[key]), where,
                    "the %s request exceeds its limit" % key)
    if flags.get("device") == "cpu" and "cpu" in requests:
        f.check(manifests.quantity(requests["cpu"]) >= int(flags.get("tp", 1)), where,
                "requests fewer cores than --tp ranks")
    return manifests.quantity(requests.get("memory", 0))


def check_metrics_port(where, deployment, ports, flags, f):
    """--metrics-port, the containerPort named metrics and the pod's prometheus.io
    annotations agree, each present with the others."""
    annotations = deployment["spec"]["template"].get("metadata", {}).get("annotations", {})
    metrics = flags.get("metrics-port")
    if not f.check(str(metrics).isdigit(), where, "no --metrics-port for Prometheus"):
        return
    f.check(ports.get("metrics") == int(metrics), where,
            "containerPort named metrics is not --metrics-port %s" % metrics)
    f.check(annotations.get("prometheus.io/scrape") == "true" and
            annotations.get("prometheus.io/port") == str(metrics) and
            annotations.get("prometheus.io/path", "/metrics") == "/metrics", where,
            "the prometheus.io annotations do not scrape /metrics on --metrics-port %s" % metrics)


def image_target(container):
    """The Dockerfile target a container's image was built from: tag "cuda" is
    --target cuda, any other the default (CPU) image."""
    return "cuda" if container.get("image", "").rpartition(":")[2] == "cuda" else None


def check_deployment(path, deployment, images, image_flags, known, f):
    """Returns the Deployment's Reference, or None when it cannot run."""
    where = "%s: Deployment %s" % (path, deployment["metadata"]["name"])
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    f.check(manifests.selects(spec["selector"].get("matchLabels"),
                              manifests.pod_labels(deployment)),
            where, "selector does not match the pod template's labels")
    if not f.check(len(pod["containers"]) == 1, where, "has more than one container"):
        return None
    container = pod["containers"][0]
    image = images[image_target(container)]
    argv = manifests.effective_argv(container, image.entrypoint, image.cmd)
    f.check(argv[0] == image.entrypoint[0], where, "runs %s, not the image's tpserve" % argv[0])
    flags = parse_flags(argv[1:], known, where, f)
    if not flags:
        return None
    fixed = parse_flags(image.entrypoint[1:], known, where, f)
    changed = differences(flags, fixed, only_theirs=True)
    f.check(not changed, where, "changes the image's ENTRYPOINT flags: " + changed)
    if flags.get("device") == "cpu":
        changed = differences(flags, image_flags)
        f.check(not changed, where, "differs from the image's ENTRYPOINT and CMD: " + changed)
    strategy = spec.get("strategy", {})
    if flags.get("device") == "cuda":
        f.check(strategy.get("type") == "Recreate", where, "a GPU Deployment without the "
                "Recreate strategy: a rolling update's surge pod waits for GPUs no node has")
    else:
        f.check(strategy.get("type", "RollingUpdate") == "RollingUpdate" and
                str(strategy.get("rollingUpdate", {}).get("maxUnavailable")) == "0", where,
                "a rolling update may take a replica down before its successor serves")
    f.check((flags.get("device") == "cuda") == (image.target == "cuda"), where,
            "runs --device %s on image %s: CUDA serving needs the image built with "
            "--target cuda (tag :cuda), and only it holds CUDA libraries"
            % (flags.get("device"), container.get("image")))
    f.check(flags.get("exit-on-pool-failure") is True, where, "no --exit-on-pool-failure")
    port = int(flags["port"]) if str(flags.get("port")).isdigit() else -1
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    f.check(ports.get("grpc") == port, where, "containerPort named grpc is not --port %d" % port)
    check_probes(where, container, port, flags, f)
    check_metrics_port(where, deployment, ports, flags, f)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if f.check("drain-grace-ms" in flags, where, "--drain-grace-ms is not set"):
        f.check(grace >= int(flags["drain-grace-ms"]) / 1000 + POOL_STOP_S, where,
                "terminationGracePeriodSeconds %d leaves under %d s beyond --drain-grace-ms %s"
                % (grace, POOL_STOP_S, flags["drain-grace-ms"]))
    context = dict(pod.get("securityContext", {}), **container.get("securityContext", {}))
    f.check(context.get("runAsNonRoot") is True and str(context.get("runAsUser")) == image.user,
            where, "does not run as non-root with the image's uid %s" % image.user)
    mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
    f.check(not context.get("readOnlyRootFilesystem") or "/tmp" in mounts, where,
            "the root filesystem is read-only but /tmp (the ranks' control socket) is not mounted")
    memory = check_resources(where, container, flags, f)
    return Reference(where, argv, grace, memory, flags.get("device"))


def check_services(path, documents, f):
    deployments = manifests.of_kind(documents, "Deployment")
    for service in manifests.of_kind(documents, "Service"):
        where = "%s: Service %s" % (path, service["metadata"]["name"])
        spec = service["spec"]
        f.check(spec.get("type", "ClusterIP") == "ClusterIP", where, "is not ClusterIP")
        picked = [d for d in deployments
                  if manifests.selects(spec.get("selector"), manifests.pod_labels(d))]
        if not f.check(len(picked) == 1, where,
                       "selects %d Deployments of this file, not 1" % len(picked)):
            continue
        container = picked[0]["spec"]["template"]["spec"]["containers"][0]
        grpc_port = next((p.get("containerPort") for p in container.get("ports", [])
                          if p.get("name") == "grpc"), None)
        port = next((p for p in spec.get("ports", []) if p.get("name") == "grpc"), {})
        f.check(port.get("targetPort") in ("grpc", grpc_port), where,
                "has no port named grpc whose targetPort is the container's grpc port")
        metrics_port = next((p.get("containerPort") for p in container.get("ports", [])
                             if p.get("name") == "metrics"), None)
        port = next((p for p in spec.get("ports", []) if p.get("name") == "metrics"), {})
        f.check(metrics_port is None or port.get("targetPort") in ("metrics", metrics_port),
                where, "has no port named metrics whose targetPort is the container's")


def check_scaling(path, documents, f):
    """Every Deployment is scaled by a HorizontalPodAutoscaler of its file (and sets no
    replicas of its own, which each apply would reset) on a per-pod metric, and guarded
    by a PodDisruptionBudget selecting its pods. Returns the HPAs' metric names."""
    metrics = set()
    hpas = manifests.of_kind(documents, "HorizontalPodAutoscaler")
    budgets = manifests.of_kind(documents, "PodDisruptionBudget")
    for deployment in manifests.of_kind(documents, "Deployment"):
        name = deployment["metadata"]["name"]
        where = "%s: Deployment %s" % (path, name)
        mine = [h for h in hpas if h["spec"]["scaleTargetRef"] ==
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}]
        if f.check(len(mine) == 1, where, "%d HorizontalPodAutoscalers, not 1" % len(mine)):
            spec = mine[0]["spec"]
            f.check("replicas" not in deployment["spec"], where,
                    "sets replicas, which its HorizontalPodAutoscaler owns")
            f.check(1 <= spec.get("minReplicas", 1) <= spec["maxReplicas"], where,
                    "the autoscaler's replica range is empty")
            for metric in spec.get("metrics", []):
                f.check(metric["type"] == "Pods", where, "scales on a %s metric, not a per-pod "
                        "one tpserve exports" % metric["type"])
                if metric["type"] == "Pods":
                    metrics.add(metric["pods"]["metric"]["name"])
        guarded = [b for b in budgets if manifests.selects(
            b["spec"].get("selector", {}).get("matchLabels"), manifests.pod_labels(deployment))]
        f.check(len(guarded) == 1 and guarded[0]["spec"].get("maxUnavailable") == 1, where,
                "no PodDisruptionBudget allowing one replica down at a time")
    return metrics


def check_manifests(images, image_flags, known, f):
    """Returns the Reference of every Deployment (one with --device cpu among them) and
    the metrics their autoscalers use. Files without a Deployment (LeaderWorkerSets, the
    Prometheus adapter's rule) are lws_manifest_test's and k8s_schema_test's."""
    found = manifests.load(MANIFESTS)
    f.check(found, MANIFESTS, "no manifests")
    references, metrics = [], set()
    for path, documents in found.items():
        if not manifests.of_kind(documents, "Deployment"):
            continue
        for deployment in manifests.of_kind(documents, "Deployment"):
            result = check_deployment(path, deployment, images, image_flags, known, f)
            references += [result] if result else []
        check_services(path, documents, f)
        metrics |= check_scaling(path, documents, f)
    cpu = [r for r in references if r.device == "cpu"]
    f.check(len(cpu) == 1, MANIFESTS, "%d Deployments with --device cpu, not 1" % len(cpu))
    return references, metrics


def replace_flags(argv, values):
    """argv with the values of the flags in `values` replaced, in either spelling."""
    out = []
    for word in argv:
        name = word[2:].partition("=")[0]
        if out and out[-1][2:] in values and "=" not in out[-1]:
            word = values[out[-1][2:]]
        elif word.startswith("--") and "=" in word and name in values:
            word = "--%s=%s" % (name, values[name])
        out.append(word)
    return out


def peak_memory(server):
    """Bytes: the highest resident set of the frontend and its ranks, summed."""
    total = 0
    for pid in [server.proc.pid] + server.worker_pids():
        status = open("/proc/%d/status" % pid).read()
        total += int(status.split("VmHWM:")[1].split()[0]) * 1024
    return total


def adapter_series(f):
    """{custom metric name: Prometheus series} that the Prometheus adapter's rules
    (deploy/kubernetes/prometheus-adapter.yaml) serve; every HorizontalPodAutoscaler's
    metric, in any manifest, must be one of them."""
    served = {}
    for path, documents in manifests.load(ADAPTER).items():
        for config_map in manifests.of_kind(documents, "ConfigMap"):
            for rule in yaml.safe_load(config_map["data"]["config.yaml"])["rules"]:
                series = re.match(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\{", rule["seriesQuery"])
                if f.check(series, path, "a rule's seriesQuery names no series: %r"
                           % rule["seriesQuery"]):
                    served[rule["name"]["as"]] = series.group(1)
                f.check("rate(" not in rule["metricsQuery"], path, "the rule for %s takes a "
                        "rate: tpserve's queue length is a gauge" % rule["name"]["as"])
    for path, documents in manifests.load(MANIFESTS).items():
        for hpa in manifests.of_kind(documents, "HorizontalPodAutoscaler"):
            for metric in hpa["spec"].get("metrics", []):
                name = metric.get("pods", {}).get("metric", {}).get("name")
                f.check(name in served, "%s: HorizontalPodAutoscaler %s" % (
                    path, hpa["metadata"]["name"]), "scales on %s, which no Prometheus adapter "
                    "rule of %s serves" % (name, ADAPTER))
    return served


def check_serving(server, address, healthcheck, memory, where, f, metrics_port=None,
                  gauges=()):
    f.check(health_status(address) == "SERVING", where, "health is not SERVING")
    health = [CLI] + replace_flags(healthcheck[1:], {"target": address})
    out = subprocess.run(health, capture_output=True, text=True, timeout=30)
    f.check(out.returncode == 0, where, "the image's HEALTHCHECK fails: %s" % out.stdout)
    rc, out, err = cli(address, "generate", "And God said", "--max-tokens", "8",
                       "--temperature", "0", "--json")
    f.check(rc == 0 and '"text"' in out, where, "generate failed: %s %s" % (out, err))
    rc, out, err = cli(address, "bench", "--num-prompts", "32", "--input-len", "32",
                       "--output-len", "32", "--concurrency", "8")
    f.check(rc == 0, where, "bench failed: %s" % err)
    if metrics_port is not None:
        try:
            samples, types = scrape_metrics(metrics_port)
        except (OSError, AssertionError) as e:
            samples, types = {}, {}
            f.check(False, where, "GET /metrics on --metrics-port: %s" % e)
        for gauge in gauges:
            f.check(types.get(gauge) == "gauge", where, "the autoscalers' series %s is not a "
                    "gauge on /metrics (%s)" % (gauge, types.get(gauge)))
        f.check(metric_value(samples, "tpserve_serving") == 1, where,
                "GET /metrics on --metrics-port does not say tpserve_serving 1")
        f.check((metric_value(samples, "tpserve_requests_total", code="OK") or 0) >= 33, where,
                "/metrics does not count the 33 requests")
    peak = peak_memory(server)
    f.check(peak <= memory, where, "peaked at %d MiB, above the memory request %d MiB"
            % (peak >> 20, int(memory) >> 20))


def check_sigterm(server, address, grace, where, f):
    """SIGTERM with a stream in flight, as the kubelet sends it: the stream finishes and
    tpserve exits 0 within the grace period."""
    stream = subprocess.Popen([CLI, "--target", address, "generate", "And God said",
                               "--max-tokens", "300", "--ignore-eos", "--stream"],
                              stdout=subprocess.PIPE)
    stream.stdout.read(1)  # the first chunk: the request is in flight
    start = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(grace)
    except subprocess.TimeoutExpired:
        code = "none"
    f.check(code == 0, where, "SIGTERM: exit %s after %.1f s (grace period %d s)"
            % (code, time.monotonic() - start, grace))
    stream.stdout.read()
    f.check(stream.wait(30) == 0, where, "the stream in flight at SIGTERM did not finish")


def run_reference(reference, healthcheck, gauges, f):
    where = "%s, run as %s" % (reference.where, " ".join(reference.argv))
    local, metrics = free_port(), free_port()
    cuda = reference.device == "cuda"
    # The image's worker is beside tpserve; here the built one (for CUDA, the emulator's).
    argv = [SERVER] + replace_flags(reference.argv[1:], {
        "model": DEMO, "port": str(local), "metrics-port": str(metrics)}) + [
        "--worker-binary", WORKER_EMU if cuda else WORKER]
    stubs()
    if cuda:
        os.environ["TPSERVE_EMU_DEVICE_MB"] = EMU_DEVICE_MB
    try:
        server = Server(argv=argv)
    except AssertionError as e:
        f.check(False, where, "tpserve does not start: %s" % e)
        return
    finally:
        os.environ.pop("TPSERVE_EMU_DEVICE_MB", None)  # the ranks have inherited it
    address = "127.0.0.1:%d" % local
    try:
        f.check(server.address.endswith(":%d" % local), where, "serves on %s" % server.address)
        check_serving(server, address, healthcheck, reference.memory, where, f, metrics,
                      gauges)
        check_sigterm(server, address, reference.grace, where, f)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def main():
    f = Failures()
    usage = subprocess.run([SERVER, "--help"], capture_output=True, text=True, check=True).stdout
    known = manifests.help_flags(usage)
    assert known.get("port") is True and known.get("exit-on-pool-failure") is False, usage
    image, cuda_image = Image(DOCKERFILE), Image(DOCKERFILE, "cuda")
    for each in (image, cuda_image):
        check_libraries(each, f)
    check_no_cuda(image, f)
    image_flags = check_image(image, known, f)
    cuda_flags = check_image(cuda_image, known, f)
    f.check(cuda_flags == image_flags, cuda_image.where,
            "runs another command line than the default image: " +
            differences(cuda_flags, image_flags))
    if image.entrypoint and image.cmd:
        images = {None: image, "cuda": cuda_image}
        references, metrics = check_manifests(images, image_flags, known, f)
        served = adapter_series(f)
        f.check(metrics, MANIFESTS, "no autoscaler metric")
        for reference in references:
            if image.healthcheck:
                run_reference(reference, image.healthcheck,
                              sorted(served[m] for m in metrics if m in served), f)
    f.finish("the image, the manifests and tpserve with their flags agree")


if __name__ == "__main__":
    main()
