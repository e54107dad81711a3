"""A real multi-node Ray cluster on this machine, an MLflow tracking server, `ray job submit`.

The cluster is what a user builds by hand (docs/cluster.md): `ray start --head` plus a worker
node joined with `ray start --address`, both with token authentication, each node with its
own temp folder and ports (two nodes share this host), and an MLflow server on 127.0.0.1
serving the artifacts. Sweeps are submitted with `ray job submit`, the job's working dir
holding only the sweep file (the package is installed). One cluster serves the module; a
test that kills the worker node gets a fresh one for the next test. Worker nodes declare one
GPU they do not have, so that fractional-GPU placement runs here too (torch, finding no CUDA
device, trains on the CPU). Token auth works offline: the token is a random string in a file
(RAY_AUTH_TOKEN_PATH), the same for both nodes and the `ray job` commands.

Everything started here is stopped by PID: every process carries a marker in its environment
(Ray passes it on to the workers it spawns), so the teardown finds and kills them all, even
ones that left our process groups, without matching on names (`ray stop` would kill every Ray
on the machine).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient

from pipeline.vocab import keys

TINY = Path(__file__).parent / "data" / "sweeps" / "tiny.yaml"
MARKER = "SCALING_TEST_CLUSTER"  # in the environment of everything the cluster fixture starts
READY = "Ray runtime started"


def _exe(name: str) -> str:
    """The console script next to this interpreter (not whatever is first on PATH)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"{name} is not installed"
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_table() -> list[tuple[int, list[str], dict[str, str], str]]:
    """(pid, argv, environment, state) of every process we may read (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        base = Path("/proc", entry)
        try:
            argv = base.joinpath("cmdline").read_bytes().split(b"\0")
            env_items = base.joinpath("environ").read_bytes().split(b"\0")
            state = base.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone, or not ours to read
            continue
        env = dict(item.decode(errors="replace").split("=", 1) for item in env_items
                   if b"=" in item)
        out.append((int(entry), [a.decode(errors="replace") for a in argv if a], env, state))
    return out


class LocalCluster:
    """Head node, worker nodes and an MLflow server, all under one short temp folder."""

    def __init__(self) -> None:
        # Short: Ray's unix sockets live under the temp dir and must fit in 107 characters.
        self.root = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
        self.token = self.root / "token"
        self.token.write_text(secrets.token_hex(32))  # what `ray get-auth-token --generate` makes
        self.token.chmod(0o600)
        self.gcs_port, self.dashboard_port, self.mlflow_port = (
            _free_port(), _free_port(), _free_port())
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        self.tracking_uri = f"http://127.0.0.1:{self.mlflow_port}"
        self.checkpoints = self.root / "ckpt"  # "shared storage": every node sees it here
        self.procs: dict[str, subprocess.Popen] = {}
        self.worker = ""  # name of the live worker node's process
        self.n_workers = 0

    def env(self, **extra: str) -> dict[str, str]:
        """Environment of every cluster process and of `ray job` commands: token auth on."""
        env = dict(os.environ)
        for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "MLFLOW_TRACKING_URI"):
            env.pop(key, None)  # the job gets its tracking URI from its runtime env
        env.update({MARKER: str(self.root), "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN_PATH": str(self.token), "RAY_USAGE_STATS_ENABLED": "0"})
        env.update(extra)
        return env

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait(self, name: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{self.log(name)[-3000:]}")
            time.sleep(0.5)
        raise TimeoutError(f"{name} not ready after {timeout}s:\n{self.log(name)[-3000:]}")

    def start_mlflow(self) -> None:
        # The server as docs/cluster.md starts it: loopback only, artifacts proxied through it
        # (workers need no shared disk for them). Its GenAI job runner is not needed here.
        self._spawn("mlflow", [
            _exe("mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.mlflow_port),
            "--workers", "1", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
            "--artifacts-destination", str(self.root / "artifacts"),
        ], self.env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"))

    def start_head(self) -> None:
        self._spawn("head", [
            _exe("ray"), "start", "--head", "--block", "--port", str(self.gcs_port),
            "--node-ip-address", "127.0.0.1",
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(self.dashboard_port),
            "--ray-client-server-port", str(_free_port()),
            "--dashboard-agent-listen-port", str(_free_port()),
            "--min-worker-port", "0", "--max-worker-port", "0",
            "--num-cpus", "1", "--num-gpus", "0", "--object-store-memory", str(100 * 2**20),
            "--temp-dir", str(self.root / "h"), "--disable-usage-stats",
        ], self.env())

    def start_worker(self) -> None:
        """A second node on this host: its own temp dir and agent port, random worker ports.

        It declares one GPU it does not have: Ray schedules and assigns it like a real one
        (CUDA_VISIBLE_DEVICES), and torch, finding no CUDA device, trains on the CPU.
        """
        self.n_workers += 1
        self.worker = f"worker{self.n_workers}"
        self._spawn(self.worker, [
            _exe("ray"), "start", "--block", "--address", f"127.0.0.1:{self.gcs_port}",
            "--node-ip-address", "127.0.0.1",
            "--dashboard-agent-listen-port", str(_free_port()),
            "--min-worker-port", "0", "--max-worker-port", "0",
            "--num-cpus", "1", "--num-gpus", "1", "--object-store-memory", str(100 * 2**20),
            "--temp-dir", str(self.root / f"w{self.n_workers}"), "--disable-usage-stats",
        ], self.env())
        self._wait(self.worker, lambda: READY in self.log(self.worker), 120)

    def _get(self, url: str, token: bool = True) -> bytes:
        req = urllib.request.Request(url)
        if token:
            req.add_header("Authorization", f"Bearer {self.token.read_text()}")
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback
        with direct.open(req, timeout=5) as r:
            return r.read()

    def _answers(self, url: str) -> bool:
        try:
            self._get(url)
            return True
        except OSError:
            return False

    def start(self) -> None:
        self.start_mlflow()  # slow to start (database migrations): overlaps with Ray's start
        self.start_head()
        self._wait("head", lambda: READY in self.log("head"), 180)
        self.start_worker()
        self._wait("head", lambda: self._answers(f"{self.dashboard}/api/jobs/"), 120)
        self._wait("mlflow", lambda: self._answers(f"{self.tracking_uri}/health"), 180)

    def node_id(self, name: str) -> str:
        """The Ray node id of a node, read from its raylet's command line."""
        temp = str(self.root / ("h" if name == "head" else f"w{name.removeprefix('worker')}"))
        for _pid, argv, env, _state in _proc_table():
            if (env.get(MARKER) == str(self.root) and argv and argv[0].endswith("raylet")
                    and any(temp + "/" in a for a in argv)):
                return next(a.split("=", 1)[1] for a in argv if a.startswith("--node_id="))
        raise LookupError(f"no raylet for {name}")

    def alive(self, name: str) -> bool:
        return name in self.procs and self.procs[name].poll() is None

    def kill_node(self, name: str) -> None:
        """SIGKILL a node's process group: `ray start`, its raylet and agents."""
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    def submit(self, workdir: Path, sweep_file: str, submission_id: str,
               **popen) -> subprocess.Popen:
        """`ray job submit` as docs/cluster.md shows it; follows the job until it ends."""
        runtime_env = {"env_vars": {"MLFLOW_TRACKING_URI": self.tracking_uri,
                                    "SCALING_CHECKPOINT_DIR": str(self.checkpoints)}}
        cmd = [_exe("ray"), "job", "submit", "--address", self.dashboard,
               "--submission-id", submission_id, "--working-dir", str(workdir),
               "--runtime-env-json", json.dumps(runtime_env), "--",
               sys.executable, "-m", "pipeline.sweep", sweep_file, "--no-report", "--no-estimate"]
        return subprocess.Popen(cmd, cwd=workdir, env=self.env(), text=True, **popen)

    def ours(self) -> list[tuple[int, list[str], str]]:
        """Live processes we started, and theirs: by the marker in their environment."""
        return [(pid, argv, state) for pid, argv, env, state in _proc_table()
                if env.get(MARKER) == str(self.root) and pid != os.getpid()]

    def stop(self) -> list[str]:
        """Stop everything (TERM, then KILL); return Ray daemons that survived (should be none)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                _signal(os.killpg, proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(s != "Z" for _p, _a, s in self.ours()):
            time.sleep(0.5)
        for proc in self.procs.values():
            _signal(os.killpg, proc.pid, signal.SIGKILL)
        for pid, _argv, state in self.ours():  # e.g. Ray workers: they run in their own sessions
            if state != "Z":
                _signal(os.kill, pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        time.sleep(1)
        return [" ".join(argv)[:200] for _pid, argv, state in self.ours()
                if state != "Z" and argv and argv[0].endswith(("raylet", "gcs_server"))]


def _signal(send, pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        send(pid, sig)


def _daemons_below(root: Path) -> list[int]:
    """Ray daemons whose command line mentions our temp folder, by any means left."""
    return [pid for pid, argv, _env, state in _proc_table()
            if state != "Z" and any(str(root) in a for a in argv)
            and any(a.endswith(("raylet", "gcs_server")) for a in argv[:1])]


@pytest.fixture(scope="module")
def cluster():
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs Linux /proc to find every process it starts")
    c = LocalCluster()
    try:
        c.start()
        yield c
    finally:
        survivors = c.stop()
        left = _daemons_below(c.root)
        for pid in left:
            _signal(os.kill, pid, signal.SIGKILL)
        shutil.rmtree(c.root, ignore_errors=True)
        assert not survivors and not left, f"Ray processes survived the teardown: {survivors}"


@pytest.fixture
def two_nodes(cluster: LocalCluster) -> LocalCluster:
    """The cluster with a live worker node (a test before may have killed it)."""
    if not cluster.alive(cluster.worker):
        cluster.start_worker()
    return cluster


def _trials(uri: str, experiment: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], f"tags.{keys.TAG_KIND} = 'trial'")


def _tags_read_only(db: Path, experiment: str, *names: str) -> list[dict[str, str]]:
    """The run id, status and named tags of the experiment's child runs in the server's
    sqlite store, read with plain sqlite in read-only mode: a poll that costs the server
    nothing (a search through it is a request the server, on the same 2 cores as the nodes,
    answers with queries and JSON), and never writes. [] while the store is locked."""
    wanted = (keys.TAG_RUN_ID, keys.TAG_KIND, keys.TAG_STATUS, *names)
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
        try:
            rows = con.execute(
                "SELECT t.run_uuid, t.key, t.value FROM tags t "
                "JOIN runs r ON r.run_uuid = t.run_uuid "
                "JOIN experiments e ON e.experiment_id = r.experiment_id "
                f"WHERE e.name = ? AND t.key IN ({', '.join('?' * len(wanted))})",
                (experiment, *wanted)).fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return []
    runs: dict[str, dict[str, str]] = {}
    for run_uuid, key, value in rows:
        runs.setdefault(run_uuid, {})[key] = value
    return [t for t in runs.values() if t.get(keys.TAG_KIND) == "trial" and keys.TAG_RUN_ID in t]


def _workdir(tmp_path: Path, name: str, text: str) -> Path:
    """The job's working dir: the sweep file only (pipeline is installed on every node)."""
    workdir = tmp_path / "job"
    workdir.mkdir()
    (workdir / name).write_text(text)
    return workdir


