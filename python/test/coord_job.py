"""A job without Slurm for the Python tests: runtime_coord_serve (libomni's test coordinator)
and single-rank units as processes of this machine, each running a worker script that
writes JSON lines. Shared by test_ranks.py and test_torch.py."""

import json
import os
import subprocess
import sys
import threading
import time

SERVE = os.environ.get("OMNI_COORD_SERVE", "")
HERE = os.path.dirname(os.path.abspath(__file__))


def serve_built():
    return bool(SERVE) and os.access(SERVE, os.X_OK)


def clean_env(extra=None):
    """This process's environment without OMNI_*, PMIX_* and SLURM_* (no job around it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMNI_", "PMIX_", "SLURM_"))}
    env.update(extra or {})
    return env


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def _start_at_step(log, step, start_file, seconds):
    """Writes start_file once the worker log LOG holds a step event of STEP or later (or after
    SECONDS, when the run ended sooner: the joiners then exit for want of a job and the test
    fails on their status)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(log) as f:
                # A line being written may be cut short: only whole lines count.
                if any(line.endswith("\n") and json.loads(line).get("event") == "step"
                       and json.loads(line)["step"] >= step for line in f):
                    break
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    open(start_file, "w").close()


def run_job(test, d, worker, args, units, target, joiners=0, extra_env=None, per_unit_env=None,
            serve_stops=True, seconds=120, prestart=False, join_after_step=0):
    """Runs UNITS ranks of `worker` (its argv: the log path, then `args`) under a coordinator in
    directory `d` that reshapes to `target` units once the job forms, then stops it; `joiners`
    more ranks are started once generation 1 exists. Returns (each rank's log lines, the
    coordinator's lines). With serve_stops False the coordinator is killed once the ranks
    have exited, and their exit codes come back instead of its lines. With prestart the
    joiners' processes start with the others and wait (OMNI_TEST_START_FILE, for a worker that
    honours it: torch_worker.py) until generation 1 exists. A joiner started only then, which
    must still start Python and import torch, was not admitted within the whole 40-step run
    (24 s) at load 12 on 2 cores (a Debian 13 root, 2026-12-07); the start-up time of Python
    is not what a grow test checks. With join_after_step K as well the prestarted joiners are
    let go once rank 0 logged step K, not at generation 1: the coordinator stops the job right
    after the grow, and a test that checks the training after it needs a run longer than the
    1-2 steps a joiner let go at once leaves (test_ddp_grow's falling loss,
    test_float_within_derived_bound's replay of 8 steps)."""
    job = os.path.join(d, "job")
    os.mkdir(job, 0o700)
    # The coordinator keeps serving after the stop until the ranks have exited: rank 0's note
    # of the checkpoint it writes at the stop must find it (omni-launch's lives as long).
    serve = subprocess.Popen([SERVE, job, str(units), str(target), str(seconds)], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, OMNI_SERVE_LINGER_MS=str(seconds * 1000)))
    test.assertTrue(serve.stdout.readline().startswith("tcp://"))
    procs, logs = [], []

    start_file = os.path.join(d, "joiners-start")

    def spawn(unit):
        path = os.path.join(d, "rank-%d.jsonl" % unit)
        env = clean_env({"OMNI_JOB_DIR": job, "OMNI_UNIT_ID": str(unit), "OMNI_UNIT_SLOT": "0", "OMNI_UNIT_SIZE": "1",
                         "OMNI_JOIN_TIMEOUT_MS": "60000", "OMNI_GLOO_HOST": "127.0.0.1"})
        if prestart and unit >= units:
            env["OMNI_TEST_START_FILE"] = start_file
        env.update(extra_env or {})
        env.update((per_unit_env or {}).get(unit, {}))
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, worker), path] + list(args), env=env))
        logs.append(path)

    for u in range(units):
        spawn(u)
    if prestart:
        for j in range(joiners):
            spawn(units + j)
    if not serve_stops:
        codes = [p.wait(timeout=seconds) for p in procs]
        serve.kill()
        serve.wait()
        serve.stdout.close()
        return [read(p) for p in logs], codes
    seen = []
    for line in serve.stdout:
        seen.append(line.strip())
        if joiners and line.startswith("generation 1 "):
            if prestart and join_after_step:
                threading.Thread(target=_start_at_step, args=(logs[0], join_after_step, start_file, seconds),
                                 daemon=True).start()
            elif prestart:
                open(start_file, "w").close()
            else:
                for j in range(joiners):
                    spawn(units + j)
        if line.startswith("stopped at generation"):
            break
    for p in procs:
        test.assertEqual(p.wait(timeout=seconds), 0)
    serve.terminate()
    serve.wait(timeout=60)
    serve.stdout.close()
    test.assertTrue(seen and seen[-1].startswith("stopped at generation"), seen)
    return [read(p) for p in logs], seen
