"""Ranks on two "hosts" of one machine: a network namespace joined to this one by a veth
pair is host B (its own address, its own loopback, and, for its ranks, its own
/dev/shm), this namespace is host A (the frontend and its ranks). tpserve
--external-workers listens on host A's veth address; workers on both hosts attach with
the token file, rendezvous through the frontend's store, and run their collectives over
TCP across the link (Gloo binds where each host routes to the store from; before, it
bound loopback and no rank of host B could join). Checked: tp 2 (a rank per host) and
tp 4 (two per host, each worker naming its rank with --host-index, --ranks-per-host and
--local-rank, host B's attaching first) answer Hugging Face's greedy ids, as one host
does, each worker holding the rank it named, with shared memory within each host and TCP
between them; a worker of
host B without the pool's token is refused; host B's rank killed, frozen (SIGSTOP) or
cut off (its link down, or every packet dropped) mid-stream ends the stream UNAVAILABLE
within 5 s, health turns NOT_SERVING, and restarted workers bring the pool back; 20% of
host B's packets dropped mid-stream leaves the stream the ids of a clean link or ends it
UNAVAILABLE, never a hang or other ids. Needs root (namespaces, veth): elsewhere
it says so and passes as a skip.
"""
import os
import shutil
import signal
import subprocess
import time

import grpc

from harness import (WORKER, Server, check_golden_greedy, free_port, health_status, stubs,
                     token_file)

MODEL = "tests/data/models/llama_gqa"
TAG = "%d" % (os.getpid() % 100000)
NAMESPACE = "tpserve-b" + TAG
VETH_A, VETH_B = "tpsa" + TAG, "tpsb" + TAG
SUBNET = "10.213.%d" % (os.getpid() % 250 + 1)
HOST_A, HOST_B = SUBNET + ".1", SUBNET + ".2"
LOSS_BOUND_S = 5  # a lost remote rank fails in-flight requests within this
STALL_S = 15  # a lossy stream with no token for this long counts as hung
HOST_B_SHM = "/tmp/tpserve-host-b-shm-" + TAG  # a tmpfs: host B's /dev/shm
# nftables (Debian's nftables; /usr/sbin is not on a Bazel test's PATH), or None.
NFT = shutil.which("nft", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def sh(*argv, check=True):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=60)


