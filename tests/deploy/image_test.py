"""Builds deploy/Dockerfile for real and runs the CPU image, with Debian's own packages
(no container registry is reachable): mmdebstrap bootstraps the debian:12 base (also
tagged debian:12-slim) from the apt mirror this machine uses, podman imports it, and
podman builds the Dockerfile as written (its default target, the CPU image). The
image then:

  - holds no CUDA library, and every shared library its three binaries load resolves;
  - starts as its numeric non-root user, with every process of the container that user;
  - passes its own HEALTHCHECK (podman healthcheck run);
  - serves the bundled demo model: greedy generations equal models/demo/samples.json
    (Hugging Face's);
  - stays within deploy/kubernetes/tpserve.yaml's memory request, run under that limit
    (peak of the container's memory cgroup, when the machine's cgroups report it);
  - exits 0 on SIGTERM with a stream in flight, and the stream finishes.

Its build time, the image's size and the peak memory are printed (docs/ keeps them).
Where containers cannot run (not root, no user namespaces, no podman to install), it
says why and exits 0: SKIP. The bazel disk cache and apt's archive cache of this machine
are mounted into the build, so the in-image build reuses what CI built.

    python3 tests/deploy/image_test.py        # from the repository root, as root
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), d)
                for d in (".", os.path.join("..", "e2e"))]
import manifests  # noqa: E402
from image_checks import CUDA_LIBRARIES  # noqa: E402

IMAGE = "localhost/tpserve:image-test"
CONTAINER = "tpserve-image-test"
BASES = ("docker.io/library/debian:12", "docker.io/library/debian:12-slim")
CLI = "bazel-bin/client/tpserve-cli"
MANIFEST = "deploy/kubernetes/tpserve.yaml"
SAMPLES = "models/demo/samples.json"
PORT = 50051  # the image's --port
PACKAGES = ["podman", "buildah", "mmdebstrap", "runc", "uidmap", "ca-certificates"]


def log(message):
    print("image_test: " + message, flush=True)


def skip(why):
    log("SKIP: " + why)
    sys.exit(0)


def run(argv, check=True, timeout=3600, **kwargs):
    return subprocess.run(argv, check=check, timeout=timeout, text=True, **kwargs)


def out(argv, timeout=600):
    return run(argv, capture_output=True, timeout=timeout).stdout


def install():
    """The container tools, from Debian; False when they cannot be had."""
    if all(shutil.which(t) for t in ("podman", "mmdebstrap", "runc")):
        return True
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], check=False, env=env)
    done = run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + PACKAGES,
               check=False, env=env, stdout=subprocess.DEVNULL)
    return done.returncode == 0 and bool(shutil.which("podman"))


def mirror_source():
    """This machine's apt source for Debian: the deb822 file or sources.list."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return path
    return "http://deb.debian.org/debian"


def make_base(work):
    """debian:12 (and -slim) bootstrapped from Debian's packages, imported into podman."""
    if all(run(["podman", "image", "exists", b], check=False).returncode == 0 for b in BASES):
        log("base images present")
        return
    tar = os.path.join(work, "debian12.tar")
    start = time.monotonic()
    for step in (["mmdebstrap", "--variant=minbase", "--mode=root", "--quiet", "bookworm", tar,
                  mirror_source()],
                 ["podman", "import", "--quiet", tar, BASES[0]],
                 ["podman", "tag", BASES[0], BASES[1]]):
        done = run(step, check=False, capture_output=True)
        if done.returncode != 0:
            skip("cannot make the debian:12 base here (%s: %s)"
                 % (" ".join(step[:2]), done.stderr.strip()[-500:]))
    log("base debian:12 bootstrapped with mmdebstrap in %.0f s" % (time.monotonic() - start))


def engine_flags():
    """The OCI runtime, limits and network this machine's kernel accepts for containers:
    crun, else runc (crun refuses cgroup v1 hybrid hierarchies); the open-files limit no
    higher than this process's (podman's default is above what a VM may allow); the
    host's network (no bridge needed)."""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1 << 20)
    limits = ["--ulimit", "nofile=%d:%d" % (nofile, nofile), "--ulimit", "nproc=4096:4096",
              "--network", "host"]
    errors = []
    for runtime in ("crun", "runc"):
        if not shutil.which(runtime):
            continue
        flags = ["--runtime", runtime] + limits
        tried = run(["podman", "run", "--rm"] + flags + [BASES[0], "true"], check=False,
                    capture_output=True, timeout=120)
        if tried.returncode == 0:
            return flags
        errors.append("%s: %s" % (runtime, tried.stderr.strip()[-300:]))
    skip("no container runs on this machine: " + "; ".join(errors))


