"""The LeaderWorkerSet manifests of deploy/kubernetes/ (tpserve-lws*.yaml) against the
image, the binaries' flags and each other, and then run as the cluster would run them.

Checked without running anything:
  - the leader pod runs tpserve with --external-workers, a control port that a
    containerPort and the headless Service name, --tp equal to the ranks the group's
    pods hold; every other container of both templates is a rank (tpserve_worker, or
    tpserve_worker_cuda on the :cuda image with one GPU and --device cuda:0) dialling
    $(LWS_LEADER_ADDRESS) on that port; every flag is one the binary takes;
  - with LWS_WORKER_INDEX set as LWS sets it (0 for the leader, 1..size-1), the ranks
    the containers ask for are 0..tp-1, each once, rank 0 in the leader pod;
  - tpserve and every rank read the token from the same Secret, mounted where their
    --worker-token-file looks, readable by the pod's group (fsGroup);
  - ranks get /dev/shm as a memory emptyDir; the headless Service is named as the
    LeaderWorkerSet (LWS then makes none), lists pods before they are ready
    (publishNotReadyAddresses: the leader is not ready until its ranks attach) and
    selects the set's pods; the client Service selects the leader pods only;
  - startupPolicy is not LeaderReady (the leader would wait for workers never made);
    the gRPC probes fit --start-timeout-s, liveness does not fail on NOT_SERVING (a pool
    being rebuilt); the grace period covers --drain-grace-ms; pods run as the image's
    non-root user.
Run: the leader pod's command lines (tpserve and its ranks) on this host and the worker
pod's in a network namespace with its own address and /dev/shm (a second node; all on
this host, saying so, where namespaces cannot be made, and for the CUDA variant, whose
ranks run on the CPU emulator of CUDA, whose NCCL is one host's), with the LWS
variables set, the token in a Kubernetes-style secret folder, the worker pod started
first. The pool serves the demo model's greedy samples (tpserve-cli, text prompts, Hugging
Face's ids; the CUDA variant's bfloat16 ranks: generations), each rank holding the
rank its pod asks for; the worker pod's ranks killed mid-stream fail it UNAVAILABLE
within 5 s, health NOT_SERVING, and the containers restarted as the kubelet restarts
them (every rank container exits: the killed ones, and the others after the frontend's
Shutdown) bring the pool back; SIGTERM to tpserve exits 0 and every rank ends.
"""
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path[:0] = ["tests/deploy", "tests/e2e"]
import manifests  # noqa: E402
import multi_host_test as hosts  # noqa: E402
from harness import (CLI, SERVER, WORKER, Server, free_port, health_status,  # noqa: E402
                     stubs)
from image_checks import DEMO, DOCKERFILE, Failures, Image, parse_flags  # noqa: E402

import grpc  # noqa: E402

MANIFESTS = "deploy/kubernetes/tpserve-lws*.yaml"
WORKER_EMU = "worker/rank/tpserve_worker_emu"
EMU_DEVICE_MB = "512"
LOSS_BOUND_S = 5
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
SERVER_PATH = "/usr/local/bin/tpserve"
RANK_PATHS = {None: "/usr/local/bin/tpserve_worker", "cuda": "/usr/local/bin/tpserve_worker_cuda"}

# One container of a pod to run: its pod's index, name, argv (the image's paths), and
# the rank it asks for (None for tpserve).
Container = collections.namedtuple("Container", "pod name argv rank")


def expand(argv, env):
    """The kubelet's $(VAR) expansion of command and args ($$ escapes a $)."""
    def one(word):
        return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                      lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
                      word)
    return [one(w) for w in argv]


def help_of(binary):
    usage = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    return manifests.help_flags(usage)


def requested_rank(flags):
    """The rank tpserve_worker's flags ask for (as worker_main.cc computes it), or None."""
    if "rank" in flags:
        return int(flags["rank"])
    if "host-index" in flags:
        return (int(flags["host-index"]) * int(flags.get("ranks-per-host", 1)) +
                int(flags.get("local-rank", 0)))
    return None


def volume_sources(pod):
    return {v["name"]: v for v in pod.get("volumes", [])}


