#!/usr/bin/env python3
"""Simulates SSD admission rules on Mooncake-format traces (docs/eviction.md,
"SSD admission").

The tiers are modelled, not run: an LRU hot tier of --hot-tokens, an LRU SSD
tier of --ssd-tokens, lookups in chain order stopping at the first miss, SSD
hits promoted into RAM (the SSD copy stays), the blocks after the hit prefix
put in RAM, and every block written to SSD at its first dirty eviction unless
the admission rule skips it. As in the engine (TierStack::AdmitBelow), only a
leaf may be skipped: a victim with a child in RAM or on SSD is written (forced).
For each trace it prints the token hit ratio and blocks written under "write
all", the share of written blocks ever read back from SSD (the offline bound:
write only those), that share per feature known at eviction time, and each
rule's hit ratio and writes saved.

Rules use only signals an engine has on any traffic: hits of the block while
in RAM (this residency), a ghost list of keys skipped before (reject first,
admit when a skipped key comes back), and an online per-bucket reuse estimate.

    python3 tools/sim_admission.py tests/data/*.jsonl
"""
import argparse
import json
from collections import OrderedDict, defaultdict

BLOCK_TOKENS = 512


class All:
    def admit(self, key, f):
        return True

    def evicted_reused(self, key):
        pass


class RamHit(All):
    """Writes blocks hit while in RAM."""

    def admit(self, key, f):
        return f["res_hits"] > 0


class Ghost(All):
    """Reject first with a ghost: a victim is skipped and its key remembered
    (an LRU of `size` keys); a victim whose key is in the ghost is written.
    With ram_hit, blocks hit while in RAM are written at once too."""

    def __init__(self, size, ram_hit=False):
        self.ghost, self.size, self.ram_hit = OrderedDict(), size, ram_hit

    def admit(self, key, f):
        if key in self.ghost:
            del self.ghost[key]
            return True
        if self.ram_hit and f["res_hits"] > 0:
            return True
        self.ghost[key] = True
        while len(self.ghost) > self.size:
            self.ghost.popitem(last=False)
        return False


class Learned(Ghost):
    """An online reuse estimate per bucket (hit in RAM or not, blocks to the
    end of the storing request, capped): the share of evicted blocks of the
    bucket referenced again (read from SSD, or a skipped one asked for again).
    A victim whose bucket's share is at least `threshold` is written; the
    others go through the ghost (rejected first)."""

    def __init__(self, size, threshold, depth=False):
        super().__init__(size, ram_hit=False)
        self.threshold, self.depth = threshold, depth
        self.counts = defaultdict(lambda: [1.0, 2.0])  # reused, evicted (prior 0.5)
        self.pending = {}

    def bucket(self, f):
        b = (min(f["res_hits"], 2), min(f["from_end"], 3))
        return b + (min(f["depth"], 64).bit_length(),) if self.depth else b

    def admit(self, key, f):
        b = self.bucket(f)
        c = self.counts[b]
        c[1] += 1
        self.pending[key] = b
        if c[0] / c[1] >= self.threshold:
            return True
        return super().admit(key, f)

    def evicted_reused(self, key):
        b = self.pending.pop(key, None)
        if b is not None:
            self.counts[b][0] += 1


