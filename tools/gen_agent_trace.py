#!/usr/bin/env python3
"""Generates tests/data/agent_synthetic_trace.jsonl: agent traffic in the
Mooncake trace format (docs/eviction.md, "The agent trace").

Shape (different from the Mooncake conversation trace): a few agents, each with
a very long shared system prompt (tools and instructions, 60 to 200 blocks of
512 tokens), and many short tasks branching off it. A task is the system prompt
plus a short task description (1 to 4 blocks) and then a loop of steps, each
appending one or two blocks (a tool result) to the task's chain, so every step
reuses the whole chain before it. Tasks run interleaved (up to `--concurrency`
at a time), most finish after a few steps, some run long. One-off requests
with long unique documents (no reuse) are mixed in as noise.

Deterministic: the same --seed gives the same file byte for byte (Python's
random.Random with an integer seed). Timestamps are milliseconds at about 4
requests per second, as in the Mooncake trace.

    python3 tools/gen_agent_trace.py --seed 15 > tests/data/agent_synthetic_trace.jsonl
"""
import argparse
import json
import random
import sys

BLOCK_TOKENS = 512


def generate(seed, requests, agents, concurrency):
    rng = random.Random(seed)
    next_id = [0]

    def fresh(n):
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    prompts = [fresh(rng.randint(60, 200)) for _ in range(agents)]
    # Popular agents get most tasks (Zipf-like weights 1, 1/2, 1/3, ...).
    weights = [1.0 / (a + 1) for a in range(agents)]
    active = []  # [chain ids, steps left]
    out = []
    t = 0.0
    while len(out) < requests:
        t += rng.expovariate(4.0) * 1000.0
        if rng.random() < 0.2:  # a one-off long document: never reused
            ids = fresh(rng.randint(20, 160))
        elif len(active) < concurrency and (not active or rng.random() < 0.3):
            agent = rng.choices(range(agents), weights)[0]
            steps = rng.randint(1, 4) if rng.random() < 0.8 else rng.randint(8, 30)
            chain = prompts[agent] + fresh(rng.randint(1, 4))
            active.append([chain, steps])
            ids = list(chain)
        else:
            task = active[rng.randrange(len(active))]
            task[0] = task[0] + fresh(rng.randint(1, 2))  # a tool result appended
            task[1] -= 1
            ids = list(task[0])
            if task[1] <= 0:
                active.remove(task)
        tail = rng.randint(1, BLOCK_TOKENS)  # the last block is partly filled
        out.append({
            "timestamp": int(t),
            "input_length": (len(ids) - 1) * BLOCK_TOKENS + tail,
            "output_length": rng.randint(20, 400),
            "hash_ids": ids,
        })
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=15)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--agents", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=64)
    a = p.parse_args()
    for r in generate(a.seed, a.requests, a.agents, a.concurrency):
        sys.stdout.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