def mounted_secret(container, pod, path):
    """(secretName, volume) of the Secret volume whose mount holds `path`, or (None, None)."""
    volumes = volume_sources(pod)
    for mount in container.get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        if "secret" in volume and path.startswith(mount["mountPath"].rstrip("/") + "/"):
            return volume["secret"].get("secretName"), volume
    return None, None


def check_shm(where, container, pod, f):
    volumes = volume_sources(pod)
    shm = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
    f.check(shm and volumes.get(shm[0]["name"], {}).get("emptyDir", {}).get("medium") == "Memory",
            where, "/dev/shm is not a memory emptyDir")


def check_security(where, pod, container, image, f):
    context = dict(pod.get("securityContext", {}), **container.get("securityContext", {}))
    f.check(context.get("runAsNonRoot") is True and str(context.get("runAsUser")) == image.user,
            where, "does not run as non-root with the image's uid %s" % image.user)


def check_server(where, container, pod, known, image, f):
    """tpserve's flags (checked against the pod and the set), or {}."""
    flags = parse_flags(container.get("args", []), known, where, f)
    if not flags:
        return {}
    f.check(flags.get("external-workers") is True, where, "no --external-workers")
    f.check("exit-on-pool-failure" not in flags, where, "--exit-on-pool-failure: the frontend "
            "should rebuild the pool in place as the kubelet restarts the ranks")
    control = str(flags.get("control-address", ""))
    host, _, port = control.rpartition(":")
    f.check(port.isdigit() and host and not control.startswith("unix:"), where,
            "--control-address %r is not HOST:PORT" % control)
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports", [])}
    if port.isdigit():
        f.check(ports.get("control") == int(port), where,
                "containerPort named control is not --control-address's port %s" % port)
    grpc_port = int(flags["port"]) if str(flags.get("port")).isdigit() else -1
    f.check(ports.get("grpc") == grpc_port, where, "containerPort named grpc is not --port")
    for name in ("startupProbe", "readinessProbe"):
        probe = container.get(name, {})
        f.check(probe.get("grpc", {}).get("port") == grpc_port and
                probe["grpc"].get("service", "") == "", where,
                "%s is not a grpc health probe on --port" % name)
    startup = container.get("startupProbe", {})
    budget = (startup.get("initialDelaySeconds", 0) + startup.get("periodSeconds", 10) *
              startup.get("failureThreshold", 3))
    f.check(budget >= int(flags.get("start-timeout-s", 10 ** 9)), where,
            "startupProbe allows %d s, less than --start-timeout-s" % budget)
    liveness = container.get("livenessProbe", {})
    f.check("grpc" not in liveness and liveness, where, "livenessProbe is missing, or a gRPC "
            "health check, which would restart the frontend while it rebuilds a lost pool")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    f.check(grace >= int(flags.get("drain-grace-ms", 30000)) / 1000 + 5, where,
            "terminationGracePeriodSeconds %d leaves under 5 s beyond --drain-grace-ms" % grace)
    check_security(where, pod, container, image, f)
    f.check(flags.get("device") == ("cuda" if image.target == "cuda" else "cpu"), where,
            "--device %s on image %s" % (flags.get("device"), container.get("image")))
    return flags


def check_rank(where, container, pod, known, image, control_port, f):
    """tpserve_worker's flags, or {}."""
    argv = list(container.get("command", [])) + list(container.get("args", []))
    f.check(argv[:1] == [RANK_PATHS[image.target]], where,
            "runs %s, not %s" % (argv[:1], RANK_PATHS[image.target]))
    flags = parse_flags(argv[1:], known, where, f)
    if not flags:
        return {}
    f.check(flags.get("frontend") == "$(LWS_LEADER_ADDRESS):%s" % control_port, where,
            "--frontend is not $(LWS_LEADER_ADDRESS):%s (the leader by the name other pods "
            "reach it at: a rank binds its collectives where it reaches the store from)"
            % control_port)
    check_shm(where, container, pod, f)
    check_security(where, pod, container, image, f)
    resources = container.get("resources", {})
    if image.target == "cuda":
        f.check(str(resources.get("limits", {}).get("nvidia.com/gpu")) == "1", where,
                "a CUDA rank does not ask for exactly one GPU")
        f.check(flags.get("device") == "cuda:0", where,
                "a CUDA rank does not drive the one GPU it is given (--device cuda:0)")
    else:
        f.check(flags.get("device", "cpu") == "cpu", where, "a CPU rank with --device")
        f.check(manifests.quantity(resources.get("requests", {}).get("cpu", 0)) >= 1, where,
                "a rank requests less than one core")
    return flags


