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

--shape agentic: agent sessions on a long shared system-and-tools prompt (16
to 64 blocks, a few agents, Zipf-popular). Sessions come in bursts (a fan-out
of one to eight sub-agents of one agent at once); each is many short turns:
a short tool call as the answer, a tool result appended, the next request a
second or two later. A session goes on with a fixed probability whatever the
answer's length, so answer length does not predict reuse.

--shape rag: retrieval-augmented questions. A short system prompt (1 block,
3 variants), then 2 to 6 chunks (1 to 6 blocks) retrieved from a Zipf-popular
corpus in retrieval order, so the same chunk lands at varying positions
(after other chunks, where no prefix of it is shared), then a fresh question.
Few follow-ups (10%). Reuse is mostly the system prompt and a popular first
chunk; answer length does not predict it.

--shape anti: multi-turn chat whose continuation is anti-correlated with the
"long answers end a conversation" heuristic: a conversation goes on after a
turn with a probability that grows with the answer's length (a long answer,
code or an explanation, draws follow-ups; a short one ends it), 0.1 for a
one-token answer up to 0.8 for 800 tokens and more.

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
    """Poisson arrivals of conversations; p_continue a number or a function of
    the answer's length (--shape anti)."""
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


def chat_user(rng):
    return lognormal_tokens(rng, 300, 1.5, 16000)


def chat_answer(rng):
    return lognormal_tokens(rng, 250, 0.9, 4000)


def chat_think(rng):
    return rng.lognormvariate(math.log(180), 1.5)  # seconds; median 3 min


def turn(rng, ids, conv, p_continue, pending, user_tokens=chat_user,
         answer_tokens=chat_answer, think_seconds=chat_think):
    """One request of a conversation [time, full-block ids, tokens]; queues the
    next turn with probability p_continue (a number, or a function of the
    answer's length)."""
    when, full, tokens = conv
    user = user_tokens(rng)
    tokens += user
    n_full = tokens // BLOCK_TOKENS
    full = full + ids.fresh(n_full - len(full))
    tail = tokens - n_full * BLOCK_TOKENS
    hash_ids = full + (ids.fresh(1) if tail else [])
    answer = answer_tokens(rng)
    req = {
        "timestamp": int(when * 1000),
        "input_length": tokens,
        "output_length": answer,
        "hash_ids": hash_ids,
    }
    p = p_continue(answer) if callable(p_continue) else p_continue
    if rng.random() < p:
        pending.append([when + think_seconds(rng), full, tokens + answer])
    return req


def anti_continue(answer):
    """--shape anti: the longer the answer, the likelier the next turn."""
    return min(0.8, 0.1 + 0.7 * answer / 800)


def agentic(seed, requests, rate, p_continue):
    """Bursts of agent sessions; many short tool-call turns on a long shared
    prompt. p_continue per turn is independent of the answer."""
    rng = random.Random(seed)
    ids = Ids()
    agents = [ids.fresh(rng.randint(16, 64)) for _ in range(6)]
    weights = [1.0 / (a + 1) for a in range(len(agents))]
    out = []
    pending = []
    t = 0.0
    task = lambda r: lognormal_tokens(r, 200, 1.0, 4000)  # first user message
    tool_result = lambda r: lognormal_tokens(r, 400, 1.2, 8000)
    tool_call = lambda r: lognormal_tokens(r, 60, 0.8, 2000)  # the answer
    tool_latency = lambda r: r.lognormvariate(math.log(1.5), 1.0)
    while len(out) < requests:
        t += rng.expovariate(rate)  # a burst
        agent = agents[rng.choices(range(len(agents)), weights)[0]]
        for _ in range(rng.randint(1, 8)):
            pending.sort(key=lambda c: c[0])
            while pending and pending[0][0] <= t and len(out) < requests:
                conv = pending.pop(0)
                out.append(turn(rng, ids, conv, p_continue, pending, tool_result,
                                tool_call, tool_latency))
            if len(out) >= requests:
                break
            conv = [t, list(agent), len(agent) * BLOCK_TOKENS]
            out.append(turn(rng, ids, conv, p_continue, pending, task, tool_call,
                            tool_latency))
            t += rng.expovariate(50.0)  # sub-agents start within tens of ms
    out.sort(key=lambda r: r["timestamp"])
    return out


