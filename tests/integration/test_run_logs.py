"""A gang run's output: each rank's log, all ranks at once, and reads that wait for the next output of any rank."""

import json
import threading
import time
import urllib.request

from conftest import head_http, wait_until
from test_gang_runs import V6E_4X4, finish, rank_logs, run_status, run_view, start_train, train_ok


def test_logs_of_one_rank_or_all_ranks(torus, tmp_path):
    torus.up()
    train_ok(torus, tmp_path, *V6E_4X4, "--name", "chatty",
             command=["sh", "-c", 'for i in 1 2 3; do echo "rank $RANK line $i"; done'])
    run_id = run_status(torus, "chatty")["run_id"]

    assert rank_logs(torus, run_id, 2) == "rank 2 line 1\nrank 2 line 2\nrank 2 line 3\n"
    assert rank_logs(torus, run_id, 2, "--attempt", "1") == "rank 2 line 1\nrank 2 line 2\nrank 2 line 3\n"

    everything = torus.ok("job", "logs", run_id).stdout.splitlines()
    assert sorted(everything) == sorted(f"[rank {r}] rank {r} line {i}" for r in range(4) for i in (1, 2, 3))
    for r in range(4):  # each rank's lines in order
        assert [line for line in everything if line.startswith(f"[rank {r}] ")] == [
            f"[rank {r}] rank {r} line {i}" for i in (1, 2, 3)]


def run_logs(torus, run_id, query, timeout=10):
    """GET /api/v0/runs/RUN/logs?ranks=all&QUERY."""
    base, context = head_http(torus.session)
    request = urllib.request.Request(f"{base}/api/v0/runs/{run_id}/logs?ranks=all&{query}",
                                     headers={"Authorization": f"Bearer {torus.token}"})
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return json.loads(response.read())


def wait_then_go(torus, run_id, offsets, go, early):
    """Starts a read of all ranks from `offsets` that waits (60 s); checks it has not answered a second later
    (`early` says why it should not have), creates the file `go`, and returns the read's answer."""
    answer = {}
    reader = threading.Thread(target=lambda: answer.update(
        run_logs(torus, run_id, f"offsets={offsets}&wait_ms=60000", timeout=45)))
    reader.start()
    time.sleep(1)
    assert not answer, early
    go.write_text("")
    reader.join(timeout=50)
    return answer


def test_a_waiting_read_of_all_ranks_answers_when_any_rank_writes(torus, tmp_path):
    torus.up()
    go = tmp_path / "go"
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "waiter", command=[
        "sh", "-c", f'echo "rank $RANK up"; if [ "$RANK" = 2 ]; then while [ ! -e {go} ]; do sleep 0.05; done; '
                    f'echo "rank 2 late"; fi; exec sleep 120'])
    try:
        run = wait_until(lambda: (lambda r: r if r and r["status"] == "RUNNING" else None)(
            run_view(torus, "waiter")), 30, message="the run to start")
        ups = [len(f"rank {r} up\n") for r in range(4)]
        wait_until(lambda: [c.get("next_offset") for c in run_logs(torus, run["run_id"], "")["ranks"]] == ups, 10,
                   message="every rank's first line")
        offsets = ",".join(str(n) for n in ups)
        # Nothing new from any rank: the read waits; rank 2 writes while it waits, and it answers with that, without
        # waiting for the three ranks that stay silent (60 s).
        answer = wait_then_go(torus, run["run_id"], offsets, go, "it answered before any rank wrote")
        assert [r["data"] for r in answer["ranks"]] == ["", "", "rank 2 late\n", ""]
        # The silent ranks' waits were cut short: nothing new from them, read again from where they were.
        assert [r["next_offset"] for r in answer["ranks"]] == [ups[0], ups[1], ups[2] + len("rank 2 late\n"), ups[3]]
        assert not any(r["finished"] for r in answer["ranks"])
        assert torus.ok("train", "stop", "waiter").stdout == "waiter stopped\n"
        code, out, err = finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # `torus train` printed every line, the late one too, and how the run ended.
    assert sorted(out.splitlines()) == sorted([f"[rank {r}] rank {r} up" for r in range(4)] + ["[rank 2] rank 2 late"])
    assert "STOPPED" in err


def test_a_waiting_read_of_all_ranks_answers_when_the_last_silent_rank_ends(torus, tmp_path):
    torus.up()
    go = tmp_path / "go"
    proc = start_train(torus, tmp_path, *V6E_4X4, "--name", "enders", command=[
        "sh", "-c", f'echo "rank $RANK up"; if [ "$RANK" = 3 ]; then while [ ! -e {go} ]; do sleep 0.05; done; fi'])
    try:
        run = wait_until(lambda: (lambda r: r if r and r["status"] == "RUNNING" else None)(
            run_view(torus, "enders")), 30, message="the run to start")
        ups = [len(f"rank {r} up\n") for r in range(4)]
        first = wait_until(lambda: (lambda v: v if [c.get("next_offset") for c in v["ranks"]] == ups and all(
            c["finished"] for c in v["ranks"][:3]) else None)(run_logs(torus, run["run_id"], "")), 10,
            message="every rank's first line, and ranks 0-2 ended")
        assert not first["ranks"][3]["finished"]
        offsets = ",".join(str(n) for n in ups)
        # Three ranks have ended without more output and rank 3 runs silently: the read waits for its end.
        answer = wait_then_go(torus, run["run_id"], offsets, go, "it answered while rank 3 still ran and nobody wrote")
        assert [(r["data"], r["next_offset"], r["finished"]) for r in answer["ranks"]] == [
            ("", n, True) for n in ups]
        code, out, err = finish(proc, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    assert sorted(out.splitlines()) == sorted(f"[rank {r}] rank {r} up" for r in range(4))


def test_logs_of_a_rank_the_run_lacks_is_an_error(torus, tmp_path):
    torus.up()
    train_ok(torus, tmp_path, *V6E_4X4, "--name", "four", command=["true"])
    run_id = run_status(torus, "four")["run_id"]
    # The head says "rank 4 is out of range; attempt 1 has 4 ranks"; the CLI must not print an empty log and exit 0.
    refused = torus.run("job", "logs", run_id, "--rank", "4")
    assert refused.returncode != 0, refused.stderr
    assert "rank 4 is out of range" in refused.stderr