def image_of(container, images):
    return images["cuda" if container.get("image", "").rpartition(":")[2] == "cuda" else None]


def check_services(path, documents, lws, control_port, f):
    name = lws["metadata"]["name"]
    services = {s["metadata"]["name"]: s for s in manifests.of_kind(documents, "Service")}
    headless = services.get(name, {}).get("spec", {})
    where = "%s: Service %s" % (path, name)
    f.check(headless.get("clusterIP") == "None", where,
            "no headless Service named as the LeaderWorkerSet")
    f.check(headless.get("publishNotReadyAddresses") is True, where,
            "publishNotReadyAddresses is not true: ranks could not resolve a leader that is "
            "not ready yet, and it is not ready until they attach")
    f.check(headless.get("selector") == {NAME_LABEL: name}, where,
            "does not select the set's pods by %s" % NAME_LABEL)
    f.check(any(p.get("port") == control_port for p in headless.get("ports", [])), where,
            "does not name the control port %s" % control_port)
    leader_labels = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    clients = [s for n, s in services.items() if n != name]
    f.check(clients, path, "no Service for clients")
    for service in clients:
        selector = service["spec"].get("selector", {})
        where = "%s: Service %s" % (path, service["metadata"]["name"])
        f.check(selector.get(NAME_LABEL) == name and
                manifests.selects({k: v for k, v in selector.items() if k != NAME_LABEL},
                                  leader_labels),
                where, "does not select the leader pods only (%s and the leader's labels)"
                % NAME_LABEL)


def pods_of(lws):
    """[(index, pod spec)] as LWS makes one group: the leader (0), then size-1 workers."""
    template = lws["spec"]["leaderWorkerTemplate"]
    size = template.get("size", 1)
    worker = template["workerTemplate"]["spec"]
    return [(0, template.get("leaderTemplate", template["workerTemplate"])["spec"])] + [
        (i, worker) for i in range(1, size)]


def check_lws(path, documents, images, known, f):
    """The group's containers to run, or None."""
    found = manifests.of_kind(documents, "LeaderWorkerSet")
    if not f.check(len(found) == 1, path, "%d LeaderWorkerSets, not 1" % len(found)):
        return None
    lws = found[0]
    name = lws["metadata"]["name"]
    spec = lws["spec"]
    f.check(spec.get("startupPolicy", "LeaderCreated") != "LeaderReady", path,
            "startupPolicy LeaderReady: LWS would make no worker until the leader is ready, "
            "which it is not until the workers attach")
    server, token_paths, secrets, containers = None, set(), set(), []
    for index, pod in pods_of(lws):
        servers = [c for c in pod["containers"] if c.get("command", [""])[0] == SERVER_PATH]
        f.check(len(servers) == (1 if index == 0 else 0), path, "pod %d runs %d tpserve, not %d"
                % (index, len(servers), 1 if index == 0 else 0))
        env = {"LWS_WORKER_INDEX": str(index), "LWS_LEADER_ADDRESS": "%s-0.%s" % (name, name),
               "LWS_GROUP_SIZE": str(len(pods_of(lws)))}
        for container in pod["containers"]:
            where = "%s: pod %d container %s" % (path, index, container["name"])
            image = image_of(container, images)
            if container in servers:
                server = check_server(where, container, pod, known["tpserve"], image, f)
                control_port = str(server.get("control-address", ":")).rpartition(":")[2]
                argv = list(container["command"]) + list(container.get("args", []))
                token = server.get("worker-token-file", "")
                containers.append(Container(index, container["name"], tuple(argv), None))
            else:
                if server is None:
                    f.check(False, where, "a rank before the leader's tpserve")
                    return None
                flags = check_rank(where, container, pod, known[image.target or "cpu"], image,
                                   control_port, f)
                argv = list(container["command"]) + list(container.get("args", []))
                rank_flags = manifests.flag_map(expand(argv[1:], env), known[
                    image.target or "cpu"]) if flags else {}
                containers.append(Container(index, container["name"], tuple(argv),
                                            requested_rank(rank_flags)))
                token = flags.get("worker-token-file", "")
            secret, volume = mounted_secret(container, pod, token)
            f.check(secret, where, "--worker-token-file %r is not in a mounted Secret" % token)
            if volume:
                mode = volume["secret"].get("defaultMode", 0o644)
                f.check(mode & 0o040 and pod.get("securityContext", {}).get("fsGroup") ==
                        int(image.user), where, "the token's Secret is not readable by the "
                        "pod's fsGroup (the image's group %s): defaultMode %o" % (image.user, mode))
            token_paths.add(token)
            secrets.add(secret)
    f.check(len(token_paths) == 1 and len(secrets) == 1, path,
            "tpserve and the ranks read different token files or Secrets: %s %s"
            % (sorted(token_paths), sorted(map(str, secrets))))
    if not server:
        return None
    tp = int(server.get("tp", 1))
    ranks = sorted(c.rank for c in containers if c.rank is not None)
    f.check(ranks == list(range(tp)), path, "the group's ranks ask for %s, not 0..%d each once"
            % (ranks, tp - 1))
    f.check(any(c.rank == 0 and c.pod == 0 for c in containers), path,
            "rank 0 is not in the leader pod")
    check_services(path, documents, lws, int(control_port) if control_port.isdigit() else -1, f)
    return containers, tp, images[None if server.get("device") == "cpu" else "cuda"]


