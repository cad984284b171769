#!/usr/bin/env python3
"""Generates chat-shaped or document-shaped traces in the Mooncake trace format
(docs/eviction.md, "Traces"), to check eviction and admission policies on
traffic whose structure differs from tests/data's two traces.

--shape chat: multi-turn conversations. New conversations arrive at random
(Poisson); most open with one of a few shared system prompts (Zipf-popular),
some with their own. A conversation continues after each turn with a fixed
probability, so whether a turn's blocks are reused does NOT depend on its
answer length (unlike the Mooncake synthetic trace). Turn k's prompt is turn
k-1's prompt, its answer and a new user message; user messages and answers
have heavy-tailed lengths (log-normal; some pasted documents). The user's
think time between turns is heavy-tailed too: most come back within a minute,
a few after an hour, so reuse distances span RAM and SSD sizes.

--shape docs: question answering over documents. A fixed corpus of documents
(4 to 60 blocks each) with Zipf popularity; each request is a shared
instruction prompt, one document and a fresh question. Reuse comes from
document popularity, not from conversations.

Deterministic: the same --seed gives the same file byte for byte.

    python3 tools/gen_chat_trace.py --shape chat --seed 7 > chat.jsonl
"""
import argparse
import json
import math
import random
import sys

BLOCK_TOKENS = 512


class Ids:
    def __init__(self):
        self.next = 0

    def fresh(self, n):
        ids = list(range(self.next, self.next + n))
        self.next += n
        return ids


def lognormal_tokens(rng, median, sigma, cap):
    return max(1, min(cap, int(rng.lognormvariate(math.log(median), sigma))))


def chat(seed, requests, rate, p_continue):
    rng = random.Random(seed)
    ids = Ids()
    systems = [ids.fresh(rng.randint(1, 6)) for _ in range(20)]
    weights = [1.0 / (s + 1) for s in range(len(systems))]
    events = []  # (time, conversation) heap-free: sorted list insertions
    out = []
    t = 0.0
    pending = []  # [due time, full ids, tokens, tail id]
    while len(out) < requests:
        t += rng.expovariate(rate)
        # Turns of running conversations due before this arrival go first.
        pending.sort(key=lambda c: c[0])
        while pending and pending[0][0] <= t and len(out) < requests:
            conv = pending.pop(0)
            out.append(turn(rng, ids, conv, p_continue, pending))
        if len(out) >= requests:
            break
        if rng.random() < 0.4:
            prefix = list(systems[rng.choices(range(len(systems)), weights)[0]])
        else:
            prefix = ids.fresh(rng.randint(1, 4))
        conv = [t, prefix, len(prefix) * BLOCK_TOKENS]
        out.append(turn(rng, ids, conv, p_continue, pending))
    out.sort(key=lambda r: r["timestamp"])
    return out


def turn(rng, ids, conv, p_continue, pending):
    """One request of a conversation [time, full-block ids, tokens]; queues the next turn."""
    when, full, tokens = conv
    user = lognormal_tokens(rng, 300, 1.5, 16000)
    tokens += user
    n_full = tokens // BLOCK_TOKENS
    full = full + ids.fresh(n_full - len(full))
    tail = tokens - n_full * BLOCK_TOKENS
    hash_ids = full + (ids.fresh(1) if tail else [])
    answer = lognormal_tokens(rng, 250, 0.9, 4000)
    req = {
        "timestamp": int(when * 1000),
        "input_length": tokens,
        "output_length": answer,
        "hash_ids": hash_ids,
    }
    if rng.random() < p_continue:
        think = rng.lognormvariate(math.log(180), 1.5)  # seconds; median 3 min
        pending.append([when + think, full, tokens + answer])
    return req


def docs(seed, requests, rate, documents):
    rng = random.Random(seed)
    ids = Ids()
    instructions = [ids.fresh(2) for _ in range(4)]
    corpus = [ids.fresh(rng.randint(4, 60)) for _ in range(documents)]
    weights = [1.0 / (d + 1) ** 0.9 for d in range(documents)]
    out = []
    t = 0.0
    for _ in range(requests):
        t += rng.expovariate(rate)
        prefix = instructions[rng.randrange(len(instructions))]
        doc = corpus[rng.choices(range(documents), weights)[0]]
        question = lognormal_tokens(rng, 60, 0.8, 2000)
        hash_ids = prefix + doc + ids.fresh(1 + question // BLOCK_TOKENS)
        out.append({
            "timestamp": int(t * 1000),
            "input_length": (len(prefix) + len(doc)) * BLOCK_TOKENS + question,
            "output_length": lognormal_tokens(rng, 200, 0.8, 2000),
            "hash_ids": hash_ids,
        })
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=["chat", "docs"], default="chat")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--requests", type=int, default=12000)
    p.add_argument("--rate", type=float, default=20.0, help="new requests per second")
    p.add_argument("--continue-probability", type=float, default=0.4,
                   help="chat: chance a conversation has another turn")
    p.add_argument("--documents", type=int, default=3000, help="docs: corpus size")
    a = p.parse_args()
    if a.shape == "chat":
        reqs = chat(a.seed, a.requests, a.rate, a.continue_probability)
    else:
        reqs = docs(a.seed, a.requests, a.rate, a.documents)
    for r in reqs:
        sys.stdout.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