def make_hosts():
    """Host B and the link; False (with why) where this machine cannot make them."""
    if os.geteuid() != 0:
        return "not root"
    steps = [["ip", "netns", "add", NAMESPACE],
             ["ip", "link", "add", VETH_A, "type", "veth", "peer", "name", VETH_B],
             ["ip", "link", "set", VETH_B, "netns", NAMESPACE],
             ["ip", "addr", "add", HOST_A + "/24", "dev", VETH_A],
             ["ip", "link", "set", VETH_A, "up"],
             ["ip", "netns", "exec", NAMESPACE, "ip", "addr", "add", HOST_B + "/24", "dev", VETH_B],
             ["ip", "netns", "exec", NAMESPACE, "ip", "link", "set", VETH_B, "up"],
             ["ip", "netns", "exec", NAMESPACE, "ip", "link", "set", "lo", "up"],
             ["mkdir", "-p", HOST_B_SHM],
             ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", HOST_B_SHM]]
    for step in steps:
        done = sh(*step, check=False)
        if done.returncode != 0:
            return "%s: %s" % (" ".join(step), done.stderr.strip())
    return None


def remove_hosts():
    sh("ip", "netns", "del", NAMESPACE, check=False)  # takes the veth pair with it
    sh("ip", "link", "del", VETH_A, check=False)
    sh("umount", HOST_B_SHM, check=False)
    sh("rmdir", HOST_B_SHM, check=False)


def on_host_b(argv):
    """argv run in host B's network namespace with host B's /dev/shm (one tmpfs for all
    its processes, not host A's)."""
    inner = "mount --bind %s /dev/shm && exec %s" % (HOST_B_SHM, " ".join(argv))
    return ["ip", "netns", "exec", NAMESPACE, "unshare", "--mount", "--propagation", "private",
            "sh", "-c", inner]


def start_workers(control, token, tp, placed=False, logs=None):
    """tp workers dialling `control`, alternately on host A and host B; or, `placed`,
    host B's half first, each asking for its rank (--host-index 0 on host A, 1 on host
    B, --ranks-per-host tp/2, --local-rank), rank i's log lines going to `logs`[i]."""
    # Both "hosts" are this machine: each worker would take all its CPUs (a worker's
    # default --threads), and two teams on the same cores wait on each other's spins.
    argv = [os.path.abspath(WORKER), "--frontend", control, "--worker-token-file", token,
            "--threads", "1"]
    if not placed:
        return [subprocess.Popen(argv if r % 2 == 0 else on_host_b(argv)) for r in range(tp)]
    half, workers = tp // 2, []
    for host in (1, 0):
        for local in range(half):
            rank = host * half + local
            where = argv + ["--host-index", str(host), "--ranks-per-host", str(half),
                            "--local-rank", str(local)]
            workers.append((rank, subprocess.Popen(
                on_host_b(where) if host else where, stdout=logs[rank])))
        if host:  # host B's have their ranks before host A's dial: attach order differs
            for rank in range(half, tp):
                wait_logged(logs[rank], "assigned:")
    return [w for _, w in sorted(workers, key=lambda rw: rw[0])]


def wait_logged(log, text):
    for _ in range(300):
        log.seek(0)
        if text in log.read():
            return
        time.sleep(0.1)
    raise AssertionError("never logged %r" % text)


def check_rank_flags():
    """tpserve_worker's placement flags: a contradictory or impossible one exits 2 naming
    it, before dialling anything."""
    base = [WORKER, "--frontend", "127.0.0.1:1", "--worker-token-file", "/nonexistent"]
    for args, message in [(["--rank", "1", "--host-index", "0"], "not both"),
                          (["--local-rank", "1"], "--host-index is required"),
                          (["--host-index", "1", "--ranks-per-host", "2", "--local-rank", "2"],
                           "--local-rank 2 must be below --ranks-per-host 2"),
                          (["--host-index", "0", "--ranks-per-host", "0"], "--ranks-per-host"),
                          (["--rank", "70000"], "--rank must be < 65536"),
                          (["--rank", "-1"], "--rank must be ≥ 0, not -1"),
                          (["--host-index", "-2"], "--host-index must be ≥ 0, not -2"),
                          (["--host-index", "0", "--ranks-per-host", "-1"],
                           "--ranks-per-host must be in [1, 65536]"),
                          (["--threads", "-1"], "--threads must be in [0, 1024], got -1"),
                          (["--threads", "1025"], "--threads must be in [0, 1024], got 1025")]:
        token = token_file("flags", os.urandom(32).hex())
        argv = [a if a != "/nonexistent" else token for a in base] + args
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and message in out.stderr, (args, out.returncode, out.stderr)


def wait_serving(server, workers):
    for _ in range(1200):
        if health_status(server.address) == "SERVING":
            return
        assert all(w.poll() is None for w in workers), [w.returncode for w in workers]
        time.sleep(0.1)
    raise AssertionError("the pool did not form: %r" % server.lines[-20:])


def long_stream(stub, pb):
    """A stream that runs for seconds (4 completions to near the context), its first
    chunk read: in flight."""
    stream = stub.Generate(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=[1, 2, 3]),
        sampling=pb.SamplingParams(max_tokens=400, ignore_eos=True, temperature=0, n=4)),
        timeout=120)
    next(stream)
    return stream


def ends_unavailable(stream, since, what):
    """Seconds from `since` until `stream` ended UNAVAILABLE, at most LOSS_BOUND_S."""
    try:
        for _ in stream:
            pass
        raise AssertionError("the stream outlived " + what)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNAVAILABLE, e
    took = time.monotonic() - since
    assert took <= LOSS_BOUND_S, (what, took)
    return took


def restart(server, stub, pb, workers, control, token):
    """The pool's workers all end; a restarted pair (the cluster's doing) serves the golden
    ids again."""
    for w in workers:
        w.wait(30)
    workers[:] = start_workers(control, token, 2)
    wait_serving(server, workers)
    check_golden_greedy(stub, pb, MODEL)


