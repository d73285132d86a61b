"""One client process of the soak test (tests/test_soak.py): for ``duration`` seconds, a mix of
ingest, lookups, gets and check-and-adds on its own pool of keys through permindex.Client;
writes what it was acknowledged, its latencies and its errors as JSON. Not a test module.

usage: python soak_worker.py ADDRESS CLIENT_ID POOL DURATION OUT.json
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import permindex
from permindex.errors import ServerError

OPERATIONS = ("ingest", "query", "get", "check")
WEIGHTS = (2, 5, 1, 2)


def main() -> None:
    address, client_id, pool_size, duration, out = sys.argv[1:6]
    cid = int(client_id)
    rng = random.Random(cid)
    pool = [f"c{cid}/page/{i}" for i in range(int(pool_size))]
    expected: dict[str, int] = {}
    uncertain: set[str] = set()
    latencies: dict[str, list[float]] = {op: [] for op in OPERATIONS}
    errors: Counter[str] = Counter()
    with permindex.Client(address, timeout=30, retries=0) as client:
        first = [(key, rng.getrandbits(64)) for key in pool]
        client.ingest(first)
        expected.update(first)
        print("warm", flush=True)  # the pool is stored: the harness starts measuring
        end = time.monotonic() + float(duration)
        while time.monotonic() < end:
            op = rng.choices(OPERATIONS, WEIGHTS)[0]
            written: list[tuple[str, int]] = []
            began = time.perf_counter()
            try:
                if op == "ingest":
                    written = [(rng.choice(pool), rng.getrandbits(64)) for _ in range(200)]
                    client.ingest(written)
                    expected.update(written)  # the last write of a key wins
                elif op == "query":
                    keys = rng.sample(pool, 50)
                    client.query_many(expected[k] ^ (1 << rng.randrange(64)) for k in keys)
                elif op == "get":
                    client.get_many(rng.sample(pool, 50))
                else:
                    key, other = rng.sample(pool, 2)
                    near = rng.random() < 0.5
                    fp = expected[other] ^ (1 << rng.randrange(64)) if near else rng.getrandbits(64)
                    written = [(key, fp)]
                    if client.check_and_add(key, fp).added:
                        expected[key] = fp
            except ServerError as error:
                errors[error.code] += 1
                uncertain.update(key for key, _ in written)  # may or may not be applied
                continue
            latencies[op].append((time.perf_counter() - began) * 1000)
    Path(out).write_text(
        json.dumps(
            {
                "expected": {k: v for k, v in expected.items() if k not in uncertain},
                "uncertain": sorted(uncertain),
                "latencies_ms": latencies,
                "errors": dict(errors),
            }
        )
    )


if __name__ == "__main__":
    main()
