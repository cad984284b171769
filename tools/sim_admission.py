#!/usr/bin/env python3
"""Simulates SSD admission rules on Mooncake-format traces (docs/eviction.md,
"SSD admission: measured, not built yet").

The tiers are modelled, not run: an LRU hot tier of --hot-tokens, an LRU SSD
tier of --ssd-tokens, lookups in chain order stopping at the first miss, SSD
hits promoted into RAM (the SSD copy stays), the blocks after the hit prefix
put in RAM, and every block written to SSD at its first dirty eviction unless
the admission rule skips it. For each trace it prints the token hit ratio and
blocks written under "write all", the share of written blocks ever read back
from SSD (the offline bound: write only those), that share per feature known
at eviction time, and each rule's hit ratio and writes saved.

    python3 tools/sim_admission.py tests/data/*.jsonl
"""
import argparse
import json
from collections import OrderedDict, defaultdict

BLOCK_TOKENS = 512


def simulate(reqs, hot_blocks, ssd_blocks, admit=None):
    ram, ssd, info = OrderedDict(), OrderedDict(), {}
    written, later_reads = [], defaultdict(int)
    hit_tokens = input_tokens = 0

    def evict():
        while len(ram) > hot_blocks:
            key, _ = ram.popitem(last=False)
            f = info[key]
            if key in ssd or not f["dirty"]:
                continue
            f["dirty"] = False
            ok = admit is None or admit(f)
            written.append((key, dict(f), ok))
            if ok:
                ssd[key] = True
                while len(ssd) > ssd_blocks:
                    ssd.popitem(last=False)

    for r in reqs:
        chain, k = [], None
        for h in r["hash_ids"]:
            k = hash((k, h))
            chain.append(k)
        hit = 0
        for key in chain:
            if key in ram:
                ram.move_to_end(key)
            elif key in ssd:
                ssd.move_to_end(key)
                later_reads[key] += 1
                ram[key] = True
                evict()
            else:
                break
            info[key]["hits"] += 1
            hit += 1
        hit_tokens += min(hit * BLOCK_TOKENS, r["input_length"])
        input_tokens += r["input_length"]
        for i in range(hit, len(chain)):
            key = chain[i]
            if key in ram:
                ram.move_to_end(key)
                continue
            if key not in info:
                info[key] = dict(hits=0, depth=i, creator_hit=hit, dirty=True,
                                 from_end=len(chain) - 1 - i)
            else:
                info[key]["dirty"] = key not in ssd
            ram[key] = True
            evict()
    return dict(hit=hit_tokens / input_tokens, written=written, later=later_reads)


RULES = {
    "skip-tails": lambda f: f["from_end"] != 0,
    "skip-unhit-near-end": lambda f: not (f["hits"] == 0 and f["from_end"] <= 1),
    "hit-in-ram-only": lambda f: f["hits"] > 0,
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--hot-tokens", type=int, default=3_000_000)
    p.add_argument("--ssd-tokens", type=int, default=50_000_000)
    a = p.parse_args()
    hot, ssd = a.hot_tokens // BLOCK_TOKENS, a.ssd_tokens // BLOCK_TOKENS
    for path in a.traces:
        reqs = [json.loads(line) for line in open(path)]
        base = simulate(reqs, hot, ssd)
        ev, later = base["written"], base["later"]
        read = sum(1 for key, _, _ in ev if later.get(key))
        print(f"{path}: hit {base['hit']:.4f}, blocks written {len(ev)}, "
              f"read back {read} -> offline bound saves {1 - read / len(ev):.2f}")
        for name, fn in [("hits in RAM", lambda f: min(f["hits"], 3)),
                         ("request tail", lambda f: f["from_end"] == 0),
                         ("storing request hit", lambda f: f["creator_hit"] > 0),
                         ("depth/8", lambda f: min(f["depth"] // 8, 6))]:
            buckets = defaultdict(lambda: [0, 0])
            for key, f, _ in ev:
                b = buckets[fn(f)]
                b[0] += 1
                b[1] += later.get(key, 0) > 0
            print(f"  read back by {name}: " + " ".join(
                f"{k}:{n}/{r / n:.2f}" for k, (n, r) in sorted(buckets.items())))
        for name, rule in RULES.items():
            r = simulate(reqs, hot, ssd, rule)
            w = sum(1 for _, _, ok in r["written"] if ok)
            print(f"  {name:20s} hit {r['hit']:.4f} ({r['hit'] / base['hit']:.3f}x), "
                  f"writes saved {1 - w / len(ev):.2f}")


if __name__ == "__main__":
    main()