@pytest.mark.slow
def test_submitted_sweep_runs_on_every_node(two_nodes: LocalCluster, tmp_path: Path) -> None:
    c = two_nodes
    nodes = {c.node_id("head"), c.node_id(c.worker)}
    # Token authentication is on: a client without the token is turned away.
    no_token = c.env(RAY_AUTH_MODE="disabled")
    del no_token["RAY_AUTH_TOKEN_PATH"]
    anonymous = subprocess.run([_exe("ray"), "job", "list", "--address", c.dashboard],
                               env=no_token, capture_output=True, text=True, timeout=120)
    assert anonymous.returncode != 0, anonymous.stdout[-2000:]
    with pytest.raises(urllib.error.HTTPError) as denied:
        c._get(f"{c.dashboard}/api/jobs/", token=False)
    assert denied.value.code == 401

    workdir = _workdir(tmp_path, "tiny.yaml", TINY.read_text())
    job = c.submit(workdir, "tiny.yaml", "tiny-1", stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT)
    try:
        out, _ = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, out[-5000:]
    assert "succeeded" in out, out[-3000:]
    assert "warning: a cluster address" not in out  # the checkpoint dir is shared

    runs = _trials(c.tracking_uri, "tiny")
    assert len(runs) == 4
    client = MlflowClient(tracking_uri=c.tracking_uri)
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        assert run.info.status == "FINISHED"
        assert tags[keys.TAG_STATUS] == keys.STATUS_FINISHED
        assert tags[keys.TAG_ATTEMPTS] == "1"
        assert 0 < metrics[keys.FINAL_VAL_LOSS] < math.log(256)
        assert len(client.get_metric_history(run.info.run_id, keys.VAL_LOSS)) >= 4
        # num_gpus: 0 -> the run sees no CUDA device, whatever the node has
        assert tags["cuda_visible_devices"] == ""
        # Artifacts went through the server into its artifact store (no shared disk needed).
        names = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {keys.SPEC_ARTIFACT, keys.CURVE_ARTIFACT} <= names
        assert (c.checkpoints / "tiny" / tags[keys.TAG_RUN_ID]).is_dir()
    assert list((c.root / "artifacts").rglob(keys.CURVE_ARTIFACT))
    # Both nodes ran runs (with tokens the driver put in the object store once).
    assert {r.data.tags["node"] for r in runs} == nodes


