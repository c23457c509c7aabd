"""The image half of tests/deploy: what deploy/Dockerfile's two images (the default CPU
one and --target cuda) install and run, checked against the built binaries (their
shared libraries, through ldd and dpkg) and against tpserve's own flags; the CPU image
holds no CUDA library."""
import fnmatch
import os
import subprocess
import sys

import dockerfile
import manifests
from harness import CLI, SERVER, WORKER

DOCKERFILE = "deploy/Dockerfile"
DEMO = "models/demo"
WORKER_CUDA = "worker/rank/tpserve_worker_cuda"
# What each image runs: the default (CPU) one and the one built with --target cuda.
IMAGE_BINARIES = {None: (SERVER, WORKER, CLI), "cuda": (SERVER, WORKER_CUDA, CLI)}
CUDA_LIBRARIES = ("libcuda.so*", "libcudart*", "libcublas*", "libnccl*", "libnvidia*")


class Failures:
    """Broken rules, each naming its file, so that one run reports all of them."""

    def __init__(self):
        self.rules = []

    def check(self, ok, where, rule):
        if not ok:
            self.rules.append("%s: %s" % (where, rule))
        return ok

    def finish(self, passed):
        """Prints every broken rule and exits 1, or prints PASS `passed`."""
        for rule in self.rules:
            print("FAIL " + rule, flush=True)
        if self.rules:
            sys.exit(1)
        print("PASS " + passed, flush=True)


class Image:
    """What an image of the Dockerfile sets up: the stage `target` (default: the last),
    with the stages it is built FROM."""

    def __init__(self, path, target=None):
        self.target = target
        self.where = "%s: %s image" % (path, "--target " + target if target else "default")
        stage = dockerfile.image_instructions(dockerfile.stages(path), target)
        text = {k: getattr(dockerfile.find(stage, k), "rest", "")
                for k in ("ENTRYPOINT", "CMD", "USER", "EXPOSE", "HEALTHCHECK")}
        self.entrypoint = dockerfile.exec_form(text["ENTRYPOINT"])
        self.cmd = dockerfile.exec_form(text["CMD"])
        self.healthcheck = dockerfile.healthcheck_command(text["HEALTHCHECK"])
        self.user = text["USER"].split(":")[0]
        self.exposed = text["EXPOSE"].split()
        self.packages = dockerfile.apt_packages(stage)
        self.installed = {}  # source path -> where it lands in the image
        for _, sources, destination in dockerfile.copies(stage):
            for source in sources:
                into_folder = destination.endswith("/")
                self.installed[source] = (destination + os.path.basename(source)
                                          if into_folder else destination)

    def installed_as(self, name):
        """Where a copied file whose base name is `name` lands, or None."""
        return next((d for s, d in self.installed.items() if os.path.basename(s) == name), None)


def deb_owners(paths):
    """{path: Debian package} for the files that a package owns, each tried as given,
    resolved and as its /usr-merged twin (one dpkg query for all of them)."""
    candidates = {}
    for path in paths:
        twin = path[4:] if path.startswith("/usr/") else "/usr" + path
        for candidate in (path, os.path.realpath(path), twin):
            candidates.setdefault(candidate, path)
    out = subprocess.run(["dpkg", "-S"] + list(candidates), capture_output=True, text=True)
    owners = {}
    for line in out.stdout.splitlines():
        packages, _, owned = line.rpartition(": ")
        if packages and not line.startswith("diversion") and owned in candidates:
            owners.setdefault(candidates[owned], packages.split(",")[0].split(":")[0])
    return owners