def lose_remote_rank(server, stub, pb, workers, control, token):
    """Host B's rank dies mid-stream, then (with a new pair) freezes mid-stream (SIGSTOP:
    a hung host, whose kernel still holds its connections open): each time the stream
    ends UNAVAILABLE within LOSS_BOUND_S, health turns NOT_SERVING, host A's rank is
    shut down, and restarted workers bring the pool back. The frozen rank is found by
    the control plane's keepalive; without it, the step timeout (30 s) would. Returns
    the seconds each took."""
    stream = long_stream(stub, pb)
    killed = time.monotonic()
    workers[1].kill()
    died = ends_unavailable(stream, killed, "host B's rank")
    assert health_status(server.address) == "NOT_SERVING"
    restart(server, stub, pb, workers, control, token)
    stream = long_stream(stub, pb)
    frozen = time.monotonic()
    workers[1].send_signal(signal.SIGSTOP)
    hung = ends_unavailable(stream, frozen, "host B's frozen rank")
    assert health_status(server.address) == "NOT_SERVING"
    workers[1].kill()  # the cluster replaces the hung pod
    restart(server, stub, pb, workers, control, token)
    return died, hung


def nft_on_host_b(*rules):
    """Replaces host B's packet filter (nftables in its namespace) by `rules`, each added
    to both its input and output hooks; none: no filter."""
    sh("ip", "netns", "exec", NAMESPACE, NFT, "delete", "table", "inet", "tpserve_loss",
       check=False)
    if not rules:
        return
    script = ["add table inet tpserve_loss"]
    for hook in ("input", "output"):
        script.append("add chain inet tpserve_loss %s { type filter hook %s priority 0; }"
                      % (hook, hook))
        script += ["add rule inet tpserve_loss %s %s" % (hook, rule) for rule in rules]
    done = subprocess.run(["ip", "netns", "exec", NAMESPACE, NFT, "-f", "-"],
                          input="\n".join(script) + "\n", capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr


def lossy_link(server, stub, pb, workers, control, token):
    """Host B's packets, both ways, dropped at random (20%, nftables in its namespace)
    while a greedy stream runs: the stream ends with the ids it gives on a clean link, or
    UNAVAILABLE, or still giving the clean link's ids when the client's deadline passes —
    never other ids, never a hang (STALL_S without a token). Then every packet dropped (a partition):
    UNAVAILABLE within LOSS_BOUND_S, NOT_SERVING, both workers end; healed, restarted
    workers bring the pool back. Returns (how the lossy stream ended, its seconds, the
    seconds from the partition to the end)."""
    request = pb.GenerateRequest(token_ids=pb.TokenIds(ids=[5, 6, 7]), sampling=pb.SamplingParams(
        max_tokens=300, ignore_eos=True, temperature=0))
    clean = list(stub.GenerateUnary(request, timeout=120).token_ids)
    stream = stub.Generate(request, timeout=120)
    ids = list(next(stream).token_ids)
    nft_on_host_b("numgen random mod 100 < 20 drop")
    start = last_chunk = time.monotonic()
    try:
        for chunk in stream:
            ids += chunk.token_ids
            last_chunk = time.monotonic()
        ended = "complete"
        assert ids == clean, "a lossy link changed the ids"
    except grpc.RpcError as e:
        # Retransmits can slow a stream past the client's own deadline; that is not a
        # hang so long as tokens (the clean link's) were still arriving near its end.
        slow = (e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and ids == clean[:len(ids)]
                and time.monotonic() - last_chunk < STALL_S)
        assert e.code() == grpc.StatusCode.UNAVAILABLE or slow, (e, len(ids),
                                                                time.monotonic() - last_chunk)
        ended = "UNAVAILABLE" if e.code() == grpc.StatusCode.UNAVAILABLE else "slow"
    lossy_s = time.monotonic() - start
    if ended == "UNAVAILABLE":  # the pool was lost: bring it back before the partition
        nft_on_host_b()
        restart(server, stub, pb, workers, control, token)
        nft_on_host_b("numgen random mod 100 < 20 drop")
    stream = long_stream(stub, pb)
    cut = time.monotonic()
    nft_on_host_b("drop")
    try:
        took = ends_unavailable(stream, cut, "a partition")
        assert health_status(server.address) == "NOT_SERVING"
        for w in workers:
            w.wait(30)
    finally:
        nft_on_host_b()
    restart(server, stub, pb, workers, control, token)
    return ended, lossy_s, took


def cut_link(server, stub, pb, workers, control, token):
    """Host B's end of the link goes down mid-stream: the stream ends UNAVAILABLE within
    LOSS_BOUND_S, health turns NOT_SERVING, both workers end; healed, restarted workers
    bring the pool back. Returns the seconds from the cut to the stream's end."""
    stream = long_stream(stub, pb)
    cut = time.monotonic()
    sh("ip", "netns", "exec", NAMESPACE, "ip", "link", "set", VETH_B, "down")
    try:
        took = ends_unavailable(stream, cut, "the link")
        assert health_status(server.address) == "NOT_SERVING"
        for w in workers:
            w.wait(30)
    finally:
        sh("ip", "netns", "exec", NAMESPACE, "ip", "link", "set", VETH_B, "up")
    restart(server, stub, pb, workers, control, token)
    return took


def check_pool(pb, pb_grpc, tp, token):
    control = "%s:%d" % (HOST_A, free_port(HOST_A))
    server = Server(MODEL, tp=tp, until="listening",
                    extra_args=["--external-workers", "--control-address", control,
                                "--worker-token-file", token])
    workers = []
    logs = [open(os.path.join(os.environ["TEST_TMPDIR"], "rank%d.log" % r), "w+")
            for r in range(tp)]
    try:
        workers = start_workers(control, token, tp, placed=tp > 2, logs=logs)
        wait_serving(server, workers)
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(server.address))
        check_golden_greedy(stub, pb, MODEL)
        if tp > 2:  # each holds the rank it asked for, not the one its attach order gave
            for rank, log in enumerate(logs):
                log.seek(0)
                text = log.read()
                assert "tpserve_worker rank %d/%d" % (rank, tp) in text, (rank, text[-2000:])
                # Shared memory within each host (host B's /dev/shm is its own), TCP
                # between them.
                assert ("collectives: shared memory within hosts {0,1} {2,3}, TCP between "
                        "them" in text), text[-2000:]
        if tp == 2:
            rogue = subprocess.run(
                on_host_b([os.path.abspath(WORKER), "--frontend", control,
                           "--worker-token-file", token_file("other", os.urandom(32).hex())]),
                capture_output=True, text=True, timeout=60)
            assert rogue.returncode == 1 and "UNAUTHENTICATED" in rogue.stderr, rogue
            assert health_status(server.address) == "SERVING"
            died, hung = lose_remote_rank(server, stub, pb, workers, control, token)
            print("PASS host B's rank killed / frozen mid-stream: UNAVAILABLE %.2f / %.2f s "
                  "after, NOT_SERVING, a restarted pair serves golden ids again" % (died, hung),
                  flush=True)
            took = cut_link(server, stub, pb, workers, control, token)
            print("PASS the link cut mid-stream: UNAVAILABLE %.2f s after, NOT_SERVING, both "
                  "workers end; healed, a restarted pair serves golden ids again" % took,
                  flush=True)
            if NFT:
                ended, lossy_s, took = lossy_link(server, stub, pb, workers, control, token)
                print("PASS 20%% packet loss mid-stream: the stream ended %s after %.1f s (the "
                      "clean link's ids, or UNAVAILABLE); a partition: UNAVAILABLE %.2f s after, "
                      "NOT_SERVING; healed, a restarted pair serves golden ids again"
                      % (ended, lossy_s, took), flush=True)
            else:
                print("multi_host_test: packet loss not tested: no nft (Debian's nftables) "
                      "here", flush=True)
    finally:
        assert server.stop() == 0
        for w in workers:
            w.wait(30)  # the workers end with the server
        for log in logs:
            log.close()


def main():
    check_rank_flags()
    print("PASS tpserve_worker's contradictory placement flags exit 2 naming them", flush=True)
    why = make_hosts()
    try:
        if why:
            print("multi_host_test: SKIP: cannot make a second host here (%s)" % why)
            return
        pb, pb_grpc = stubs()
        token = token_file("worker_token", os.urandom(32).hex())
        check_pool(pb, pb_grpc, 2, token)
        print("PASS tp 2, a rank on each host: golden greedy ids; a worker of host B with "
              "another token is refused", flush=True)
        check_pool(pb, pb_grpc, 4, token)
        print("PASS tp 4, two ranks on each host, host B's attaching first: each worker holds "
              "the rank its --host-index/--local-rank name; shared memory within each host, "
              "TCP between; golden greedy ids", flush=True)
    finally:
        remove_hosts()


if __name__ == "__main__":
    main()