def check_demo_samples(where, address, exact, f):
    """tpserve-cli's greedy generations of the demo's prompts are Hugging Face's
    (models/demo/samples.json, float32); not `exact` (bfloat16 ranks), only that each
    generates."""
    samples = json.load(open(os.path.join(DEMO, "samples.json")))
    for sample in samples["samples"]:
        got = subprocess.run([CLI, "--target", address, "generate", sample["prompt"],
                              "--temperature", "0", "--max-tokens",
                              str(samples["max_new_tokens"]), "--json"],
                             capture_output=True, text=True, timeout=120)
        ids = json.loads(got.stdout).get("token_ids") if got.returncode == 0 else got.stderr
        if exact:
            f.check(ids == sample["output_ids"], where, "greedy %r is not Hugging Face's: %s"
                    % (sample["prompt"], ids))
        else:
            f.check(isinstance(ids, list) and ids, where, "generate %r: %s"
                    % (sample["prompt"], ids))


def secret_folder(token):
    """A folder laid out as the kubelet mounts a Secret (token -> ..data/token), with the
    token, group-readable: its path."""
    folder = tempfile.mkdtemp(dir=os.environ["TEST_TMPDIR"])
    os.mkdir(os.path.join(folder, "..data"))
    with open(os.path.join(folder, "..data", "token"), "w") as out:
        out.write(token)
    os.chmod(os.path.join(folder, "..data", "token"), 0o440)
    os.symlink("..data/token", os.path.join(folder, "token"))
    return folder


