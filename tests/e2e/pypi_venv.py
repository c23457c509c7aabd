"""Runs a test script inside a venv of its own that holds PyPI packages Debian lacks (the
`openai` SDK, kubernetes-validate): the venv is made once per set of pinned requirements
and cached (under $TPSERVE_VENV_CACHE, else /tmp), with Debian's grpcio, protobuf and
PyYAML coming in through --system-site-packages."""
import hashlib
import os
import subprocess
import sys


def reexec_in_venv(name, requirements, module, no_deps=False):
    """Returns when `module` imports here; otherwise re-executes this script with the
    Python of the venv `name` holding `requirements` (pinned "pkg==version" strings;
    with no_deps, nothing else: their dependencies are Debian's), making that venv
    first if needed."""
    try:
        __import__(module)
        return
    except ImportError:
        pass
    digest = hashlib.sha256(("\n".join(requirements) + str(no_deps)).encode()).hexdigest()[:12]
    venv = os.path.join(os.environ.get("TPSERVE_VENV_CACHE", "/tmp"),
                        "tpserve-%s-venv-%s" % (name, digest))
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(venv, "ready")):
        staging = "%s.%d" % (venv, os.getpid())
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", staging],
                       check=True)
        subprocess.run([os.path.join(staging, "bin", "pip"), "install", "-q"] +
                       (["--no-deps"] if no_deps else []) + requirements,
                       check=True, timeout=600)
        open(os.path.join(staging, "ready"), "w").close()
        try:
            os.rename(staging, venv)  # another run may have won: use either
        except OSError:
            subprocess.run(["rm", "-rf", staging])
        # The venv's scripts name the staging path; its python runs from anywhere.
    os.execv(python, [python] + sys.argv)