def build(flags):
    revision = out(["git", "rev-parse", "--short=12", "HEAD"]).strip() or "unknown"
    volumes = []
    for host, inside in ((os.path.expanduser("~/.cache/tpserve-bazel-disk"),
                          "/root/.cache/tpserve-bazel-disk"),
                         ("/var/cache/apt/archives", "/var/cache/apt/archives")):
        os.makedirs(host, exist_ok=True)
        volumes += ["--volume", "%s:%s" % (host, inside)]
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as output:
        # Docker's image format: OCI's has no HEALTHCHECK.
        done = run(["podman", "build", "--format", "docker", "-f", "deploy/Dockerfile", "-t", IMAGE,
                    "--build-arg", "TPSERVE_GIT_REVISION=" + revision] + flags + volumes + ["."],
                   check=False, stdout=output, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            output.seek(0)
            print("".join(output.readlines()[-80:]), flush=True)
            raise SystemExit("image_test: podman build of deploy/Dockerfile failed (exit %d)"
                             % done.returncode)
    return time.monotonic() - start


def memory_request():
    """Bytes: the CPU Deployment's memory request."""
    deployment = manifests.of_kind(manifests.load(MANIFEST)[MANIFEST], "Deployment")[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return int(manifests.quantity(container["resources"]["requests"]["memory"]))


class Failures:
    def __init__(self):
        self.rules = []

    def check(self, ok, rule):
        if not ok:
            self.rules.append(rule)
        log(("ok: " if ok else "FAIL: ") + rule)
        return ok


def check_contents(flags, f):
    script = ("find / -xdev \\( " + " -o ".join("-name '%s'" % n for n in CUDA_LIBRARIES) +
              " \\) -print; ldd /usr/local/bin/tpserve /usr/local/bin/tpserve_worker "
              "/usr/local/bin/tpserve-cli | grep 'not found' || true")
    found = out(["podman", "run", "--rm"] + flags + ["--user", "0", "--entrypoint", "/bin/sh",
                                                      IMAGE, "-c", script]).strip()
    f.check(found == "", "the image holds no CUDA library and every library resolves%s"
            % ("" if not found else ": " + found.replace("\n", ", ")))
    image = json.loads(out(["podman", "image", "inspect", IMAGE]))[0]
    f.check(image["Config"].get("User", "").split(":")[0] == "10001",
            "the image's user is uid 10001")
    test = (image.get("Healthcheck") or {}).get("Test") or []
    f.check("health" in test and "/usr/local/bin/tpserve-cli" in test,
            "the image has its HEALTHCHECK, tpserve-cli health: %s" % test)


def cgroup_peak(pid):
    """Bytes: the peak of the memory cgroup of process `pid`, or None where unknown."""
    for line in open("/proc/%d/cgroup" % pid):
        number, controllers, path = line.rstrip("\n").split(":", 2)
        for name in ("memory.max_usage_in_bytes", "memory.peak"):
            root = "/sys/fs/cgroup/memory" if controllers == "memory" else (
                "/sys/fs/cgroup" if number == "0" else None)
            if root and os.path.exists(root + path + "/" + name):
                return int(open(root + path + "/" + name).read())
    return None


def wait_healthy(f):
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if run(["podman", "healthcheck", "run", CONTAINER], check=False,
               capture_output=True).returncode == 0:
            return f.check(True, "the image's HEALTHCHECK passes")
        state = json.loads(out(["podman", "inspect", CONTAINER]))[0]["State"]
        if not state.get("Running"):
            break
        time.sleep(2)
    logs = run(["podman", "logs", CONTAINER], check=False, capture_output=True)
    return f.check(False, "the image's HEALTHCHECK passes (logs: %s)"
                   % (logs.stdout + logs.stderr)[-2000:])


def check_running(flags, request, f):
    run(["podman", "rm", "-f", CONTAINER], check=False, capture_output=True)
    # The HEALTHCHECK is run here (podman healthcheck run), not by a systemd timer.
    started = run(["podman", "run", "-d", "--name", CONTAINER, "--memory", str(request),
                   "--memory-swap", str(request), "--health-interval", "disable"] + flags +
                  [IMAGE], check=False, capture_output=True)
    if not f.check(started.returncode == 0, "the image starts" + (
            "" if started.returncode == 0 else ": " + started.stderr[-1000:])):
        return None
    try:
        if not wait_healthy(f):
            return None
        pid = json.loads(out(["podman", "inspect", CONTAINER]))[0]["State"]["Pid"]
        users = out(["podman", "top", CONTAINER, "user", "comm"]).split("\n")[1:]
        users = [u.split() for u in users if u.strip()]
        f.check(users and all(u[0] in ("10001", "tpserve") for u in users),
                "every process runs as the image's non-root user: %s" % users)
        target = "127.0.0.1:%d" % PORT
        samples = json.load(open(SAMPLES))
        for sample in samples["samples"]:
            got = run([CLI, "--target", target, "generate", sample["prompt"], "--temperature",
                       "0", "--max-tokens", str(samples["max_new_tokens"]), "--json"],
                      capture_output=True, timeout=120, check=False)
            ids = json.loads(got.stdout).get("token_ids") if got.returncode == 0 else got.stderr
            f.check(ids == sample["output_ids"], "greedy %r is Hugging Face's" % sample["prompt"])
        stream = subprocess.Popen([CLI, "--target", target, "generate", "And God said",
                                   "--max-tokens", "300", "--ignore-eos", "--stream"],
                                  stdout=subprocess.PIPE)
        stream.stdout.read(1)  # the first chunk: the request is in flight
        peak = cgroup_peak(pid)
        run(["podman", "kill", "--signal", "TERM", CONTAINER], stdout=subprocess.DEVNULL)
        code = out(["podman", "wait", CONTAINER], timeout=90).strip()
        stream.stdout.read()
        f.check(code == "0", "SIGTERM with a stream in flight: exit %s" % code)
        f.check(stream.wait(30) == 0, "the stream in flight at SIGTERM finishes")
        state = json.loads(out(["podman", "inspect", CONTAINER]))[0]["State"]
        f.check(not state.get("OOMKilled"), "not OOM-killed under the memory request")
        if peak is not None:
            f.check(peak <= request, "peak memory %d MiB within the request %d MiB"
                    % (peak >> 20, request >> 20))
        return peak
    finally:
        run(["podman", "rm", "-f", CONTAINER], check=False, capture_output=True)


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if os.environ.get("TPSERVE_SKIP_IMAGE_TEST"):
        skip("TPSERVE_SKIP_IMAGE_TEST is set")
    if os.geteuid() != 0:
        skip("not root: rootful podman is what this test drives")
    if run(["unshare", "--user", "--map-root-user", "true"], check=False,
           capture_output=True).returncode != 0:
        skip("no user namespaces on this machine")
    if not os.access(CLI, os.X_OK):
        raise SystemExit("image_test: build //client:tpserve-cli first (bazel build //...)")
    if not install():
        skip("podman, mmdebstrap and runc cannot be installed from apt here")
    f = Failures()
    with tempfile.TemporaryDirectory() as work:
        make_base(work)
    flags = engine_flags()
    seconds = build(flags)
    size = int(json.loads(out(["podman", "image", "inspect", IMAGE]))[0]["Size"])
    check_contents(flags, f)
    request = memory_request()
    peak = check_running(flags, request, f)
    log("built in %.0f s; image %s: %.0f MB; peak memory %s (request %d MiB)"
        % (seconds, IMAGE, size / 1e6, "%d MiB" % (peak >> 20) if peak else "unknown",
           request >> 20))
    if f.rules:
        for rule in f.rules:
            log("FAIL " + rule)
        sys.exit(1)
    log("PASS the image builds, runs as its user, passes its HEALTHCHECK, serves the demo "
        "and drains on SIGTERM")


if __name__ == "__main__":
    main()
