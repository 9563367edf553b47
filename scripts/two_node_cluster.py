"""A real two-node Ray cluster on this machine: submit efx_mappo as a Ray job, then train
it through --address across both nodes, lose the worker node mid-run, keep training on the head.

    python scripts/two_node_cluster.py [--iters 8] [--kill-after 3] [--keep-dir]

Each node gets its own ``--num-cpus``, temp dir and ports. Ray 2.60 clusters use token
authentication: the script writes one token file and hands it to every process it
starts (head, worker node, driver, job CLI) through ``RAY_AUTH_MODE=token`` and
``RAY_AUTH_TOKEN_PATH``; ``~/.ray/auth_token`` is left alone. Every node runs as
``ray start --block`` under a PID this script records; the worker node's raylet is
killed by its own PID, and at the end only the recorded processes are stopped (never
``ray stop``, which would end every Ray on the machine). ``ray job submit`` needs
Ray's job server: ``pip install -c constraints.txt -e ".[cluster]"``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

CPUS_PER_NODE = 2
ENV_RUNNERS = 3  # more than one node holds: runners land on both


class NodeExited(RuntimeError):
    """A node's ``ray start --block`` ended while the cluster was starting."""


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def children(pid: int) -> list[int]:
    """Direct child PIDs of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def missing_cluster_packages() -> list[str]:
    """Modules of ``ray[default]`` (the ``cluster`` extra) that a head node with a
    dashboard, job server and client server needs and this environment lacks."""
    return [m for m in ("grpc", "aiohttp", "aiohttp_cors", "opencensus") if not find_spec(m)]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Cluster:
    """Head and worker node started with ``ray start --block``; stops only those."""

    def __init__(self, root: Path) -> None:
        self.root = root
        token = root / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token),
        }
        self.gcs_port, self.dashboard_port = free_ports(2)
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.nodes: dict[str, subprocess.Popen] = {}

    def _node_ports(self) -> list[str]:
        node_manager, object_manager, client, agent, metrics, runtime_env, http = free_ports(7)
        low = free_ports(1)[0]
        return [
            f"--node-manager-port={node_manager}",
            f"--object-manager-port={object_manager}",
            f"--dashboard-agent-grpc-port={agent}",
            f"--dashboard-agent-listen-port={http}",
            f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--min-worker-port={low}",
            f"--max-worker-port={low + 200}",
        ] + ([f"--ray-client-server-port={client}"] if not self.nodes else [])

    def start_node(self, name: str, *, head: bool) -> None:
        temp_dir = self.root / name
        temp_dir.mkdir()
        command = ["ray", "start", "--block", "--disable-usage-stats"]
        command += [f"--num-cpus={CPUS_PER_NODE}", f"--temp-dir={temp_dir}"]
        command += ["--node-ip-address=127.0.0.1", *self._node_ports()]
        if head:
            command += [
                "--head",
                f"--port={self.gcs_port}",
                "--include-dashboard=true",
                "--dashboard-host=127.0.0.1",
                f"--dashboard-port={self.dashboard_port}",
            ]
        else:
            command += [f"--address={self.address}"]
        with open(self.root / f"{name}.log", "w") as log:  # the child keeps its own fd
            self.nodes[name] = subprocess.Popen(
                command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        print(f"started {name} node: ray start --block, pid {self.nodes[name].pid}", flush=True)

    def start_node_and_wait(self, name: str, *, head: bool, count: int, tries: int = 3) -> None:
        """``start_node`` then ``wait_for_nodes(count)``; a node that exits while starting
        is started again on fresh ports (a port chosen free can be taken by another
        process before the node binds it), up to ``tries`` times."""
        for attempt in range(1, tries + 1):
            self.start_node(name, head=head)
            try:
                self.wait_for_nodes(count)
                return
            except NodeExited as e:
                if attempt == tries:
                    raise
                print(f"{e}; starting it again ({attempt + 1}/{tries})", flush=True)
                self.nodes.pop(name)
                log = self.root / f"{name}.log"
                log.rename(self.root / f"{name}.attempt{attempt}.log")
                shutil.rmtree(self.root / name, ignore_errors=True)
                if head:
                    self.gcs_port, self.dashboard_port = free_ports(2)
                    self.address = f"127.0.0.1:{self.gcs_port}"

    def wait_for_nodes(self, count: int, timeout: float = 120.0) -> None:
        probe = (
            f"import ray; ray.init(address='{self.address}', logging_level='ERROR'); "
            "print(sum(n['Alive'] for n in ray.nodes()))"
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, process in self.nodes.items():
                if process.poll() is not None:
                    log = self.root / f"{name}.log"
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                    raise NodeExited(f"{name} node exited; its log ({log}) ends:\n{tail}")
            try:  # ray.init waits for a head that is still starting, or never will
                out = subprocess.run(
                    [sys.executable, "-c", probe],
                    env=self.env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            except subprocess.TimeoutExpired:
                continue
            alive = out.stdout.strip()
            if out.returncode == 0 and alive.isdigit() and int(alive) >= count:
                return
            time.sleep(2)
        raise TimeoutError(f"the cluster did not reach {count} nodes in {timeout:.0f} s")

    def raylet_pid(self, name: str) -> int:
        """The raylet started by node ``name``'s ``ray start --block``."""
        for pid in children(self.nodes[name].pid):
            if "raylet" in command_line(pid).split(" ")[0]:
                return pid
        raise RuntimeError(f"no raylet among the children of {name}'s ray start")

    def stop(self) -> None:
        """SIGTERM to each recorded ``ray start --block`` (it ends its node's processes),
        then SIGKILL to what is left of those process groups."""
        for process in self.nodes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.time() + 30
        for process in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(1.0, deadline - time.time()))
            # Each node was started in its own session: its group is its processes.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