@pytest.mark.slow
def test_fractional_gpu_runs_go_where_ray_assigned_them(two_nodes: LocalCluster,
                                                        tmp_path: Path) -> None:
    # Only the worker node has a GPU (a declared one): runs asking for a quarter of a GPU all
    # land there and see the device Ray gave them; the head, which has none, runs none.
    c = two_nodes
    text = TINY.read_text().replace("name: tiny", "name: tinygpu")
    text = text.replace("budgets: [3e9, 6e9]", "budgets: [3e9]")
    text = text.replace("resources:\n  num_cpus: 1", "resources:\n  num_cpus: 1\n  num_gpus: 0.25")
    workdir = _workdir(tmp_path, "gpu.yaml", text)
    job = c.submit(workdir, "gpu.yaml", "gpu-1", stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT)
    try:
        out, _ = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, out[-5000:]
    runs = _trials(c.tracking_uri, "tinygpu")
    assert len(runs) == 2
    assert all(r.info.status == "FINISHED" for r in runs)
    assert {r.data.tags["node"] for r in runs} == {c.node_id(c.worker)}
    assert {r.data.tags["cuda_visible_devices"] for r in runs} == {"0"}


@pytest.mark.slow
def test_submitted_sweep_mixes_one_and_two_worker_runs(two_nodes: LocalCluster,
                                                       tmp_path: Path) -> None:
    """Issue 18 under `ray job submit`: the 8k-parameter run trains on 2 Ray Train workers
    (DDP over gloo), one on each node (each has 1 CPU), the 3k one on a single worker; the
    tokens reach the workers through the object store; rank 0 alone writes the run."""
    c = two_nodes
    text = TINY.read_text().replace("name: tiny", "name: tinyddp")
    text = text.replace("budgets: [3e9, 6e9]", "budgets: [6e9]")
    text = text.replace("resources:\n  num_cpus: 1", "resources:\n  num_cpus: 1\n"
                        "  workers_per_run: 2\n  workers_from_params: 5000")
    workdir = _workdir(tmp_path, "ddp.yaml", text)
    job = c.submit(workdir, "ddp.yaml", "ddp-1", stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT)
    try:
        out, _ = job.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        job.kill()
        out, _ = job.communicate()
        pytest.fail(f"the job did not end in 240 s:\n{out[-6000:]}")
    assert job.returncode == 0, out[-5000:]
    runs = _trials(c.tracking_uri, "tinyddp")
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs), out[-3000:]
    client = MlflowClient(tracking_uri=c.tracking_uri)
    for run in runs:
        steps = [p.step for p in client.get_metric_history(run.info.run_id, keys.VAL_LOSS)]
        assert steps == sorted(set(steps)) and len(steps) >= 4  # one writer per run
    assert "2 workers x 2 sequences" in out  # the plan said which run is data-parallel
    nodes = {r.data.tags["node"] for r in runs}
    assert nodes <= {c.node_id("head"), c.node_id(c.worker)}


