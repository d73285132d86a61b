"""kill -9 of a real server process at random moments during streaming ingestion.

Each round starts ``python -m permindex serve`` on the same data directory (fsync policy
``always``, ``interval`` and ``never`` in turn, a snapshot every 0.2 s so that kills also land
in snapshots, log rotations and deletions), streams batches through one Ingest stream -- one
batch in flight at a time -- with Remove and CheckAndAdd calls in between, and SIGKILLs the
process at a random moment. The next round's server then must hold every acknowledged change:
exactly the client's model, except that the one request in flight at the kill may or may not
have been applied, as a whole. Queries and Pairs must answer exactly as brute force over what
the server holds. Some rounds are killed while the server is still starting (recovering).
:data:`ROUNDS` rounds run in the default suite; ``pytest -m soak`` runs :data:`SOAK_ROUNDS`.
"""

from __future__ import annotations

import queue
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import make_stub
from serverproc import ServeProcess

from permindex.v1 import index_pb2 as pb

pytestmark = pytest.mark.slow

ROUNDS = 12  # in the default suite: every fsync policy 4 times, 2 kills during a start
SOAK_ROUNDS = 48  # behind the soak marker
ROUND_SECONDS = 6.25  # the time limit per round (rounds take about a third of it)
POOL = 3000  # distinct keys
POLICIES = ("always", "interval", "never")
ADDED = pb.DOCUMENT_STATUS_ADDED
REPLACED = pb.DOCUMENT_STATUS_REPLACED