class Group:
    """One group's pods run as processes: the leader's on this host, the workers' on host
    B when `two_hosts`."""

    def __init__(self, containers, tp, cuda, two_hosts, token_dir):
        self.containers, self.tp, self.cuda, self.two_hosts = containers, tp, cuda, two_hosts
        self.leader = hosts.HOST_A if two_hosts else "127.0.0.1"
        self.control = free_port(self.leader)
        self.token_dir = token_dir
        self.grpc_port, self.metrics_port = free_port(), free_port()
        self.ranks = {}  # container -> Popen
        self.logs = {}
        self.server = None

    def local_argv(self, container):
        env = {"LWS_WORKER_INDEX": str(container.pod), "LWS_LEADER_ADDRESS": self.leader,
               "LWS_GROUP_SIZE": str(1 + max(c.pod for c in self.containers))}
        argv = expand(container.argv, env)
        out = []
        for word in argv[1:]:
            name, _, value = word[2:].partition("=")
            if name == "worker-token-file":
                word = "--worker-token-file=" + os.path.join(self.token_dir, "token")
            elif name == "frontend":
                word = "--frontend=%s:%d" % (self.leader, self.control)
            elif name == "control-address":
                word = "--control-address=0.0.0.0:%d" % self.control
            elif name in ("port", "metrics-port", "model"):
                word = "--%s=%s" % (name, {"port": self.grpc_port, "metrics-port":
                                           self.metrics_port, "model": DEMO}[name])
            elif name == "host":
                word = "--host=127.0.0.1"
            out.append(word)
        binary = SERVER if container.rank is None else (WORKER_EMU if self.cuda else WORKER)
        return [os.path.abspath(binary)] + out

    def start_rank(self, container):
        argv = self.local_argv(container)
        if container.pod > 0 and self.two_hosts:
            argv = hosts.on_host_b(argv)
        log = self.logs.setdefault(container, open(os.path.join(
            os.environ["TEST_TMPDIR"], "pod%d-%s.log" % (container.pod, container.name)), "w+"))
        log.seek(0)
        log.truncate()
        self.ranks[container] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def start(self):
        """The worker pods first (their ranks wait for the leader), then the leader's."""
        for container in sorted(self.containers, key=lambda c: -c.pod):
            if container.rank is None:
                self.server = Server(argv=self.local_argv(container), until="listening")
            else:
                self.start_rank(container)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.grpc_port

    def restart_exited(self, containers):
        """Starts again each of `containers` whose rank process has exited; returns them."""
        exited = [c for c in containers if self.ranks[c].poll() is not None]
        for container in exited:
            self.start_rank(container)
        return exited

    def wait_serving(self):
        """Until the leader serves, a rank container that exits is started again, as the
        kubelet restarts it (a pool that failed to start ends its ranks; the leader's
        retry needs them back)."""
        for _ in range(1200):
            if health_status(self.address) == "SERVING":
                return
            self.restart_exited(list(self.ranks))
            time.sleep(0.1)
        raise AssertionError("the group did not serve: %r" % self.server.lines[-20:])

    def held_ranks(self):
        """{container: the rank its log says it holds}."""
        held = {}
        for container, log in self.logs.items():
            log.seek(0)
            m = re.search(r"tpserve_worker rank (\d+)/%d" % self.tp, log.read())
            held[container] = int(m.group(1)) if m else None
        return held

    def stop(self):
        for proc in self.ranks.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
        if self.server and self.server.proc.poll() is None:
            self.server.proc.kill()
        for log in self.logs.values():
            log.close()


def start_group(containers, tp, cuda, two_hosts, token_dir, attempts=3):
    """A serving group. free_port's ports are free when asked for, but another test
    running beside this one can take one before tpserve binds it, and tpserve then exits
    (logging "cannot serve WorkerControl on ..." or "cannot listen on ...": gRPC gives no
    reason); so a leader that exits before serving is started again on fresh ports, up
    to `attempts` times. One that keeps exiting, or a group that fails any other way,
    fails the test."""
    for attempt in range(attempts):
        group = Group(containers, tp, cuda, two_hosts, token_dir)
        try:
            group.start()
            group.wait_serving()
            return group
        except Exception as e:
            if group.server is None:
                exited = "server did not announce itself" in str(e)
            else:
                try:
                    exited = group.server.proc.wait(10) != 0
                except subprocess.TimeoutExpired:
                    exited = False
            group.stop()
            if not exited or attempt + 1 == attempts:
                raise
            print("tpserve exited before serving (a port taken before it bound?); "
                  "starting the group again on fresh ports", flush=True)