def shared_libraries(binary):
    """[(name, path or None)] that ldd reports for a binary."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    for words in (line.split() for line in out.splitlines()):
        if "=>" in words and words[words.index("=>") + 1] != "not found":
            path = words[words.index("=>") + 1]
            if path.startswith("/"):
                yield words[0], path
        elif "=>" in words:
            yield words[0], None
        elif words and words[0].startswith("/"):
            yield os.path.basename(words[0]), words[0]


def check_libraries(image, f):
    where = image.where
    loaded = {}  # path -> the first binary that loads it
    for binary in IMAGE_BINARIES[image.target]:
        for name, path in shared_libraries(binary):
            if f.check(path, where, "ldd finds no %s for %s here" % (name, binary)):
                loaded.setdefault(path, binary)
    owners = deb_owners(loaded)
    for path, binary in sorted(loaded.items()):
        if path in owners:
            f.check(owners[path] in image.packages, where,
                    "%s (loaded by %s) is in Debian package %s, which apt-get install "
                    "does not list" % (path, binary, owners[path]))
        else:
            copied = image.installed_as(os.path.basename(path))
            f.check(copied and os.path.dirname(copied) == os.path.dirname(path), where,
                    "%s (loaded by %s) is in no Debian package, and no COPY puts it in "
                    "%s/" % (path, binary, os.path.dirname(path)))
    for package in image.packages:
        f.check(not package.endswith("-dev"), where, "installs %s, a -dev package" % package)
        f.check(package in owners.values(), where, "installs %s, which owns none of the "
                "libraries that ldd reports for the three binaries" % package)


def check_no_cuda(image, f):
    """The CPU image holds no CUDA library: its binaries load none, and neither a COPY nor
    a package puts one in."""
    cuda = [name for binary in IMAGE_BINARIES[image.target]
            for name, _ in shared_libraries(binary)
            if any(fnmatch.fnmatch(name, p) for p in CUDA_LIBRARIES)]
    f.check(not cuda, image.where, "its binaries load CUDA libraries: %s" % ", ".join(cuda))
    copied = [d for d in image.installed.values()
              if any(fnmatch.fnmatch(os.path.basename(d), p) for p in CUDA_LIBRARIES)]
    f.check(not copied, image.where, "copies CUDA libraries: %s" % ", ".join(copied))
    packages = [p for p in image.packages if "cuda" in p or "nccl" in p or "cublas" in p]
    f.check(not packages, image.where, "installs CUDA packages: %s" % ", ".join(packages))


def parse_flags(arguments, known, where, f):
    """manifests.flag_map, with what is wrong reported as a broken rule ({} then)."""
    try:
        return manifests.flag_map(arguments, known)
    except ValueError as e:
        f.check(False, where, str(e))
        return {}


def check_image(image, known, f):
    """Returns the flags of the image's default command line."""
    where = image.where
    if not (f.check(image.entrypoint and image.cmd, where, "ENTRYPOINT and CMD are not in "
                    "exec form, so tpserve would not be PID 1 and get SIGTERM")):
        return {}
    flags = parse_flags(image.entrypoint[1:] + image.cmd, known, where, f)
    for binary in IMAGE_BINARIES[image.target]:
        f.check(image.installed_as(os.path.basename(binary)), where,
                "no COPY installs %s" % os.path.basename(binary))
    f.check(image.entrypoint[0] == image.installed_as("tpserve"), where,
            "ENTRYPOINT runs %s, not the tpserve it installs" % image.entrypoint[0])
    # tpserve spawns the worker installed beside it, unless --worker-binary names one.
    worker = os.path.basename(IMAGE_BINARIES[image.target][1])
    f.check(os.path.dirname(image.installed_as(worker) or "") ==
            os.path.dirname(image.entrypoint[0]) and "worker-binary" not in flags, where,
            "%s is not installed beside tpserve (or --worker-binary overrides it)" % worker)
    f.check(flags.get("model") == image.installed.get(DEMO), where,
            "--model is not where %s is copied" % DEMO)
    f.check(image.user.isdigit() and image.user != "0", where, "USER is not a numeric non-root uid")
    f.check(flags.get("port") in image.exposed, where, "EXPOSE does not list --port")
    f.check("metrics-port" not in flags or flags["metrics-port"] in image.exposed, where,
            "EXPOSE does not list --metrics-port")
    health = image.healthcheck or []
    f.check(health[:1] == [image.installed_as("tpserve-cli")] and "health" in health and
            any(w.endswith(":" + str(flags.get("port"))) for w in health), where,
            "HEALTHCHECK is not tpserve-cli health on --port")
    return flags