def simulate(reqs, hot_blocks, ssd_blocks, rule=None, leaf_only=True, leaf_first=False):
    rule = rule or All()
    ram, ssd, info = OrderedDict(), OrderedDict(), {}
    parent, present_children, ram_children = {}, defaultdict(int), defaultdict(int)
    written, later_reads = [], defaultdict(int)
    forced = 0
    hit_tokens = input_tokens = 0

    def present(key):
        return key in ram or key in ssd

    def became(key, was):
        if was != present(key) and parent.get(key) is not None:
            present_children[parent[key]] += 1 if not was else -1

    def add_ram(key):
        was = present(key)
        ram[key] = True
        if parent.get(key) is not None:
            ram_children[parent[key]] += 1
        became(key, was)

    def pop_victim():
        if leaf_first:  # leaf-lru: the least recently used block with no child in RAM
            key = next(k for k in ram if ram_children[k] == 0)
            del ram[key]
        else:
            key, _ = ram.popitem(last=False)
        if parent.get(key) is not None:
            ram_children[parent[key]] -= 1
        became(key, True)
        return key

    def evict():
        nonlocal forced
        while len(ram) > hot_blocks:
            key = pop_victim()
            f = info[key]
            if key in ssd or not f["dirty"]:
                continue
            f["dirty"] = False
            ok = rule.admit(key, f)
            if not ok and leaf_only and present_children[key] > 0:
                ok = True
                forced += 1
            written.append((key, dict(f), ok))
            if ok:
                ssd[key] = True
                became(key, False)
                while len(ssd) > ssd_blocks:
                    k, _ = ssd.popitem(last=False)
                    became(k, True)

    for r in reqs:
        chain, k = [], None
        for i, h in enumerate(r["hash_ids"]):
            nk = hash((k, h))
            parent[nk] = k
            k = nk
            chain.append(k)
        hit = 0
        for key in chain:
            if key in ram:
                ram.move_to_end(key)
                info[key]["res_hits"] += 1
            elif key in ssd:
                ssd.move_to_end(key)
                later_reads[key] += 1
                rule.evicted_reused(key)
                add_ram(key)
                info[key]["res_hits"] = 1
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
                                 from_end=len(chain) - 1 - i, res_hits=0)
            else:
                if key not in ssd:
                    rule.evicted_reused(key)  # asked for again: a miss
                info[key]["dirty"] = key not in ssd
                info[key]["res_hits"] = 0
                info[key]["from_end"] = len(chain) - 1 - i
            add_ram(key)
            evict()
    return dict(hit=hit_tokens / input_tokens, written=written, later=later_reads,
                forced=forced)


def rules(ssd_blocks):
    return {
        "ram-hit": lambda: RamHit(),
        "ghost": lambda: Ghost(ssd_blocks),
        "ghost+ram-hit": lambda: Ghost(ssd_blocks, ram_hit=True),
        "ghost/4+ram-hit": lambda: Ghost(ssd_blocks // 4, ram_hit=True),
        "learned 0.2": lambda: Learned(ssd_blocks, 0.2),
        "learned 0.3": lambda: Learned(ssd_blocks, 0.3),
        "learned 0.5": lambda: Learned(ssd_blocks, 0.5),
        "learned+depth 0.1": lambda: Learned(ssd_blocks, 0.1, depth=True),
        "learned+depth 0.2": lambda: Learned(ssd_blocks, 0.2, depth=True),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--hot-tokens", type=int, default=3_000_000)
    p.add_argument("--ssd-tokens", type=int, default=50_000_000)
    p.add_argument("--any-victim", action="store_true",
                   help="let a rule skip blocks with children (unsafe; the engine does not)")
    p.add_argument("--hot-policy", choices=["lru", "leaf-lru"], default="lru")
    p.add_argument("--rule", dest="rules", action="append", help="only these rules")
    p.add_argument("--features", action="store_true", help="print reuse by feature")
    a = p.parse_args()
    hot, ssd = a.hot_tokens // BLOCK_TOKENS, a.ssd_tokens // BLOCK_TOKENS
    kw = dict(leaf_only=not a.any_victim, leaf_first=a.hot_policy == "leaf-lru")
    for path in a.traces:
        reqs = [json.loads(line) for line in open(path)]
        base = simulate(reqs, hot, ssd, **kw)
        ev, later = base["written"], base["later"]
        read = sum(1 for key, _, _ in ev if later.get(key))
        print(f"{path}: hit {base['hit']:.4f}, blocks written {len(ev)}, "
              f"read back {read} -> offline bound saves {1 - read / len(ev):.2f}", flush=True)
        if a.features:
            for name, fn in [("hits in RAM", lambda f: min(f["res_hits"], 3)),
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
        for name, make in rules(ssd).items():
            if a.rules and name not in a.rules:
                continue
            r = simulate(reqs, hot, ssd, make(), **kw)
            w = sum(1 for _, _, ok in r["written"] if ok)
            print(f"  {name:18s} hit {r['hit']:.4f} ({r['hit'] / base['hit']:.3f}x), "
                  f"writes saved {1 - w / len(ev):.3f} (forced {r['forced']})", flush=True)


if __name__ == "__main__":
    main()