@pytest.mark.slow
def test_killed_worker_node_runs_are_retried_on_the_head(two_nodes: LocalCluster,
                                                         tmp_path: Path) -> None:
    c = two_nodes
    head, worker = c.node_id("head"), c.node_id(c.worker)
    # Two longer runs (one per node), checkpointed often, so the kill lands mid-run: 1.2e10,
    # 1,262 and 2,881 steps (2.5e10 until 2026-12-07: twice the training, on both nodes and
    # again in the retry, for a window the poll below needs a fraction of).
    text = TINY.read_text().replace("name: tiny", "name: tinykill")
    text = text.replace("budgets: [3e9, 6e9]", "budgets: [1.2e10]")
    text = text.replace("resources:\n  num_cpus: 1",
                        "resources:\n  num_cpus: 1\n  checkpoint_interval: 50")
    workdir = _workdir(tmp_path, "kill.yaml", text)
    log = tmp_path / "submit.log"
    with open(log, "w") as sink:
        job = c.submit(workdir, "kill.yaml", "kill-1", stdout=sink, stderr=subprocess.STDOUT)
    try:
        victims: set[str] = set()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and job.poll() is None and not victims:
            time.sleep(0.2)
            for tags in _tags_read_only(c.root / "mlflow.db", "tinykill", "node"):
                ckpt = c.checkpoints / "tinykill" / tags[keys.TAG_RUN_ID]
                if (tags.get(keys.TAG_STATUS) == keys.STATUS_RUNNING
                        and tags.get("node") == worker and list(ckpt.glob("*.sha256"))):
                    victims.add(tags[keys.TAG_RUN_ID])
        assert victims, "no run was seen running on the worker node:\n" + log.read_text()[-3000:]
        c.kill_node(c.worker)  # the worker node dies mid-run (a lost machine)
        assert job.wait(timeout=300) == 0, log.read_text()[-5000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    out = log.read_text()
    assert "succeeded" in out
    runs = _trials(c.tracking_uri, "tinykill")
    assert len(runs) == 2
    assert all(r.info.status == "FINISHED" for r in runs), out[-3000:]
    for run in runs:
        tags = run.data.tags
        if tags[keys.TAG_RUN_ID] in victims:
            # Retried by Ray on the surviving node, from the checkpoint on shared storage.
            assert tags[keys.TAG_ATTEMPTS] == "2"
            assert tags["node"] == head
            assert int(tags[keys.TAG_RESUMED_FROM]) >= 50
        else:
            assert tags[keys.TAG_ATTEMPTS] == "1"
    # Nothing of the dead node is left running.
    assert not _daemons_below(c.root / c.worker.replace("worker", "w"))


@pytest.fixture
def sweep_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """`python -m pipeline.sweep tiny.yaml --no-report ARGS` run by pipeline.sweep.main in
    this process, in tmp_path, with the environment given: what it exits with and prints.
    For the checks that refuse a sweep before the data, Ray or a ledger (its address, its
    tracking store, its checkpoint folder): an interpreter of their own cost each ~5 s of
    CPU importing torch and MLflow, and printed the same lines."""
    from pipeline.sweep import main

    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        code = main([str(TINY), "--no-report", "--no-estimate", *args])
        out = capsys.readouterr()
        return subprocess.CompletedProcess(["pipeline.sweep", *args], code, out.out, out.err)

    return run


@pytest.mark.parametrize("how", ["flag", "RAY_ADDRESS"])
def test_cluster_address_needs_a_tracking_server(tmp_path: Path, how: str, sweep_here) -> None:
    # RAY_ADDRESS is how the driver learns the address under `ray job submit`.
    env = {"MLFLOW_TRACKING_URI": "sqlite:///x.db"}
    args: tuple[str, ...] = ("--address", "127.0.0.1:1")
    if how == "RAY_ADDRESS":
        env["RAY_ADDRESS"], args = "127.0.0.1:1", ()
    t0 = time.monotonic()
    done = sweep_here(*args, **env)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "127.0.0.1:1" in done.stderr and "local store (sqlite:///x.db)" in done.stderr
    assert "MLFLOW_TRACKING_URI=http://HOST:PORT" in done.stderr
    assert "docs/cluster.md" in done.stderr
    # Nothing was started: no store created, no plan printed, no Ray contacted (port 1).
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "mlflow.db").exists()
    assert "runs (" not in done.stdout
    assert time.monotonic() - t0 < 60