class PrefixIds:
    """Ids of prefixes: one id per distinct (parent id, content) pair, so equal
    ids mean equal prefixes, as the trace format says, even where one content
    (a retrieved chunk) follows different prefixes."""

    def __init__(self):
        self.ids = {}

    def chain(self, contents):
        out = []
        parent = -1
        for c in contents:
            parent = self.ids.setdefault((parent, c), len(self.ids))
            out.append(parent)
        return out


def rag(seed, requests, rate, documents):
    rng = random.Random(seed)
    content = Ids()  # block contents; PrefixIds turns them into prefix ids
    prefix_ids = PrefixIds()
    systems = [content.fresh(1) for _ in range(3)]
    corpus = [content.fresh(rng.randint(1, 6)) for _ in range(documents)]
    weights = [1.0 / (d + 1) for d in range(documents)]
    out = []
    pending = []  # [due time, full-block contents, tokens]: a follow-up
    t = 0.0

    def ask(when, full, tokens):
        """A request: full (whole blocks, `tokens` of them) and a fresh
        question; queues a follow-up on the same context one time in ten."""
        tokens += lognormal_tokens(rng, 80, 0.8, 2000)
        n_full = tokens // BLOCK_TOKENS
        full = full + content.fresh(n_full - len(full))
        tail = content.fresh(1) if tokens % BLOCK_TOKENS else []
        answer = lognormal_tokens(rng, 200, 0.8, 2000)
        out.append({
            "timestamp": int(when * 1000),
            "input_length": tokens,
            "output_length": answer,
            "hash_ids": prefix_ids.chain(full + tail),
        })
        if rng.random() < 0.1:
            pending.append([when + rng.lognormvariate(math.log(30), 1.0), full,
                            tokens + answer])

    while len(out) < requests:
        t += rng.expovariate(rate)
        pending.sort(key=lambda c: c[0])
        while pending and pending[0][0] <= t and len(out) < requests:
            ask(*pending.pop(0))
        if len(out) >= requests:
            break
        full = list(systems[rng.randrange(len(systems))])
        picked = []
        for d in rng.choices(range(documents), weights, k=rng.randint(2, 6)):
            if d not in picked:  # retrieval order: popular chunks anywhere
                picked.append(d)
                full += corpus[d]
        ask(t, full, len(full) * BLOCK_TOKENS)
    out.sort(key=lambda r: r["timestamp"])
    return out


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
    p.add_argument("--shape", choices=["chat", "docs", "agentic", "rag", "anti"],
                   default="chat")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--requests", type=int, default=12000)
    p.add_argument("--rate", type=float, default=20.0,
                   help="new requests per second (agentic: bursts of sessions at "
                   "rate / 8 per second)")
    p.add_argument("--continue-probability", type=float, default=None,
                   help="chat: chance a conversation has another turn (0.4); agentic: "
                   "chance a session has another tool call (0.85)")
    p.add_argument("--documents", type=int, default=None,
                   help="docs: corpus size (3000); rag: chunks (5000)")
    a = p.parse_args()
    cont = a.continue_probability
    if a.shape == "chat":
        reqs = chat(a.seed, a.requests, a.rate, 0.4 if cont is None else cont)
    elif a.shape == "anti":
        reqs = chat(a.seed, a.requests, a.rate, anti_continue)
    elif a.shape == "agentic":
        reqs = agentic(a.seed, a.requests, a.rate / 8, 0.85 if cont is None else cont)
    elif a.shape == "rag":
        reqs = rag(a.seed, a.requests, a.rate, a.documents or 5000)
    else:
        reqs = docs(a.seed, a.requests, a.rate, a.documents or 3000)
    for r in reqs:
        sys.stdout.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