def run_group(where, containers, tp, cuda, two_hosts, token_dir, f):
    pb, pb_grpc = stubs()
    if cuda:
        os.environ["TPSERVE_EMU_DEVICE_MB"] = EMU_DEVICE_MB
    group = None
    try:
        group = start_group(containers, tp, cuda, two_hosts, token_dir)
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(group.address))
        check_demo_samples(where, group.address, not cuda, f)
        held = group.held_ranks()
        f.check(all(held[c] == c.rank for c in held), where,
                "ranks held differ from those asked for: %s" %
                {"pod%d/%s" % (c.pod, c.name): (c.rank, h) for c, h in held.items()})
        lose_worker_pod(where, group, stub, pb, f)
        check_demo_samples(where, group.address, not cuda, f)
        start = time.monotonic()
        group.server.proc.send_signal(signal.SIGTERM)
        f.check(group.server.proc.wait(60) == 0, where, "SIGTERM: tpserve did not exit 0")
        for container, proc in group.ranks.items():
            f.check(proc.wait(30) is not None, where, "rank %s outlived tpserve" % container.name)
        return time.monotonic() - start
    finally:
        os.environ.pop("TPSERVE_EMU_DEVICE_MB", None)
        if group is not None:
            group.stop()


def lose_worker_pod(where, group, stub, pb, f):
    """The worker pods' ranks killed mid-stream: UNAVAILABLE within LOSS_BOUND_S,
    NOT_SERVING; every rank container exits and, restarted, brings the pool back."""
    stream = stub.Generate(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=[1, 2, 3]),
        sampling=pb.SamplingParams(max_tokens=200, ignore_eos=True, temperature=0, n=4)),
        timeout=120)
    next(stream)
    killed = time.monotonic()
    for container, proc in group.ranks.items():
        if container.pod > 0:
            proc.kill()
    try:
        for _ in stream:
            pass
        f.check(False, where, "the stream outlived the worker pod")
    except grpc.RpcError as e:
        took = time.monotonic() - killed
        f.check(e.code() == grpc.StatusCode.UNAVAILABLE and took <= LOSS_BOUND_S, where,
                "the worker pod's loss ended the stream %s after %.1f s" % (e.code(), took))
    # The stream's error can reach the client before the leader marks the pool lost (a
    # fresh-clone CI run saw SERVING right after it); NOT_SERVING must follow promptly.
    health, until = health_status(group.address), time.monotonic() + LOSS_BOUND_S
    while health != "NOT_SERVING" and time.monotonic() < until:
        time.sleep(0.05)
        health = health_status(group.address)
    f.check(health == "NOT_SERVING", where, "health is %s, not NOT_SERVING, %.0f s after the "
            "stream ended" % (health, LOSS_BOUND_S))
    # The kubelet restarts each rank container as it exits, not one after another: ranks
    # restarted a container's exit apart can miss the pool's join timeout.
    pending = set(group.ranks)
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        pending -= set(group.restart_exited(pending))
        time.sleep(0.05)
    for container in pending:
        f.check(False, where, "rank %s did not exit after the pool was lost" % container.name)
        group.ranks[container].kill()
        group.ranks[container].wait(30)
        group.start_rank(container)
    group.wait_serving()


def main():
    f = Failures()
    known = {"tpserve": help_of(SERVER), "cpu": help_of(WORKER), "cuda": help_of(WORKER_EMU)}
    images = {None: Image(DOCKERFILE), "cuda": Image(DOCKERFILE, "cuda")}
    found = manifests.load(MANIFESTS)
    f.check(len(found) >= 2, MANIFESTS, "no CPU and CUDA LeaderWorkerSet manifests")
    runs = []
    for path, documents in found.items():
        checked = check_lws(path, documents, images, known, f)
        if checked:
            runs.append((path,) + checked)
    why = hosts.make_hosts()
    try:
        if why:
            print("lws_manifest_test: the worker pods run on this host: no second host here "
                  "(%s)" % why, flush=True)
        for path, containers, tp, image in runs:
            cuda = image.target == "cuda"
            token_dir = secret_folder(os.urandom(32).hex())
            two_hosts = not why and not cuda
            took = run_group(path, containers, tp, cuda, two_hosts, token_dir, f)
            print("PASS %s: tp %d, the worker pod %s; %s, ranks as asked, the worker pod "
                  "lost mid-stream and restarted, SIGTERM exit 0 in %.1f s"
                  % (path, tp, "on host B" if two_hosts else "on this host",
                     "generates (bfloat16)" if cuda else "Hugging Face's greedy ids", took),
                  flush=True)
    finally:
        hosts.remove_hosts()
    f.finish("the LeaderWorkerSet manifests agree with the binaries and serve")


if __name__ == "__main__":
    main()