def test_dashboard_url_is_not_a_driver_address(sweep_here) -> None:
    done = sweep_here("--address", "http://127.0.0.1:8265",
                      MLFLOW_TRACKING_URI="http://127.0.0.1:5000")
    assert done.returncode == 2
    assert "ray job submit --address http://127.0.0.1:8265" in done.stderr


def test_unreachable_tracking_server_fails_fast(sweep_here) -> None:
    uri = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    t0 = time.monotonic()
    done = sweep_here("--address", "127.0.0.1:1", MLFLOW_TRACKING_URI=uri)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"tracking server {uri} does not answer" in done.stderr
    assert time.monotonic() - t0 < 60  # not MLflow's minutes of retries


def test_unwritable_checkpoint_dir_fails_before_anything_starts(tmp_path: Path,
                                                                sweep_here) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = sweep_here("--checkpoint-dir", str(blocker / "checkpoints"),
                      MLFLOW_TRACKING_URI="sqlite:///x.db")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"--checkpoint-dir {blocker / 'checkpoints'}: run checkpoints cannot be written" \
        in done.stderr
    assert not (tmp_path / "x.db").exists()  # no ledger created, no run started


def test_relative_checkpoint_dir_on_a_cluster_warns(capsys: pytest.CaptureFixture) -> None:
    from pipeline.preflight import _warn_checkpoint_dir

    _warn_checkpoint_dir("checkpoints", "10.0.0.1:6379")
    err = capsys.readouterr().err
    assert "warning" in err and "restarts from scratch" in err and "SCALING_CHECKPOINT_DIR" in err
    _warn_checkpoint_dir("/mnt/shared/checkpoints", "10.0.0.1:6379")
    assert capsys.readouterr().err == ""