class Workload:
    """Random requests over a pool of keys whose fingerprints cluster around a few hundred
    bases (so that queries and pairs find near-duplicates), mirrored in ``model``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.bases = [self.rng.getrandbits(64) for _ in range(200)]
        self.model: dict[str, int] = {}
        #: The request sent and not yet acknowledged: (kind, {key: fingerprint or None}).
        self.pending: tuple[str, dict[str, int | None]] | None = None

    def fingerprint(self) -> int:
        value = self.rng.choice(self.bases)
        for _ in range(self.rng.randrange(5)):
            value ^= 1 << self.rng.randrange(64)
        return value

    def batch(self) -> dict[str, int]:
        return {
            f"doc/{self.rng.randrange(POOL)}": self.fingerprint()
            for _ in range(self.rng.randrange(1, 60))
        }


def _ingest_until_killed(address: str, work: Workload, deadline: float) -> int:
    """Stream batches (with Remove and CheckAndAdd calls between them) until the server dies
    or ``deadline``; the number of acknowledged requests."""
    channel, stub = make_stub(address)
    requests: queue.Queue[pb.AddRequest | None] = queue.Queue()
    acknowledged = 0
    with channel:
        responses: Iterator[pb.AddResponse] = stub.Ingest(iter(requests.get, None), timeout=60)
        try:
            while time.monotonic() < deadline:
                roll = work.rng.random()
                if roll < 0.8:
                    entries = work.batch()
                    work.pending = ("add", dict(entries))
                    requests.put(
                        pb.AddRequest(
                            documents=[
                                pb.Document(key=k, fingerprint=v) for k, v in entries.items()
                            ]
                        )
                    )
                    response = next(responses)
                    assert response.added + response.replaced == len(entries)
                    work.model.update(entries)
                elif roll < 0.9:
                    keys = [
                        f"doc/{work.rng.randrange(POOL)}" for _ in range(work.rng.randrange(1, 20))
                    ]
                    work.pending = ("remove", dict.fromkeys(keys))
                    stub.Remove(pb.RemoveRequest(keys=keys), timeout=60)
                    for key in keys:
                        work.model.pop(key, None)
                else:
                    entries = work.batch()
                    work.pending = ("check", dict(entries))
                    reply = stub.CheckAndAdd(
                        pb.CheckAndAddRequest(
                            documents=[
                                pb.Document(key=k, fingerprint=v) for k, v in entries.items()
                            ]
                        ),
                        timeout=60,
                    )
                    for result in reply.results:
                        if result.status in (ADDED, REPLACED):
                            work.model[result.key] = result.fingerprint
                work.pending = None
                acknowledged += 1
        except grpc.RpcError as error:
            assert error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED), error
        finally:
            requests.put(None)
    return acknowledged


def _held(stub: Any) -> dict[str, int]:
    keys = [f"doc/{i}" for i in range(POOL)]
    response = stub.Get(pb.GetRequest(keys=keys), timeout=60)
    return {r.key: r.fingerprint for r in response.results if r.found}


def _check_against_model(held: dict[str, int], work: Workload) -> None:
    """``held`` is the model, or the model with the request in flight applied as a whole."""
    if held == work.model:
        return
    assert work.pending is not None, "an acknowledged change is missing or changed"
    kind, changes = work.pending
    if kind == "add":
        assert held == {**work.model, **changes}, "half a batch applied"
    elif kind == "remove":
        assert held == {k: v for k, v in work.model.items() if k not in changes}, "half a remove"
    else:  # CheckAndAdd: which documents it added is unknown; only its keys may differ
        differ = {k for k in held.keys() | work.model.keys() if held.get(k) != work.model.get(k)}
        assert differ <= changes.keys()
        assert all(held[k] == changes[k] for k in differ)


def _brute_force_pairs(held: dict[str, int], k: int = 3) -> list[tuple[str, str, int]]:
    keys = sorted(held)
    values = np.array([held[key] for key in keys], dtype=np.uint64)
    out = []
    for i in range(len(keys) - 1):
        distance = np.bitwise_count(values[i + 1 :] ^ values[i])
        for j in np.flatnonzero(distance <= k).tolist():
            out.append((keys[i], keys[i + 1 + j], int(distance[j])))
    return sorted(out)


def _check_answers(stub: Any, held: dict[str, int], rng: random.Random) -> None:
    pairs = sorted(
        (p.key_a, p.key_b, p.distance)
        for r in stub.Pairs(pb.PairsRequest(), timeout=60)
        for p in r.pairs
    )
    assert pairs == _brute_force_pairs(held)
    values = np.array(list(held.values()), dtype=np.uint64)
    keys = list(held)
    queries = [rng.choice(values.tolist()) if held and i % 2 else rng.getrandbits(64)
               for i in range(20)]  # fmt: skip
    response = stub.Query(pb.QueryRequest(fingerprints=queries), timeout=60)
    for query, result in zip(queries, response.results, strict=True):
        distance = np.bitwise_count(values ^ np.uint64(query)) if keys else np.zeros(0)
        expected = sorted(
            ((int(d), keys[i], held[keys[i]]) for i, d in enumerate(distance.tolist()) if d <= 3),
        )
        assert [(m.distance, m.key, m.fingerprint) for m in result.matches] == expected


@pytest.mark.parametrize(
    "rounds",
    [
        pytest.param(ROUNDS, id="rounds"),
        pytest.param(SOAK_ROUNDS, id="soak", marks=[pytest.mark.soak, pytest.mark.timeout(900)]),
    ],
)
def test_kill_9_during_ingestion_loses_no_acknowledged_write(tmp_path: Path, rounds: int) -> None:
    data_dir = tmp_path / "data"
    rng = random.Random(20260101)
    work = Workload(7)
    started = time.monotonic()
    acknowledged = 0
    kills_while_starting = 0
    torn_tails = 0
    for round_ in range(rounds + 1):
        policy = POLICIES[round_ % len(POLICIES)]
        server = ServeProcess(data_dir, "--fsync", policy, "--snapshot-interval", "0.2")
        try:
            if round_ % 6 == 5:  # a kill while the server is still starting (recovering)
                time.sleep(rng.uniform(0.0, 0.4))
                server.kill()
                kills_while_starting += 1
                continue
            address = server.address()
            assert address is not None, server.text
            channel, stub = make_stub(address)
            with channel:
                held = _held(stub)
                _check_against_model(held, work)
                work.model, work.pending = held, None
                _check_answers(stub, held, rng)
            if round_ == rounds:
                assert server.stop() == 0, server.text
                break
            kill_at = time.monotonic() + rng.uniform(0.05, 0.6)
            killer = _Killer(server, kill_at)
            acknowledged += _ingest_until_killed(address, work, kill_at + 5)
            killer.join()
        finally:
            server.kill()
        assert "Traceback" not in server.text, server.text
        torn_tails += server.text.count("cut off a torn tail")
    elapsed = time.monotonic() - started
    assert elapsed < ROUND_SECONDS * rounds, f"{rounds} rounds took {elapsed:.0f} s"
    assert acknowledged > 10 * rounds  # the rounds did real work
    print(
        f"\n{rounds} kill -9 rounds in {elapsed:.1f} s: {acknowledged} acknowledged requests, "
        f"{kills_while_starting} kills during a start, {torn_tails} torn tails cut, "
        f"{len(work.model)} keys at the end"
    )


class _Killer:
    """SIGKILL ``server`` at monotonic time ``at``, from a thread."""

    def __init__(self, server: ServeProcess, at: float) -> None:
        import threading

        self._thread = threading.Thread(target=self._run, args=(server, at), daemon=True)
        self._thread.start()

    @staticmethod
    def _run(server: ServeProcess, at: float) -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        server.kill()

    def join(self) -> None:
        self._thread.join()
