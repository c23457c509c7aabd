"""Shared pieces of the end-to-end tests: the tpserve process, the CLI, and Python stubs
generated from the repo's protos at test time.

The tests run from the Bazel runfiles root with Debian's python3 (grpcio, protobuf).
The server picks its own free port (--port 0) and announces it on stdout.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

SERVER = "server/tpserve"
WORKER = "worker/rank/tpserve_worker"
CLI = "client/tpserve-cli"


def generate_stubs(out_dir):
    plugin = ["--python_out=" + out_dir, "--grpc_python_out=" + out_dir,
              "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin"]
    subprocess.run(["/usr/bin/protoc", "-Iproto"] + plugin + ["proto/tpserve/v1/inference.proto"],
                   check=True)
    # Python's own `grpc` package owns the grpc.* module path: compile the health proto
    # under another file name (the wire names stay grpc.health.v1.Health).
    shutil.copy("proto/grpc/health/v1/health.proto", os.path.join(out_dir, "e2e_health.proto"))
    subprocess.run(["/usr/bin/protoc", "-I" + out_dir] + plugin + [os.path.join(out_dir, "e2e_health.proto")],
                   check=True)
    sys.path.insert(0, out_dir)


class Server:
    """The tpserve process; its stdout is scanned for the serving line."""

    def __init__(self, model=None, tp=2, extra_args=(), until="serving", argv=None):
        """Starts tpserve and waits for its "tpserve: <until> on ADDRESS" line. argv, when
        given, is the whole command line instead of the tests' flags for `model`."""
        if argv is None:
            argv = [SERVER, "--model", model, "--tp", str(tp), "--device", "cpu", "--host",
                    "127.0.0.1", "--port", "0", "--worker-binary", WORKER, "--kv-blocks", "128",
                    "--drain-grace-ms", "20000"] + list(extra_args)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.lines = []
        self.address = None
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.search(r" tpserve: %s on (\S+)" % until, line)
                if m and self.address is None:
                    self.address = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(240) or self.address is None:
            self.proc.kill()
            raise AssertionError("server did not announce itself: %r" % self.lines)

    def metrics_port(self):
        """The --metrics-port the server announced ("tpserve: metrics on http://H:P/metrics")."""
        for line in self.lines:
            m = re.search(r" tpserve: metrics on http://\S+:(\d+)/metrics", line)
            if m:
                return int(m.group(1))
        raise AssertionError("no metrics line: %r" % self.lines)

    def http_port(self):
        """The --http-port the server announced ("OpenAI-compatible API on http://H:P/v1")."""
        for line in self.lines:
            if "OpenAI-compatible API on http://" in line:
                return int(line.rsplit(":", 1)[1].split("/")[0])
        raise AssertionError("no HTTP line: %r" % self.lines)

    def worker_pids(self):
        """The live worker children of the server."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = open("/proc/%s/stat" % entry).read()
            except OSError:
                continue
            name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            # tpserve_worker, or tpserve_worker_emu (whose name the kernel cuts to 15).
            if (name.startswith("tpserve_worker") and int(fields[1]) == self.proc.pid and
                    fields[0] != "Z"):
                pids.append(int(entry))
        return pids

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def scrape_metrics(port):
    """GET /metrics on 127.0.0.1:port (200, text format 0.0.4), parsed with the official
    Prometheus client (Debian's python3-prometheus-client): ({(sample name, frozenset of
    labels): value}, {family: type})."""
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as response:
        assert response.status == 200, response.status
        kind = response.headers["Content-Type"]
        assert kind.startswith("text/plain; version=0.0.4"), kind
        text = response.read().decode()
    samples, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, types


def metric_value(samples, name, **labels):
    """The value of sample `name` with exactly `labels` in scrape_metrics' samples, or None."""
    return samples.get((name, frozenset(labels.items())))


def stubs():
    """Generates the Python stubs and returns (inference_pb2, inference_pb2_grpc)."""
    out_dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    generate_stubs(out_dir)
    from tpserve.v1 import inference_pb2, inference_pb2_grpc
    return inference_pb2, inference_pb2_grpc


def health_status(address):
    """grpc.health.v1 Check of the whole server: "SERVING", "NOT_SERVING", ... (after
    stubs())."""
    import e2e_health_pb2
    import e2e_health_pb2_grpc
    import grpc
    stub = e2e_health_pb2_grpc.HealthStub(grpc.insecure_channel(address))
    status = stub.Check(e2e_health_pb2.HealthCheckRequest(), timeout=10).status
    return e2e_health_pb2.HealthCheckResponse.ServingStatus.Name(status)


class HealthWatch:
    """Records every status a grpc.health.v1 Watch stream reports (after stubs()), so a
    transient NOT_SERVING is seen even if it lasts less than a polling interval."""

    def __init__(self, address):
        import e2e_health_pb2
        import e2e_health_pb2_grpc
        import grpc
        self.seen = []
        stub = e2e_health_pb2_grpc.HealthStub(grpc.insecure_channel(address))
        self._call = stub.Watch(e2e_health_pb2.HealthCheckRequest())
        names = e2e_health_pb2.HealthCheckResponse.ServingStatus.Name

        def pump():
            try:
                for response in self._call:
                    self.seen.append(names(response.status))
            except grpc.RpcError:
                pass

        threading.Thread(target=pump, daemon=True).start()

    def cancel(self):
        self._call.cancel()


def free_port(host="127.0.0.1"):
    """A TCP port free on `host` now."""
    import socket
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def token_file(name, token):
    """A worker token file in TEST_TMPDIR, private to this user, as tpserve wants it."""
    path = os.path.join(os.environ["TEST_TMPDIR"], name)
    with open(path, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def check_golden_greedy(stub, pb, model):
    """Every greedy case of `model`'s golden.json, answered with Hugging Face's ids."""
    import json
    golden = json.load(open(model + "/golden.json"))
    for case in golden["greedy"]:
        response = stub.GenerateUnary(pb.GenerateRequest(
            token_ids=pb.TokenIds(ids=golden["prompts"][case["prompt_index"]]),
            sampling=pb.SamplingParams(max_tokens=len(case["output_ids"]), temperature=0)),
            timeout=120)
        assert list(response.token_ids) == case["output_ids"], (response, case)


def cli(address, *args):
    out = subprocess.run([CLI, "--target", address] + list(args), capture_output=True,
                         text=True, timeout=120)
    return out.returncode, out.stdout, out.stderr