def train_across_nodes(cluster: Cluster, iters: int, kill_after: int) -> Path:
    """efx_mappo through --address; kills the worker node's raylet after ``kill_after``
    iterations; returns the final checkpoint."""
    command = [
        sys.executable, "-m", "marllib_ext.cli", "train", "efx_mappo",
        "--env", "mpe:simple_spread", "--address", cluster.address,
        "--stop-iters", str(iters), "--checkpoint-freq", "1",
        "--local-dir", str(cluster.root / "runs"),
        "--set", f"num_env_runners={ENV_RUNNERS}", "--set", "train_batch_size=1200",
        "--set", "minibatch_size=600", "--set", "num_envs_per_env_runner=4",
    ]  # fmt: skip
    print("$ " + " ".join(command[1:]), flush=True)
    driver = subprocess.Popen(
        command, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    checkpoint = None
    for line in driver.stdout:
        print("  " + line.rstrip(), flush=True)
        match = re.match(r"iter\s+(\d+)", line)
        if match and int(match.group(1)) == kill_after:
            raylet = cluster.raylet_pid("worker")
            os.kill(raylet, signal.SIGKILL)
            print(f"killed the worker node's raylet (pid {raylet})", flush=True)
        if line.startswith("checkpoint:"):
            checkpoint = Path(line.split(":", 1)[1].strip())
    if driver.wait() != 0 or checkpoint is None:
        raise RuntimeError("training across the cluster failed")
    return checkpoint


def run_job(command: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``ray job submit ...``, retried while the head's job agents are still starting."""
    for _ in range(10):
        job = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        if "No available agent" not in job.stdout + job.stderr:
            break
        time.sleep(5)
    return job


def submit_job(cluster: Cluster) -> None:
    """The same run as a Ray job through the head's job server."""
    env = {**cluster.env, "RAY_ADDRESS": f"http://127.0.0.1:{cluster.dashboard_port}"}
    command = [
        "ray", "job", "submit", "--", "marllib-ext", "train", "efx_mappo",
        "--env", "mpe:simple_spread", "--stop-iters", "2",
        "--local-dir", str(cluster.root / "job_runs"),
        "--set", "num_env_runners=1", "--set", "train_batch_size=1200",
        "--set", "minibatch_size=600",
    ]  # fmt: skip
    print("$ " + " ".join(command), flush=True)
    job = run_job(command, env, timeout=600)
    for line in job.stdout.splitlines():
        if re.match(r"(iter |checkpoint:|training |Job '|-+$)", line.strip()):
            print("  " + line.strip(), flush=True)
    if job.returncode != 0 or "succeeded" not in job.stdout.lower():
        raise RuntimeError(f"ray job submit failed:\n{job.stdout[-3000:]}{job.stderr[-3000:]}")
    print("ray job submit: SUCCEEDED", flush=True)


BENCHMARK = """\
name: cluster_grid
algorithms: [mappo, ippo]
tasks: [toy:coordination]
seeds: [0, 1]
stop: {iterations: 2}
evaluation: {every: 2, episodes: 2}
resources: {env_runners: 0}
"""


def submit_benchmark(cluster: Cluster) -> Path:
    """An experiment file's grid as a Ray job: ``ray job submit -- marllib-ext benchmark``;
    returns the experiment's folder."""
    env = {**cluster.env, "RAY_ADDRESS": f"http://127.0.0.1:{cluster.dashboard_port}"}
    file = cluster.root / "cluster_grid.yaml"
    file.write_text(BENCHMARK)
    out = cluster.root / "bench"
    command = [
        "ray", "job", "submit", "--",
        "marllib-ext", "benchmark", str(file), "--out", str(out), "--progress-every", "5",
    ]  # fmt: skip
    print("$ " + " ".join(command), flush=True)
    job = run_job(command, env, timeout=900)
    for line in job.stdout.splitlines():
        if re.match(r"(trial done:|summary:|report:|experiment )", line.strip()):
            print("  " + line.strip(), flush=True)
    if job.returncode != 0 or "succeeded" not in job.stdout.lower():
        raise RuntimeError(f"benchmark job failed:\n{job.stdout[-3000:]}{job.stderr[-3000:]}")
    root = out / "cluster_grid"
    runs = sorted(p.parent for p in (root / "runs").rglob("metrics.json"))
    print(f"ray job submit benchmark: SUCCEEDED, {len(runs)} run directories", flush=True)
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument("--kill-after", type=int, default=3, help="iteration to lose the node")
    parser.add_argument("--keep-dir", action="store_true", help="keep logs and runs")
    args = parser.parse_args()
    if shutil.which("ray") is None:
        raise SystemExit("the `ray` CLI is not on PATH")
    missing = missing_cluster_packages()
    if missing:
        raise SystemExit(
            f"a Ray cluster needs ray[default] (missing: {', '.join(missing)}): "
            'pip install -e ".[cluster]"'
        )
    # Short root: Ray's unix socket paths live under each node's temp dir.
    root = Path(tempfile.mkdtemp(prefix="mxc", dir="/tmp"))
    cluster = Cluster(root)
    try:
        cluster.start_node_and_wait("head", head=True, count=1)
        cluster.start_node_and_wait("worker", head=False, count=2)
        print(f"cluster up at {cluster.address} (2 nodes x {CPUS_PER_NODE} CPUs)", flush=True)
        submit_job(cluster)
        submit_benchmark(cluster)
        checkpoint = train_across_nodes(cluster, args.iters, args.kill_after)
        saved = sorted(p.name for p in checkpoint.parent.iterdir() if p.name.startswith("check"))
        print(f"final checkpoint: {checkpoint} ({len(saved)} checkpoints kept)", flush=True)
    finally:
        cluster.stop()
        if args.keep_dir:
            print(f"logs and runs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
